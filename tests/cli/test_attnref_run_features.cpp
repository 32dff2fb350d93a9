// SPDX-License-Identifier: Apache-2.0
// attnref-run's engine-feature options, end to end: --sliding-window, --sinks and
// --alibi-slopes (with --soft-cap) on paged, ragged and splash, out and --lse-out against the
// float64 oracles of reference/ (GQA; a length-0 paged sequence sees only its sink); the
// options' errors (code, message, exit 2); paged's --megacore-mode and --round-kv-to-bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "attnref/io/npy.hpp"
#include "attnref/validate/paged.hpp"
#include "attnref/validate/ragged.hpp"
#include "cli_harness.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"
#include "reference/splash_problem.hpp"

namespace attnref {
namespace {

using cli_test::Result;

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

/// Random values rounded to float32 (what the files hold), as doubles for the oracles.
std::vector<double> random_f32(std::size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(normal(rng)));
  return v;
}

std::vector<float> f32(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

class Features : public cli_test::CliTest {
 public:
  /// A float32 file's values as doubles.
  std::vector<double> values(const std::string& name, const std::vector<std::int64_t>& shape) {
    const NpyArray a = load(name);
    EXPECT_EQ(a.shape, shape) << name;
    std::vector<double> v;
    if (const float* p = a.data<float>())
      for (std::int64_t i = 0; i < a.numel(); ++i) v.push_back(static_cast<double>(p[i]));
    return v;
  }
};

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " " << i;
    }
  }
}

// --- paged ------------------------------------------------------------------------------------

// 3 sequences (lengths 0, 5, 12), 4 query heads over 2 KV heads, head_dim 8, pages of 4.
struct PagedCase {
  static constexpr std::int64_t B = 3, Hq = 4, Hkv = 2, D = 8, S = 4, PPS = 3, P = 9;
  std::vector<double> q, k, v, sinks, slopes;
  std::vector<std::int64_t> lengths = {0, 5, 12};
  std::vector<std::int64_t> table = {8, 7, 6, 0, 3, 5, 1, 4, 2};
  explicit PagedCase(std::uint32_t seed) {
    std::mt19937 rng(seed);
    q = random_f32(at(B * Hq * D), rng);
    k = random_f32(at(Hkv * P * S * D), rng);
    v = random_f32(at(Hkv * P * S * D), rng);
    sinks = random_f32(at(Hq), rng);
    for (std::int64_t h = 0; h < Hq; ++h) slopes.push_back(std::ldexp(1.0, -1 - int(h)));
  }
  PagedAttentionArgs<double, double, std::int64_t> args(const std::vector<float>& sinks32,
                                                        const std::vector<float>& slopes32) const {
    PagedAttentionArgs<double, double, std::int64_t> a;
    a.q = {q.data(), {B, Hq, D}};
    a.k_pages = {k.data(), {Hkv, P, S, D}};
    a.v_pages = {v.data(), {Hkv, P, S, D}};
    a.lengths = {lengths.data(), {B}};
    a.page_indices = {table.data(), {B, PPS}};
    a.sinks = {sinks32.data(), {Hq}};
    a.alibi_slopes = {slopes32.data(), {Hq}};
    return a;
  }
  void save(Features& t) const {
    t.save<float>("q.npy", {B, Hq, D}, f32(q));
    t.save<float>("k.npy", {Hkv, P, S, D}, f32(k));
    t.save<float>("v.npy", {Hkv, P, S, D}, f32(v));
    t.save<std::int32_t>("len.npy", {B}, std::vector<std::int32_t>(lengths.begin(), lengths.end()));
    t.save<std::int32_t>("pi.npy", {B, PPS}, std::vector<std::int32_t>(table.begin(), table.end()));
    t.save<float>("sinks.npy", {Hq}, f32(sinks));
    t.save<float>("slopes.npy", {Hq}, f32(slopes));
  }
};

/// The input options of PagedCase::save's files.
constexpr const char* kPagedFiles =
    "--q q.npy --k-pages k.npy --v-pages v.npy --lengths len.npy --page-indices pi.npy ";

