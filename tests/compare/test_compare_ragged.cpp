// SPDX-License-Identifier: Apache-2.0
// The comparison report of the ragged family (compare/ragged.hpp): likely causes made with the
// float64 oracle of reference/ragged.hpp (the oracle run on the changed inputs): the causal
// diagonal top-left, the sliding window off by one, a length off by one, the sm_scale, the
// logsumexp in log2, padding rows past cu_q_lens[num_seqs], sinks ignored (and the window,
// sinks and ALiBi slopes kept by every other hypothesis); decode and prefill rows localized
// apart; an output that is simply wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnref/compare/ragged.hpp"
#include "reference/ragged.hpp"

namespace {

using attnref::RaggedPagedAttentionArgs;
namespace compare = attnref::compare;

/// Two prefill sequences (3 of 7 keys, 4 of 6 keys) and a decode sequence (1 of 5 keys), two
/// padding rows; separate K and V pools in JAX's layout, every slot filled.
struct Problem {
  std::int64_t tokens = 10, hq = 4, hkv = 2, dim = 8, page_size = 4, pps = 3, pages = 10;
  std::vector<float> q, k, v;
  std::vector<std::int32_t> kv_lens{7, 6, 5}, cu{0, 3, 7, 8}, table{0, 3, 6, 1, 4, 7, 2, 5, 8};
  RaggedPagedAttentionArgs<float> args;

  Problem() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < tokens * hq * dim; ++i) q.push_back(u(rng));
    for (std::int64_t i = 0; i < hkv * pages * page_size * dim; ++i) k.push_back(u(rng));
    for (std::int64_t i = 0; i < hkv * pages * page_size * dim; ++i) v.push_back(u(rng));
    point();
  }
  /// (Re)points the views at the buffers.
  void point() {
    args.q = {q.data(), {tokens, hq, dim}};
    args.k_pages = {k.data(), {hkv, pages, page_size, dim}};
    args.v_pages = {v.data(), {hkv, pages, page_size, dim}};
    args.kv_lens = {kv_lens.data(), {3}};
    args.cu_q_lens = {cu.data(), {4}};
    args.page_indices = {table.data(), {3, pps}};
    args.num_seqs_value = 3;
  }
};

compare::Options options() {
  compare::Options o;
  o.tol = {1e-4, 1e-4};
  return o;
}

compare::Report report_of(const RaggedPagedAttentionArgs<float>& a, const std::vector<double>& got,
                          const std::vector<double>& got_lse = {}, compare::Options o = options()) {
  compare::Report r;
  const attnref::Status s = compare::try_compare_ragged(a, got, got_lse, o, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

void expect_one_cause(const compare::Report& r, const std::string& words) {
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.causes.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.causes[0].what.find(words), std::string::npos) << compare::format_report(r);
}

TEST(CompareRagged, CorrectOutputNamesNoCause) {
  Problem p;
  const compare::Report r = report_of(p.args, attnref::reference::ragged_paged_attention(p.args));
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.causes.empty());
}

TEST(CompareRagged, CausalDiagonalTopLeft) {
  Problem p;
  // Top-left: row r sees keys <= r, which is the bottom-right rule with kv_len = q_len.
  Problem wrong;
  wrong.kv_lens = {3, 4, 1};
  wrong.point();
  const compare::Report r =
      report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args));
  expect_one_cause(r, "causal diagonal aligned top-left");
  const std::string text = compare::format_report(r);
  EXPECT_NE(text.find("decode rows that differ: 1 of 1; prefill rows that differ: 7 of 7"),
            std::string::npos)
      << text;
}

TEST(CompareRagged, SlidingWindowOffByOne) {
  Problem p;
  p.args.sliding_window = 3;
  Problem wrong;
  wrong.args.sliding_window = 4;
  const compare::Report r =
      report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args));
  expect_one_cause(r, "sliding window off by one: 4 instead of 3");
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "sliding_window");
  EXPECT_EQ(r.causes[0].reproduce.value, "4");
}

TEST(CompareRagged, SinksIgnored) {
  Problem p;
  const std::vector<float> sinks{0.5f, -0.25f, 1.0f, 0.0f};
  p.args.sinks = {sinks.data(), {4}};
  Problem wrong;
  const compare::Report r =
      report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args));
  ASSERT_NO_FATAL_FAILURE(expect_one_cause(r, "attention sinks ignored"));
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kUnset);
  EXPECT_EQ(r.causes[0].reproduce.field, "sinks");
}

