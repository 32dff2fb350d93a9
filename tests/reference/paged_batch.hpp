// SPDX-License-Identifier: Apache-2.0
// Test support for the paged family: a random decode batch in logical float64 form, its view as
// PagedAttentionArgs (what reference/paged.hpp reads), and writers that put K/V into any
// physical layout with every byte the kernel must not read set to NaN. Independent of the
// kernel: it indexes raw buffers with its own arithmetic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include <attnref/core/kv_layout.hpp>
#include <attnref/validate/paged.hpp>

#include "paged.hpp"

namespace paged_test {

/// A non-negative int64 index as a container index.
inline size_t ix(std::int64_t i) { return static_cast<size_t>(i); }

struct Shape {
  std::int64_t batch, hq, hkv, dim, page_size, pages_per_seq, extra_pages;
};

/// A batch in logical float64 form: q [B,Hq,D], K/V [Hkv,P,S,D], lengths, page table.
struct LogicalBatch {
  Shape shape;
  std::int64_t total_pages;
  std::vector<double> q, k, v;
  std::vector<std::int64_t> lengths, table;
  double k_at(std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) const {
    return k[ix(((h * total_pages + p) * shape.page_size + s) * shape.dim + d)];
  }
  double v_at(std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) const {
    return v[ix(((h * total_pages + p) * shape.page_size + s) * shape.dim + d)];
  }
  /// The batch as float64 arguments in JAX's layout (views of this batch: keep it alive), for
  /// attnref::reference::paged_attention.
  attnref::PagedAttentionArgs<double, double, std::int64_t> args(
      double sm_scale = 1.0, std::optional<double> cap = std::nullopt,
      bool round_kv_to_bf16 = false) const {
    attnref::PagedAttentionArgs<double, double, std::int64_t> a;
    a.q = {q.data(), {shape.batch, shape.hq, shape.dim}};
    a.k_pages = {k.data(), {shape.hkv, total_pages, shape.page_size, shape.dim}};
    a.v_pages = {v.data(), {shape.hkv, total_pages, shape.page_size, shape.dim}};
    a.lengths = {lengths.data(), {shape.batch}};
    a.page_indices = {table.data(), {shape.batch, shape.pages_per_seq}};
    a.sm_scale = static_cast<float>(sm_scale);
    if (cap) a.soft_cap = static_cast<float>(*cap);
    a.round_kv_to_bf16 = round_kv_to_bf16;
    return a;
  }
};

/// Random batch; lengths cycle through 0, 1, S-1, S, S+1 and full capacity; the page table is a
/// random permutation; table entries past each length are -1 (never read).
inline LogicalBatch make_batch(const Shape& shape, std::mt19937& rng) {
  LogicalBatch lb;
  lb.shape = shape;
  lb.total_pages = shape.batch * shape.pages_per_seq + shape.extra_pages;
  std::normal_distribution<double> normal(0.0, 1.0);
  lb.q.resize(ix(shape.batch * shape.hq * shape.dim));
  for (double& x : lb.q) x = normal(rng);
  lb.k.resize(ix(shape.hkv * lb.total_pages * shape.page_size * shape.dim));
  lb.v.resize(lb.k.size());
  for (double& x : lb.k) x = normal(rng);
  for (double& x : lb.v) x = normal(rng);
  const std::int64_t s = shape.page_size, cap = shape.pages_per_seq * s;
  const std::int64_t pattern[] = {0, 1, s - 1, s, s + 1, cap};
  std::vector<std::int64_t> perm(ix(lb.total_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    const std::int64_t len = std::min(cap, std::max<std::int64_t>(0, pattern[b % 6]));
    lb.lengths.push_back(len);
    for (std::int64_t j = 0; j < shape.pages_per_seq; ++j)
      lb.table.push_back(j * s < len ? perm[ix(b * shape.pages_per_seq + j)] : -1);
  }
  return lb;
}

/// Physical offset of logical (h, p, s, d) in `layout`, computed independently of attnref.
inline std::int64_t physical_offset(attnref::KvLayout layout, const LogicalBatch& lb,
                                    std::int64_t h, std::int64_t p, std::int64_t s,
                                    std::int64_t d) {
  const std::int64_t H = lb.shape.hkv, P = lb.total_pages, S = lb.shape.page_size, D = lb.shape.dim;
  switch (layout) {
    case attnref::KvLayout::kJax:
      return ((h * P + p) * S + s) * D + d;
    case attnref::KvLayout::kNhd:
      return ((p * S + s) * H + h) * D + d;
    case attnref::KvLayout::kHnd:
      return ((p * H + h) * S + s) * D + d;
  }
  return -1;
}

/// Whether token slot s of page p is read by some sequence (so it must hold real data).
inline std::vector<char> live_slots(const LogicalBatch& lb) {
  const Shape& sh = lb.shape;
  std::vector<char> live(ix(lb.total_pages * sh.page_size), 0);
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t t = 0; t < lb.lengths[ix(b)]; ++t)
      live[ix(lb.table[ix(b * sh.pages_per_seq + t / sh.page_size)] * sh.page_size +
              t % sh.page_size)] = 1;
  return live;
}

/// Writes logical K or V into a physical buffer of element type T; dead slots get `poison`.
template <class T, class Convert>
std::vector<T> to_physical(const LogicalBatch& lb, const std::vector<double>& logical,
                           attnref::KvLayout layout, T poison, Convert convert) {
  const Shape& sh = lb.shape;
  std::vector<T> out(logical.size(), poison);
  const std::vector<char> live = live_slots(lb);
  for (std::int64_t h = 0; h < sh.hkv; ++h)
    for (std::int64_t p = 0; p < lb.total_pages; ++p)
      for (std::int64_t s = 0; s < sh.page_size; ++s) {
        if (!live[ix(p * sh.page_size + s)]) continue;
        for (std::int64_t d = 0; d < sh.dim; ++d)
          out[ix(physical_offset(layout, lb, h, p, s, d))] =
              convert(logical[ix(((h * lb.total_pages + p) * sh.page_size + s) * sh.dim + d)]);
      }
  return out;
}

/// max over elements of |got - want| / (atol + rtol * |want|); <= 1 means within tolerance.
template <class T, class ToDouble>
double worst_ratio(const std::vector<T>& got, const std::vector<double>& want, double atol,
                   double rtol, ToDouble to_double) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = to_double(got[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(g - want[i]) / (atol + rtol * std::fabs(want[i])));
  }
  return worst;
}