TEST_F(Features, PagedWindowSinksAlibiAndSoftCapMatchTheOracle) {
  const PagedCase c(1);
  c.save(*this);
  const std::vector<float> sinks32 = f32(c.sinks), slopes32 = f32(c.slopes);
  PagedAttentionArgs<double, double, std::int64_t> a = c.args(sinks32, slopes32);
  a.sliding_window = 6;
  a.soft_cap = 1.5f;
  a.sm_scale = 0.5f;
  std::vector<double> want_lse;
  const std::vector<double> want = reference::paged_attention(a, nullptr, &want_lse);
  const Result r = run_subcommand(
      "paged", std::string(kPagedFiles) +
                   "--sliding-window 6 --sinks sinks.npy --alibi-slopes slopes.npy --soft-cap 1.5 "
                   "--sm-scale 0.5 --out o.npy --lse-out l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_near(values("o.npy", {3, 4, 8}), want, 2e-5, "out");
  const std::vector<double> lse = values("l.npy", {3, 4});
  expect_near(lse, want_lse, 2e-6, "lse");
  for (std::int64_t h = 0; h < PagedCase::Hq; ++h)  // length 0: the sink alone
    EXPECT_EQ(lse[at(h)], static_cast<double>(sinks32[at(h)]));
}

TEST_F(Features, PagedOptionErrorsComeFromTheLibrary) {
  const PagedCase c(2);
  c.save(*this);
  const std::string base = kPagedFiles;
  Result r = run_subcommand("paged", base + "--sliding-window 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_sliding_window] sliding_window=0 must be positive.");
  save<float>("three.npy", {3}, {0.5f, 0.25f, 0.125f});
  r = run_subcommand("paged", base + "--sinks three.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[sinks_shape] sinks must have shape (4,), one logit per query head. "
            "Got (3,).");
  r = run_subcommand("paged", base + "--alibi-slopes three.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[alibi_slopes_shape] alibi_slopes must have shape (4,), one slope per "
            "query head. Got (3,).");
  save<float>("nan.npy", {4}, {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.1f, 0.1f});
  r = run_subcommand("paged", base + "--alibi-slopes nan.npy --check-only");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_alibi_slope] alibi_slopes[1]=nan must be finite.");
  r = run_subcommand("paged", base + "--sinks nan.npy --check-only --check-data");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(), "attnref: error[non_finite_data] sinks[1] is not finite");
  save<double>("big.npy", {4}, {1e39, 0.0, 0.0, 0.0});
  r = run_subcommand("paged", base + "--alibi-slopes big.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[invalid_alibi_slope] alibi_slopes[0]=1e+39 is outside the float32 "
            "range");
  save<float>("two_d.npy", {2, 2}, {0.5f, 0.5f, 0.5f, 0.5f});
  r = run_subcommand("paged", base + "--alibi-slopes two_d.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[rank_mismatch] alibi_slopes must have 1 dimension; got 2");
  // Under --profile jax the question is whether JAX's kernel would take the call: it has no window.
  r = run_subcommand("paged", base + "--sliding-window 4 --profile jax --check-only");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[option_not_in_jax] JAX's paged_attention has no sliding_window "
            "option.");
  save<std::int32_t>("ints.npy", {4}, {1, 1, 1, 1});
  r = run_subcommand("paged", base + "--sinks ints.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[dtype_not_supported] sinks has dtype int32, which is not supported "
            "here");
}