// A hypothesis changes one thing: the asked window, sinks and ALiBi slopes stay in its re-run.
TEST(CompareRagged, HypothesesKeepWindowSinksAndAlibi) {
  Problem p;
  const std::vector<float> sinks{0.5f, -0.25f, 1.0f, 0.0f}, slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  p.args.sliding_window = 4;
  p.args.sinks = {sinks.data(), {4}};
  p.args.alibi_slopes = {slopes.data(), {4}};
  RaggedPagedAttentionArgs<float> scaled = p.args;
  scaled.sm_scale = 1.0f / std::sqrt(8.0f);
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(scaled)),
                   "sm_scale 1/sqrt(head_dim)");
  Problem top_left;  // the causal diagonal top-left: kv_lens set to the query lengths
  top_left.kv_lens = {3, 4, 1};
  top_left.point();
  top_left.args.sliding_window = 4;
  top_left.args.sinks = p.args.sinks;
  top_left.args.alibi_slopes = p.args.alibi_slopes;
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(top_left.args)),
                   "causal diagonal aligned top-left");
}

TEST(CompareRagged, LastKeyDropped) {
  Problem p;
  Problem wrong;
  wrong.kv_lens = {6, 5, 4};
  wrong.point();
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args)),
                   "last key of each sequence dropped");
}

TEST(CompareRagged, SmScale) {
  Problem p;
  Problem wrong;
  wrong.args.sm_scale = 1.0f / std::sqrt(8.0f);
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args)),
                   "sm_scale 1/sqrt(head_dim)");
}

TEST(CompareRagged, LogsumexpInLog2) {
  Problem p;
  std::vector<double> lse;
  const std::vector<double> out = attnref::reference::ragged_paged_attention(p.args, nullptr, &lse);
  for (double& x : lse) x /= std::log(2.0);
  const compare::Report r = report_of(p.args, out, lse);
  expect_one_cause(r, "log2");
}

TEST(CompareRagged, PaddingRowsOnly) {
  Problem p;
  std::vector<double> got = attnref::reference::ragged_paged_attention(p.args);
  for (std::int64_t i = 8 * p.hq * p.dim; i < p.tokens * p.hq * p.dim; ++i)
    got[static_cast<std::size_t>(i)] = 1.0;  // rows 8 and 9: past cu_q_lens[num_seqs]
  const compare::Report r = report_of(p.args, got);
  EXPECT_TRUE(r.padding_only);
  EXPECT_TRUE(r.causes.empty());
  EXPECT_NE(compare::format_report(r).find("padding rows that differ: 2 (rows 8-9)"),
            std::string::npos)
      << compare::format_report(r);
  compare::Options o = options();
  o.ignore_padding = true;
  EXPECT_TRUE(report_of(p.args, got, {}, o).ok());
}

TEST(CompareRagged, SimplyWrongLocalizedByRow) {
  Problem p;
  std::vector<double> got = attnref::reference::ragged_paged_attention(p.args);
  // Row 5 (sequence 1, prefill), head 2: off.
  for (std::int64_t d = 0; d < p.dim; ++d)
    got[static_cast<std::size_t>((5 * p.hq + 2) * p.dim + d)] += 0.2;
  const compare::Report r = report_of(p.args, got);
  EXPECT_TRUE(r.causes.empty()) << compare::format_report(r);
  const std::string text = compare::format_report(r);
  EXPECT_NE(text.find("no likely cause found"), std::string::npos);
  EXPECT_NE(text.find("sequence 1: heads 2 partly wrong"), std::string::npos) << text;
  EXPECT_NE(text.find("query rows that differ: 1 of 8 (rows 5)"), std::string::npos) << text;
  EXPECT_NE(text.find("decode rows that differ: 0 of 1; prefill rows that differ: 1 of 7"),
            std::string::npos)
      << text;
}

TEST(CompareRagged, ErrorGrowingAlongTheSequence) {
  Problem p;
  std::vector<double> got = attnref::reference::ragged_paged_attention(p.args);
  // Sequence 1 (rows 3..6, key positions 2..5): rows from position 3 on off, more and more.
  for (std::int64_t row = 4; row < 7; ++row)
    for (std::int64_t h = 0; h < p.hq; ++h)
      got[static_cast<std::size_t>((row * p.hq + h) * p.dim)] += 0.1 * static_cast<double>(row - 3);
  const std::string text = compare::format_report(report_of(p.args, got));
  EXPECT_NE(text.find("the error grows along the sequence: rows before key position 3 match"),
            std::string::npos)
      << text;
}

