// SPDX-License-Identifier: Apache-2.0
// attnref-run --check-data, end to end: after the shape and metadata checks, paged, splash and
// ragged run the library's data tier and report the first NaN/Inf in what the kernel reads with
// the library's message (the tensor and where) and exit 2; NaN only where nothing reads
// (padding pages, slots past a length, padding q rows) is accepted; without the flag a NaN is
// no error and the output shows it (docs/hostile-inputs.md, "NaN and Inf in live inputs").
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attnref/io/npy.hpp"
#include "cli_harness.hpp"

namespace {

using attnref::cli_test::Result;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

class CheckDataCli : public attnref::cli_test::CliTest {};

// --- paged: 2 sequences (lengths 3, 1), Hq 2, Hkv 1, D 4, pages of 2 tokens; page 2, page 3
// slot 1 and page 0 slot 1 are padding (NaN) --------------------------------------------------

constexpr std::int64_t kD = 4, kS = 2;

/// K or V element of page p, slot s, dim d ([1, 4, 2, 4]); NaN in every padding slot.
std::vector<float> paged_pool(float offset) {
  std::vector<float> x(ix(4 * kS * kD), kNaN);
  const int live[][2] = {{1, 0}, {1, 1}, {3, 0}, {0, 0}};  // (page, slot) of the live tokens
  for (const auto& ps : live)
    for (std::int64_t d = 0; d < kD; ++d)
      x[ix((ps[0] * kS + ps[1]) * kD + d)] = offset + 0.1f * static_cast<float>(ps[0] + d);
  return x;
}

const char* const kPagedArgs =
    "--q q.npy --k-pages k.npy --v-pages v.npy --lengths len.npy --page-indices pi.npy";

void save_paged(CheckDataCli& t, const std::vector<float>& k, const std::vector<float>& v) {
  t.save<float>("q.npy", {2, 2, kD},
                {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.1f, 0.2f, 0.3f,  //
                 -0.2f, 0.1f, 0.3f, 0.2f, 0.4f, 0.2f, -0.5f, 0.1f});
  t.save<float>("k.npy", {1, 4, kS, kD}, k);
  t.save<float>("v.npy", {1, 4, kS, kD}, v);
  t.save<std::int32_t>("len.npy", {2}, {3, 1});
  t.save<std::int32_t>("pi.npy", {2, 2}, {1, 3, 0, 0});
}

TEST_F(CheckDataCli, PagedNaNInALiveRowIsRejectedWithItsLocation) {
  std::vector<float> v = paged_pool(0.5f);
  v[ix((3 * kS + 0) * kD + 1)] = kNaN;  // sequence 0, token 2: page 3, slot 0, dim 1
  save_paged(*this, paged_pool(-0.25f), v);
  const std::string expected =
      "attnref: error[non_finite_data] v_pages is not finite at sequence 0, token 2 (page 3, slot "
      "0), kv head 0, dim 1";
  for (const char* mode : {" --check-data", " --check-data --check-only"}) {
    const Result r = run_subcommand("paged", std::string(kPagedArgs) + mode);
    EXPECT_EQ(r.code, 2) << mode << "\n" << r.err;
    EXPECT_EQ(r.first_err_line(), expected) << mode;
    EXPECT_EQ(r.out, "") << mode;
  }
  // Without the flag the inputs are valid and the kernel runs: the NaN reaches element 1 of
  // both heads' rows of sequence 0 (the only V row it is in), and nothing else.
  const Result r = run_subcommand("paged", std::string(kPagedArgs) + " --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<float> out = load("out.npy").to_vector<float>();
  ASSERT_EQ(out.size(), ix(2 * 2 * kD));
  for (std::int64_t i = 0; i < 2 * 2 * kD; ++i)
    EXPECT_EQ(std::isnan(out[ix(i)]), i < 2 * kD && i % kD == 1) << "out[" << i << "]";
}

TEST_F(CheckDataCli, PagedNaNOnlyInPaddingIsAccepted) {
  save_paged(*this, paged_pool(-0.25f), paged_pool(0.5f));
  Result r = run_subcommand("paged", std::string(kPagedArgs) + " --check-data --check-only");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  r = run_subcommand("paged", std::string(kPagedArgs) + " --check-data --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  for (float x : load("out.npy").to_vector<float>()) EXPECT_TRUE(std::isfinite(x));
}

// --- splash: q [2, 8, 4], k, v [1, 8, 4], causal; every row is read -------------------------

const char* const kSplashArgs = "--q q.npy --k k.npy --v v.npy --causal";

void save_splash(CheckDataCli& t, std::vector<float> q) {
  std::vector<float> kv(ix(8 * kD));
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
  t.save<float>("q.npy", {2, 8, kD}, q);
  t.save<float>("k.npy", {1, 8, kD}, kv);
  t.save<float>("v.npy", {1, 8, kD}, kv);
}

std::vector<float> splash_q() {
  std::vector<float> q(ix(2 * 8 * kD));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.03f * static_cast<float>(i % 11) - 0.15f;
  return q;
}

TEST_F(CheckDataCli, SplashNaNInAQRowOrASinkIsRejectedWithItsLocation) {
  std::vector<float> q = splash_q();
  q[ix((1 * 8 + 2) * kD + 3)] = kNaN;
  save_splash(*this, q);
  Result r = run_subcommand("splash", std::string(kSplashArgs) + " --check-data");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(), "attnref: error[non_finite_data] q[1, 2, 3] is not finite");
  // Without the flag: row 2 of head 1 is NaN, logsumexp too; the rest finite.
  r = run_subcommand("splash", std::string(kSplashArgs) + " --out out.npy --lse-out lse.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<float> out = load("out.npy").to_vector<float>();
  for (std::int64_t i = 0; i < 2 * 8 * kD; ++i)
    EXPECT_EQ(std::isnan(out[ix(i)]), i / kD == 1 * 8 + 2) << "out[" << i << "]";
  const std::vector<float> lse = load("lse.npy").to_vector<float>();
  for (std::int64_t i = 0; i < 2 * 8; ++i)
    EXPECT_EQ(std::isnan(lse[ix(i)]), i == 1 * 8 + 2) << "lse[" << i << "]";

  save_splash(*this, splash_q());
  save<float>("s.npy", {2}, {0.5f, kNaN});
  r = run_subcommand("splash",
                     std::string(kSplashArgs) + " --sinks s.npy --check-data --check-only");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(), "attnref: error[non_finite_data] sinks[1] is not finite");
}

TEST_F(CheckDataCli, SplashFiniteInputsAreAccepted) {
  save_splash(*this, splash_q());
  save<float>("s.npy", {2}, {0.5f, -0.25f});
  const Result r = run_subcommand(
      "splash", std::string(kSplashArgs) + " --sinks s.npy --check-data --check-only");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
}

// --- ragged: sequence 0 (2 rows over 3 keys, pages 0, 1), sequence 1 (1 row over 2 keys, page
// 2), a padding q row, a padding sequence; pool [4, 2, 2 * 1, 4] with page 3 and page 1 slot 1
// padding (NaN) --------------------------------------------------------------------------------

const char* const kRaggedArgs =
    "--q q.npy --kv-pages kv.npy --kv-lens kl.npy --page-indices pi.npy --cu-q-lens cu.npy "
    "--num-seqs n.npy";

/// Element (page, slot, combined head c: K at 0, V at 1, dim d) of the pool.
std::size_t pool_at(std::int64_t page, std::int64_t slot, std::int64_t c, std::int64_t d) {
  return ix(((page * kS + slot) * 2 + c) * kD + d);
}

std::vector<float> ragged_pool() {
  std::vector<float> kv(ix(4 * kS * 2 * kD), kNaN);
  const int live[][2] = {{0, 0}, {0, 1}, {1, 0}, {2, 0}, {2, 1}};
  for (const auto& ps : live)
    for (std::int64_t c = 0; c < 2; ++c)
      for (std::int64_t d = 0; d < kD; ++d)
        kv[pool_at(ps[0], ps[1], c, d)] = 0.1f * static_cast<float>(ps[0] - c + d) - 0.2f;
  return kv;
}

void save_ragged(CheckDataCli& t, const std::vector<float>& kv) {
  std::vector<float> q(ix(4 * 2 * kD), kNaN);  // row 3 is padding
  for (std::int64_t i = 0; i < 3 * 2 * kD; ++i) q[ix(i)] = 0.07f * static_cast<float>(i % 5) - 0.1f;
  t.save<float>("q.npy", {4, 2, kD}, q);
  t.save<float>("kv.npy", {4, kS, 2, kD}, kv);
  t.save<std::int32_t>("kl.npy", {3}, {3, 2, 0});
  t.save<std::int32_t>("pi.npy", {3, 2}, {0, 1, 2, 2, 0, 0});
  t.save<std::int32_t>("cu.npy", {4}, {0, 2, 3, 3});
  t.save<std::int32_t>("n.npy", {1}, {2});
}

TEST_F(CheckDataCli, RaggedNaNInALiveRowIsRejectedWithItsLocation) {
  std::vector<float> kv = ragged_pool();
  kv[pool_at(1, 0, 0, 3)] = kNaN;  // K of sequence 0, token 2 (page 1, slot 0), dim 3
  save_ragged(*this, kv);
  const Result r = run_subcommand("ragged", std::string(kRaggedArgs) + " --check-data");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.first_err_line(),
            "attnref: error[non_finite_data] k_pages is not finite at sequence 0, token 2 (page "
            "1, slot 0), kv head 0, dim 3");
  // Without the flag: token 2 is seen by row 1 only (position 2); row 0 (position 1) does not
  // see it and stays finite; so do sequence 1 and the padding row (0).
  const Result run = run_subcommand("ragged", std::string(kRaggedArgs) + " --out out.npy");
  ASSERT_EQ(run.code, 0) << run.err;
  const std::vector<float> out = load("out.npy").to_vector<float>();
  for (std::int64_t i = 0; i < 4 * 2 * kD; ++i)
    EXPECT_EQ(std::isnan(out[ix(i)]), i / (2 * kD) == 1) << "out[" << i << "]";
}

TEST_F(CheckDataCli, RaggedNaNOnlyInPaddingIsAccepted) {
  save_ragged(*this, ragged_pool());
  Result r = run_subcommand("ragged", std::string(kRaggedArgs) + " --check-data --check-only");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  r = run_subcommand("ragged", std::string(kRaggedArgs) + " --check-data --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  for (float x : load("out.npy").to_vector<float>()) EXPECT_TRUE(std::isfinite(x));
}

}  // namespace
