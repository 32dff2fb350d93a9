// SPDX-License-Identifier: Apache-2.0
// Splash backward (dq, dk, dv, dsinks): against the float64 dense formulas of spec §2.6
// (reference/splash.hpp) over JAX's head/dim grid with MQA, segment ids, sinks and soft cap at
// lengths no block divides; against central finite differences of the forward in double; NaN
// in skipped K/V blocks; block-size independence; validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnref/kernels/splash_attention.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::CausalMask;
using attnref::LocalMask;
using attnref::MultiHeadMask;
using attnref::Profile;
using attnref::SplashAttentionArgs;
using attnref::SplashGradients;
using attnref::TensorView;
using splash_ref::back;
using splash_ref::to;

/// Vector index from a signed element offset (offsets here are never negative).
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

// A problem with its kernel-side buffers in T.
template <class T>
struct Case {
  splash_ref::Problem p;
  std::vector<T> q, k, v;
  std::vector<float> sinks;
  bool mqa = false;
  std::int64_t bq = 16, bkv = 16;

  SplashAttentionArgs<T> args() const {
    SplashAttentionArgs<T> a;
    a.q = {q.data(), {p.hq, p.sq, p.dqk}};
    a.k = {k.data(), {p.hkv, p.skv, p.dqk}};
    a.v = {v.data(), {p.hkv, p.skv, p.dv}};
    a.is_mqa = mqa;
    a.sm_scale = static_cast<float>(p.scale);
    if (p.soft_cap != 0) a.soft_cap = static_cast<float>(p.soft_cap);
    if (!p.q_seg.empty()) {
      a.q_segment_ids = {p.q_seg.data(), {p.sq}};
      a.kv_segment_ids = {p.kv_seg.data(), {p.skv}};
    }
    if (!sinks.empty()) a.sinks = {sinks.data(), {p.hq}};
    a.block_sizes.block_q = bq;
    a.block_sizes.block_kv = bkv;
    a.block_sizes.block_q_dkv = bq;
    a.block_sizes.block_kv_dkv = bkv;
    return a;
  }
};

// The mask used by all cases: per head causal / local(4, 2) / chunked(6), cycling.
MultiHeadMask make_mask(std::int64_t hq, std::int64_t sq, std::int64_t skv) {
  std::vector<attnref::AnyMask> heads;
  for (std::int64_t h = 0; h < hq; ++h) {
    if (h % 3 == 0)
      heads.emplace_back(CausalMask{{sq, skv}});
    else if (h % 3 == 1)
      heads.emplace_back(LocalMask{{sq, skv}, 4, 2, 0});
    else
      heads.emplace_back(attnref::ChunkedCausalMask{{sq, skv}, 6});
  }
  return MultiHeadMask(heads);
}
bool allowed(std::int64_t h, std::int64_t r, std::int64_t t) {
  if (h % 3 == 0) return t <= r;
  if (h % 3 == 1) return t >= r - 4 && t <= r + 2;
  return r / 6 == t / 6 && t <= r;
}

template <class T>
Case<T> make_case(std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t skv,
                  std::int64_t dqk, std::int64_t dv, bool mqa, bool seg, bool sinks, double cap,
                  unsigned seed) {
  std::mt19937 rng(seed);
  Case<T> c;
  auto& p = c.p;
  p.hq = hq;
  p.hkv = mqa ? 1 : hkv;
  p.sq = sq;
  p.skv = skv;
  p.dqk = dqk;
  p.dv = dv;
  p.scale = 1.0 / std::sqrt(static_cast<double>(dqk));
  p.soft_cap = cap;
  c.mqa = mqa;
  splash_ref::fill(p.q, static_cast<size_t>(hq * sq * dqk), rng, -1, 1);
  splash_ref::fill(p.k, static_cast<size_t>(p.hkv * skv * dqk), rng, -1, 1);
  splash_ref::fill(p.v, static_cast<size_t>(p.hkv * skv * dv), rng, -1, 1);
  c.q = to<T>(p.q);
  c.k = to<T>(p.k);
  c.v = to<T>(p.v);
  p.q = back(c.q);
  p.k = back(c.k);
  p.v = back(c.v);
  if (seg) {
    p.q_seg.resize(static_cast<size_t>(sq));
    p.kv_seg.resize(static_cast<size_t>(skv));
    for (std::int64_t r = 0; r < sq; ++r)
      p.q_seg[static_cast<size_t>(r)] = static_cast<std::int32_t>(r * 2 / sq);
    for (std::int64_t t = 0; t < skv; ++t)
      p.kv_seg[static_cast<size_t>(t)] = static_cast<std::int32_t>(t * 2 / skv);
  }
  if (sinks) {
    splash_ref::fill(p.sinks, static_cast<size_t>(hq), rng, 0, 1);
    c.sinks = to<float>(p.sinks);
    p.sinks = back(c.sinks);
  }
  p.allowed = allowed;
  return c;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dsinks;
};

