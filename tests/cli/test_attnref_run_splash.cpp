// SPDX-License-Identifier: Apache-2.0
// attnref-run splash, end to end: runs the built program on .npy files this test writes and
// checks exit codes, error text and the results (out, logsumexp, dq, dk, dv, dsinks) against the
// float64 splash oracle (reference/splash.hpp, through reference/splash_problem.hpp).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attnref/io/npy.hpp"
#include "cli_harness.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::cli_test::Result;

class SplashCli : public attnref::cli_test::CliTest {
 protected:
  /// Runs `attnref-run splash <args>` (args as the shell splits them).
  Result run(const std::string& args) const { return run_program("splash " + args); }

  /// A float32 result file of `shape`, as doubles.
  std::vector<double> load(const std::string& name, std::vector<std::int64_t> shape) const {
    const attnref::NpyArray a = CliTest::load(name);
    EXPECT_EQ(a.dtype, attnref::DType::kFloat32);
    EXPECT_EQ(a.shape, shape);
    std::vector<double> out;
    for (float x : a.to_vector<float>()) out.push_back(x);
    return out;
  }
};

std::vector<float> as_float(std::vector<double>& x) {
  std::vector<float> f(x.begin(), x.end());
  for (size_t i = 0; i < x.size(); ++i) x[i] = f[i];
  return f;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << "[" << i << "]";
    } else {
      ASSERT_NEAR(got[i], want[i], tol + tol * std::abs(want[i])) << what << "[" << i << "]";
    }
  }
}

TEST_F(SplashCli, RoundTripGqaForwardAndBackwardWithMaskFileSegmentsSinks) {
  const std::int64_t hq = 4, hkv = 2, sq = 21, skv = 21, d = 8, dv = 6;
  std::mt19937 rng(3);
  splash_ref::Problem p;
  p.hq = hq;
  p.hkv = hkv;
  p.sq = sq;
  p.skv = skv;
  p.dqk = d;
  p.dv = dv;
  p.scale = 0.5;
  p.soft_cap = 4.0;
  splash_ref::fill(p.q, hq * sq * d, rng, -1, 1);
  splash_ref::fill(p.k, hkv * skv * d, rng, -1, 1);
  splash_ref::fill(p.v, hkv * skv * dv, rng, -1, 1);
  splash_ref::fill(p.sinks, hq, rng, 0, 1);
  std::vector<double> dout;
  splash_ref::fill(dout, hq * sq * dv, rng, -1, 1);
  p.q_seg.resize(sq);
  for (std::int64_t t = 0; t < sq; ++t) p.q_seg[static_cast<size_t>(t)] = t < 12 ? 0 : 1;
  p.kv_seg = p.q_seg;
  // A random per-head mask with the diagonal allowed.
  std::vector<char> mask(static_cast<size_t>(hq * sq * skv));
  std::bernoulli_distribution coin(0.6);
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < sq; ++r)
      for (std::int64_t t = 0; t < skv; ++t)
        mask[static_cast<size_t>((h * sq + r) * skv + t)] = r == t || coin(rng);
  p.allowed = [&](std::int64_t h, std::int64_t r, std::int64_t t) {
    return mask[static_cast<size_t>((h * sq + r) * skv + t)] != 0;
  };
  save("q.npy", {hq, sq, d}, as_float(p.q));
  save("k.npy", {hkv, skv, d}, as_float(p.k));
  save("v.npy", {hkv, skv, dv}, as_float(p.v));
  save("sinks.npy", {hq}, as_float(p.sinks));
  save("do.npy", {hq, sq, dv}, as_float(dout));
  save("seg.npy", {sq}, p.q_seg);
  save_bool("mask.npy", {hq, sq, skv}, mask);
  const auto f = splash_ref::forward(p);
  const auto b = splash_ref::backward(p, f, dout);
  std::vector<float> expected(f.out.begin(), f.out.end());
  save("expected.npy", {hq, sq, dv}, expected);

  const std::string inputs = "--q " + path("q.npy") + " --k " + path("k.npy") + " --v " +
                             path("v.npy") + " --mask " + path("mask.npy") + " --q-segment-ids " +
                             path("seg.npy") + " --kv-segment-ids " + path("seg.npy") +
                             " --sinks " + path("sinks.npy") + " --soft-cap 4 --sm-scale 0.5" +
                             " --block-q 8 --block-kv 16";
  const Result r = run(inputs + " --out " + path("out.npy") + " --lse-out " + path("lse.npy") +
                       " --expect " + path("expected.npy") + " --dout " + path("do.npy") +
                       " --dq-out " + path("dq.npy") + " --dk-out " + path("dk.npy") +
                       " --dv-out " + path("dv.npy") + " --dsinks-out " + path("ds.npy"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("match: 504 elements"), std::string::npos) << r.out;
  expect_close(load("out.npy", {hq, sq, dv}), f.out, 1e-5, "out");
  expect_close(load("lse.npy", {hq, sq}), f.lse, 1e-5, "lse");
  expect_close(load("dq.npy", {hq, sq, d}), b.dq, 1e-4, "dq");
  expect_close(load("dk.npy", {hkv, skv, d}), b.dk, 1e-4, "dk");
  expect_close(load("dv.npy", {hkv, skv, dv}), b.dv, 1e-4, "dv");
  expect_close(load("ds.npy", {hq}), b.dsinks, 1e-4, "dsinks");

  // --check-only under both profiles: JAX checks the mask's blocks (M3: 21 % 8 != 0) when it
  // makes the kernel, before the inputs' lane rule (S8).
  Result c = run(inputs + " --check-only");
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "ok\n");
  c = run(inputs + " --check-only --profile jax");
  EXPECT_EQ(c.code, 2);
  EXPECT_EQ(c.first_err_line(),
            "attnref: error[block_not_divisible] q_block_size=8 should divide q_seq_len=21.");
}

