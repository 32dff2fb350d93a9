// SPDX-License-Identifier: Apache-2.0
// attnref-run's comparison report end to end: `--expect` with an output made by the float64
// oracles of reference/ under one wrong change prints `likely cause: ...` with the option that
// reproduces it (and that option then matches), exits 3 (paged: sm_scale, sinks ignored with
// the window and ALiBi kept); `--expect-lse`, `--ignore-padding`;
// an output that is simply wrong gets "no likely cause found" and where.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_harness.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"
#include "reference/splash.hpp"

namespace attnref {
namespace {

using cli_test::Result;

std::vector<float> random_floats(std::uint32_t seed, std::size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

/// A decode batch: q [2, 4, 8], K/V pages [2, 6, 4, 8] (JAX's layout), lengths {5, 7}.
class CompareCli : public cli_test::CliTest {
 public:
  std::vector<float> q = random_floats(1, 2 * 4 * 8), k = random_floats(2, 2 * 6 * 4 * 8),
                     v = random_floats(3, 2 * 6 * 4 * 8);
  std::vector<std::int32_t> lengths{5, 7}, table{0, 2, 4, 1, 3, 5};
  PagedAttentionArgs<float> args;
  const std::string inputs =
      "--q q.npy --k-pages k.npy --v-pages v.npy --lengths lengths.npy --page-indices pi.npy";

  void SetUp() override {
    CliTest::SetUp();
    args.q = {q.data(), {2, 4, 8}};
    args.k_pages = {k.data(), {2, 6, 4, 8}};
    args.v_pages = {v.data(), {2, 6, 4, 8}};
    args.lengths = {lengths.data(), {2}};
    args.page_indices = {table.data(), {2, 3}};
    save<float>("q.npy", {2, 4, 8}, q);
    save<float>("k.npy", {2, 6, 4, 8}, k);
    save<float>("v.npy", {2, 6, 4, 8}, v);
    save<std::int32_t>("lengths.npy", {2}, lengths);
    save<std::int32_t>("pi.npy", {2, 3}, table);
  }
  void save_doubles(const std::string& name, std::vector<std::int64_t> shape,
                    const std::vector<double>& x) {
    save<float>(name, std::move(shape), std::vector<float>(x.begin(), x.end()));
  }
  Result paged(const std::string& more) const {
    return run_subcommand("paged", inputs + " " + more);
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(CompareCli, PagedSmScaleNamedAndReproduced) {
  PagedAttentionArgs<float> wrong = args;
  wrong.sm_scale = 1.0f / std::sqrt(8.0f);
  save_doubles("kernel.npy", {2, 4, 8}, reference::paged_attention(wrong));
  Result r = paged("--expect kernel.npy");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.first_err_line(), "attnref: mismatch: ")) << r.err;
  EXPECT_TRUE(has(r.err,
                  "likely cause: sm_scale 1/sqrt(head_dim) = 0.353553 used instead of 1 (max abs "
                  "error "))
      << r.err;
  EXPECT_TRUE(has(r.err, "; reproduce with --sm-scale 0.353553\n")) << r.err;
  EXPECT_FALSE(has(r.err, "no likely cause")) << r.err;
  EXPECT_TRUE(has(r.err,
                  "where: per sequence and query head: 8 all wrong, 0 partly wrong, 0 "
                  "right"))
      << r.err;
  // The option the report names reproduces the kernel's output.
  r = paged("--expect kernel.npy --sm-scale 0.353553");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CompareCli, PagedSinksIgnoredNamedAndReproduced) {
  const std::vector<float> sinks{0.5f, -0.25f, 1.0f, 0.0f}, slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  save<float>("sinks.npy", {4}, sinks);
  save<float>("alibi.npy", {4}, slopes);
  // The kernel honours the window and ALiBi but drops the sinks.
  PagedAttentionArgs<float> wrong = args;
  wrong.sliding_window = 4;
  wrong.alibi_slopes = {slopes.data(), {4}};
  save_doubles("kernel.npy", {2, 4, 8}, reference::paged_attention(wrong));
  const std::string kept = "--expect kernel.npy --sliding-window 4 --alibi-slopes alibi.npy";
  Result r = paged(kept + " --sinks sinks.npy");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "likely cause: attention sinks ignored (max abs error ")) << r.err;
  EXPECT_TRUE(has(r.err, "; reproduce with no --sinks\n")) << r.err;
  EXPECT_FALSE(has(r.err, "no likely cause")) << r.err;
  // The command without --sinks, the window and slopes kept, reproduces the kernel's output.
  r = paged(kept);
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CompareCli, PagedSimplyWrong) {
  std::vector<double> out = reference::paged_attention(args);
  out[3] += 0.5;
  out[40] -= 0.25;
  save_doubles("kernel.npy", {2, 4, 8}, out);
  const Result r = paged("--expect kernel.npy");
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(has(r.err, "\nno likely cause found\n")) << r.err;
  EXPECT_TRUE(has(r.err, "where:   sequence 0: heads 0 partly wrong")) << r.err;
  EXPECT_TRUE(has(r.err, "where:   sequence 1: heads 1 partly wrong")) << r.err;
}

TEST_F(CompareCli, PagedLogsumexpInLog2) {
  std::vector<double> lse;
  const std::vector<double> out = reference::paged_attention(args, nullptr, &lse);
  for (double& x : lse) x /= std::log(2.0);
  save_doubles("kernel.npy", {2, 4, 8}, out);
  save_doubles("kernel_lse.npy", {2, 4}, lse);
  Result r = paged("--expect kernel.npy --expect-lse kernel_lse.npy");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "logsumexp mismatches: 8")) << r.err;
  EXPECT_TRUE(has(r.err, "likely cause: logsumexp in log2 (base 2) instead of the natural log"))
      << r.err;
  // The logsumexp alone, without --expect, is a usage error.
  r = paged("--expect-lse kernel_lse.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--expect-lse needs --expect")) << r.err;
  // An expected logsumexp of another shape is a bad file, before any work.
  save_doubles("short_lse.npy", {2, 3}, std::vector<double>(6, 0.0));
  r = paged("--expect kernel.npy --expect-lse short_lse.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, ": --expect-lse has shape (2, 3); the result has shape (2, 4)")) << r.err;
}

