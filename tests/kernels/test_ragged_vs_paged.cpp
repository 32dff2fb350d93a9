// SPDX-License-Identifier: Apache-2.0
// A ragged batch of decode-only sequences (q_len 1 each) is paged attention: both kernels, run
// on the same buffers, give the same numbers. The ragged pool [P, S, 2 * Hkv, D] is viewed as
// the paged kernel's logical [Hkv, P, S, D] K pages (head stride 2D, offset 0) and V pages
// (offset D); nothing is copied.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "attnref/kernels/paged_attention.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"

namespace attnref {
namespace {

// A non-negative int64 index or size as a vector subscript.
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

// JAX's decode-only set (spec §5.5), plus lengths at page edges (1, 16, 17).
const std::vector<std::int32_t> kKvLens = {18, 129, 597,  122, 64, 322,  463, 181, 1107, 123,
                                           31, 18,  1229, 229, 87, 1328, 1,   16,  17};

template <class T>
void expect_same_numbers(std::int64_t hq, std::int64_t hkv, std::int64_t dim,
                         std::int64_t page_size, std::optional<float> soft_cap, double tol) {
  const std::int64_t batch = static_cast<std::int64_t>(kKvLens.size());
  std::int64_t max_len = 0, total_pages = 0;
  for (std::int32_t len : kKvLens) {
    max_len = std::max<std::int64_t>(max_len, len);
    total_pages += (len + page_size - 1) / page_size;
  }
  total_pages += 8;
  const std::int64_t pps = (max_len + page_size - 1) / page_size;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  // Everything unused is NaN; both kernels must ignore it.
  std::vector<T> kv(at(total_pages * page_size * 2 * hkv * dim), T(std::nanf("")));
  std::vector<T> q(at(batch * hq * dim));
  for (T& x : q) x = T(normal(rng));
  std::vector<std::int32_t> pages(at(total_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<std::int32_t> table(at(batch * pps), 1 << 30), cu(at(batch + 1), 0);
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    cu[at(b + 1)] = cu[at(b)] + 1;
    for (std::int64_t p = 0; p * page_size < kKvLens[at(b)]; ++p) {
      const std::int32_t page = pages[next++];
      table[at(b * pps + p)] = page;
      for (std::int64_t s = 0; s < page_size && p * page_size + s < kKvLens[at(b)]; ++s)
        for (std::int64_t c = 0; c < 2 * hkv; ++c)
          for (std::int64_t d = 0; d < dim; ++d)
            kv[at(((page * page_size + s) * 2 * hkv + c) * dim + d)] = T(normal(rng));
    }
  }

  RaggedPagedAttentionArgs<T> r;
  r.q = {q.data(), {batch, hq, dim}};
  const TensorView<const T, 4> pool(kv.data(), {total_pages, page_size, 2 * hkv, dim});
  ASSERT_TRUE(ragged_kv_views(pool, &r.k_pages, &r.v_pages).ok());
  r.kv_lens = {kKvLens.data(), {batch}};
  r.page_indices = {table.data(), {batch, pps}};
  r.cu_q_lens = {cu.data(), {batch + 1}};
  r.num_seqs_value = batch;
  r.sm_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  r.soft_cap = soft_cap;

  PagedAttentionArgs<T> p;
  p.q = r.q;
  // Logical [Hkv, P, S, D] over the combined pool: KV head h is combined head 2h (K), 2h+1 (V).
  const std::array<std::int64_t, 4> extents{hkv, total_pages, page_size, dim};
  const std::array<std::int64_t, 4> strides{2 * dim, page_size * 2 * hkv * dim, 2 * hkv * dim, 1};
  p.k_pages = TensorView<const T, 4>(kv.data(), extents, strides);
  p.v_pages = TensorView<const T, 4>(kv.data() + dim, extents, strides);
  // The helper's views are exactly these.
  EXPECT_EQ(r.k_pages.data, p.k_pages.data);
  EXPECT_EQ(r.v_pages.data, p.v_pages.data);
  EXPECT_EQ(r.k_pages.strides, strides);
  EXPECT_EQ(r.v_pages.strides, strides);
  EXPECT_EQ(r.k_pages.extents, extents);
  p.lengths = r.kv_lens;
  p.page_indices = r.page_indices;
  p.sm_scale = r.sm_scale;
  p.soft_cap = soft_cap;

  std::vector<T> out_r(q.size(), T(std::nanf(""))), out_p(q.size(), T(std::nanf("")));
  const Status sr = try_ragged_paged_attention(r, TensorView<T, 3>(out_r.data(), r.q.extents));
  ASSERT_TRUE(sr.ok()) << sr.to_string();
  const Status sp = try_paged_attention(p, TensorView<T, 3>(out_p.data(), p.q.extents));
  ASSERT_TRUE(sp.ok()) << sp.to_string();
  for (std::size_t i = 0; i < q.size(); ++i) {
    const double a = static_cast<double>(static_cast<float>(out_r[i]));
    const double b = static_cast<double>(static_cast<float>(out_p[i]));
    ASSERT_TRUE(std::isfinite(a)) << i;
    ASSERT_NEAR(a, b, tol + tol * std::abs(b)) << "element " << i;
  }
}

TEST(RaggedVsPaged, DecodeOnlyFloat32) { expect_same_numbers<float>(32, 8, 128, 16, {}, 2e-6); }

TEST(RaggedVsPaged, DecodeOnlyFloat32SoftCapAndOtherShapes) {
  expect_same_numbers<float>(32, 8, 128, 16, 30.0f, 2e-6);
  expect_same_numbers<float>(8, 1, 64, 32, {}, 2e-6);
  expect_same_numbers<float>(4, 4, 128, 7, 5.0f, 2e-6);
}

// Output rounded to bf16 once from two f32 accumulations in different orders: at most one bf16
// step apart (relative 2^-8).
TEST(RaggedVsPaged, DecodeOnlyBfloat16) {
  expect_same_numbers<Eigen::bfloat16>(32, 8, 128, 16, {}, 8e-3);
}

TEST(RaggedVsPaged, DecodeOnlyFloat64) { expect_same_numbers<double>(16, 2, 64, 16, 20.0f, 1e-12); }

}  // namespace
}  // namespace attnref