TEST(CompareRagged, OneKeyPastTheLength) {
  Problem p;
  Problem wrong;
  wrong.kv_lens = {8, 7, 6};
  wrong.point();
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args)),
                   "one key past");
}

// kv_len INT64_MAX (one page of INT64_MAX slots aliasing one row, head_dim 1) with a window of
// 300: the kernel and every hypothesis read 300 keys, and the one-key-past one, whose kv_len does
// not fit in int64, is skipped with that reason. The decode path's last step of 128 keys starts
// 44 keys before INT64_MAX: `advance_within` keeps its end from overflowing.
TEST(CompareRagged, KvLenOfInt64MaxSkipsOnePastTheLength) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::vector<float> q{0.5f, -1.0f}, k{2.0f}, v{-1.0f};
  const std::vector<std::int64_t> kv_lens{kMax}, cu{0, 1}, table{0};
  RaggedPagedAttentionArgs<float, float, std::int64_t> a;
  a.q = {q.data(), {1, 2, 1}};
  a.k_pages = attnref::TensorView<const float, 4>(k.data(), {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.v_pages = attnref::TensorView<const float, 4>(v.data(), {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.kv_lens = {kv_lens.data(), {1}};
  a.cu_q_lens = {cu.data(), {2}};
  a.page_indices = {table.data(), {1, 1}};
  a.num_seqs_value = 1;
  a.sliding_window = 300;
  RaggedPagedAttentionArgs<float, float, std::int64_t> wrong = a;
  std::swap(wrong.k_pages, wrong.v_pages);
  compare::Report r;
  const attnref::Status s = compare::try_compare_ragged(
      a, attnref::reference::ragged_paged_attention(wrong), {}, options(), &r);
  ASSERT_TRUE(s.ok()) << s.message();
  expect_one_cause(r, "K and V swapped");
  ASSERT_EQ(r.skipped.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.skipped[0].find("the changed kv_len overflows int64"), std::string::npos)
      << r.skipped[0];
}

TEST(CompareRagged, KAndVSwapped) {
  Problem p;
  Problem wrong;
  std::swap(wrong.args.k_pages, wrong.args.v_pages);
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args)),
                   "K and V swapped");
}

TEST(CompareRagged, KvReadInAnotherLayout) {
  Problem p;
  Problem wrong;
  wrong.args.k_pages = attnref::kv_pages_view<const float>(wrong.k.data(), attnref::KvLayout::kHnd,
                                                           p.hkv, p.pages, p.page_size, p.dim);
  wrong.args.v_pages = attnref::kv_pages_view<const float>(wrong.v.data(), attnref::KvLayout::kHnd,
                                                           p.hkv, p.pages, p.page_size, p.dim);
  const compare::Report r =
      report_of(p.args, attnref::reference::ragged_paged_attention(wrong.args));
  expect_one_cause(r, "read as hnd");
}

TEST(CompareRagged, InterleavedGqaMapping) {
  Problem p;
  // Reference head h * G + g holds query head g * Hkv + h (G = Hkv = 2: heads 1 and 2 swap).
  Problem wrong;
  for (std::int64_t row = 0; row < p.tokens; ++row)
    for (std::int64_t d = 0; d < p.dim; ++d)
      std::swap(wrong.q[static_cast<std::size_t>((row * p.hq + 1) * p.dim + d)],
                wrong.q[static_cast<std::size_t>((row * p.hq + 2) * p.dim + d)]);
  std::vector<double> got = attnref::reference::ragged_paged_attention(wrong.args);
  for (std::int64_t row = 0; row < p.tokens; ++row)
    for (std::int64_t d = 0; d < p.dim; ++d)
      std::swap(got[static_cast<std::size_t>((row * p.hq + 1) * p.dim + d)],
                got[static_cast<std::size_t>((row * p.hq + 2) * p.dim + d)]);
  expect_one_cause(report_of(p.args, got), "qh % num_kv_heads");
}

TEST(CompareRagged, SoftCapMissing) {
  Problem p;
  for (float& x : p.q) x *= 4.0f;
  p.args.soft_cap = 2.0f;
  RaggedPagedAttentionArgs<float> wrong = p.args;
  wrong.soft_cap.reset();
  expect_one_cause(report_of(p.args, attnref::reference::ragged_paged_attention(wrong)),
                   "soft cap 2 not applied");
}

}  // namespace
