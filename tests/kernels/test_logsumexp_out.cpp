// SPDX-License-Identifier: Apache-2.0
// The optional logsumexp output of the paged and ragged kernels (natural log of the softmax's
// denominator, f32, -inf for a row with no visible key), against the float64 oracles of
// reference/: paged serial and split-KV (thread pool, GQA), ragged decode and prefill rows,
// padding rows -inf; the `(args, out, executor)` overloads of all three families; the output
// checks (shape, overlapping views, logsumexp sharing memory with out).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnref/core/executor.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "reference/paged_batch.hpp"
#include "reference/ragged.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::ErrorCode;
using attnref::TensorView;
using paged_test::LogicalBatch;
using paged_test::Shape;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

/// |got - want| <= tol * (1 + |want|) for finite want; an infinite want must be met exactly.
void expect_lse_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(static_cast<double>(got[i]), want[i]) << what << " row " << i;
    } else {
      EXPECT_NEAR(static_cast<double>(got[i]), want[i], tol * (1.0 + std::fabs(want[i])))
          << what << " row " << i;
    }
  }
}

// --- paged ------------------------------------------------------------------------------------

/// A LogicalBatch as T arguments in JAX's layout; slots no sequence reads are NaN.
template <class T>
struct PagedInputs {
  std::vector<T> q, k, v;
  std::vector<std::int32_t> lengths, table;
  attnref::PagedAttentionArgs<T> args;

  PagedInputs(const LogicalBatch& lb, float sm_scale) {
    const Shape& sh = lb.shape;
    const auto convert = [](double x) { return static_cast<T>(x); };
    for (double x : lb.q) q.push_back(convert(x));
    const T poison = static_cast<T>(kNaN);
    k = paged_test::to_physical<T>(lb, lb.k, attnref::KvLayout::kJax, poison, convert);
    v = paged_test::to_physical<T>(lb, lb.v, attnref::KvLayout::kJax, poison, convert);
    lengths.assign(lb.lengths.begin(), lb.lengths.end());
    table.assign(lb.table.begin(), lb.table.end());
    args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
    args.k_pages = {k.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
    args.v_pages = {v.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
    args.lengths = {lengths.data(), {sh.batch}};
    args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
    args.sm_scale = sm_scale;
  }
  TensorView<T, 3> out_view(std::vector<T>& out) const {
    return TensorView<T, 3>(out.data(), args.q.extents);
  }
  TensorView<float, 2> lse_view(std::vector<float>& lse) const {
    return TensorView<float, 2>(lse.data(), {args.batch(), args.num_q_heads()});
  }
};

/// The oracle's out [B, Hq, D] and logsumexp [B, Hq] of a batch.
std::pair<std::vector<double>, std::vector<double>> paged_oracle(const LogicalBatch& lb,
                                                                 float sm_scale) {
  std::vector<double> lse;
  std::vector<double> out = attnref::reference::paged_attention(lb.args(sm_scale), nullptr, &lse);
  return {out, lse};
}

TEST(PagedLogsumexp, MatchesTheOracleAndIsMinusInfForEmptySequences) {
  std::mt19937 rng(11);
  int runs = 0;
  for (std::int64_t group : {1, 4}) {
    for (std::int64_t page_size : {1, 4, 16}) {
      const Shape sh{6, 2 * group, 2, 32, page_size, 3, 2};
      const LogicalBatch lb = paged_test::make_batch(sh, rng);
      const float scale = 1.0f / std::sqrt(32.0f);
      const PagedInputs<float> in(lb, scale);
      std::vector<float> out(in.q.size(), kNaN), lse(at(sh.batch * sh.hq), kNaN);
      attnref::paged_attention(in.args, in.out_view(out), in.lse_view(lse));
      const auto [want_out, want_lse] = paged_oracle(lb, scale);
      ASSERT_EQ(lb.lengths[0], 0);  // make_batch's pattern starts with an empty sequence
      for (std::int64_t h = 0; h < sh.hq; ++h) EXPECT_EQ(lse[at(h)], kNegInf);
      expect_lse_near(lse, want_lse, 2e-6, "G=" + std::to_string(group));
      EXPECT_LE(
          paged_test::worst_ratio(out, want_out, 1e-4, 1e-4, [](float x) { return double(x); }),
          1.0);
      ++runs;
    }
  }
  EXPECT_EQ(runs, 6);
}

TEST(PagedLogsumexp, SplitKvOnAThreadPoolWithGqaMatchesTheOracle) {
  // 6 sequences x 1 KV head on 8 threads: fewer items than threads, so each sequence's pages are
  // split and the partial states merged (the split-KV path).
  std::mt19937 rng(12);
  const Shape sh{6, 4, 1, 16, 4, 6, 1};
  ASSERT_GT(attnref::detail::kv_splits(sh.batch * sh.hkv, 8, sh.pages_per_seq), 1);
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const float scale = 0.25f;
  const PagedInputs<float> in(lb, scale);
  attnref::ThreadPoolExecutor pool(8);
  std::vector<float> out(in.q.size(), kNaN), lse(at(sh.batch * sh.hq), kNaN);
  attnref::paged_attention(in.args, in.out_view(out), in.lse_view(lse), pool);
  const auto [want_out, want_lse] = paged_oracle(lb, scale);
  expect_lse_near(lse, want_lse, 2e-6, "split-KV");
  EXPECT_LE(paged_test::worst_ratio(out, want_out, 1e-4, 1e-4, [](float x) { return double(x); }),
            1.0);
  // The serial run (no split) agrees within rounding, -inf rows exactly.
  std::vector<float> out1(in.q.size(), kNaN), lse1(lse.size(), kNaN);
  attnref::paged_attention(in.args, in.out_view(out1), in.lse_view(lse1));
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse1[i])) {
      EXPECT_EQ(lse[i], lse1[i]) << i;
    } else {
      EXPECT_NEAR(lse[i], lse1[i], 2e-6 * (1 + std::fabs(lse1[i]))) << i;
    }
  }
}

