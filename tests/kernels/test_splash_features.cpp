// SPDX-License-Identifier: Apache-2.0
// Splash attention's sliding window and ALiBi: the window equals AND-ing the mask with the
// matching LocalMask (forward and backward); window, ALiBi after the soft cap, sinks and GQA
// against the float64 oracle (reference/splash.hpp), forward and backward; keys no window
// reaches are never read (NaN there); a row that sees no key gets 0 and its sink (or -inf) as
// logsumexp; ALiBi's absolute convention and ALiBi before the soft cap, causal and not, forward
// and backward, with hand-worked numbers; a bottom-right CausalMask (and LocalMask, for a
// window) equals the ragged kernel on the same keys; every new check (code, JAX id, message).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/validate/engines/causal_alignment.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::CausalMask;
using attnref::ErrorCode;
using attnref::FullMask;
using attnref::LocalMask;
using attnref::SplashAttentionArgs;
using attnref::SplashGradients;
using attnref::TensorView;
using splash_ref::back;
using splash_ref::to;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

/// A problem with f32 buffers (the problem holds their exact values).
struct Case {
  splash_ref::Problem p;
  std::vector<float> q, k, v, sinks, slopes;
  std::int64_t block = 16;

  Case(std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t skv, std::int64_t dim,
       unsigned seed) {
    std::mt19937 rng(seed);
    p.hq = hq;
    p.hkv = hkv;
    p.sq = sq;
    p.skv = skv;
    p.dqk = p.dv = dim;
    p.scale = 1.0 / std::sqrt(static_cast<double>(dim));
    splash_ref::fill(p.q, at(hq * sq * dim), rng, -1, 1);
    splash_ref::fill(p.k, at(hkv * skv * dim), rng, -1, 1);
    splash_ref::fill(p.v, at(hkv * skv * dim), rng, -1, 1);
    q = to<float>(p.q);
    k = to<float>(p.k);
    v = to<float>(p.v);
    p.q = back(q);
    p.k = back(k);
    p.v = back(v);
    p.allowed = [](std::int64_t, std::int64_t, std::int64_t) { return true; };
  }
  void add_sinks(std::mt19937& rng) {
    splash_ref::fill(p.sinks, at(p.hq), rng, -1, 1);
    sinks = to<float>(p.sinks);
    p.sinks = back(sinks);
  }
  void add_slopes() {
    p.slopes.clear();
    for (std::int64_t h = 0; h < p.hq; ++h) p.slopes.push_back(std::ldexp(1.0, -1 - int(h)));
    slopes = to<float>(p.slopes);
  }
  SplashAttentionArgs<float> args() const {
    SplashAttentionArgs<float> a;
    a.q = {q.data(), {p.hq, p.sq, p.dqk}};
    a.k = {k.data(), {p.hkv, p.skv, p.dqk}};
    a.v = {v.data(), {p.hkv, p.skv, p.dv}};
    a.sm_scale = static_cast<float>(p.scale);
    if (p.soft_cap != 0) a.soft_cap = static_cast<float>(p.soft_cap);
    if (!sinks.empty()) a.sinks = {sinks.data(), {p.hq}};
    if (!slopes.empty()) a.alibi_slopes = {slopes.data(), {p.hq}};
    a.sliding_window = p.window;
    a.alibi_convention = p.alibi_convention;
    a.soft_cap_order = p.soft_cap_order;
    a.block_sizes.block_q = a.block_sizes.block_kv = block;
    a.block_sizes.block_kv_compute = block / 2;
    return a;
  }
};

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dsinks;
};

