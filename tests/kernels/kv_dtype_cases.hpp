// SPDX-License-Identifier: Apache-2.0
// Test support for K/V element types: random paged and ragged calls whose q has one dtype and
// whose pages have another (float, half, bfloat16, int8, fp8), with every element the kernels
// must not read poisoned (NaN, a NaN code, or a NaN scale), and the comparison of a kernel's
// output with the float64 oracles of reference/, which read the same typed arguments.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <attnref/core/dtype.hpp>
#include <attnref/validate/paged.hpp>
#include <attnref/validate/ragged.hpp>

#include "reference/common.hpp"

namespace kv_dtype_test {

inline std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

/// How K/V scales are given: none, per token [.., 1], per element [.., D], per tensor (a
/// [.., 1] view with zero strides over one float).
enum class Scales { kNone, kPerToken, kPerElement, kPerTensor };

/// A random element of `T` that the math may read: floats in [-1, 1), int8 in [-127, 127], fp8
/// codes of finite values in [-4, 4] (any exponent down to the subnormals).
template <class T>
T random_element(std::mt19937& rng) {
  if constexpr (attnref::is_fp8_dtype<T>) {
    std::uniform_int_distribution<int> code(0, 255);
    for (;;) {
      const T x{static_cast<std::uint8_t>(code(rng))};
      const double v = attnref::reference::to_double(x);
      if (std::isfinite(v) && std::fabs(v) <= 4.0) return x;
    }
  } else if constexpr (std::is_same<T, std::int8_t>::value) {
    return static_cast<std::int8_t>(std::uniform_int_distribution<int>(-127, 127)(rng));
  } else {
    return static_cast<T>(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
  }
}

/// What fills elements no kernel may read: NaN, a NaN code (fp8), or -128 for int8 (whose
/// scales are NaN there instead).
template <class T>
T poison() {
  if constexpr (std::is_same<T, attnref::float8_e4m3fn>::value) {
    return T{0x7F};
  } else if constexpr (std::is_same<T, attnref::float8_e5m2>::value) {
    return T{0x7E};
  } else if constexpr (std::is_same<T, std::int8_t>::value) {
    return std::int8_t{-128};
  } else {
    return static_cast<T>(std::numeric_limits<float>::quiet_NaN());
  }
}

/// A kernel output element as double.
template <class T>
double out_value(T x) {
  if constexpr (std::is_same<T, double>::value) {
    return x;
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}

/// Checks |got - want| <= atol + rtol * |want| element by element (NaN nowhere).
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double atol,
                  double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = out_value(got[i]);
    if (!(std::fabs(g - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << want[i];
      ++bad;
    }
  }
}

/// Tolerances of an output of dtype Q against the oracle (f32 accumulation; one rounding to Q).
template <class Q>
constexpr double output_tolerance() {
  return std::is_same<Q, float>::value ? 2e-5 : 1.6e-2;
}

/// The scales of every [Hkv, P, S] slot (and dim, per element): live slots in [0.05, 0.5),
/// dead ones NaN. Per tensor: one float.
struct ScaleBuffer {
  std::vector<float> values;
  attnref::TensorView<const float, 4> view;
};

inline ScaleBuffer make_scales(Scales mode, std::int64_t hkv, std::int64_t pages, std::int64_t s,
                               std::int64_t d, const std::vector<char>& live, std::mt19937& rng) {
  ScaleBuffer b;
  std::uniform_real_distribution<float> scale(0.05f, 0.5f);
  if (mode == Scales::kNone) return b;
  if (mode == Scales::kPerTensor) {
    b.values.assign(1, scale(rng));
    b.view = attnref::TensorView<const float, 4>(b.values.data(), {hkv, pages, s, 1}, {0, 0, 0, 0});
    return b;
  }
  const std::int64_t last = mode == Scales::kPerElement ? d : 1;
  b.values.assign(ix(hkv * pages * s * last), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t h = 0; h < hkv; ++h)
    for (std::int64_t p = 0; p < pages; ++p)
      for (std::int64_t t = 0; t < s; ++t)
        if (live[ix(p * s + t)])
          for (std::int64_t e = 0; e < last; ++e)
            b.values[ix(((h * pages + p) * s + t) * last + e)] = scale(rng);
  b.view = attnref::TensorView<const float, 4>(b.values.data(), {hkv, pages, s, last});
  return b;
}

/// A random decode batch of `Q` queries over `KV` pages (JAX layout [Hkv, P, S, D]) with a
/// shuffled page table; lengths include 0 and a full table.
template <class Q, class KV>
struct PagedCase {
  static constexpr std::int64_t kBatch = 4, kHq = 4, kHkv = 2, kS = 4, kPps = 3;
  std::int64_t dim;
  std::int64_t pages = kBatch * kPps + 1;
  std::vector<Q> q;
  std::vector<KV> k, v;
  std::vector<std::int32_t> lengths{5, 0, 12, 1}, table;
  ScaleBuffer k_scales, v_scales;

  PagedCase(std::int64_t head_dim, Scales mode, std::mt19937& rng) : dim(head_dim) {
    for (std::int64_t i = 0; i < kBatch * kHq * dim; ++i) q.push_back(random_element<Q>(rng));
    table.resize(ix(kBatch * kPps));
    std::iota(table.begin(), table.end(), 1);  // page 0 is never used
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<char> live(ix(pages * kS), 0);
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t t = 0; t < lengths[ix(b)]; ++t)
        live[ix(table[ix(b * kPps + t / kS)] * kS + t % kS)] = 1;
    for (std::int64_t h = 0; h < kHkv; ++h)
      for (std::int64_t p = 0; p < pages; ++p)
        for (std::int64_t t = 0; t < kS; ++t)
          for (std::int64_t d = 0; d < dim; ++d) {
            const bool is_live = live[ix(p * kS + t)];
            k.push_back(is_live ? random_element<KV>(rng) : poison<KV>());
            v.push_back(is_live ? random_element<KV>(rng) : poison<KV>());
          }
    k_scales = make_scales(mode, kHkv, pages, kS, dim, live, rng);
    v_scales = make_scales(mode, kHkv, pages, kS, dim, live, rng);
  }

  attnref::PagedAttentionArgs<Q, KV> args() const {
    attnref::PagedAttentionArgs<Q, KV> a;
    a.q = {q.data(), {kBatch, kHq, dim}};
    a.k_pages = {k.data(), {kHkv, pages, kS, dim}};
    a.v_pages = {v.data(), {kHkv, pages, kS, dim}};
    a.lengths = {lengths.data(), {kBatch}};
    a.page_indices = {table.data(), {kBatch, kPps}};
    a.k_scales = k_scales.view;
    a.v_scales = v_scales.view;
    a.sm_scale = 0.5f;
    return a;
  }
};

/// A random ragged batch of `Q` queries over `KV` pages: a decode row, a prefill chunk, a
/// sequence that is all prefill, then a padding row; (q_len, kv_len) = (1, 6), (3, 9), (2, 2).
template <class Q, class KV>
struct RaggedCase {
  static constexpr std::int64_t kHq = 4, kHkv = 2, kS = 4, kPps = 3, kSeqs = 3, kRows = 7;
  std::int64_t dim;
  std::int64_t pages = kSeqs * kPps + 1;
  std::vector<Q> q;
  std::vector<KV> k, v;
  std::vector<std::int32_t> kv_lens{6, 9, 2}, cu_q_lens{0, 1, 4, 6}, table;
  std::optional<float> k_scale, v_scale;

  RaggedCase(std::int64_t head_dim, bool scaled, std::mt19937& rng) : dim(head_dim) {
    for (std::int64_t i = 0; i < kRows * kHq * dim; ++i) {
      // Row 6 is padding: never read.
      q.push_back(i < 6 * kHq * dim ? random_element<Q>(rng)
                                    : static_cast<Q>(std::numeric_limits<float>::quiet_NaN()));
    }
    table.resize(ix(kSeqs * kPps));
    std::iota(table.begin(), table.end(), 1);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<char> live(ix(pages * kS), 0);
    for (std::int64_t i = 0; i < kSeqs; ++i)
      for (std::int64_t t = 0; t < kv_lens[ix(i)]; ++t)
        live[ix(table[ix(i * kPps + t / kS)] * kS + t % kS)] = 1;
    for (std::int64_t h = 0; h < kHkv; ++h)
      for (std::int64_t p = 0; p < pages; ++p)
        for (std::int64_t t = 0; t < kS; ++t)
          for (std::int64_t d = 0; d < dim; ++d) {
            const bool is_live = live[ix(p * kS + t)];
            k.push_back(is_live ? random_element<KV>(rng) : poison<KV>());
            v.push_back(is_live ? random_element<KV>(rng) : poison<KV>());
          }
    if (scaled) {
      k_scale = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
      v_scale = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
    }
  }

  attnref::RaggedPagedAttentionArgs<Q, KV> args() const {
    attnref::RaggedPagedAttentionArgs<Q, KV> a;
    a.q = {q.data(), {kRows, kHq, dim}};
    a.k_pages = {k.data(), {kHkv, pages, kS, dim}};
    a.v_pages = {v.data(), {kHkv, pages, kS, dim}};
    a.kv_lens = {kv_lens.data(), {kSeqs}};
    a.page_indices = {table.data(), {kSeqs, kPps}};
    a.cu_q_lens = {cu_q_lens.data(), {kSeqs + 1}};
    a.num_seqs_value = kSeqs;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.sm_scale = 0.5f;
    return a;
  }
};

}  // namespace kv_dtype_test