// JAX's megacore split (P8, P9 under --profile jax; P10 for any other value) and its bf16 rounding
// of float K/V.
TEST_F(Features, PagedMegacoreModeAndBf16Rounding) {
  const PagedCase c(3);  // batch 3 (odd), 2 KV heads (even)
  c.save(*this);
  const std::string base = kPagedFiles;
  Result r = run_subcommand("paged", base + "--megacore-mode batch --profile jax --check-only");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[megacore_odd_batch] batch size must be even when megacore_mode is "
            "'batch'");
  r = run_subcommand("paged", base + "--megacore-mode kv_head --profile jax --check-only");
  EXPECT_EQ(r.code, 0) << r.err;
  // A value JAX rejects is JAX's P10 with JAX's text, in every profile, as in the module.
  for (const char* profile : {"", "--profile jax "}) {
    r = run_subcommand("paged", base + profile + "--megacore-mode both --check-only");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.first_err_line(),
              "attnref: error[invalid_megacore_mode] megacore_mode must be one of ['kv_head', "
              "'batch', None]");
    EXPECT_NE(r.err.find("P10"), std::string::npos) << r.err;
  }

  // --round-kv-to-bf16 equals running on K/V already rounded to bfloat16 (nearest even).
  r = run_subcommand("paged", base + "--out plain.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_subcommand("paged", base + "--round-kv-to-bf16 --out rounded.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto to_bf16 = [](const std::vector<double>& x) {
    std::vector<float> out;
    for (double v : x) out.push_back(static_cast<float>(Eigen::bfloat16(static_cast<float>(v))));
    return out;
  };
  save<float>("k.npy", {PagedCase::Hkv, PagedCase::P, PagedCase::S, PagedCase::D}, to_bf16(c.k));
  save<float>("v.npy", {PagedCase::Hkv, PagedCase::P, PagedCase::S, PagedCase::D}, to_bf16(c.v));
  r = run_subcommand("paged", base + "--out prerounded.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<double> rounded = values("rounded.npy", {3, 4, 8});
  EXPECT_EQ(rounded, values("prerounded.npy", {3, 4, 8}));
  EXPECT_NE(rounded, values("plain.npy", {3, 4, 8}));
}

// --- ragged -----------------------------------------------------------------------------------

TEST_F(Features, RaggedSinksAlibiWindowAndSoftCapMatchTheOracle) {
  // Two sequences: a prefill chunk (9 rows over 14 keys) and a decode row (1 over 6); 4 query
  // heads over 2 KV heads, head_dim 8, pages of 4; JAX's combined pool [P, S, 2 Hkv, D].
  constexpr std::int64_t T = 12, Hq = 4, Hkv = 2, D = 8, S = 4, P = 6, N = 3, PPS = 4;
  std::mt19937 rng(3);
  std::vector<double> q = random_f32(at(T * Hq * D), rng);
  std::vector<double> kv = random_f32(at(P * S * 2 * Hkv * D), rng);
  std::vector<double> sinks = random_f32(at(Hq), rng), slopes;
  for (std::int64_t h = 0; h < Hq; ++h) slopes.push_back(0.1 * static_cast<double>(h + 1));
  const std::vector<std::int32_t> kv_lens = {14, 6, 0}, cu = {0, 9, 10, 10}, num = {2};
  const std::vector<std::int32_t> table = {5, 0, 3, 1, 2, 4, 0, 0, 0, 0, 0, 0};
  save<float>("q.npy", {T, Hq, D}, f32(q));
  save<float>("kv.npy", {P, S, 2 * Hkv, D}, f32(kv));
  save<std::int32_t>("kv_lens.npy", {N}, kv_lens);
  save<std::int32_t>("pi.npy", {N, PPS}, table);
  save<std::int32_t>("cu.npy", {N + 1}, cu);
  save<std::int32_t>("n.npy", {1}, num);
  save<float>("sinks.npy", {Hq}, f32(sinks));
  save<float>("slopes.npy", {Hq}, f32(slopes));
  const Result r = run_subcommand(
      "ragged",
      "--q q.npy --kv-pages kv.npy --kv-lens kv_lens.npy --page-indices pi.npy --cu-q-lens cu.npy "
      "--num-seqs n.npy --sliding-window 5 --sinks sinks.npy --alibi-slopes slopes.npy "
      "--soft-cap 2 --sm-scale 0.35 --out o.npy --lse-out l.npy");
  ASSERT_EQ(r.code, 0) << r.err;

  RaggedPagedAttentionArgs<double> a;
  a.q = {q.data(), {T, Hq, D}};
  ASSERT_TRUE(ragged_kv_views(TensorView<const double, 4>(kv.data(), {P, S, 2 * Hkv, D}),
                              &a.k_pages, &a.v_pages)
                  .ok());
  a.kv_lens = {kv_lens.data(), {N}};
  a.page_indices = {table.data(), {N, PPS}};
  a.cu_q_lens = {cu.data(), {N + 1}};
  a.num_seqs_value = 2;
  a.sliding_window = 5;
  a.soft_cap = 2.0f;
  a.sm_scale = 0.35f;
  const std::vector<float> sinks32 = f32(sinks), slopes32 = f32(slopes);
  a.sinks = {sinks32.data(), {Hq}};
  a.alibi_slopes = {slopes32.data(), {Hq}};
  std::vector<double> want_lse;
  const std::vector<double> want = reference::ragged_paged_attention(a, nullptr, &want_lse);
  expect_near(values("o.npy", {T, Hq, D}), want, 2e-5, "out");
  expect_near(values("l.npy", {T, Hq}), want_lse, 2e-6, "lse");
}

// --- splash -----------------------------------------------------------------------------------

TEST_F(Features, SplashWindowAlibiAndSinksMatchTheOracle) {
  splash_ref::Problem p;
  p.hq = 4;
  p.hkv = 2;
  p.sq = p.skv = 21;
  p.dqk = p.dv = 8;
  p.scale = 0.25;
  p.soft_cap = 3.0;
  p.window = 4;
  std::mt19937 rng(4);
  p.q = random_f32(at(p.hq * p.sq * p.dqk), rng);
  p.k = random_f32(at(p.hkv * p.skv * p.dqk), rng);
  p.v = random_f32(at(p.hkv * p.skv * p.dv), rng);
  p.sinks = random_f32(at(p.hq), rng);
  p.slopes = {0.5, 0.25, 0.125, 0.0625};
  p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  save<float>("q.npy", {p.hq, p.sq, p.dqk}, f32(p.q));
  save<float>("k.npy", {p.hkv, p.skv, p.dqk}, f32(p.k));
  save<float>("v.npy", {p.hkv, p.skv, p.dv}, f32(p.v));
  save<float>("sinks.npy", {p.hq}, f32(p.sinks));
  save<float>("slopes.npy", {p.hq}, f32(p.slopes));
  const Result r = run_subcommand(
      "splash",
      "--q q.npy --k k.npy --v v.npy --causal --sliding-window 4 --sinks sinks.npy "
      "--alibi-slopes slopes.npy --soft-cap 3 --sm-scale 0.25 --block-q 8 --block-kv 8 "
      "--out o.npy --lse-out l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = splash_ref::forward(p);
  expect_near(values("o.npy", {4, 21, 8}), f.out, 2e-5, "out");
  expect_near(values("l.npy", {4, 21}), f.lse, 2e-6, "lse");

  const Result bad = run_subcommand("splash", "--q q.npy --k k.npy --v v.npy --sliding-window -2");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.first_err_line(),
            "attnref: error[invalid_sliding_window] sliding_window=-2 must be positive.");
}

}  // namespace
}  // namespace attnref