/// Forward, then backward with `dout`, through the kernel.
template <class M>
Result run(const SplashAttentionArgs<float>& a, const M& mask, const std::vector<double>& dout_d) {
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dv = a.head_dim_v();
  const std::int64_t hkv = a.num_kv_heads(), skv = a.kv_seq_len(), dqk = a.head_dim_qk();
  std::vector<float> out(at(hq * sq * dv), kNaN), lse(at(hq * sq), kNaN);
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, sq, dv}),
                            TensorView<float, 2>(lse.data(), {hq, sq}));
  const std::vector<float> dout = to<float>(dout_d);
  std::vector<float> dq(at(hq * sq * dqk), kNaN), dk(at(hkv * skv * dqk), kNaN),
      dvv(at(hkv * skv * dv), kNaN), dsinks(a.has_sinks() ? at(hq) : 0, kNaN);
  SplashGradients<float> g;
  g.dq = {dq.data(), {hq, sq, dqk}};
  g.dk = {dk.data(), {hkv, skv, dqk}};
  g.dv = {dvv.data(), {hkv, skv, dv}};
  if (a.has_sinks()) g.dsinks = {dsinks.data(), {hq}};
  attnref::splash_attention_backward(a, mask, TensorView<const float, 3>(out.data(), {hq, sq, dv}),
                                     TensorView<const float, 2>(lse.data(), {hq, sq}),
                                     TensorView<const float, 3>(dout.data(), {hq, sq, dv}), g);
  return {back(out), back(lse), back(dq), back(dk), back(dvv), back(dsinks)};
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t n = 0; n < got.size(); ++n) {
    if (std::isinf(want[n])) {
      ASSERT_EQ(got[n], want[n]) << what << "[" << n << "]";
    } else {
      ASSERT_NEAR(got[n], want[n], tol * (1 + std::fabs(want[n]))) << what << "[" << n << "]";
    }
  }
}

/// The kernel's forward and backward results against the float64 oracle of problem p.
void expect_oracle(const Result& r, const splash_ref::Problem& p, const std::vector<double>& dout) {
  const auto f = splash_ref::forward(p);
  const auto b = splash_ref::backward(p, f, dout);
  expect_close(r.out, f.out, 2e-5, "out");
  expect_close(r.lse, f.lse, 2e-6, "lse");
  expect_close(r.dq, b.dq, 1e-4, "dq");
  expect_close(r.dk, b.dk, 1e-4, "dk");
  expect_close(r.dv, b.dv, 1e-4, "dv");
  expect_close(r.dsinks, b.dsinks, 1e-4, "dsinks");
}

std::vector<double> random_dout(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<double> d;
  splash_ref::fill(d, at(c.p.hq * c.p.sq * c.p.dv), rng, -1, 1);
  return back(to<float>(d));
}

TEST(SplashWindow, EqualsTheMatchingLocalMaskForwardAndBackward) {
  unsigned seed = 1;
  for (std::int64_t w : {1, 3, 17, 100}) {
    SCOPED_TRACE("window " + std::to_string(w));
    Case c(4, 2, 45, 45, 8, seed++);
    const std::vector<double> dout = random_dout(c, seed);
    // The window alone, and with a causal mask (the same set): LocalMask(W - 1, 0).
    const Result want = run(c.args(), LocalMask{{45, 45}, w - 1, 0, 0}, dout);
    c.p.window = w;
    for (int m = 0; m < 2; ++m) {
      const Result got = m == 0 ? run(c.args(), FullMask{{45, 45}}, dout)
                                : run(c.args(), CausalMask{{45, 45}}, dout);
      expect_close(got.out, want.out, 1e-6, "out");
      expect_close(got.lse, want.lse, 1e-6, "lse");
      expect_close(got.dq, want.dq, 1e-5, "dq");
      expect_close(got.dk, want.dk, 1e-5, "dk");
      expect_close(got.dv, want.dv, 1e-5, "dv");
      if (HasFatalFailure()) return;
    }
  }
}

TEST(SplashWindowAlibi, MatchTheOracleForwardAndBackwardWithSinksCapAndGqa) {
  unsigned seed = 10;
  for (const auto& [window, cap] : std::vector<std::pair<std::optional<std::int64_t>, double>>{
           {std::nullopt, 0.0}, {std::nullopt, 0.5}, {5, 0.0}, {5, 2.0}, {24, 1.0}}) {
    SCOPED_TRACE("window " + (window ? std::to_string(*window) : std::string("none")) + " cap " +
                 std::to_string(cap));
    Case c(8, 2, 37, 41, 16, seed++);
    std::mt19937 rng(seed);
    c.add_sinks(rng);
    c.add_slopes();
    c.p.soft_cap = cap;
    c.p.window = window;
    c.p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r + 2; };
    const LocalMask mask{{37, 41}, std::nullopt, 2, 0};
    const std::vector<double> dout = random_dout(c, seed);
    expect_oracle(run(c.args(), mask, dout), c.p, dout);
    if (HasFatalFailure()) return;
  }
}