TEST_F(CompareCli, RaggedPaddingRowsAndIgnorePadding) {
  // Sequences of 3 (of 5 keys) and 1 (of 7 keys) query rows; rows 4 and 5 are padding.
  std::vector<float> rq = random_floats(4, 6 * 4 * 8);
  std::vector<std::int32_t> kv_lens{5, 7}, cu{0, 3, 4}, num_seqs{2};
  save<float>("rq.npy", {6, 4, 8}, rq);
  save<std::int32_t>("kv_lens.npy", {2}, kv_lens);
  save<std::int32_t>("cu.npy", {3}, cu);
  save<std::int32_t>("num_seqs.npy", {1}, num_seqs);
  RaggedPagedAttentionArgs<float> ra;
  ra.q = {rq.data(), {6, 4, 8}};
  ra.k_pages = args.k_pages;
  ra.v_pages = args.v_pages;
  ra.kv_lens = {kv_lens.data(), {2}};
  ra.page_indices = {table.data(), {2, 3}};
  ra.cu_q_lens = {cu.data(), {3}};
  ra.num_seqs_value = 2;
  std::vector<double> out = reference::ragged_paged_attention(ra);
  for (std::size_t i = 4 * 4 * 8; i < out.size(); ++i) out[i] = 7.0;  // garbage in padding
  save_doubles("kernel.npy", {6, 4, 8}, out);
  const std::string ragged_inputs =
      "--q rq.npy --k-pages k.npy --v-pages v.npy --kv-lens kv_lens.npy --page-indices pi.npy "
      "--cu-q-lens cu.npy --num-seqs num_seqs.npy --expect kernel.npy";
  Result r = run_subcommand("ragged", ragged_inputs);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "likely cause: only padding rows differ")) << r.err;
  EXPECT_TRUE(has(r.err, "where: padding rows that differ: 2 (rows 4-5)")) << r.err;
  r = run_subcommand("ragged", ragged_inputs + " --ignore-padding");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "ignored: 64 padding values (--ignore-padding)")) << r.out;
}

TEST_F(CompareCli, SplashDiagonalNamedAndReproduced) {
  // q [2, 3, 8] against k/v [2, 6, 8]: bottom-right is --offset 3; the kernel used top-left.
  std::vector<float> sq = random_floats(5, 2 * 3 * 8), sk = random_floats(6, 2 * 6 * 8),
                     sv = random_floats(7, 2 * 6 * 8);
  save<float>("sq.npy", {2, 3, 8}, sq);
  save<float>("sk.npy", {2, 6, 8}, sk);
  save<float>("sv.npy", {2, 6, 8}, sv);
  SplashAttentionArgs<float> sa;
  sa.q = {sq.data(), {2, 3, 8}};
  sa.k = {sk.data(), {2, 6, 8}};
  sa.v = {sv.data(), {2, 6, 8}};
  const auto top_left = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  save_doubles("kernel.npy", {2, 3, 8}, reference::splash_forward(sa, top_left).out);
  const std::string splash_inputs = "--q sq.npy --k sk.npy --v sv.npy --causal --expect kernel.npy";
  Result r = run_subcommand("splash", splash_inputs + " --offset 3");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err,
                  "likely cause: causal diagonal aligned top-left (offset 0) instead of "
                  "at offset 3"))
      << r.err;
  EXPECT_TRUE(has(r.err, "reproduce with --offset 0")) << r.err;
  r = run_subcommand("splash", splash_inputs + " --offset 0");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CompareCli, MergeLogsumexpInLog2) {
  // Two states [2 rows, 2 heads, 4], merged by hand: out = (w_a a + w_b b) / (w_a + w_b).
  const std::vector<float> a = random_floats(8, 16), b = random_floats(9, 16);
  const std::vector<float> la{0.5f, 1.0f, -0.25f, 2.0f}, lb{1.5f, 0.0f, 0.75f, -1.0f};
  save<float>("a.npy", {2, 2, 4}, a);
  save<float>("b.npy", {2, 2, 4}, b);
  save<float>("la.npy", {2, 2}, la);
  save<float>("lb.npy", {2, 2}, lb);
  std::vector<double> out(16), lse(4);
  for (std::size_t rh = 0; rh < 4; ++rh) {
    const double m = std::max(la[rh], lb[rh]);
    const double wa = std::exp(la[rh] - m), wb = std::exp(lb[rh] - m);
    for (std::size_t d = 0; d < 4; ++d)
      out[rh * 4 + d] = (wa * a[rh * 4 + d] + wb * b[rh * 4 + d]) / (wa + wb);
    lse[rh] = (m + std::log(wa + wb)) / std::log(2.0);
  }
  save_doubles("merged.npy", {2, 2, 4}, out);
  save_doubles("merged_lse.npy", {2, 2}, lse);
  const Result r = run_subcommand("merge",
                                  "--out-a a.npy --lse-a la.npy --out-b b.npy --lse-b lb.npy "
                                  "--expect merged.npy --expect-lse merged_lse.npy");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.err, "the output matches")) << r.err;
  EXPECT_TRUE(has(r.err, "likely cause: logsumexp in log2 (base 2) instead of the natural log"))
      << r.err;
}

}  // namespace
}  // namespace attnref