TEST(PagedLogsumexp, DoubleInputsGiveTheLogsumexpToFloat32Rounding) {
  std::mt19937 rng(13);
  const Shape sh{6, 8, 2, 64, 16, 3, 2};
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const PagedInputs<double> in(lb, 0.125f);
  std::vector<double> out(in.q.size());
  std::vector<float> lse(at(sh.batch * sh.hq), kNaN);
  attnref::paged_attention(in.args, in.out_view(out), in.lse_view(lse));
  const auto [want_out, want_lse] = paged_oracle(lb, 0.125f);
  expect_lse_near(lse, want_lse, 1e-7, "double");  // one f32 rounding: 2^-24 relative
}

TEST(PagedLogsumexp, EveryFormTakesAnExecutorWithOrWithoutTheLogsumexp) {
  std::mt19937 rng(14);
  const Shape sh{3, 4, 2, 8, 4, 2, 1};
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const PagedInputs<float> in(lb, 1.0f);
  attnref::ThreadPoolExecutor pool(2);
  std::vector<float> want(in.q.size()), lse(at(sh.batch * sh.hq));
  attnref::paged_attention(in.args, in.out_view(want), in.lse_view(lse), pool);
  for (int form = 0; form < 3; ++form) {
    std::vector<float> out(in.q.size(), kNaN);
    if (form == 0) attnref::paged_attention(in.args, in.out_view(out), pool);
    if (form == 1) {
      EXPECT_TRUE(attnref::try_paged_attention(in.args, in.out_view(out), pool).ok());
    }
    if (form == 2) attnref::paged_attention_unchecked(in.args, in.out_view(out), pool);
    EXPECT_EQ(out, want) << "form " << form;
  }
  std::vector<float> out(in.q.size(), kNaN), lse2(lse.size(), kNaN);
  attnref::paged_attention_unchecked(in.args, in.out_view(out), in.lse_view(lse2));
  EXPECT_EQ(lse2, lse);
}

