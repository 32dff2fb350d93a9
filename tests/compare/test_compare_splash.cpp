// SPDX-License-Identifier: Apache-2.0
// The comparison report of the splash family (compare/splash.hpp): likely causes made with the
// float64 oracle of reference/splash.hpp (the oracle run on the changed inputs or mask): sinks
// ignored, the causal diagonal top-left versus bottom-right (q_seq_len < kv_seq_len) both
// ways, the local window and the sliding_window option off by one, K and V swapped, the
// interleaved GQA mapping, the window, sinks and ALiBi slopes kept by every hypothesis; rows
// localized one by one; an output that is simply wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnref/compare/splash.hpp"
#include "reference/splash.hpp"

namespace {

using attnref::CausalMask;
using attnref::LocalMask;
using attnref::MaskShape;
using attnref::MultiHeadMask;
using attnref::SplashAttentionArgs;
namespace compare = attnref::compare;

/// q [4, 6, 8], k/v [2, 10, 8], sinks [4].
struct Problem {
  std::int64_t hq = 4, hkv = 2, sq = 6, skv = 10, dim = 8;
  std::vector<float> q, k, v, sinks{0.5f, -0.25f, 1.0f, 0.0f};
  SplashAttentionArgs<float> args;

  Problem() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t i = 0; i < hq * sq * dim; ++i) q.push_back(u(rng));
    for (std::int64_t i = 0; i < hkv * skv * dim; ++i) k.push_back(u(rng));
    for (std::int64_t i = 0; i < hkv * skv * dim; ++i) v.push_back(u(rng));
    args.q = {q.data(), {hq, sq, dim}};
    args.k = {k.data(), {hkv, skv, dim}};
    args.v = {v.data(), {hkv, skv, dim}};
  }
};

/// The oracle's mask: causal at `offset`.
auto causal(std::int64_t offset) {
  return [offset](std::int64_t, std::int64_t r, std::int64_t t) { return r + offset >= t; };
}

compare::SplashMaskParams causal_params(std::int64_t offset) {
  compare::SplashMaskParams p;
  p.kind = compare::SplashMaskParams::Kind::kCausal;
  p.offset = offset;
  return p;
}

compare::Report report_of(const SplashAttentionArgs<float>& a, const MultiHeadMask& mask,
                          const compare::SplashMaskParams& params, const std::vector<double>& got) {
  compare::Options o;
  o.tol = {1e-4, 1e-4};
  compare::Report r;
  const attnref::Status s = compare::try_compare_splash(a, mask, params, got, {}, o, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

void expect_one_cause(const compare::Report& r, const std::string& words) {
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.causes.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.causes[0].what.find(words), std::string::npos) << compare::format_report(r);
}

TEST(CompareSplash, CorrectOutputNamesNoCause) {
  Problem p;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  const compare::Report r = report_of(p.args, mask, causal_params(4),
                                      attnref::reference::splash_forward(p.args, causal(4)).out);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.causes.empty());
}

TEST(CompareSplash, SinksIgnored) {
  Problem p;
  p.args.sinks = {p.sinks.data(), {4}};
  Problem wrong;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  expect_one_cause(report_of(p.args, mask, causal_params(4),
                             attnref::reference::splash_forward(wrong.args, causal(4)).out),
                   "attention sinks ignored");
}

TEST(CompareSplash, DiagonalTopLeftInsteadOfBottomRight) {
  Problem p;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  const compare::Report r = report_of(p.args, mask, causal_params(4),
                                      attnref::reference::splash_forward(p.args, causal(0)).out);
  expect_one_cause(r, "causal diagonal aligned top-left (offset 0) instead of at offset 4");
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "offset");
  EXPECT_EQ(r.causes[0].reproduce.value, "0");
}

TEST(CompareSplash, DiagonalBottomRightInsteadOfTopLeft) {
  Problem p;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 0}};
  expect_one_cause(report_of(p.args, mask, causal_params(0),
                             attnref::reference::splash_forward(p.args, causal(4)).out),
                   "causal diagonal aligned bottom-right");
}

TEST(CompareSplash, LocalWindowOffByOne) {
  Problem p;
  const MultiHeadMask mask{LocalMask{MaskShape{6, 10}, 3, 0, 4}};
  compare::SplashMaskParams params;
  params.kind = compare::SplashMaskParams::Kind::kLocal;
  params.offset = 4;
  params.left = 3;
  params.right = 0;
  const auto wider = [](std::int64_t, std::int64_t r, std::int64_t t) {
    return r + 4 - 4 <= t && t <= r + 4;
  };
  const compare::Report r =
      report_of(p.args, mask, params, attnref::reference::splash_forward(p.args, wider).out);
  expect_one_cause(r, "sliding window off by one: 4 instead of 3");
}

// A local mask's left side of INT64_MAX (no bound) is valid; its off-by-one hypotheses stop at
// INT64_MAX - 1 instead of overflowing.
TEST(CompareSplash, UnboundedLocalLeftHasNoWiderNeighbour) {
  Problem p;
  constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();
  const MultiHeadMask mask{LocalMask{MaskShape{6, 10}, kUnbounded, 0, 4}};
  compare::SplashMaskParams params;
  params.kind = compare::SplashMaskParams::Kind::kLocal;
  params.offset = 4;
  params.left = kUnbounded;
  params.right = 0;
  SplashAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k, wrong.v);
  expect_one_cause(
      report_of(p.args, mask, params, attnref::reference::splash_forward(wrong, causal(4)).out),
      "K and V swapped");
}