// Runs the kernel's forward, then its backward with dO.
template <class T>
Result run_kernel(const Case<T>& c, const std::vector<double>& dout_d) {
  const auto& p = c.p;
  const SplashAttentionArgs<T> a = c.args();
  const MultiHeadMask mask = make_mask(p.hq, p.sq, p.skv);
  std::vector<T> out(static_cast<size_t>(p.hq * p.sq * p.dv));
  std::vector<float> lse(static_cast<size_t>(p.hq * p.sq));
  attnref::splash_attention(a, mask, TensorView<T, 3>(out.data(), {p.hq, p.sq, p.dv}),
                            TensorView<float, 2>(lse.data(), {p.hq, p.sq}));
  const std::vector<T> dout = to<T>(dout_d);
  std::vector<T> dq(static_cast<size_t>(p.hq * p.sq * p.dqk), T(99)),
      dk(static_cast<size_t>(p.hkv * p.skv * p.dqk), T(99)),
      dv(static_cast<size_t>(p.hkv * p.skv * p.dv), T(99));
  std::vector<float> dsinks(c.sinks.size(), 99.0f);
  SplashGradients<T> g;
  g.dq = {dq.data(), {p.hq, p.sq, p.dqk}};
  g.dk = {dk.data(), {p.hkv, p.skv, p.dqk}};
  g.dv = {dv.data(), {p.hkv, p.skv, p.dv}};
  if (!dsinks.empty()) g.dsinks = {dsinks.data(), {p.hq}};
  attnref::splash_attention_backward(a, mask,
                                     TensorView<const T, 3>(out.data(), {p.hq, p.sq, p.dv}),
                                     TensorView<const float, 2>(lse.data(), {p.hq, p.sq}),
                                     TensorView<const T, 3>(dout.data(), {p.hq, p.sq, p.dv}), g);
  return {back(out), back(lse), back(dq), back(dk), back(dv), back(dsinks)};
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t n = 0; n < got.size(); ++n)
    ASSERT_NEAR(got[n], want[n], atol + rtol * std::abs(want[n])) << what << "[" << n << "]";
}

TEST(SplashBackward, JaxGridAgainstFloat64Formulas) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> heads = {
      {1, 1}, {2, 2}, {4, 1}, {8, 4}, {6, 2}};
  const std::vector<std::pair<std::int64_t, std::int64_t>> dims = {
      {64, 64}, {128, 192}, {192, 128}};
  unsigned n = 0;
  for (auto h : heads)
    for (auto d : dims) {
      const bool seg = n % 2 == 1, sinks = n % 3 == 0, mqa = n % 5 == 4;
      const double cap = n % 4 == 2 ? 2.5 : 0.0;
      SCOPED_TRACE("case " + std::to_string(n) + " Hq " + std::to_string(h.first) + " D " +
                   std::to_string(d.first) + "x" + std::to_string(d.second));
      Case<float> c = make_case<float>(h.first, h.second, 23, 29, d.first, d.second, mqa, seg,
                                       sinks, cap, 100 + n);
      c.bq = n % 2 ? 8 : 16;
      c.bkv = n % 3 ? 16 : 8;
      std::mt19937 rng(n);
      std::vector<double> dout;
      splash_ref::fill(dout, static_cast<size_t>(h.first * 23 * d.second), rng, -1, 1);
      dout = back(to<float>(dout));
      const Result r = run_kernel(c, dout);
      const auto f = splash_ref::forward(c.p);
      const auto b = splash_ref::backward(c.p, f, dout);
      expect_close(r.out, f.out, 2e-5, 2e-5, "out");
      expect_close(r.dq, b.dq, 5e-5, 5e-5, "dq");
      expect_close(r.dk, b.dk, 5e-5, 5e-5, "dk");
      expect_close(r.dv, b.dv, 5e-5, 5e-5, "dv");
      expect_close(r.dsinks, b.dsinks, 5e-5, 5e-5, "dsinks");
      if (HasFatalFailure()) return;
      ++n;
    }
}