TEST(PagedLogsumexp, BadLogsumexpViewsAreRefusedAndNothingIsWritten) {
  std::mt19937 rng(15);
  const Shape sh{6, 4, 2, 8, 4, 2, 1};
  const LogicalBatch lb = paged_test::make_batch(sh, rng);
  const PagedInputs<float> in(lb, 1.0f);
  std::vector<float> out(in.q.size(), 7.0f), lse(at(sh.batch * (sh.hq + 1)), 7.0f);

  attnref::Status s = attnref::try_paged_attention(in.args, in.out_view(out),
                                                   TensorView<float, 2>(lse.data(), {6, 5}));
  EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "logsumexp has shape (6, 5); expected (6, 4)");
  EXPECT_EQ(s.field(), std::string("logsumexp"));

  s = attnref::try_paged_attention(in.args, in.out_view(out),
                                   TensorView<float, 2>(lse.data(), {6, 4}, {1, 1}));
  EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
  EXPECT_EQ(s.message(),
            "logsumexp: dimension 1 (stride 1) overlaps the elements of faster dimensions, which "
            "span 6 elements");

  // The logsumexp inside out's buffer: the two outputs would overwrite each other.
  s = attnref::try_paged_attention(in.args, in.out_view(out),
                                   TensorView<float, 2>(out.data() + 5, {6, 4}));
  EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
  EXPECT_EQ(s.message(), "logsumexp and out share memory");
  EXPECT_EQ(s.field(), std::string("logsumexp"));
  EXPECT_NE(s.hint().find("own buffer"), std::string::npos) << s.hint();
  EXPECT_EQ(attnref::check_paged_output(in.args, in.out_view(out),
                                        TensorView<float, 2>(out.data() + 5, {6, 4}))
                .code(),
            ErrorCode::kOverlappingOutput);

  for (float x : out) ASSERT_EQ(x, 7.0f);
  for (float x : lse) ASSERT_EQ(x, 7.0f);
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  EXPECT_THROW(
      attnref::paged_attention(in.args, in.out_view(out), TensorView<float, 2>(lse.data(), {5, 4})),
      attnref::ShapeError);
#endif
}

// --- ragged -----------------------------------------------------------------------------------

using SeqLens = std::vector<std::pair<std::int64_t, std::int64_t>>;  // (q_len, kv_len)

/// A ragged batch over JAX's combined pool [P, S, 2*Hkv, D] with pages in random order; what
/// the kernel must not read (padding query rows, K/V past kv_len, unused pages) is NaN, unused
/// page-table entries point outside the pool.
struct RaggedInputs {
  std::int64_t hq, hkv, dim, page_size, pages = 8, max_seqs, pps, tokens;
  std::vector<float> q, kv;
  std::vector<std::int32_t> kv_lens, table, cu;
  std::int32_t num_seqs = 0;
  std::optional<std::int64_t> window;

  RaggedInputs(const SeqLens& seqs, std::int64_t hq_, std::int64_t hkv_, std::int64_t dim_,
               std::int64_t page_size_, std::uint32_t seed)
      : hq(hq_), hkv(hkv_), dim(dim_), page_size(page_size_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    num_seqs = static_cast<std::int32_t>(seqs.size());
    max_seqs = static_cast<std::int64_t>(seqs.size()) + 2;
    std::int64_t total = 0, max_kv = 1;
    for (const auto& s : seqs) {
      total += s.first;
      max_kv = std::max(max_kv, s.second);
      pages += (s.second + page_size - 1) / page_size;
    }
    tokens = total + 3;  // padding rows
    pps = (max_kv + page_size - 1) / page_size;
    q.assign(at(tokens * hq * dim), kNaN);
    for (std::int64_t i = 0; i < total * hq * dim; ++i) q[at(i)] = normal(rng);
    kv.assign(at(pages * page_size * 2 * hkv * dim), kNaN);
    std::vector<std::int32_t> free_pages(at(pages));
    std::iota(free_pages.begin(), free_pages.end(), 0);
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    kv_lens.assign(at(max_seqs), 0);
    table.assign(at(max_seqs * pps), 1 << 29);
    cu.assign(at(max_seqs + 1), 0);
    std::size_t next = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::int64_t kv_len = seqs[i].second;
      kv_lens[i] = static_cast<std::int32_t>(kv_len);
      cu[i + 1] = cu[i] + static_cast<std::int32_t>(seqs[i].first);
      for (std::int64_t p = 0; p * page_size < kv_len; ++p) {
        const std::int32_t page = free_pages[next++];
        table[i * at(pps) + at(p)] = page;
        for (std::int64_t s = 0; s < page_size && p * page_size + s < kv_len; ++s)
          for (std::int64_t e = 0; e < 2 * hkv * dim; ++e)
            kv[at((page * page_size + s) * 2 * hkv * dim + e)] = normal(rng);
      }
    }
    for (std::size_t i = seqs.size(); i < at(max_seqs); ++i) cu[i + 1] = cu[i];
  }

  attnref::RaggedPagedAttentionArgs<float> args() const {
    attnref::RaggedPagedAttentionArgs<float> a;
    a.q = {q.data(), {tokens, hq, dim}};
    const TensorView<const float, 4> pool(kv.data(), {pages, page_size, 2 * hkv, dim});
    EXPECT_TRUE(attnref::ragged_kv_views(pool, &a.k_pages, &a.v_pages).ok());
    a.kv_lens = {kv_lens.data(), {max_seqs}};
    a.page_indices = {table.data(), {max_seqs, pps}};
    a.cu_q_lens = {cu.data(), {max_seqs + 1}};
    a.num_seqs_value = num_seqs;
    a.sm_scale = 1.0f / std::sqrt(static_cast<float>(dim));
    a.sliding_window = window;
    return a;
  }
};

