// SPDX-License-Identifier: Apache-2.0
// Ragged paged attention kernel: differential tests against the float64 oracle of
// reference/ragged.hpp over JAX's sequence sets (spec §5.5): basic, decode-only, prefill-only,
// mixed, a random "complex" grid, sliding windows {none, 5, 128}, soft cap {none, 50}. Every
// byte the kernel must not read (K/V past kv_len, unused pages, padding query rows) holds NaN,
// unused page-table entries point outside the pool, and the output must still be finite and
// right.
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
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnref/kernels/ragged_paged_attention.hpp"
#include "reference/ragged.hpp"

namespace attnref {
namespace {

using SeqLens = std::vector<std::pair<std::int64_t, std::int64_t>>;  // (q_len, kv_len)

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A non-negative int64 index or size as a vector subscript (`Batch::at` is the K/V pool offset).
std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

struct Options {
  double sm_scale = 1.0;
  std::optional<std::int64_t> sliding_window;
  std::optional<double> soft_cap;
  std::optional<float> k_scale, v_scale;
};

// A ragged batch in plain memory, built the way JAX's test harness builds it, but with pages in
// a random order and a few spare pages. Everything the kernel must not read is NaN (int8: -128,
// which the quantizer below never produces), and unused page-table entries point outside the
// pool.
template <class Q, class KV>
struct Batch {
  std::int64_t hq, hkv, dim, page_size, num_pages = 0, max_seqs, pages_per_seq, tokens, num_seqs;
  std::vector<Q> q;
  std::vector<KV> kv;
  std::vector<std::int32_t> kv_lens, page_indices, cu_q_lens;
  std::int32_t num_seqs_array = 0;
  Options opt;

  Batch(const SeqLens& seqs, std::int64_t hq_, std::int64_t hkv_, std::int64_t dim_,
        std::int64_t page_size_, std::uint32_t seed, std::int64_t spare_pages = 16)
      : hq(hq_), hkv(hkv_), dim(dim_), page_size(page_size_) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    num_seqs = static_cast<std::int64_t>(seqs.size());
    max_seqs = std::max<std::int64_t>(8, num_seqs);
    std::int64_t total = 0, max_kv = 1;
    for (const auto& s : seqs) {
      total += s.first;
      max_kv = std::max(max_kv, s.second);
      num_pages += (s.second + page_size - 1) / page_size;
    }
    num_pages += spare_pages;
    tokens = total + 5;                                        // always some padding rows
    pages_per_seq = (max_kv + page_size - 1) / page_size + 1;  // one spare column
    q.assign(idx(tokens * hq * dim), static_cast<Q>(kNaN));
    for (std::int64_t i = 0; i < total * hq * dim; ++i) q[idx(i)] = static_cast<Q>(normal(rng));
    kv.assign(idx(num_pages * page_size * 2 * hkv * dim), poison_kv());
    std::vector<std::int32_t> free_pages(idx(num_pages));
    std::iota(free_pages.begin(), free_pages.end(), 0);
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    kv_lens.assign(idx(max_seqs), 0);
    page_indices.assign(idx(max_seqs * pages_per_seq), 1 << 30);
    cu_q_lens.assign(idx(max_seqs + 1), 0);
    std::size_t next = 0;
    for (std::int64_t i = 0; i < num_seqs; ++i) {
      const std::int64_t kv_len = seqs[idx(i)].second;
      kv_lens[idx(i)] = static_cast<std::int32_t>(kv_len);
      cu_q_lens[idx(i + 1)] = cu_q_lens[idx(i)] + static_cast<std::int32_t>(seqs[idx(i)].first);
      for (std::int64_t p = 0; p * page_size < kv_len; ++p) {
        const std::int32_t page = free_pages.at(next++);
        page_indices[idx(i * pages_per_seq + p)] = page;
        for (std::int64_t slot = 0; slot < page_size && p * page_size + slot < kv_len; ++slot)
          for (std::int64_t c = 0; c < 2 * hkv; ++c)
            for (std::int64_t d = 0; d < dim; ++d) kv[at(page, slot, c, d)] = make_kv(normal(rng));
      }
    }
    for (std::int64_t i = num_seqs; i < max_seqs; ++i) cu_q_lens[idx(i + 1)] = cu_q_lens[idx(i)];
    num_seqs_array = static_cast<std::int32_t>(num_seqs);
  }