TEST(SplashConventions, AbsoluteAlibiAndAlibiBeforeTheCapMatchTheOracleForwardAndBackward) {
  using attnref::AlibiConvention;
  using attnref::SoftCapOrder;
  struct Conv {
    AlibiConvention alibi;
    SoftCapOrder order;
    double cap;
    const char* what;
  };
  unsigned seed = 70;
  for (const Conv& cv :
       {Conv{AlibiConvention::kAbsolute, SoftCapOrder::kCapThenAlibi, 0.0, "absolute"},
        Conv{AlibiConvention::kAbsolute, SoftCapOrder::kCapThenAlibi, 0.5, "absolute + cap"},
        Conv{AlibiConvention::kSigned, SoftCapOrder::kAlibiThenCap, 0.5, "alibi then cap"},
        Conv{AlibiConvention::kAbsolute, SoftCapOrder::kAlibiThenCap, 1.0,
             "absolute alibi then cap"}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(cv.what) + (causal ? " causal" : " non-causal"));
      Case c(8, 2, 37, 41, 16, seed++);
      std::mt19937 rng(seed);
      c.add_sinks(rng);
      c.add_slopes();
      c.p.soft_cap = cv.cap;
      c.p.alibi_convention = cv.alibi;
      c.p.soft_cap_order = cv.order;
      const std::vector<double> dout = random_dout(c, seed);
      if (causal) {
        c.p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
        expect_oracle(run(c.args(), CausalMask{{37, 41}}, dout), c.p, dout);
      } else {
        expect_oracle(run(c.args(), FullMask{{37, 41}}, dout), c.p, dout);
      }
      if (HasFatalFailure()) return;
    }
}

TEST(SplashConventions, SignedAndAbsoluteAlibiDifferOnlyRightOfTheQuery) {
  Case c(4, 2, 20, 20, 8, 80);
  c.add_slopes();
  const std::vector<double> dout = random_dout(c, 81);
  const Result causal = run(c.args(), CausalMask{{20, 20}}, dout);
  const Result full = run(c.args(), FullMask{{20, 20}}, dout);
  c.p.alibi_convention = attnref::AlibiConvention::kAbsolute;
  const Result causal_abs = run(c.args(), CausalMask{{20, 20}}, dout);
  EXPECT_EQ(causal_abs.out, causal.out);
  EXPECT_EQ(causal_abs.dq, causal.dq);
  EXPECT_NE(run(c.args(), FullMask{{20, 20}}, dout).out, full.out);
}

// Worked by hand: one query row (position 0) and two keys (positions 0 and 1), no mask, head_dim
// 1, q = 0, k = 1 and 1 (every dot product 0), v = 1 and 3, dout = 1, ALiBi slope 1.
TEST(SplashConventions, HandWorkedAlibiConventionAndSoftCapOrder) {
  Case c(1, 1, 1, 2, 1, 90);
  c.q = {0.0f};
  c.k = {1.0f, 1.0f};
  c.v = {1.0f, 3.0f};
  c.p.scale = 1.0;
  c.p.slopes = {1.0};
  c.slopes = {1.0f};
  const FullMask mask{{1, 2}};
  const std::vector<double> dout = {1.0};
  // Signed: logits 0 and +1: out (1 + 3e) / (1 + e) = 2.462117, lse log(1 + e) = 1.313262.
  Result r = run(c.args(), mask, dout);
  EXPECT_NEAR(r.out[0], 2.462117, 1e-6);
  EXPECT_NEAR(r.lse[0], 1.313262, 1e-6);
  // Absolute: logits 0 and -1 * |1 - 0| = -1: out (1 + 3/e) / (1 + 1/e) = 1.537883,
  // lse log(1 + 1/e) = 0.313262.
  c.p.alibi_convention = attnref::AlibiConvention::kAbsolute;
  r = run(c.args(), mask, dout);
  EXPECT_NEAR(r.out[0], 1.537883, 1e-6);
  EXPECT_NEAR(r.lse[0], 0.313262, 1e-6);
  // Signed, soft cap 1 after ALiBi: logits tanh(0) = 0 and tanh(1) = t = 0.761594, weights
  // p0 = 1 / (1 + e^t) = 0.318300 and p1 = 0.681700: out p0 + 3 p1 = 2.363399. The gradient:
  // ds_j = p_j (v_j - out) (1 - tanh(u_j)^2) at the biased logits u = 0, 1, and
  // dq = ds_0 + ds_1 = -p0 (out - 1) t^2 = -0.251714 (p0 (1 - out) + p1 (3 - out) = 0).
  // Cap first, the cap sees 0 and 0: the same derivative for both keys, dq = 0.
  c.p.alibi_convention = attnref::AlibiConvention::kSigned;
  c.p.soft_cap = 1.0;
  c.p.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  r = run(c.args(), mask, dout);
  EXPECT_NEAR(r.out[0], 2.363399, 1e-6);
  EXPECT_NEAR(r.lse[0], 1.144760, 1e-6);
  EXPECT_NEAR(r.dq[0], -0.251714, 1e-6);
  c.p.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  r = run(c.args(), mask, dout);
  EXPECT_NEAR(r.out[0], 2.462117, 1e-6);
  EXPECT_NEAR(r.dq[0], 0.0, 1e-6);
}

