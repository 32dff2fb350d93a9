// SPDX-License-Identifier: Apache-2.0
// Paged decode over pages smaller than a softmax chunk reads each chunk's rows through a list of
// row addresses (one tile product per chunk, `list_chunk` in paged_attention.hpp); one page per
// sequence reads them from one strided page. Both must do the same sums in the same order, so the
// same K/V values laid out as random pages of 16 and as one page per sequence must give the same
// bits, for every K/V dtype and scale layout the listing takes, over several chunks, a partial
// last chunk and a length that ends inside a page. A non-finite scale sends its chunk back to the
// piece-by-piece path: its rows come out NaN in both layouts and every other row the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <attnref/kernels/paged_attention.hpp>

#include "kv_dtype_cases.hpp"

namespace {

using attnref::TensorView;

constexpr std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

enum class ScaleKind { kNone, kPerToken, kPerTensor };

constexpr std::int64_t kBatch = 3, kHkv = 2, kSmallPage = 16;
const std::vector<std::int32_t> kLengths{700, 129, 17};  // 6 chunks; 1 token past one; 2 pages
constexpr std::int64_t kLongest = 700;

/// Token t of sequence b, KV head h: K/V values and scales, whatever the layout.
template <class KV>
struct Sequences {
  std::int64_t dim;
  std::vector<KV> k, v;                   // [B, Hkv, kLongest, D]
  std::vector<float> k_scales, v_scales;  // [B, Hkv, kLongest]
  Sequences(std::int64_t d, std::mt19937& rng) : dim(d) {
    const std::int64_t rows = kBatch * kHkv * kLongest;
    for (auto* x : {&k, &v}) {
      x->resize(ix(rows * dim));
      for (KV& e : *x) e = kv_dtype_test::random_element<KV>(rng);
    }
    for (auto* s : {&k_scales, &v_scales}) {
      s->resize(ix(rows));
      for (float& e : *s) e = std::uniform_real_distribution<float>(0.01f, 2.0f)(rng);
    }
  }
  std::int64_t row(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return (b * kHkv + h) * kLongest + t;
  }
};

/// The sequences laid out in pages of `page` tokens ([Hkv, pages, page, D]), the pages of all
/// sequences shuffled (one page per sequence when page >= kLongest).
template <class KV>
struct Pool {
  std::int64_t page, pps, total;
  std::vector<KV> k, v;
  std::vector<float> k_scales, v_scales;
  std::vector<std::int32_t> table;
  Pool(const Sequences<KV>& s, std::int64_t page_size, std::mt19937& rng)
      : page(page_size), pps((kLongest + page_size - 1) / page_size), total(kBatch * pps) {
    table.resize(ix(total));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    k.assign(ix(kHkv * total * page * s.dim), KV{});
    v = k;
    k_scales.assign(ix(kHkv * total * page), 1.0f);
    v_scales = k_scales;
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t h = 0; h < kHkv; ++h)
        for (std::int64_t t = 0; t < kLongest; ++t) {
          const std::int64_t p = table[ix(b * pps + t / page)];
          const std::int64_t slot = (h * total + p) * page + t % page, from = s.row(b, h, t);
          std::copy_n(&s.k[ix(from * s.dim)], s.dim, &k[ix(slot * s.dim)]);
          std::copy_n(&s.v[ix(from * s.dim)], s.dim, &v[ix(slot * s.dim)]);
          k_scales[ix(slot)] = s.k_scales[ix(from)];
          v_scales[ix(slot)] = s.v_scales[ix(from)];
        }
  }
};

struct Result {
  std::vector<float> out, lse;
};