// Decode rows (q_len * G <= 16: the few-rows tiling), prefill chunks (the many-rows tiling) and
// an empty sequence.
const SeqLens kMixed = {{1, 7}, {20, 20}, {1, 1}, {5, 40}, {0, 4}, {13, 29}, {1, 33}};

TEST(RaggedLogsumexp, DecodeAndPrefillRowsMatchTheOraclePaddingRowsAreMinusInf) {
  for (const std::optional<std::int64_t> window :
       {std::optional<std::int64_t>(), std::optional<std::int64_t>(5)}) {
    RaggedInputs in(kMixed, 4, 2, 16, 4, 21);
    in.window = window;
    const attnref::RaggedPagedAttentionArgs<float> a = in.args();
    std::vector<float> out(in.q.size(), kNaN), lse(at(in.tokens * in.hq), kNaN);
    attnref::ragged_paged_attention(a, TensorView<float, 3>(out.data(), a.q.extents),
                                    TensorView<float, 2>(lse.data(), {in.tokens, in.hq}));
    std::vector<double> want_lse;
    const std::vector<double> want_out =
        attnref::reference::ragged_paged_attention(a, nullptr, &want_lse);
    const std::string what = window ? "window 5" : "no window";
    expect_lse_near(lse, want_lse, 2e-6, what);
    const std::int64_t live = in.cu[at(in.num_seqs)];
    ASSERT_EQ(in.tokens - live, 3);
    for (std::int64_t t = live; t < in.tokens; ++t)
      for (std::int64_t h = 0; h < in.hq; ++h) EXPECT_EQ(lse[at(t * in.hq + h)], kNegInf) << t;
    for (std::size_t i = 0; i < want_out.size(); ++i)
      ASSERT_NEAR(out[i], want_out[i], 1e-4 * (1 + std::fabs(want_out[i]))) << what << " " << i;
  }
}

TEST(RaggedLogsumexp, ThreadPoolAndEveryFormGiveTheSameBits) {
  const RaggedInputs in(kMixed, 8, 2, 8, 8, 22);
  const attnref::RaggedPagedAttentionArgs<float> a = in.args();
  const auto out_view = [&](std::vector<float>& o) {
    return TensorView<float, 3>(o.data(), a.q.extents);
  };
  const auto lse_view = [&](std::vector<float>& l) {
    return TensorView<float, 2>(l.data(), {in.tokens, in.hq});
  };
  std::vector<float> want(in.q.size(), kNaN), want_lse(at(in.tokens * in.hq), kNaN);
  attnref::ragged_paged_attention(a, out_view(want), lse_view(want_lse));
  attnref::ThreadPoolExecutor pool(3);
  std::vector<float> lse(want_lse.size(), kNaN), out(want.size(), kNaN);
  attnref::ragged_paged_attention(a, out_view(out), lse_view(lse), pool);
  EXPECT_EQ(lse, want_lse);
  for (int form = 0; form < 3; ++form) {
    std::vector<float> o(want.size(), kNaN);
    if (form == 0) attnref::ragged_paged_attention(a, out_view(o), pool);
    if (form == 1) {
      EXPECT_TRUE(attnref::try_ragged_paged_attention(a, out_view(o), pool).ok());
    }
    if (form == 2) attnref::ragged_paged_attention_unchecked(a, out_view(o), pool);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(o[i], want[i]) << form << " " << i;
  }
  std::fill(lse.begin(), lse.end(), kNaN);
  EXPECT_TRUE(attnref::try_ragged_paged_attention(a, out_view(out), lse_view(lse)).ok());
  EXPECT_EQ(lse, want_lse);
}