TEST(SplashWindow, KeysNoWindowReachesAreNeverRead) {
  // 24 query rows, 40 keys: keys 24.. follow every query (t > r), so no window sees them.
  Case c(2, 1, 24, 40, 8, 30);
  c.p.window = 5;
  c.add_slopes();
  for (std::int64_t t = 24; t < 40; ++t)
    for (std::int64_t d = 0; d < 8; ++d) c.k[at(t * 8 + d)] = c.v[at(t * 8 + d)] = kNaN;
  const std::vector<double> dout = random_dout(c, 31);
  const Result r = run(c.args(), FullMask{{24, 40}}, dout);
  for (double x : r.out) ASSERT_TRUE(std::isfinite(x));
  for (double x : r.dq) ASSERT_TRUE(std::isfinite(x));
  for (std::int64_t t = 0; t < 40; ++t)
    for (std::int64_t d = 0; d < 8; ++d) {
      ASSERT_TRUE(std::isfinite(r.dk[at(t * 8 + d)])) << t;
      if (t >= 24) {
        ASSERT_EQ(r.dv[at(t * 8 + d)], 0.0) << t;
      }
    }
  c.p.k = back(c.k);  // the oracle never reads them either
  c.p.v = back(c.v);
  expect_close(r.out, splash_ref::forward(c.p).out, 2e-5, "out");
}

TEST(SplashWindow, ARowThatSeesNoKeyGetsZeroAndItsSinkAsLogsumexp) {
  // 40 rows, 20 keys, window 4: row r sees (r - 4, r] within [0, 20); rows 23.. see nothing.
  for (bool with_sinks : {false, true}) {
    Case c(2, 2, 40, 20, 8, 40);
    std::mt19937 rng(41);
    if (with_sinks) c.add_sinks(rng);
    c.p.window = 4;
    const Result r = run(c.args(), FullMask{{40, 20}}, random_dout(c, 42));
    const auto f = splash_ref::forward(c.p);
    expect_close(r.out, f.out, 2e-5, "out");
    expect_close(r.lse, f.lse, 2e-6, "lse");
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t row = 23; row < 40; ++row) {
        const float want = with_sinks ? c.sinks[at(h)] : -std::numeric_limits<float>::infinity();
        EXPECT_EQ(r.lse[at(h * 40 + row)], static_cast<double>(want)) << h << " " << row;
        EXPECT_EQ(r.out[at((h * 40 + row) * 8)], 0.0);
      }
  }
}

TEST(SplashWindow, AKvBlockOfInt64MaxStepsThroughTheWindowedColumnsWithoutOverflow) {
  // A block of INT64_MAX keys is valid (reference profile) and holds all 12; with window 3 the
  // second q block (rows 8..11) sees columns 6..11, so its column steps start at 6, and a step
  // of the whole block from there overflowed (UBSan; found by fuzz_splash).
  Case c(2, 1, 12, 12, 4, 60);
  std::mt19937 rng(61);
  c.add_sinks(rng);
  c.p.window = 3;
  SplashAttentionArgs<float> a = c.args();
  a.block_sizes.block_q = 8;
  a.block_sizes.block_kv = std::numeric_limits<std::int64_t>::max();
  a.block_sizes.block_kv_compute = std::nullopt;
  const FullMask mask{{12, 12}};
  ASSERT_TRUE(attnref::check_splash(a, mask, attnref::Profile::kReference).ok());
  const std::vector<double> dout = random_dout(c, 62);
  expect_oracle(run(a, mask, dout), c.p, dout);
}