// Central finite differences of L = sum(out * dO) through the kernel's own double forward.
TEST(SplashBackward, FiniteDifferencesInDouble) {
  for (unsigned variant = 0; variant < 2; ++variant) {
    const bool mqa = variant == 1;
    Case<double> c = make_case<double>(4, 2, 9, 11, 3, 5, mqa, /*seg=*/true, /*sinks=*/true,
                                       /*cap=*/variant == 0 ? 1.5 : 0.0, 7 + variant);
    c.bq = 4;
    c.bkv = 3;
    const auto& p = c.p;
    std::mt19937 rng(1);
    std::vector<double> dout;
    splash_ref::fill(dout, static_cast<size_t>(p.hq * p.sq * p.dv), rng, -1, 1);
    const Result r = run_kernel(c, dout);
    const MultiHeadMask mask = make_mask(p.hq, p.sq, p.skv);
    auto loss = [&](const Case<double>& cc) {
      std::vector<double> out(static_cast<size_t>(p.hq * p.sq * p.dv));
      attnref::splash_attention(cc.args(), mask,
                                TensorView<double, 3>(out.data(), {p.hq, p.sq, p.dv}));
      double l = 0;
      for (size_t n = 0; n < out.size(); ++n) l += out[n] * dout[n];
      return l;
    };
    const double eps = 1e-6;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
      for (size_t n = 0; n < x.size(); ++n) {
        const double saved = x[n];
        x[n] = saved + eps;
        const double up = loss(c);
        x[n] = saved - eps;
        const double down = loss(c);
        x[n] = saved;
        const double fd = (up - down) / (2 * eps);
        ASSERT_NEAR(grad[n], fd, 1e-7 + 1e-6 * std::abs(fd)) << what << "[" << n << "]";
      }
    };
    check(c.q, r.dq, "dq");
    check(c.k, r.dk, "dk");
    check(c.v, r.dv, "dv");
    // Sinks are float: step them as floats around their value, with a larger step.
    for (size_t h = 0; h < c.sinks.size(); ++h) {
      const float saved = c.sinks[h];
      const float step = 1.0f / 1024;
      c.sinks[h] = saved + step;
      const double up = loss(c);
      c.sinks[h] = saved - step;
      const double down = loss(c);
      c.sinks[h] = saved;
      const double fd = (up - down) / (2.0 * step);
      EXPECT_NEAR(r.dsinks[h], fd, 1e-6 + 1e-5 * std::abs(fd)) << "dsinks[" << h << "]";
    }
  }
}

TEST(SplashBackward, BlockSizeIndependence) {
  Case<float> c = make_case<float>(4, 2, 30, 30, 16, 8, false, false, true, 0.0, 3);
  std::mt19937 rng(2);
  std::vector<double> dout;
  splash_ref::fill(dout, static_cast<size_t>(4 * 30 * 8), rng, -1, 1);
  c.bq = 30;
  c.bkv = 30;
  const Result ref = run_kernel(c, dout);
  for (auto b :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {4, 7}, {16, 8}, {64, 64}}) {
    c.bq = b.first;
    c.bkv = b.second;
    const Result r = run_kernel(c, dout);
    expect_close(r.dq, ref.dq, 2e-6, 1e-5, "dq");
    expect_close(r.dk, ref.dk, 2e-6, 1e-5, "dk");
    expect_close(r.dv, ref.dv, 2e-6, 1e-5, "dv");
    expect_close(r.dsinks, ref.dsinks, 2e-6, 1e-5, "dsinks");
  }
}