TEST(CompareSplash, SlidingWindowOptionOffByOne) {
  Problem p;
  p.args.sliding_window = 3;
  SplashAttentionArgs<float> wrong = p.args;
  wrong.sliding_window = 4;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 0}};
  const compare::Report r = report_of(p.args, mask, causal_params(0),
                                      attnref::reference::splash_forward(wrong, causal(0)).out);
  ASSERT_NO_FATAL_FAILURE(expect_one_cause(r, "sliding window off by one: 4 instead of 3"));
  EXPECT_EQ(r.causes[0].reproduce.kind, compare::Reproduce::Kind::kSet);
  EXPECT_EQ(r.causes[0].reproduce.field, "sliding_window");
  EXPECT_EQ(r.causes[0].reproduce.value, "4");
}

// A hypothesis changes one thing: the asked window, sinks and ALiBi slopes stay in its re-run.
TEST(CompareSplash, HypothesesKeepWindowSinksAndAlibi) {
  Problem p;
  const std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  p.args.sliding_window = 4;
  p.args.sinks = {p.sinks.data(), {4}};
  p.args.alibi_slopes = {slopes.data(), {4}};
  SplashAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k, wrong.v);
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 0}};
  expect_one_cause(report_of(p.args, mask, causal_params(0),
                             attnref::reference::splash_forward(wrong, causal(0)).out),
                   "K and V swapped");
}

TEST(CompareSplash, KAndVSwapped) {
  Problem p;
  SplashAttentionArgs<float> wrong = p.args;
  std::swap(wrong.k, wrong.v);
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  expect_one_cause(report_of(p.args, mask, causal_params(4),
                             attnref::reference::splash_forward(wrong, causal(4)).out),
                   "K and V swapped");
}

TEST(CompareSplash, InterleavedGqaMapping) {
  Problem p;
  // Reference head h * G + g holds query head g * Hkv + h (G = Hkv = 2).
  const std::int64_t order[4] = {0, 2, 1, 3};
  std::vector<float> q2(p.q.size());
  const std::int64_t per_head = p.sq * p.dim;
  for (std::int64_t j = 0; j < 4; ++j)
    for (std::int64_t i = 0; i < per_head; ++i)
      q2[static_cast<std::size_t>(j * per_head + i)] =
          p.q[static_cast<std::size_t>(order[j] * per_head + i)];
  SplashAttentionArgs<float> permuted = p.args;
  permuted.q = {q2.data(), {p.hq, p.sq, p.dim}};
  const std::vector<double> out2 = attnref::reference::splash_forward(permuted, causal(4)).out;
  std::vector<double> got(out2.size());
  for (std::int64_t j = 0; j < 4; ++j)
    for (std::int64_t i = 0; i < per_head; ++i)
      got[static_cast<std::size_t>(order[j] * per_head + i)] =
          out2[static_cast<std::size_t>(j * per_head + i)];
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  expect_one_cause(report_of(p.args, mask, causal_params(4), got), "qh % num_kv_heads");
}

TEST(CompareSplash, SimplyWrongLocalizedByRow) {
  Problem p;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  std::vector<double> got = attnref::reference::splash_forward(p.args, causal(4)).out;
  got[static_cast<std::size_t>((1 * p.sq + 2) * p.dim)] += 0.5;  // head 1, row 2
  const compare::Report r = report_of(p.args, mask, causal_params(4), got);
  EXPECT_TRUE(r.causes.empty()) << compare::format_report(r);
  const std::string text = compare::format_report(r);
  EXPECT_NE(text.find("no likely cause found"), std::string::npos);
  EXPECT_NE(text.find("query rows that differ: 1 of 6 (rows 2)"), std::string::npos) << text;
  EXPECT_NE(text.find("sequence 0: heads 1 partly wrong"), std::string::npos) << text;
}

TEST(CompareSplash, SmScale) {
  Problem p;
  p.args.sm_scale = 0.5f;
  SplashAttentionArgs<float> wrong = p.args;
  wrong.sm_scale = 1.0f;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  expect_one_cause(report_of(p.args, mask, causal_params(4),
                             attnref::reference::splash_forward(wrong, causal(4)).out),
                   "sm_scale 1 used instead of 0.5");
}

TEST(CompareSplash, SoftCapNotAsked) {
  Problem p;
  for (float& x : p.q) x *= 8.0f;
  SplashAttentionArgs<float> wrong = p.args;
  wrong.soft_cap = 20.0f;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  expect_one_cause(report_of(p.args, mask, causal_params(4),
                             attnref::reference::splash_forward(wrong, causal(4)).out),
                   "soft cap of 20 applied");
}

TEST(CompareSplash, LogsumexpInLog2) {
  Problem p;
  const MultiHeadMask mask{CausalMask{MaskShape{6, 10}, 4}};
  attnref::reference::SplashForwardResult f = attnref::reference::splash_forward(p.args, causal(4));
  for (double& x : f.lse) x /= std::log(2.0);
  compare::Options o;
  o.tol = {1e-4, 1e-4};
  compare::Report r;
  ASSERT_TRUE(
      compare::try_compare_splash(p.args, mask, causal_params(4), f.out, f.lse, o, &r).ok());
  expect_one_cause(r, "log2");
}

}  // namespace