// --- checks -----------------------------------------------------------------------------------

// A chunk of 20 query rows after 36 cached keys: splash's CausalMask with offset kv_len - q_len
// (bottom-right, as the GPU engines align it) computes what the ragged kernel computes for the
// same keys, and both match the float64 oracle; with a window of W, LocalMask(W - 1, 0, offset)
// is the ragged kernel's sliding window; offset 0 (top-left) is the oracle's t <= r.
TEST(SplashCausalAlignment, BottomRightOffsetEqualsTheRaggedKernelOnTheSameKeys) {
  using attnref::CausalAlignment;
  constexpr std::int64_t kHq = 4, kHkv = 2, kSq = 20, kSkv = 56, kDim = 16, kPage = 8;
  Case c(kHq, kHkv, kSq, kSkv, kDim, 90);
  std::mt19937 rng(91);
  c.add_sinks(rng);
  c.p.soft_cap = 2.0;
  const std::int64_t offset = attnref::causal_mask_offset(CausalAlignment::kBottomRight, kSq, kSkv);
  ASSERT_EQ(offset, 36);
  const std::vector<double> dout = random_dout(c, 92);

  // The same keys as one ragged sequence: K/V [Hkv, Skv, D] are [Hkv, 7 pages, 8, D]; q and out
  // are token-major [Sq, Hq, D].
  std::vector<float> q(c.q.size());
  for (std::int64_t h = 0; h < kHq; ++h)
    for (std::int64_t r = 0; r < kSq; ++r)
      for (std::int64_t d = 0; d < kDim; ++d)
        q[at((r * kHq + h) * kDim + d)] = c.q[at((h * kSq + r) * kDim + d)];
  std::vector<std::int32_t> kv_lens{kSkv}, pages{0, 1, 2, 3, 4, 5, 6}, cu{0, kSq};
  attnref::RaggedPagedAttentionArgs<float> ra;
  ra.q = {q.data(), {kSq, kHq, kDim}};
  ra.k_pages = {c.k.data(), {kHkv, kSkv / kPage, kPage, kDim}};
  ra.v_pages = {c.v.data(), {kHkv, kSkv / kPage, kPage, kDim}};
  ra.kv_lens = {kv_lens.data(), {1}};
  ra.page_indices = {pages.data(), {1, kSkv / kPage}};
  ra.cu_q_lens = {cu.data(), {2}};
  ra.num_seqs_value = 1;
  ra.sm_scale = static_cast<float>(c.p.scale);
  ra.soft_cap = static_cast<float>(c.p.soft_cap);
  ra.sinks = {c.sinks.data(), {kHq}};

  Result bottom_right;
  for (const std::optional<std::int64_t>& w : std::vector<std::optional<std::int64_t>>{{}, 5}) {
    SCOPED_TRACE(w ? "window 5" : "no window");
    c.p.allowed = [w](std::int64_t, std::int64_t r, std::int64_t t) {
      return t <= r + 36 && (!w || t > r + 36 - *w);
    };
    const Result splash = w ? run(c.args(), LocalMask{{kSq, kSkv}, *w - 1, 0, offset}, dout)
                            : run(c.args(), CausalMask{{kSq, kSkv}, offset}, dout);
    expect_oracle(splash, c.p, dout);
    if (HasFatalFailure()) return;
    ra.sliding_window = w;
    std::vector<float> out(at(kSq * kHq * kDim), kNaN), lse(at(kSq * kHq), kNaN);
    attnref::ragged_paged_attention(ra, TensorView<float, 3>(out.data(), {kSq, kHq, kDim}),
                                    TensorView<float, 2>(lse.data(), {kSq, kHq}));
    for (std::int64_t h = 0; h < kHq; ++h)
      for (std::int64_t r = 0; r < kSq; ++r) {
        ASSERT_NEAR(lse[at(r * kHq + h)], splash.lse[at(h * kSq + r)], 1e-5) << h << " " << r;
        for (std::int64_t d = 0; d < kDim; ++d)
          ASSERT_NEAR(out[at((r * kHq + h) * kDim + d)], splash.out[at((h * kSq + r) * kDim + d)],
                      1e-5)
              << h << " " << r << " " << d;
      }
    if (!w) bottom_right = splash;
  }

  // Offset 0: row r sees t <= r only, another result.
  c.p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  const Result top_left = run(c.args(), CausalMask{{kSq, kSkv}}, dout);
  expect_oracle(top_left, c.p, dout);
  EXPECT_NE(top_left.out, bottom_right.out);
}