  static KV poison_kv() {
    if constexpr (std::is_same<KV, std::int8_t>::value) {
      return static_cast<KV>(-128);
    } else {
      return static_cast<KV>(std::numeric_limits<float>::quiet_NaN());
    }
  }
  static KV make_kv(double x) {
    if constexpr (std::is_same<KV, std::int8_t>::value) {
      return static_cast<KV>(std::max(-127.0, std::min(127.0, std::round(x * 40.0))));
    } else {
      return static_cast<KV>(x);
    }
  }
  std::size_t at(std::int64_t page, std::int64_t slot, std::int64_t c, std::int64_t d) const {
    return idx(((page * page_size + slot) * 2 * hkv + c) * dim + d);
  }

  RaggedPagedAttentionArgs<Q, KV> args() const {
    RaggedPagedAttentionArgs<Q, KV> a;
    a.q = {q.data(), {tokens, hq, dim}, static_cast<std::int64_t>(q.size())};
    const TensorView<const KV, 4> pool(kv.data(), {num_pages, page_size, 2 * hkv, dim},
                                       static_cast<std::int64_t>(kv.size()));
    EXPECT_TRUE(ragged_kv_views(pool, &a.k_pages, &a.v_pages).ok());
    a.kv_lens = {kv_lens.data(), {max_seqs}};
    a.page_indices = {page_indices.data(), {max_seqs, pages_per_seq}};
    a.cu_q_lens = {cu_q_lens.data(), {max_seqs + 1}};
    a.num_seqs = {&num_seqs_array, {1}};
    a.sm_scale = static_cast<float>(opt.sm_scale);
    a.sliding_window = opt.sliding_window;
    if (opt.soft_cap) a.soft_cap = static_cast<float>(*opt.soft_cap);
    a.k_scale = opt.k_scale;
    a.v_scale = opt.v_scale;
    return a;
  }
};

template <class Q>
double tolerance() {
  if (std::is_same<Q, double>::value) return 1e-10;
  if (std::is_same<Q, float>::value) return 2e-5;
  return 1.6e-2;  // one bf16/half rounding of the output, plus f32 accumulation
}

// Runs the checked kernel into a NaN-filled output and compares with the float64 reference:
// every row (live and padding) finite, within atol = rtol = tolerance<Q>().
template <class Q, class KV>
void expect_matches_reference(const Batch<Q, KV>& b, double tol = tolerance<Q>()) {
  const auto args = b.args();
  ASSERT_TRUE(check_ragged(args, Profile::kReference).ok());
  std::vector<Q> out(b.q.size(), static_cast<Q>(kNaN));
  const Status s = try_ragged_paged_attention(args, TensorView<Q, 3>(out.data(), args.q.extents));
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::vector<double> ref = reference::ragged_paged_attention(b.args());
  double worst = 0;
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double got = static_cast<double>(static_cast<float>(out[i]));
    if constexpr (std::is_same<Q, double>::value) {
      const double exact = static_cast<double>(out[i]);
      const double err = std::abs(exact - ref[i]);
      if (!(err <= tol + tol * std::abs(ref[i]))) ++bad;
      worst = std::max(worst, err);
      continue;
    }
    const double err = std::abs(got - ref[i]);
    if (!(err <= tol + tol * std::abs(ref[i]))) ++bad;  // NaN counts as bad
    worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
  }
  EXPECT_EQ(bad, 0) << "worst abs error " << worst;
  // Padding rows are exactly zero.
  const std::int64_t live = b.cu_q_lens[idx(b.num_seqs)];
  for (std::size_t i = static_cast<std::size_t>(live * b.hq * b.dim); i < out.size(); ++i)
    ASSERT_EQ(static_cast<double>(static_cast<float>(out[i])), 0.0) << "padding element " << i;
}

const SeqLens kBasic = {{192, 328}, {128, 180}, {64, 255}};
const SeqLens kDecodeOnly = {{1, 18},   {1, 129}, {1, 597},  {1, 122}, {1, 64}, {1, 322},
                             {1, 463},  {1, 181}, {1, 1107}, {1, 123}, {1, 31}, {1, 18},
                             {1, 1229}, {1, 229}, {1, 87},   {1, 1328}};