TEST(SplashBackward, NaNInSkippedKvBlocksDoesNotLeak) {
  // Causal with Skv > Sq: kv blocks past the last query row are never read. Their dk/dv are 0.
  const std::int64_t hq = 2, sq = 16, skv = 40, d = 4;
  Case<float> c = make_case<float>(hq, 1, sq, skv, d, d, true, false, false, 0.0, 21);
  c.bq = c.bkv = 8;
  c.p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  std::mt19937 rng(4);
  std::vector<double> dout;
  splash_ref::fill(dout, static_cast<size_t>(hq * sq * d), rng, -1, 1);
  dout = back(to<float>(dout));
  const auto f = splash_ref::forward(c.p);
  const auto b = splash_ref::backward(c.p, f, dout);
  for (std::int64_t t = 16; t < skv; ++t)
    for (std::int64_t e = 0; e < d; ++e) {
      c.k[static_cast<size_t>(t * d + e)] = std::numeric_limits<float>::quiet_NaN();
      c.v[static_cast<size_t>(t * d + e)] = std::numeric_limits<float>::quiet_NaN();
    }
  const CausalMask mask{{sq, skv}};
  const auto a = c.args();
  std::vector<float> out(hq * sq * d), lse(hq * sq), dq(hq * sq * d), dk(skv * d, 5.0f),
      dv(skv * d, 5.0f);
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, sq, d}),
                            TensorView<float, 2>(lse.data(), {hq, sq}));
  const auto dout_f = to<float>(dout);
  SplashGradients<float> g;
  g.dq = {dq.data(), {hq, sq, d}};
  g.dk = {dk.data(), {1, skv, d}};
  g.dv = {dv.data(), {1, skv, d}};
  attnref::splash_attention_backward(a, mask, TensorView<const float, 3>(out.data(), {hq, sq, d}),
                                     TensorView<const float, 2>(lse.data(), {hq, sq}),
                                     TensorView<const float, 3>(dout_f.data(), {hq, sq, d}), g);
  expect_close(back(dq), b.dq, 5e-5, 5e-5, "dq");
  expect_close(back(dk), b.dk, 5e-5, 5e-5, "dk");
  expect_close(back(dv), b.dv, 5e-5, 5e-5, "dv");
}

TEST(SplashBackward, FullyMaskedRowsHaveNoGradient) {
  // Causal with offset -2: rows 0, 1 see no key; lse -inf; their dq is 0 and they add nothing.
  const std::int64_t s = 6, d = 2;
  std::vector<float> q(s * d, 0.5f), k(s * d, 0.5f), v(s * d, 1.0f), dout(s * d, 1.0f);
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {1, s, d}};
  a.k = {k.data(), {1, s, d}};
  a.v = {v.data(), {1, s, d}};
  a.block_sizes.block_q = a.block_sizes.block_kv = 4;
  const CausalMask mask{{s, s}, -2};
  std::vector<float> out(s * d), lse(s), dq(s * d, 7), dk(s * d, 7), dv(s * d, 7);
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {1, s, d}),
                            TensorView<float, 2>(lse.data(), {1, s}));
  SplashGradients<float> g{
      {dq.data(), {1, s, d}}, {dk.data(), {1, s, d}}, {dv.data(), {1, s, d}}, {}};
  attnref::splash_attention_backward(a, mask, TensorView<const float, 3>(out.data(), {1, s, d}),
                                     TensorView<const float, 2>(lse.data(), {1, s}),
                                     TensorView<const float, 3>(dout.data(), {1, s, d}), g);
  for (float x : dq) EXPECT_TRUE(std::isfinite(x));
  for (std::int64_t e = 0; e < d; ++e) {
    EXPECT_EQ(dq[at(0 * d + e)], 0.0f);
    EXPECT_EQ(dq[at(1 * d + e)], 0.0f);
  }
  // All logits equal and dO = 1, v = 1: dv[t] = sum over rows r >= t + 2 of 1 / (r - 1).
  for (std::int64_t t = 0; t < s; ++t) {
    double want = 0;
    for (std::int64_t r = t + 2; r < s; ++r) want += 1.0 / static_cast<double>(r - 1);
    EXPECT_NEAR(dv[at(t * d)], want, 1e-6) << t;
  }
}