TEST_F(SplashCli, MqaCausalLocalChunkedAndFull) {
  const std::int64_t hq = 3, s = 13, d = 4;
  std::mt19937 rng(5);
  splash_ref::Problem p;
  p.hq = hq;
  p.hkv = 1;
  p.sq = p.skv = s;
  p.dqk = p.dv = d;
  splash_ref::fill(p.q, hq * s * d, rng, -1, 1);
  splash_ref::fill(p.k, s * d, rng, -1, 1);
  splash_ref::fill(p.v, s * d, rng, -1, 1);
  save("q.npy", {hq, s, d}, as_float(p.q));
  save("k.npy", {s, d}, as_float(p.k));  // 2-dim: MQA
  save("v.npy", {s, d}, as_float(p.v));
  const std::string inputs = "--q " + path("q.npy") + " --k " + path("k.npy") + " --v " +
                             path("v.npy") + " --block-q 4 --block-kv 4";
  struct Case {
    std::string option;
    std::function<bool(std::int64_t, std::int64_t, std::int64_t)> allowed;
  };
  const std::vector<Case> cases = {
      {"", [](std::int64_t, std::int64_t, std::int64_t) { return true; }},
      {"--causal --offset 2",
       [](std::int64_t, std::int64_t r, std::int64_t t) { return r + 2 >= t; }},
      {"--local 3,none", [](std::int64_t, std::int64_t r, std::int64_t t) { return r - 3 <= t; }},
      {"--local 1,2 --offset -1",
       [](std::int64_t, std::int64_t r, std::int64_t t) { return r - 2 <= t && r + 1 >= t; }},
      {"--chunked 5",
       [](std::int64_t, std::int64_t r, std::int64_t t) { return r / 5 == t / 5 && r >= t; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option);
    p.allowed = c.allowed;
    const auto f = splash_ref::forward(p);
    const Result r = run(inputs + " " + c.option + " --out " + path("out.npy") + " --lse-out " +
                         path("lse.npy"));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_close(load("out.npy", {hq, s, d}), f.out, 1e-5, "out");
    expect_close(load("lse.npy", {hq, s}), f.lse, 1e-5, "lse");
  }
  // MQA backward: dk/dv keep the 2-dim shape and sum over all heads.
  std::vector<double> dout;
  splash_ref::fill(dout, hq * s * d, rng, -1, 1);
  save("do.npy", {hq, s, d}, as_float(dout));
  p.allowed = cases[1].allowed;
  const auto f = splash_ref::forward(p);
  const auto b = splash_ref::backward(p, f, dout);
  const Result r = run(inputs + " --causal --offset 2 --dout " + path("do.npy") + " --dk-out " +
                       path("dk.npy") + " --dv-out " + path("dv.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_close(load("dk.npy", {s, d}), b.dk, 1e-4, "dk");
  expect_close(load("dv.npy", {s, d}), b.dv, 1e-4, "dv");
}

TEST_F(SplashCli, ValidationErrorsExitTwo) {
  std::vector<float> q(4 * 8 * 4, 0.5f), k(3 * 8 * 4, 0.5f), k2(2 * 8 * 4, 0.5f),
      k5(2 * 8 * 5, 0.5f);
  save("q.npy", {4, 8, 4}, q);
  save("k3.npy", {3, 8, 4}, k);
  save("k2.npy", {2, 8, 4}, k2);
  save("k5.npy", {2, 8, 5}, k5);
  save("k1d.npy", {8 * 4}, k2);
  save_bool("mask2d.npy", {8, 8}, std::vector<char>(64, 1));
  save_bool("mask3h.npy", {3, 8, 8}, std::vector<char>(192, 1));
  save("maskf.npy", {1, 8, 8}, std::vector<float>(64, 1.0f));
  const std::string q_arg = "--q " + path("q.npy");
  Result r = run(q_arg + " --k " + path("k3.npy") + " --v " + path("k3.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.first_err_line(),
      "attnref: error[gqa_not_divisible] In MHA, expected number of 'query' heads (4) to be a "
      "multiple of the number of 'key' heads (3)");
  r = run(q_arg + " --k " + path("k5.npy") + " --v " + path("k5.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.first_err_line(),
      "attnref: error[head_dim_mismatch] Expected 'key' head dimension to be: 4. Instead got: 5.");
  r = run(q_arg + " --k " + path("k1d.npy") + " --v " + path("k1d.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[rank_mismatch] Expected 3-dim 'key' tensor for MHA. Instead got a "
            "1-dim one.");
  const std::string kv = " --k " + path("k2.npy") + " --v " + path("k2.npy");
  r = run(q_arg + kv + " --mask " + path("mask2d.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(), "attnref: error[mask_shape] Unexpected mask shape: (8, 8)");
  r = run(q_arg + kv + " --mask " + path("mask3h.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.first_err_line(),
      "attnref: error[mask_head_count] the mask has 3 heads; expected 1 (shared by all heads) "
      "or num_q_heads=4");
  r = run(q_arg + kv + " --mask " + path("maskf.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(), "attnref: error[dtype_not_supported] Mask must be a boolean array");
  r = run(q_arg + kv + " --chunked 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_mask_parameter] chunk_size must be positive");
  r = run(q_arg + kv + " --soft-cap 0");
  EXPECT_EQ(r.code, 2);
  r = run(q_arg + kv + " --profile jax --check-only");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[block_not_divisible] q_block_size=128 should divide q_seq_len=8.");
}

TEST_F(SplashCli, UsageErrorsExitOne) {
  std::vector<float> q(2 * 8 * 4, 0.5f);
  save("q.npy", {2, 8, 4}, q);
  const std::string in = "--q " + path("q.npy") + " --k " + path("q.npy") + " --v " + path("q.npy");
  EXPECT_EQ(run(in + " --causal --chunked 4").code, 1);
  EXPECT_EQ(run(in + " --chunked 4 --offset 1").code, 1);
  EXPECT_EQ(run(in + " --local 3").code, 1);
  EXPECT_EQ(run(in + " --local x,1").code, 1);
  EXPECT_EQ(run(in + " --dq-out " + path("dq.npy")).code, 1);
  EXPECT_EQ(run(in + " --check-only --out " + path("o.npy")).code, 1);
  EXPECT_EQ(run("--q " + path("q.npy")).code, 1);
  const Result help = run("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: attnref-run splash"), std::string::npos);
}

TEST_F(SplashCli, SharedOptionsAndSingularRank) {
  std::vector<float> q(2 * 8 * 4, 0.5f);
  save("q.npy", {2, 8, 4}, q);
  const std::string in = "--q " + path("q.npy") + " --k " + path("q.npy") + " --v " + path("q.npy");
  // --check-only names every result option splash has.
  Result r = run(in + " --check-only --lse-out " + path("lse.npy"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.first_err_line(),
            "attnref-run splash: --check-only runs nothing, so it takes no --out, --lse-out, "
            "--expect or --dout");
  r = run(in + " --atol 1e-3");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.first_err_line(), "attnref-run splash: --atol and --rtol need --expect");
  r = run(in + " --profile tpu");
  EXPECT_EQ(r.code, 1);
  // A rank-1 input of another rank: "1 dimension", singular.
  save<std::int32_t>("seg.npy", {8, 1}, std::vector<std::int32_t>(8, 0));
  r = run(in + " --q-segment-ids " + path("seg.npy") + " --kv-segment-ids " + path("seg.npy"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[rank_mismatch] q_segment_ids must have 1 dimension; got 2");
  // Every shared option is listed by --help.
  const Result help = run("--help");
  for (const char* option : {"--soft-cap", "--mask-value", "--sm-scale", "--profile",
                             "--check-only", "--out", "--expect", "--atol", "--rtol"}) {
    EXPECT_NE(help.out.find(std::string("\n  ") + option + " "), std::string::npos) << option;
  }
}

}  // namespace