template <class KV>
Result run(const Pool<KV>& pool, const std::vector<float>& q, std::int64_t hq, std::int64_t dim,
           ScaleKind scales) {
  attnref::PagedAttentionArgs<float, KV> a;
  a.q = {q.data(), {kBatch, hq, dim}};
  a.k_pages = {pool.k.data(), {kHkv, pool.total, pool.page, dim}};
  a.v_pages = {pool.v.data(), {kHkv, pool.total, pool.page, dim}};
  const std::array<std::int64_t, 4> shape{kHkv, pool.total, pool.page, 1};
  if (scales == ScaleKind::kPerToken) {
    a.k_scales = {pool.k_scales.data(), shape};
    a.v_scales = {pool.v_scales.data(), shape};
  } else if (scales == ScaleKind::kPerTensor) {  // one float each, the same in both layouts
    static const float kTensorScales[2] = {0.7f, 1.3f};
    a.k_scales = {&kTensorScales[0], shape, {0, 0, 0, 0}};
    a.v_scales = {&kTensorScales[1], shape, {0, 0, 0, 0}};
  }
  a.lengths = {kLengths.data(), {kBatch}};
  a.page_indices = {pool.table.data(), {kBatch, pool.pps}};
  a.sm_scale = 0.2f;
  Result r;
  if (!attnref::check_paged(a, attnref::Profile::kReference).ok()) {
    ADD_FAILURE() << "check_paged rejected the call";
    return r;
  }
  r.out.assign(ix(kBatch * hq * dim), -1.0f);
  r.lse.assign(ix(kBatch * hq), -1.0f);
  attnref::paged_attention_unchecked(a, TensorView<float, 3>(r.out.data(), {kBatch, hq, dim}),
                                     TensorView<float, 2>(r.lse.data(), {kBatch, hq}));
  return r;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

template <class KV>
void check_layouts(ScaleKind scales, std::int64_t hq, std::int64_t dim, std::uint32_t seed) {
  SCOPED_TRACE("Hq " + std::to_string(hq) + " D " + std::to_string(dim) + " scales " +
               std::to_string(static_cast<int>(scales)));
  std::mt19937 rng(seed);
  const Sequences<KV> seqs(dim, rng);
  std::vector<float> q(ix(kBatch * hq * dim));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const Result small = run(Pool<KV>(seqs, kSmallPage, rng), q, hq, dim, scales);
  const Result whole = run(Pool<KV>(seqs, 1024, rng), q, hq, dim, scales);
  ASSERT_EQ(small.out.size(), whole.out.size());
  for (std::size_t i = 0; i < small.out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(small.out[i])) << i;
    ASSERT_TRUE(same_bits(small.out[i], whole.out[i]))
        << "output " << i << ": " << small.out[i] << " against " << whole.out[i];
  }
  for (std::size_t i = 0; i < small.lse.size(); ++i)
    ASSERT_TRUE(same_bits(small.lse[i], whole.lse[i])) << "logsumexp " << i;
}

template <class KV>
void check_grid(std::initializer_list<ScaleKind> kinds) {
  std::uint32_t seed = 11;
  for (ScaleKind s : kinds)
    for (std::int64_t dim : {128, 20})
      for (std::int64_t hq : {8, 16, 2}) check_layouts<KV>(s, hq, dim, seed++);
}

TEST(PagedLayouts, F32PagesOf16MatchOnePagePerSequenceBitForBit) {
  check_grid<float>({ScaleKind::kNone});
}
TEST(PagedLayouts, Bf16PagesOf16MatchOnePagePerSequenceBitForBit) {
  check_grid<Eigen::bfloat16>({ScaleKind::kNone});
}
TEST(PagedLayouts, HalfPagesOf16MatchOnePagePerSequenceBitForBit) {
  check_grid<Eigen::half>({ScaleKind::kNone});
}
TEST(PagedLayouts, Int8PagesOf16MatchOnePagePerSequenceBitForBit) {
  check_grid<std::int8_t>({ScaleKind::kPerToken, ScaleKind::kPerTensor});
}
TEST(PagedLayouts, E4m3PagesOf16MatchOnePagePerSequenceBitForBit) {
  check_grid<attnref::float8_e4m3fn>(
      {ScaleKind::kNone, ScaleKind::kPerToken, ScaleKind::kPerTensor});
}

/// A NaN K or V scale at token 200 of sequence 0, KV head 1 (the second chunk): that chunk is
/// read piece by piece with pages of 16, and every output row of KV head 1's query heads in
/// sequence 0 is NaN in both layouts (a NaN score, or NaN weights on V); the rest is the same.
TEST(PagedLayouts, ANonFiniteInt8ScaleGivesTheSameRowsInBothLayouts) {
  const std::int64_t hq = 8, dim = 128, group = hq / kHkv;
  for (bool in_k : {true, false}) {
    SCOPED_TRACE(in_k ? "K scale" : "V scale");
    std::mt19937 rng(5);
    Sequences<std::int8_t> seqs(dim, rng);
    (in_k ? seqs.k_scales : seqs.v_scales)[ix(seqs.row(0, 1, 200))] =
        std::numeric_limits<float>::quiet_NaN();
    std::vector<float> q(ix(kBatch * hq * dim));
    for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    const Result small =
        run(Pool<std::int8_t>(seqs, kSmallPage, rng), q, hq, dim, ScaleKind::kPerToken);
    const Result whole = run(Pool<std::int8_t>(seqs, 1024, rng), q, hq, dim, ScaleKind::kPerToken);
    ASSERT_EQ(small.out.size(), whole.out.size());
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t qh = 0; qh < hq; ++qh)
        for (std::int64_t d = 0; d < dim; ++d) {
          const std::size_t i = ix((b * hq + qh) * dim + d);
          if (b == 0 && qh / group == 1) {
            ASSERT_TRUE(std::isnan(small.out[i]) && std::isnan(whole.out[i])) << qh << " " << d;
          } else {
            ASSERT_TRUE(std::isfinite(small.out[i]) && same_bits(small.out[i], whole.out[i]))
                << b << " " << qh << " " << d;
          }
        }
  }
}

}  // namespace