TEST(SplashBackward, ValidatesBeforeRunning) {
  Case<float> c = make_case<float>(2, 1, 8, 8, 4, 4, false, false, false, 0.0, 1);
  auto a = c.args();
  std::vector<float> out(2 * 8 * 4), lse(2 * 8), dq(2 * 8 * 4), dk(8 * 4), dv(8 * 4);
  SplashGradients<float> g{
      {dq.data(), {2, 8, 4}}, {dk.data(), {1, 8, 4}}, {dv.data(), {1, 8, 4}}, {}};
  const TensorView<const float, 3> o(out.data(), {2, 8, 4});
  const TensorView<const float, 2> l(lse.data(), {2, 8});
  {
    // Under the jax profile the forward rules hold (128-token sequences) but no backward blocks.
    Case<float> big = make_case<float>(2, 1, 128, 128, 4, 4, false, false, false, 0.0, 1);
    auto b = big.args();
    b.block_sizes = attnref::SplashBlockSizes{};
    std::vector<float> o2(2 * 128 * 4), l2(2 * 128), dq2(2 * 128 * 4), dk2(128 * 4), dv2(128 * 4);
    SplashGradients<float> g2{
        {dq2.data(), {2, 128, 4}}, {dk2.data(), {1, 128, 4}}, {dv2.data(), {1, 128, 4}}, {}};
    const TensorView<const float, 3> ov(o2.data(), {2, 128, 4});
    const TensorView<const float, 2> lv(l2.data(), {2, 128});
    EXPECT_NO_THROW(attnref::splash_attention_backward(b, CausalMask{{128, 128}}, ov, lv, ov, g2));
    try {
      attnref::validate_splash_backward(b, CausalMask{{128, 128}}, Profile::kJax);
      FAIL() << "expected ShapeError";
    } catch (const attnref::ShapeError& e) {
      EXPECT_EQ(e.status().code(), attnref::ErrorCode::kMissingBackwardBlocks);
      EXPECT_EQ(std::string(e.status().jax_check()), "S15");
    }
  }
  a.block_sizes.block_q_dkv = 0;
  try {
    attnref::splash_attention_backward(a, CausalMask{{8, 8}}, o, l, o, g);
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), attnref::ErrorCode::kInvalidBlockSize);
    EXPECT_EQ(e.status().message(), "block_q_dkv=0 must be positive.");
  }
  a = c.args();
  g.dk = {dk.data(), {1, 8, 3}};
  try {
    attnref::splash_attention_backward(a, CausalMask{{8, 8}}, o, l, o, g);
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), attnref::ErrorCode::kShapeMismatch);
    EXPECT_EQ(e.status().message(), "dk has shape (1, 8, 3); expected (1, 8, 4)");
  }
}