const SeqLens kPrefillOnly = {{5, 18},    {15, 129},  {120, 597}, {100, 122}, {21, 64}, {32, 322},
                              {251, 463}, {40, 181},  {64, 1107}, {99, 123},  {10, 31}, {5, 18},
                              {3, 1229},  {120, 229}, {9, 87},    {2, 1328}};
const SeqLens kMixed = {{5, 18},    {1, 129},   {120, 597}, {1, 122},  {1, 64}, {32, 322},
                        {251, 463}, {1, 181},   {1, 1107},  {99, 123}, {1, 31}, {5, 18},
                        {3, 1229},  {117, 229}, {1, 87},    {1, 1328}};

// JAX's "complex" draw: q_len in [1, 100), kv_len = q_len + [0, 50). JAX uses numpy's
// default_rng(1234); this is the same distribution from a C++ generator with the same seed.
SeqLens random_seqs(std::int64_t n, std::uint32_t seed = 1234) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> q_len(1, 99), extra(0, 49);
  SeqLens s;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t ql = q_len(rng);
    s.push_back({ql, ql + extra(rng)});
  }
  return s;
}

constexpr std::int64_t kDim = 128, kPageSize = 16;

template <class T>
class RaggedKernelTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, Eigen::bfloat16>;
// The empty third argument keeps the default type names and clang's -Wpedantic quiet.
TYPED_TEST_SUITE(RaggedKernelTyped, FloatTypes, );

TYPED_TEST(RaggedKernelTyped, Basic) {
  Batch<TypeParam, TypeParam> b(kBasic, 32, 8, kDim, kPageSize, 1);
  b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
  expect_matches_reference(b);
}

TYPED_TEST(RaggedKernelTyped, DecodeOnly) {
  Batch<TypeParam, TypeParam> b(kDecodeOnly, 32, 8, kDim, kPageSize, 2);
  b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
  expect_matches_reference(b);
}

TYPED_TEST(RaggedKernelTyped, PrefillOnly) {
  Batch<TypeParam, TypeParam> b(kPrefillOnly, 32, 8, kDim, kPageSize, 3);
  b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
  expect_matches_reference(b);
}

TYPED_TEST(RaggedKernelTyped, Mixed) {
  Batch<TypeParam, TypeParam> b(kMixed, 32, 8, kDim, kPageSize, 4);
  b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
  expect_matches_reference(b);
}

// JAX's sm_scale default (1.0): peaky softmax, same answer.
TYPED_TEST(RaggedKernelTyped, MixedUnscaled) {
  Batch<TypeParam, TypeParam> b(kMixed, 8, 2, 64, kPageSize, 5);
  expect_matches_reference(b);
}

struct ComplexCase {
  std::int64_t num_seqs, hq, hkv;
};

class RaggedKernelComplex : public ::testing::TestWithParam<ComplexCase> {};

TEST_P(RaggedKernelComplex, Float32AndBfloat16) {
  const ComplexCase c = GetParam();
  const SeqLens seqs = random_seqs(c.num_seqs);
  {
    Batch<float, float> b(seqs, c.hq, c.hkv, kDim, kPageSize, 6);
    b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
    // JAX accepts every case of its own grid (R14 included), blocking knobs as in its test.
    auto a = b.args();
    a.num_kv_pages_per_block = std::min<std::int64_t>(4, b.pages_per_seq);
    a.num_queries_per_block = 32;
    EXPECT_TRUE(check_ragged(a, Profile::kJax).ok()) << check_ragged(a, Profile::kJax).to_string();
    expect_matches_reference(b);
  }
  {
    Batch<Eigen::bfloat16, Eigen::bfloat16> b(seqs, c.hq, c.hkv, kDim, kPageSize, 7);
    b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
    EXPECT_TRUE(check_ragged(b.args(), Profile::kJax).ok());
    expect_matches_reference(b);
  }
}