TEST(SplashFeatureChecks, WindowAndSlopes) {
  Case c(4, 2, 8, 8, 4, 50);
  SplashAttentionArgs<float> a = c.args();
  const CausalMask mask{{8, 8}};
  a.sliding_window = 0;
  attnref::Status s = attnref::check_splash(a, mask, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidSlidingWindow);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "sliding_window=0 must be positive.");
  a.sliding_window = std::numeric_limits<std::int64_t>::max();  // hostile but valid
  EXPECT_TRUE(attnref::check_splash(a, mask, attnref::Profile::kReference).ok());
  std::vector<float> slopes = {0.5f, 0.25f, kNaN, 1.0f, 2.0f};
  a.alibi_slopes = {slopes.data(), {5}};
  s = attnref::check_splash(a, mask, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kAlibiSlopesShape);
  EXPECT_EQ(s.message(), "alibi_slopes must have shape (4,), one slope per query head. Got (5,).");
  a.alibi_slopes = {slopes.data(), {4}};
  EXPECT_TRUE(attnref::check_splash_shapes(a, mask, attnref::Profile::kReference).ok());
  s = attnref::check_splash(a, mask, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidAlibiSlope);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_slopes[2]=nan must be finite.");
  // Through a plan, and against a MaskInfo built earlier.
  attnref::SplashPlan<float> plan;
  EXPECT_EQ(attnref::make_splash_plan(a, mask, &plan).code(), ErrorCode::kInvalidAlibiSlope);
  attnref::MaskInfo info;
  ASSERT_TRUE(attnref::build_mask_info(mask, 16, 16, attnref::Profile::kReference, &info).ok());
  EXPECT_EQ(attnref::make_splash_plan(a, info, &plan).code(), ErrorCode::kInvalidAlibiSlope);
}

TEST(SplashFeatureChecks, ConventionsMustBeEnumeratorsAndAreNotInJax) {
  Case c(4, 2, 8, 8, 4, 51);
  SplashAttentionArgs<float> a = c.args();
  const CausalMask mask{{8, 8}};
  a.alibi_convention = static_cast<attnref::AlibiConvention>(2);
  attnref::Status s = attnref::check_splash(a, mask, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidConvention);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_convention must be one of [signed, absolute]. Got 2.");
  attnref::SplashPlan<float> plan;
  EXPECT_EQ(attnref::make_splash_plan(a, mask, &plan).code(), ErrorCode::kInvalidConvention);
  a.alibi_convention = attnref::AlibiConvention::kSigned;
  a.soft_cap_order = static_cast<attnref::SoftCapOrder>(5);
  s = attnref::check_splash(a, mask, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidConvention);
  EXPECT_EQ(s.message(), "soft_cap_order must be one of [cap_then_alibi, alibi_then_cap]. Got 5.");
  // Under the jax profile (128 rows, blocks of 128 for its tiling rules) a non-default value is
  // refused.
  Case jax(4, 2, 128, 128, 8, 52);
  a = jax.args();
  a.block_sizes = attnref::SplashBlockSizes{};
  const CausalMask jax_mask{{128, 128}};
  EXPECT_TRUE(attnref::check_splash_shapes(a, jax_mask, attnref::Profile::kJax).ok());
  a.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  s = attnref::check_splash_shapes(a, jax_mask, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's splash attention has no soft_cap_order option.");
  a.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  a.alibi_convention = attnref::AlibiConvention::kAbsolute;
  s = attnref::check_splash_shapes(a, jax_mask, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's splash attention has no alibi_convention option.");
}

}  // namespace