/// A decode batch as one ragged step: one query row per sequence that has KV (an empty sequence
/// gets none: JAX's R18), rows in batch order at the front of q, padding rows NaN.
struct DecodeAsRagged {
  std::vector<std::int32_t> cu_q_lens;  ///< [batch + 1]
  std::vector<float> q;                 ///< [batch, Hq, D]
  std::vector<std::int64_t> row_of;     ///< [batch]: sequence b's row, -1 if it has none
};

/// `q` is the decode batch's [batch, Hq, D] queries.
inline DecodeAsRagged decode_as_ragged(const LogicalBatch& lb, const std::vector<float>& q) {
  const std::int64_t row = lb.shape.hq * lb.shape.dim;
  DecodeAsRagged r;
  r.cu_q_lens.assign(1, 0);
  r.q.assign(q.size(), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t b = 0; b < lb.shape.batch; ++b) {
    const std::int32_t next = r.cu_q_lens.back();
    r.row_of.push_back(lb.lengths[ix(b)] > 0 ? next : -1);
    if (lb.lengths[ix(b)] > 0)
      std::copy(q.begin() + b * row, q.begin() + (b + 1) * row, r.q.begin() + next * row);
    r.cu_q_lens.push_back(next + (lb.lengths[ix(b)] > 0 ? 1 : 0));
  }
  return r;
}

/// max over the rows of sequences with KV of |ragged - paged| / (tol + tol * |paged|); inf if a
/// ragged value is not finite. Both outputs are [batch, Hq, D], ragged in `r`'s row order.
inline double worst_ragged_vs_paged(const LogicalBatch& lb, const DecodeAsRagged& r,
                                    const std::vector<float>& ragged,
                                    const std::vector<float>& paged, double tol) {
  const std::int64_t row = lb.shape.hq * lb.shape.dim;
  double worst = 0;
  for (std::int64_t b = 0; b < lb.shape.batch; ++b) {
    if (r.row_of[ix(b)] < 0) continue;
    for (std::int64_t i = 0; i < row; ++i) {
      const double g = static_cast<double>(ragged[ix(r.row_of[ix(b)] * row + i)]);
      const double w = static_cast<double>(paged[ix(b * row + i)]);
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(g - w) / (tol + tol * std::fabs(w)));
    }
  }
  return worst;
}

}  // namespace paged_test