TEST(RaggedLogsumexp, BadLogsumexpViewsAreRefusedAndNothingIsWritten) {
  const RaggedInputs in({{1, 3}, {4, 4}}, 2, 1, 4, 2, 23);
  const attnref::RaggedPagedAttentionArgs<float> a = in.args();
  ASSERT_EQ(in.tokens, 8);
  std::vector<float> out(in.q.size(), 7.0f), lse(at(in.tokens * in.hq), 7.0f);
  const TensorView<float, 3> out_view(out.data(), a.q.extents);

  attnref::Status s =
      attnref::try_ragged_paged_attention(a, out_view, TensorView<float, 2>(lse.data(), {5, 2}));
  EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "logsumexp has shape (5, 2); expected (8, 2)");
  EXPECT_NE(s.hint().find("padding rows included"), std::string::npos) << s.hint();

  s = attnref::try_ragged_paged_attention(a, out_view,
                                          TensorView<float, 2>(lse.data(), {8, 2}, {0, 1}));
  EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
  EXPECT_EQ(s.message(),
            "logsumexp: dimension 0 (stride 0) overlaps the elements of faster dimensions, which "
            "span 1 elements");

  s = attnref::check_ragged_output(a, out_view, TensorView<float, 2>(out.data() + 60, {8, 2}));
  EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
  EXPECT_EQ(s.message(), "logsumexp and out share memory");
  // Just past out's last element: apart.
  std::vector<float> both(out.size() + lse.size(), 7.0f);
  EXPECT_TRUE(attnref::check_ragged_output(a, TensorView<float, 3>(both.data(), a.q.extents),
                                           TensorView<float, 2>(both.data() + out.size(), {8, 2}))
                  .ok());

  for (float x : out) ASSERT_EQ(x, 7.0f);
  for (float x : lse) ASSERT_EQ(x, 7.0f);
}

// --- splash: the same overloads and the same sharing check ------------------------------------

TEST(SplashLogsumexp, EveryFormTakesAnExecutorWithOrWithoutTheLogsumexp) {
  std::mt19937 rng(31);
  splash_ref::Problem p;
  p.hq = 4;
  p.hkv = 2;
  p.sq = p.skv = 40;
  p.dqk = p.dv = 8;
  splash_ref::fill(p.q, at(p.hq * p.sq * p.dqk), rng, -1, 1);
  splash_ref::fill(p.k, at(p.hkv * p.skv * p.dqk), rng, -1, 1);
  splash_ref::fill(p.v, at(p.hkv * p.skv * p.dv), rng, -1, 1);
  const std::vector<float> q = splash_ref::to<float>(p.q), k = splash_ref::to<float>(p.k),
                           v = splash_ref::to<float>(p.v);
  attnref::SplashAttentionArgs<float> a;
  a.q = {q.data(), {p.hq, p.sq, p.dqk}};
  a.k = {k.data(), {p.hkv, p.skv, p.dqk}};
  a.v = {v.data(), {p.hkv, p.skv, p.dv}};
  a.block_sizes.block_q = a.block_sizes.block_kv = 16;
  const attnref::CausalMask mask{{p.sq, p.skv}};
  attnref::SplashPlan<float> plan;
  ASSERT_TRUE(attnref::make_splash_plan(a, mask, &plan).ok());
  attnref::ThreadPoolExecutor pool(2);
  const std::size_t n = at(p.hq * p.sq * p.dv);
  std::vector<float> want(n), lse(at(p.hq * p.sq));
  const TensorView<float, 2> lse_view(lse.data(), {p.hq, p.sq});
  attnref::splash_attention(plan, TensorView<float, 3>(want.data(), {p.hq, p.sq, p.dv}), lse_view,
                            pool);
  for (int form = 0; form < 5; ++form) {
    std::vector<float> out(n, kNaN);
    const TensorView<float, 3> o(out.data(), {p.hq, p.sq, p.dv});
    if (form == 0) attnref::splash_attention(plan, o, pool);
    if (form == 1) {
      EXPECT_TRUE(attnref::try_splash_attention(plan, o, pool).ok());
    }
    if (form == 2) attnref::splash_attention_unchecked(plan, o, pool);
    if (form == 3) attnref::splash_attention(a, mask, o, pool);
    if (form == 4) {
      EXPECT_TRUE(attnref::try_splash_attention(a, mask, o, pool).ok());
    }
    EXPECT_EQ(out, want) << "form " << form;
  }
  // logsumexp inside out's buffer.
  const attnref::Status s =
      attnref::try_splash_attention(plan, TensorView<float, 3>(want.data(), {p.hq, p.sq, p.dv}),
                                    TensorView<float, 2>(want.data() + 1, {p.hq, p.sq}));
  EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
  EXPECT_EQ(s.message(), "logsumexp and out share memory");
}

}  // namespace