INSTANTIATE_TEST_SUITE_P(
    JaxGrid, RaggedKernelComplex,
    ::testing::Values(ComplexCase{1, 32, 8}, ComplexCase{1, 32, 16}, ComplexCase{1, 16, 2},
                      ComplexCase{1, 4, 4}, ComplexCase{1, 8, 1}, ComplexCase{5, 32, 8},
                      ComplexCase{5, 32, 16}, ComplexCase{5, 16, 2}, ComplexCase{5, 4, 4},
                      ComplexCase{5, 8, 1}, ComplexCase{16, 32, 8}, ComplexCase{16, 32, 16},
                      ComplexCase{16, 16, 2}, ComplexCase{16, 4, 4}, ComplexCase{16, 8, 1}));

class RaggedKernelWindow : public ::testing::TestWithParam<std::optional<std::int64_t>> {};

// JAX's sliding-window test: 5 random sequences, heads (4, 4), f32.
TEST_P(RaggedKernelWindow, JaxSet) {
  Batch<float, float> b(random_seqs(5), 4, 4, kDim, kPageSize, 8);
  b.opt.sm_scale = 1.0 / std::sqrt(double(kDim));
  b.opt.sliding_window = GetParam();
  expect_matches_reference(b);
}

// Long sequences, where the window skips whole pages: every K/V token no row of its sequence can
// see (before the first row's window) is overwritten with NaN after the reference is computed;
// the kernel never reads them, so its output is unchanged.
TEST_P(RaggedKernelWindow, MixedSkipsPagesBeforeTheWindow) {
  Batch<float, float> b(kMixed, 8, 2, 64, kPageSize, 9);
  b.opt.sm_scale = 0.125;
  b.opt.sliding_window = GetParam();
  const std::int64_t w = GetParam() ? *GetParam() : 0;
  const std::vector<double> ref = reference::ragged_paged_attention(b.args());
  if (w > 0) {
    // Poison every K/V token no row of its sequence can see: before the first row's window.
    for (std::int64_t i = 0; i < b.num_seqs; ++i) {
      const std::int64_t q_len = b.cu_q_lens[idx(i + 1)] - b.cu_q_lens[idx(i)];
      const std::int64_t lo = std::max<std::int64_t>(0, b.kv_lens[idx(i)] - q_len - w + 1);
      for (std::int64_t c = 0; c < lo; ++c) {
        const std::int64_t page = b.page_indices[idx(i * b.pages_per_seq + c / b.page_size)];
        for (std::int64_t h = 0; h < 2 * b.hkv; ++h)
          for (std::int64_t d = 0; d < b.dim; ++d)
            b.kv[b.at(page, c % b.page_size, h, d)] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
  const auto args = b.args();
  std::vector<float> out(b.q.size(), std::numeric_limits<float>::quiet_NaN());
  ragged_paged_attention(args, TensorView<float, 3>(out.data(), args.q.extents));
  for (std::size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 2e-5 + 2e-5 * std::abs(ref[i])) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Windows, RaggedKernelWindow,
                         ::testing::Values(std::nullopt, std::optional<std::int64_t>(5),
                                           std::optional<std::int64_t>(128),
                                           std::optional<std::int64_t>(1)));

class RaggedKernelSoftCap : public ::testing::TestWithParam<std::optional<double>> {};

// JAX's soft-cap test: 2 random sequences, heads (16, 2), f32, sm_scale 1 (so the cap bites).
TEST_P(RaggedKernelSoftCap, JaxSet) {
  Batch<float, float> b(random_seqs(2), 16, 2, kDim, kPageSize, 10);
  b.opt.soft_cap = GetParam();
  expect_matches_reference(b);
}

TEST_P(RaggedKernelSoftCap, MixedWithWindow) {
  Batch<Eigen::bfloat16, Eigen::bfloat16> b(kMixed, 8, 4, 64, kPageSize, 11);
  b.opt.soft_cap = GetParam();
  b.opt.sliding_window = 40;
  expect_matches_reference(b);
}

INSTANTIATE_TEST_SUITE_P(Caps, RaggedKernelSoftCap,
                         ::testing::Values(std::nullopt, std::optional<double>(50.0),
                                           std::optional<double>(5.0)));

TEST(RaggedKernel, Float64) {
  Batch<double, double> b(kMixed, 8, 2, 32, 8, 12);
  b.opt.sm_scale = 0.2;
  b.opt.sliding_window = 100;
  b.opt.soft_cap = 20.0;
  expect_matches_reference(b);
}

TEST(RaggedKernel, HalfQueriesAndPages) {
  Batch<Eigen::half, Eigen::half> b(kMixed, 8, 2, 64, kPageSize, 13);
  b.opt.sm_scale = 0.125;
  expect_matches_reference(b);
}

TEST(RaggedKernel, FloatQueriesBfloat16Pages) {
  Batch<float, Eigen::bfloat16> b(kMixed, 8, 2, 64, kPageSize, 14);
  b.opt.sm_scale = 0.125;
  expect_matches_reference(b);
}

TEST(RaggedKernel, Int8PagesWithScales) {
  // k = q_dtype(float(k) * k_scale): scales 1/40 undo the x40 of the quantizer above.
  Batch<float, std::int8_t> b(kMixed, 8, 2, 64, kPageSize, 15);
  b.opt.sm_scale = 0.125;
  b.opt.k_scale = 0.025f;
  b.opt.v_scale = 0.05f;
  expect_matches_reference(b);
  Batch<Eigen::bfloat16, std::int8_t> c(kBasic, 8, 2, 64, kPageSize, 16);
  c.opt.sm_scale = 0.125;
  c.opt.k_scale = 0.025f;
  c.opt.v_scale = 0.025f;
  expect_matches_reference(c);
}

TEST(RaggedKernel, ScalesOnFloatPages) {
  Batch<Eigen::bfloat16, Eigen::bfloat16> b(kBasic, 8, 2, 64, kPageSize, 17);
  b.opt.sm_scale = 0.125;
  b.opt.k_scale = 0.5f;
  b.opt.v_scale = 0.5f;
  expect_matches_reference(b);
}

TEST(RaggedKernel, EmptySequencesAndEmptyBatch) {
  // q_len 0 rows (a sequence waiting this step), kv_len 0 with q_len 0, and decode of length 1.
  const SeqLens seqs = {{0, 40}, {3, 3}, {0, 0}, {1, 1}, {2, 17}, {0, 5}};
  Batch<float, float> b(seqs, 4, 2, 16, 4, 18);
  b.opt.sm_scale = 0.25;
  expect_matches_reference(b);
  b.num_seqs_array = 0;  // nothing live: every row is padding, all zeros
  b.num_seqs = 0;
  expect_matches_reference(b);
}

TEST(RaggedKernel, SmallPagesAndPageSizeOne) {
  for (std::int64_t page_size : {1, 3, 7, 200, 1000}) {
    Batch<float, float> b(kMixed, 4, 1, 32, page_size, 19);
    b.opt.sm_scale = 0.2;
    b.opt.sliding_window = 33;
    expect_matches_reference(b);
  }
}

TEST(RaggedKernel, HostScalarNumSeqsAndMaskValueHaveNoEffect) {
  Batch<float, float> b(kMixed, 8, 2, 32, kPageSize, 20);
  b.opt.sm_scale = 0.2;
  auto a = b.args();
  std::vector<float> out1(b.q.size()), out2(b.q.size());
  ragged_paged_attention(a, TensorView<float, 3>(out1.data(), a.q.extents));
  a.num_seqs = {};
  a.num_seqs_value = b.num_seqs;
  a.mask_value = -1e4f;
  a.num_kv_pages_per_block = 2;
  ragged_paged_attention(a, TensorView<float, 3>(out2.data(), a.q.extents));
  EXPECT_EQ(out1, out2);
}

// Row blocks of at most kRaggedSmallRows rows take the page-walk tiling, larger ones the gathered
// matrix products: rows on both sides of the threshold (q_len * G = 16, 20 with G = 4; 16, 17
// with G = 1), with a window and a soft cap, give the float64 result.
TEST(RaggedKernel, BothTilingsAroundTheThreshold) {
  ASSERT_EQ(detail::kRaggedSmallRows, 16);
  const SeqLens seqs = {{4, 30}, {5, 30}, {16, 40}, {17, 40}, {1, 50}, {3, 3}};
  for (std::int64_t hkv : {2, 8}) {
    Batch<float, float> b(seqs, 8, hkv, 32, 4, 26);
    b.opt.sm_scale = 0.2;
    b.opt.sliding_window = 7;
    b.opt.soft_cap = 3.0;
    expect_matches_reference(b);
  }
}

// The few-rows path takes up to 128 tokens per softmax step over as many pages as they span,
// fewer when Hkv x D is large (its conversion scratch is bounded): chunks that start and end
// mid-page, rows that see only part of a chunk (q_len 2 and 3, a window), and a shrunk chunk,
// against the float64 result.
TEST(RaggedKernel, FewRowsChunksSpanPagesAndShrinkForManyKvHeads) {
  EXPECT_EQ(detail::ragged_few_rows_chunk(8, 128, 4096), 128);
  EXPECT_EQ(detail::ragged_few_rows_chunk(8, 128, 50), 50);     // a short sequence
  EXPECT_EQ(detail::ragged_few_rows_chunk(16, 512, 4096), 32);  // K/V rows bound it
  EXPECT_EQ(detail::ragged_few_rows_chunk(4096, 1, 4096), 4);   // the scores bound it
  EXPECT_EQ(detail::ragged_few_rows_chunk(4096, 256, 4096), 1);
  const SeqLens seqs = {{1, 300}, {2, 129}, {3, 257}, {1, 128}, {1, 1}, {2, 2}};
  for (std::int64_t page_size : {3, 16, 129}) {
    Batch<float, float> b(seqs, 8, 2, 32, page_size, 27);
    b.opt.sm_scale = 0.2;
    expect_matches_reference(b);
    b.opt.sliding_window = 100;
    expect_matches_reference(b);
  }
  Batch<float, float> wide({{1, 200}, {2, 150}}, 16, 16, 512, 5, 28);  // 32 tokens a chunk
  wide.opt.sm_scale = 0.05;
  expect_matches_reference(wide);
}

// The executor only schedules (sequence, KV head) items: a thread pool gives bit-identical
// output, for decode rows and prefill rows alike.
TEST(RaggedKernel, ThreadPoolGivesIdenticalOutput) {
  Batch<float, float> b(kMixed, 8, 2, 64, kPageSize, 25);
  b.opt.sm_scale = 0.125;
  b.opt.sliding_window = 100;
  const auto a = b.args();
  std::vector<float> serial(b.q.size()), pooled(b.q.size(), 7.0f);
  ragged_paged_attention(a, TensorView<float, 3>(serial.data(), a.q.extents));
  ThreadPoolExecutor pool(3);
  ragged_paged_attention(a, TensorView<float, 3>(pooled.data(), a.q.extents), pool);
  EXPECT_EQ(serial, pooled);
  const Status s =
      try_ragged_paged_attention(a, TensorView<float, 3>(pooled.data(), a.q.extents), pool);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(serial, pooled);
}

// Fewer decode sequences than threads: each is cut into ranges of KV heads run on different
// threads. The heads are independent, so output and logsumexp are the same bits as the serial
// run (one range), for f32 and for int8 pages with factored scales, with and without a window.
template <class KV>
void expect_head_ranges_give_identical_output(const SeqLens& seqs, std::optional<float> scale) {
  Batch<float, KV> b(seqs, 16, 8, 64, kPageSize, 31);
  b.opt.sm_scale = 0.125;
  b.opt.k_scale = scale;
  b.opt.v_scale = scale;
  for (const std::optional<std::int64_t> window :
       {std::optional<std::int64_t>{}, {std::int64_t{90}}}) {
    b.opt.sliding_window = window;
    const auto a = b.args();
    const std::int64_t rows = a.q.extents[0], heads = a.q.extents[1];
    std::vector<float> serial(b.q.size()), serial_lse(static_cast<std::size_t>(rows * heads));
    ASSERT_TRUE(try_ragged_paged_attention(a, TensorView<float, 3>(serial.data(), a.q.extents),
                                           TensorView<float, 2>(serial_lse.data(), {rows, heads}))
                    .ok());
    for (int threads : {2, 3, 8}) {  // 8: one KV head per item
      ThreadPoolExecutor pool(threads);
      std::vector<float> pooled(b.q.size(), 7.0f), pooled_lse(serial_lse.size(), 7.0f);
      ASSERT_TRUE(try_ragged_paged_attention(a, TensorView<float, 3>(pooled.data(), a.q.extents),
                                             TensorView<float, 2>(pooled_lse.data(), {rows, heads}),
                                             pool)
                      .ok());
      EXPECT_EQ(serial, pooled) << threads << " threads";
      EXPECT_EQ(serial_lse, pooled_lse) << threads << " threads";
    }
  }
  expect_matches_reference(b, scale ? 1e-4 : tolerance<float>());
}

TEST(RaggedKernel, DecodeSequencesSplitByKvHeadsGiveIdenticalOutput) {
  expect_head_ranges_give_identical_output<float>({{1, 700}}, std::nullopt);
  expect_head_ranges_give_identical_output<float>({{2, 300}, {1, 451}}, std::nullopt);
  expect_head_ranges_give_identical_output<std::int8_t>({{1, 700}}, 0.02f);
}

// Views carry strides: a padded token-major pool with K and V in separate halves of each slot,
// and a head-major q, give the same numbers as the dense layout.
TEST(RaggedKernel, StridedViewsGiveTheSameNumbers) {
  Batch<float, float> b(kMixed, 8, 2, 32, kPageSize, 21);
  b.opt.sm_scale = 0.2;
  const auto dense = b.args();
  std::vector<float> out_dense(b.q.size());
  ragged_paged_attention(dense, TensorView<float, 3>(out_dense.data(), dense.q.extents));

  // kv: physical [P, S, D + 5, 2 * Hkv] (dim-major inside a slot, padded).
  const std::int64_t P = b.num_pages, S = b.page_size, C = 2 * b.hkv, D = b.dim, Dp = D + 5;
  std::vector<float> kv2(idx(P * S * Dp * C), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t p = 0; p < P; ++p)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t d = 0; d < D; ++d)
          kv2[idx(((p * S + s) * Dp + d) * C + c)] = b.kv[b.at(p, s, c, d)];
  // q: physical [Hq, T, D].
  const std::int64_t T = b.tokens, H = b.hq;
  std::vector<float> q2(b.q.size());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        q2[idx((h * T + t) * D + d)] = b.q[idx((t * H + h) * D + d)];
  auto strided = dense;
  const TensorView<const float, 4> pool2(kv2.data(), {P, S, C, D}, {S * Dp * C, Dp * C, 1, C},
                                         static_cast<std::int64_t>(kv2.size()));
  ASSERT_TRUE(ragged_kv_views(pool2, &strided.k_pages, &strided.v_pages).ok());
  strided.q = TensorView<const float, 3>(q2.data(), {T, H, D}, {D, T * D, 1},
                                         static_cast<std::int64_t>(q2.size()));
  // out: physical [Hq, T, D] as well.
  std::vector<float> out2(b.q.size());
  ragged_paged_attention(strided, TensorView<float, 3>(out2.data(), {T, H, D}, {D, T * D, 1}));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        ASSERT_NEAR(out2[idx((h * T + t) * D + d)], out_dense[idx((t * H + h) * D + d)], 1e-6f);
}

// ---- Entry points and the output check.

TEST(RaggedKernel, InvalidInputLeavesOutputUntouched) {
  Batch<float, float> b(kBasic, 4, 2, 16, kPageSize, 22);
  b.kv_lens[1] = 100;  // q_len 128 > kv_len 100
  auto a = b.args();
  std::vector<float> out(b.q.size(), 7.0f);
  const TensorView<float, 3> out_view(out.data(), a.q.extents);
  const Status s = try_ragged_paged_attention(a, out_view);
  EXPECT_EQ(s.code(), ErrorCode::kQueryLongerThanKv);
  EXPECT_EQ(std::string(s.jax_check()), "R18");
  EXPECT_EQ(s.message(), "q_len=128 must be less or equal to kv_len=100 at sequence 1.");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0f; }));
  EXPECT_THROW(ragged_paged_attention(a, out_view), ShapeError);
}