// Bits of every output of one forward + backward through a plan on `exec`.
template <class Exec>
std::vector<std::vector<float>> plan_bits(const Case<float>& c, Exec&& exec) {
  const auto& p = c.p;
  SplashAttentionArgs<float> a = c.args();
  a.block_sizes.block_q_dkv = 2 * c.bq;  // backward tiles differ: the plan builds both
  attnref::SplashPlan<float> plan;
  const MultiHeadMask mask = make_mask(p.hq, p.sq, p.skv);
  EXPECT_TRUE(attnref::make_splash_plan(a, mask, &plan).ok());
  EXPECT_TRUE(plan.info_dkv.has_value());
  auto n = [](std::int64_t x) { return static_cast<size_t>(x); };
  std::vector<float> out(n(p.hq * p.sq * p.dv), -1.0f), lse(n(p.hq * p.sq), -1.0f);
  std::vector<float> dq(n(p.hq * p.sq * p.dqk), -1.0f), dk(n(p.hkv * p.skv * p.dqk), -1.0f),
      dv(n(p.hkv * p.skv * p.dv), -1.0f), dsinks(n(p.hq), -1.0f), dout(out.size());
  for (size_t i = 0; i < dout.size(); ++i)
    dout[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  EXPECT_TRUE(attnref::try_splash_attention(plan,
                                            TensorView<float, 3>(out.data(), {p.hq, p.sq, p.dv}),
                                            TensorView<float, 2>(lse.data(), {p.hq, p.sq}), exec)
                  .ok());
  SplashGradients<float> g{{dq.data(), {p.hq, p.sq, p.dqk}},
                           {dk.data(), {p.hkv, p.skv, p.dqk}},
                           {dv.data(), {p.hkv, p.skv, p.dv}},
                           {}};
  if (!c.sinks.empty()) g.dsinks = {dsinks.data(), {p.hq}};
  attnref::splash_attention_backward(
      plan, TensorView<const float, 3>(out.data(), {p.hq, p.sq, p.dv}),
      TensorView<const float, 2>(lse.data(), {p.hq, p.sq}),
      TensorView<const float, 3>(dout.data(), {p.hq, p.sq, p.dv}), g, exec);
  return {out, lse, dq, dk, dv, dsinks};
}

TEST(SplashExecutor, ThreadPoolGivesTheSerialBits) {
  // GQA (group 3) and MQA, with segment ids, sinks and a soft cap, at lengths no block divides.
  for (bool mqa : {false, true}) {
    Case<float> c = make_case<float>(6, 2, 37, 41, 8, 6, mqa, true, true, 20.0, 11);
    c.bq = 8;
    c.bkv = 16;
    const auto serial = plan_bits(c, attnref::SerialExecutor{});
    for (int threads : {2, 3}) {
      attnref::ThreadPoolExecutor pool(threads);
      const auto pooled = plan_bits(c, pool);
      ASSERT_EQ(serial.size(), pooled.size());
      for (size_t t = 0; t < serial.size(); ++t) {
        ASSERT_EQ(serial[t].size(), pooled[t].size());
        EXPECT_EQ(0,
                  std::memcmp(serial[t].data(), pooled[t].data(), serial[t].size() * sizeof(float)))
            << "tensor " << t << " differs with " << threads << " threads (mqa " << mqa << ")";
      }
    }
    // The convenience overloads give the same bits as the plan.
    const auto& p = c.p;
    const SplashAttentionArgs<float> a = c.args();
    std::vector<float> out(static_cast<size_t>(p.hq * p.sq * p.dv)),
        lse(static_cast<size_t>(p.hq * p.sq));
    attnref::splash_attention(a, make_mask(p.hq, p.sq, p.skv),
                              TensorView<float, 3>(out.data(), {p.hq, p.sq, p.dv}),
                              TensorView<float, 2>(lse.data(), {p.hq, p.sq}));
    EXPECT_EQ(0, std::memcmp(out.data(), serial[0].data(), out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(lse.data(), serial[1].data(), lse.size() * sizeof(float)));
  }
}

TEST(SplashPlan, ChecksOnceAndReportsBackwardErrorsOnlyToTheBackward) {
  Case<float> c = make_case<float>(2, 1, 8, 8, 4, 4, false, false, false, 0.0, 1);
  SplashAttentionArgs<float> a = c.args();
  a.block_sizes.block_q_dkv = 0;  // invalid for the backward only
  attnref::SplashPlan<float> plan;
  ASSERT_TRUE(attnref::make_splash_plan(a, CausalMask{{8, 8}}, &plan).ok());
  EXPECT_EQ(plan.backward_status.code(), attnref::ErrorCode::kInvalidBlockSize);
  EXPECT_EQ(plan.backward_status.message(), "block_q_dkv=0 must be positive.");
  std::vector<float> out(2 * 8 * 4), lse(2 * 8), dq(2 * 8 * 4), dk(8 * 4), dv(8 * 4);
  EXPECT_TRUE(attnref::try_splash_attention(plan, TensorView<float, 3>(out.data(), {2, 8, 4}),
                                            TensorView<float, 2>(lse.data(), {2, 8}))
                  .ok());
  const SplashGradients<float> g{
      {dq.data(), {2, 8, 4}}, {dk.data(), {1, 8, 4}}, {dv.data(), {1, 8, 4}}, {}};
  const attnref::Status s = attnref::try_splash_attention_backward(
      plan, TensorView<const float, 3>(out.data(), {2, 8, 4}),
      TensorView<const float, 2>(lse.data(), {2, 8}),
      TensorView<const float, 3>(out.data(), {2, 8, 4}), g);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kInvalidBlockSize);
  // An invalid call is rejected by the plan, which is left untouched.
  a.block_sizes.block_q_dkv.reset();
  const attnref::Status bad = attnref::make_splash_plan(a, CausalMask{{8, 7}}, &plan);
  EXPECT_EQ(bad.code(), attnref::ErrorCode::kMaskShape);
  EXPECT_EQ(plan.backward_status.code(), attnref::ErrorCode::kInvalidBlockSize);
  // The output checks are public.
  EXPECT_EQ(attnref::check_splash_output(a, TensorView<float, 3>(out.data(), {2, 8, 3})).code(),
            attnref::ErrorCode::kShapeMismatch);
  EXPECT_EQ(
      attnref::check_splash_backward_output(a, TensorView<const float, 3>(out.data(), {2, 8, 4}),
                                            TensorView<const float, 2>(lse.data(), {2, 8}),
                                            TensorView<const float, 3>(out.data(), {2, 8, 4}), g)
          .code(),
      attnref::ErrorCode::kOk);
}

}  // namespace