TEST(RaggedKernel, OutputShapeMustMatchQ) {
  Batch<float, float> b(kBasic, 4, 2, 16, kPageSize, 23);
  const auto a = b.args();
  std::vector<float> out(b.q.size());
  const Status s =
      try_ragged_paged_attention(a, TensorView<float, 3>(out.data(), {b.tokens, b.hq / 2, b.dim}));
  EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "out has shape (" + std::to_string(b.tokens) +
                             ", 2, 16); expected q's "
                             "shape (" +
                             std::to_string(b.tokens) + ", 4, 16)");
  const Status s2 = try_ragged_paged_attention(
      a, TensorView<float, 3>(out.data(), a.q.extents, static_cast<std::int64_t>(out.size()) - 1));
  EXPECT_EQ(s2.code(), ErrorCode::kOutOfBuffer);
}

TEST(RaggedKernel, UncheckedEntryMatchesChecked) {
  Batch<float, float> b(kMixed, 8, 2, 32, kPageSize, 24);
  b.opt.sm_scale = 0.2;
  const auto a = b.args();
  ASSERT_TRUE(check_ragged(a, Profile::kJax).ok());
  std::vector<float> out1(b.q.size()), out2(b.q.size());
  ragged_paged_attention(a, TensorView<float, 3>(out1.data(), a.q.extents));
  ragged_paged_attention_unchecked(a, TensorView<float, 3>(out2.data(), a.q.extents));
  EXPECT_EQ(out1, out2);
}

// Hand-worked: one KV head, head_dim 1, keys 0..3 = (1, 0, 0, 0), values (10, 20, 30, 40),
// q = 1 for 2 query rows of a sequence of kv_len 4 (rows at positions 2 and 3), sm_scale ln(2):
// row 0 sees keys 0..2 with weights (2, 1, 1)/4 -> (20 + 20 + 30)/4 = 17.5;
// row 1 sees keys 0..3 with weights (2, 1, 1, 1)/5 -> (20 + 20 + 30 + 40)/5 = 22.
// With sliding_window 2, row 1 sees keys 2..3 only -> 35.
TEST(RaggedKernel, HandWorked) {
  std::vector<float> q = {1.0f, 1.0f};
  // one page of 4 slots, combined heads (K, V), head_dim 1
  std::vector<float> kv = {1.0f, 10.0f, 0.0f, 20.0f, 0.0f, 30.0f, 0.0f, 40.0f};
  std::vector<std::int32_t> kv_lens = {4}, table = {0}, cu = {0, 2};
  RaggedPagedAttentionArgs<float> a;
  a.q = {q.data(), {2, 1, 1}};
  ASSERT_TRUE(
      ragged_kv_views(TensorView<const float, 4>(kv.data(), {1, 4, 2, 1}), &a.k_pages, &a.v_pages)
          .ok());
  a.kv_lens = {kv_lens.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  a.cu_q_lens = {cu.data(), {2}};
  a.num_seqs_value = 1;
  a.sm_scale = static_cast<float>(std::log(2.0));
  std::vector<float> out(2);
  ragged_paged_attention(a, TensorView<float, 3>(out.data(), {2, 1, 1}));
  EXPECT_NEAR(out[0], 17.5f, 1e-5f);
  EXPECT_NEAR(out[1], 22.0f, 1e-5f);
  a.sliding_window = 2;
  ragged_paged_attention(a, TensorView<float, 3>(out.data(), {2, 1, 1}));
  EXPECT_NEAR(out[0], 25.0f, 1e-5f);  // keys 1..2: (20 + 30)/2
  EXPECT_NEAR(out[1], 35.0f, 1e-5f);
}

// Regression (fuzz_ragged): a sliding window near INT64_MAX is valid (R7 only asks w > 0), but
// the many-rows path computed hi - 1 + w - first_pos, a signed overflow (UB). Such a window
// excludes nothing, on both tilings.
TEST(RaggedKernel, HugeSlidingWindowEqualsNoWindow) {
  const SeqLens seqs = {{18, 28}, {1, 9}, {40, 40}, {3, 50}};
  for (std::int64_t w : {std::numeric_limits<std::int64_t>::max(),
                         std::numeric_limits<std::int64_t>::max() - 1, std::int64_t{1} << 62}) {
    Batch<float, float> b(seqs, 4, 1, 12, 20, 28);
    b.opt.sm_scale = 0.25;
    b.opt.sliding_window = w;
    const std::vector<double> windowed = reference::ragged_paged_attention(b.args());
    b.opt.sliding_window.reset();
    ASSERT_EQ(windowed, reference::ragged_paged_attention(b.args()));
    b.opt.sliding_window = w;
    expect_matches_reference(b);
  }
}

}  // namespace
}  // namespace attnref
