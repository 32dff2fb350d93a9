// SPDX-License-Identifier: Apache-2.0
// Splash forward + logsumexp against a plain float64 implementation (reference/splash.hpp) over
// JAX's head/dim grid (spec §5.2) at small, non-divisible sequence lengths; MQA, segment ids,
// sinks, soft cap; block-size independence; NaN in skipped K/V blocks; fully masked rows;
// strided views; bf16 and double inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
using attnref::TensorView;
using splash_ref::back;
using splash_ref::to;

/// Vector index from a signed element offset (offsets here are never negative).
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

struct Config {
  std::int64_t hq, hkv, sq, skv, dqk, dv;
  bool mqa = false, segments = false, sinks = false;
  double soft_cap = 0;
  double scale = 0;                        // 0: 1/sqrt(dqk)
  std::int64_t bq = 16, bkv = 16, bc = 0;  // bc 0: = bkv
  int mask = 0;  // 0 causal, 1 full, 2 local(5, 3), 3 per-head causal/local/random
};

std::string name(const Config& c) {
  return "Hq" + std::to_string(c.hq) + "_Hkv" + std::to_string(c.hkv) + "_S" +
         std::to_string(c.sq) + "x" + std::to_string(c.skv) + "_D" + std::to_string(c.dqk) + "x" +
         std::to_string(c.dv) + (c.mqa ? "_mqa" : "") + (c.segments ? "_seg" : "") +
         (c.sinks ? "_sinks" : "") + (c.soft_cap != 0 ? "_cap" : "") + "_mask" +
         std::to_string(c.mask) + "_b" + std::to_string(c.bq) + "x" + std::to_string(c.bkv);
}

// Random per-head boolean masks for mask kind 3 (column 0 forced true, as JAX's strategy).
struct Masks {
  std::vector<std::vector<char>> random;  // [Hq][Sq*Skv]
};

template <class T>
void run_case(const Config& c, double atol, double rtol) {
  SCOPED_TRACE(name(c));
  std::mt19937 rng(static_cast<unsigned>(c.hq * 131 + c.sq * 7 + c.dqk + c.mask));
  splash_ref::Problem p;
  p.hq = c.hq;
  p.hkv = c.mqa ? 1 : c.hkv;
  p.sq = c.sq;
  p.skv = c.skv;
  p.dqk = c.dqk;
  p.dv = c.dv;
  p.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.dqk));
  p.soft_cap = c.soft_cap;
  splash_ref::fill(p.q, static_cast<size_t>(p.hq * p.sq * p.dqk), rng, -1, 1);
  splash_ref::fill(p.k, static_cast<size_t>(p.hkv * p.skv * p.dqk), rng, -1, 1);
  splash_ref::fill(p.v, static_cast<size_t>(p.hkv * p.skv * p.dv), rng, -1, 1);
  if (c.scale == 1.0) {  // JAX's own distribution: uniform [0, 1)
    splash_ref::fill(p.q, p.q.size(), rng, 0, 1);
    splash_ref::fill(p.k, p.k.size(), rng, 0, 1);
  }
  // Round inputs to T so that both sides see the same numbers.
  const auto q = to<T>(p.q), k = to<T>(p.k), v = to<T>(p.v);
  p.q = back(q);
  p.k = back(k);
  p.v = back(v);
  if (c.segments) {
    // Segments of at least 2 tokens; identical ids on both sides when square.
    p.q_seg.resize(static_cast<size_t>(c.sq));
    p.kv_seg.resize(static_cast<size_t>(c.skv));
    for (std::int64_t r = 0; r < c.sq; ++r)
      p.q_seg[static_cast<size_t>(r)] = static_cast<std::int32_t>(r * 3 / c.sq);
    for (std::int64_t t = 0; t < c.skv; ++t)
      p.kv_seg[static_cast<size_t>(t)] = static_cast<std::int32_t>(t * 3 / c.skv);
  }
  std::vector<float> sinks;
  if (c.sinks) {
    splash_ref::fill(p.sinks, static_cast<size_t>(c.hq), rng, 0, 1);
    sinks = to<float>(p.sinks);
    p.sinks = back(sinks);
  }
  Masks masks;
  std::bernoulli_distribution coin(0.7);
  for (std::int64_t h = 0; h < c.hq; ++h) {
    std::vector<char> m(static_cast<size_t>(c.sq * c.skv));
    for (std::int64_t r = 0; r < c.sq; ++r)
      for (std::int64_t t = 0; t < c.skv; ++t)
        m[static_cast<size_t>(r * c.skv + t)] = t == 0 || coin(rng);
    masks.random.push_back(std::move(m));
  }
  const attnref::MaskShape shape{c.sq, c.skv};
  const CausalMask causal{shape};
  const LocalMask local{shape, 5, 3, 0};
  switch (c.mask) {
    case 0:
      p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
      break;
    case 1:
      p.allowed = [](std::int64_t, std::int64_t, std::int64_t) { return true; };
      break;
    case 2:
      p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) {
        return t >= r - 5 && t <= r + 3;
      };
      break;
    default:
      p.allowed = [&](std::int64_t h, std::int64_t r, std::int64_t t) {
        if (h % 3 == 0) return t <= r;
        if (h % 3 == 1) return t >= r - 5 && t <= r + 3;
        return masks.random[static_cast<size_t>(h)][static_cast<size_t>(r * c.skv + t)] != 0;
      };
  }
  const auto expected = splash_ref::forward(p);

  SplashAttentionArgs<T> a;
  a.q = {q.data(), {c.hq, c.sq, c.dqk}};
  a.k = {k.data(), {p.hkv, c.skv, c.dqk}};
  a.v = {v.data(), {p.hkv, c.skv, c.dv}};
  a.is_mqa = c.mqa;
  a.sm_scale = static_cast<float>(p.scale);
  if (c.soft_cap != 0) a.soft_cap = static_cast<float>(c.soft_cap);
  if (c.segments) {
    a.q_segment_ids = {p.q_seg.data(), {c.sq}};
    a.kv_segment_ids = {p.kv_seg.data(), {c.skv}};
  }
  if (c.sinks) a.sinks = {sinks.data(), {c.hq}};
  a.block_sizes.block_q = c.bq;
  a.block_sizes.block_kv = c.bkv;
  if (c.bc != 0) a.block_sizes.block_kv_compute = c.bc;
  std::vector<T> out(static_cast<size_t>(c.hq * c.sq * c.dv), T(-7));
  std::vector<float> lse(static_cast<size_t>(c.hq * c.sq), -7.0f);
  TensorView<T, 3> out_view(out.data(), {c.hq, c.sq, c.dv});
  TensorView<float, 2> lse_view(lse.data(), {c.hq, c.sq});
  if (c.mask == 0) {
    attnref::splash_attention(a, causal, out_view, lse_view);
  } else if (c.mask == 1) {
    attnref::splash_attention(a, attnref::FullMask{shape}, out_view, lse_view);
  } else if (c.mask == 2) {
    attnref::splash_attention(a, local, out_view, lse_view);
  } else {
    std::vector<attnref::AnyMask> heads;
    for (std::int64_t h = 0; h < c.hq; ++h) {
      if (h % 3 == 0)
        heads.emplace_back(causal);
      else if (h % 3 == 1)
        heads.emplace_back(local);
      else
        heads.emplace_back(attnref::DenseMask{
            {reinterpret_cast<const bool*>(masks.random[static_cast<size_t>(h)].data()),
             {c.sq, c.skv}}});
    }
    attnref::splash_attention(a, MultiHeadMask(heads), out_view, lse_view);
  }
  for (size_t n = 0; n < out.size(); ++n) {
    const double e = expected.out[n];
    ASSERT_NEAR(static_cast<double>(out[n]), e, atol + rtol * std::abs(e)) << "out[" << n << "]";
  }
  for (size_t n = 0; n < lse.size(); ++n) {
    const double e = expected.lse[n];
    if (std::isinf(e)) {
      ASSERT_TRUE(std::isinf(lse[n]) && lse[n] < 0) << "lse[" << n << "]";
    } else {
      // logsumexp is float32 whatever the input type.
      ASSERT_NEAR(lse[n], e, std::max(atol, 1e-6) + std::max(rtol, 1e-6) * std::abs(e))
          << "lse[" << n << "]";
    }
  }
}

// JAX's grid (spec §5.2) at small lengths, with lengths no block size divides.
TEST(SplashForward, JaxGridFloat) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> heads = {
      {1, 1}, {2, 2}, {4, 1}, {8, 4}, {6, 2}};
  const std::vector<std::pair<std::int64_t, std::int64_t>> dims = {
      {64, 64}, {128, 192}, {192, 128}};
  int n = 0;
  for (auto h : heads)
    for (auto d : dims) {
      Config c{h.first, h.second, 37, 53, d.first, d.second};
      c.mask = n % 4;
      c.segments = n % 3 == 1;
      c.sinks = n % 5 == 2;
      c.soft_cap = n % 4 == 3 ? 7.5 : 0;
      c.bq = n % 2 ? 16 : 8;
      c.bkv = n % 3 ? 16 : 32;
      c.bc = n % 3 == 2 ? 8 : 0;
      ++n;
      run_case<float>(c, 2e-5, 2e-5);
      if (HasFatalFailure()) return;
    }
}

TEST(SplashForward, MqaSegmentsSinksSoftCap) {
  for (int mask = 0; mask < 4; ++mask) {
    Config c{6, 1, 41, 41, 64, 32};
    c.mqa = true;
    c.segments = true;
    c.sinks = mask % 2 == 0;
    c.soft_cap = 3.0;
    c.mask = mask;
    run_case<float>(c, 2e-5, 2e-5);
  }
}

TEST(SplashForward, JaxDistributionUnscaledLogits) {
  // q, k uniform [0, 1) and sm_scale 1 as in JAX's tests (large logits), with a soft cap in
  // JAX's range and without.
  for (double cap : {0.0, 20.0}) {
    Config c{4, 2, 48, 48, 128, 128};
    c.scale = 1.0;
    c.soft_cap = cap;
    c.mask = 3;
    run_case<float>(c, 5e-5, 5e-5);
  }
}

TEST(SplashForward, Double) {
  Config c{4, 2, 29, 31, 16, 24};
  c.mask = 3;
  c.segments = true;
  c.sinks = true;
  c.soft_cap = 2.0;
  c.bq = 8;
  c.bkv = 4;
  run_case<double>(c, 1e-12, 1e-12);
}

TEST(SplashForward, BFloat16) {
  Config c{4, 2, 40, 40, 64, 64};
  c.mask = 0;
  c.sinks = true;
  run_case<Eigen::bfloat16>(c, 1e-2, 1e-2);
}

TEST(SplashForward, BlockSizeIndependence) {
  const std::int64_t hq = 4, hkv = 2, s = 45, d = 32;
  std::mt19937 rng(3);
  std::vector<double> qd, kd, vd;
  splash_ref::fill(qd, hq * s * d, rng, -1, 1);
  splash_ref::fill(kd, hkv * s * d, rng, -1, 1);
  splash_ref::fill(vd, hkv * s * d, rng, -1, 1);
  const auto q = to<float>(qd), k = to<float>(kd), v = to<float>(vd);
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {hq, s, d}};
  a.k = {k.data(), {hkv, s, d}};
  a.v = {v.data(), {hkv, s, d}};
  a.sm_scale = 0.2f;
  const LocalMask mask{{s, s}, 9, std::nullopt, 0};
  std::vector<float> first, first_lse;
  for (auto b : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {8, 8, 8}, {16, 32, 8}, {64, 64, 64}, {7, 13, 5}}) {
    a.block_sizes.block_q = b[0];
    a.block_sizes.block_kv = b[1];
    a.block_sizes.block_kv_compute = b[2];
    std::vector<float> out(hq * s * d), lse(hq * s);
    attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, s, d}),
                              TensorView<float, 2>(lse.data(), {hq, s}));
    if (first.empty()) {
      first = out;
      first_lse = lse;
      continue;
    }
    for (size_t n = 0; n < out.size(); ++n) ASSERT_NEAR(out[n], first[n], 2e-6);
    for (size_t n = 0; n < lse.size(); ++n) ASSERT_NEAR(lse[n], first_lse[n], 2e-6);
  }
}

// NaN in the K/V rows of tiles that no (head, q block) reads: the output is still right. The
// heads that share a KV head differ in which tiles they read.
TEST(SplashForward, NaNInSkippedKvBlocksDoesNotLeak) {
  const std::int64_t hq = 4, hkv = 2, sq = 32, skv = 80, d = 16;
  std::mt19937 rng(5);
  std::vector<double> qd, kd, vd;
  splash_ref::fill(qd, hq * sq * d, rng, -1, 1);
  splash_ref::fill(kd, hkv * skv * d, rng, -1, 1);
  splash_ref::fill(vd, hkv * skv * d, rng, -1, 1);
  auto q = to<float>(qd), k = to<float>(kd), v = to<float>(vd);
  // Heads 0, 2: causal with offset 8 (kv < 40 for the last row). Heads 1, 3: chunked causal with
  // chunk 16. Tiles of 16: kv blocks 3, 4 (rows 48..79) are empty for every head.
  const CausalMask causal{{sq, skv}, 8};
  const attnref::ChunkedCausalMask chunked{{sq, skv}, 16};
  MultiHeadMask mask{causal, chunked, causal, chunked};
  splash_ref::Problem p;
  p.hq = hq;
  p.hkv = hkv;
  p.sq = sq;
  p.skv = skv;
  p.dqk = p.dv = d;
  p.q = back(q);
  p.k = back(k);
  p.v = back(v);
  p.scale = 0.3;
  p.allowed = [](std::int64_t h, std::int64_t r, std::int64_t t) {
    return h % 2 == 0 ? r + 8 >= t : (r / 16 == t / 16 && r >= t);
  };
  const auto expected = splash_ref::forward(p);
  const attnref::MaskInfo info = attnref::make_mask_info(mask, 16, 16);
  int poisoned_rows = 0;
  for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
    bool empty = true;
    for (std::int64_t h = 0; h < hq; ++h)
      for (std::int64_t i = 0; i < info.num_q_blocks; ++i)
        empty = empty && info.kind(h, i, j) == attnref::BlockKind::kEmpty;
    if (!empty) continue;
    for (std::int64_t kh = 0; kh < hkv; ++kh)
      for (std::int64_t t = j * 16; t < std::min(skv, j * 16 + 16); ++t, ++poisoned_rows)
        for (std::int64_t e = 0; e < d; ++e) {
          k[at((kh * skv + t) * d + e)] = std::numeric_limits<float>::quiet_NaN();
          v[at((kh * skv + t) * d + e)] = std::numeric_limits<float>::quiet_NaN();
        }
  }
  ASSERT_EQ(poisoned_rows, 2 * (skv - 48));
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {hq, sq, d}};
  a.k = {k.data(), {hkv, skv, d}};
  a.v = {v.data(), {hkv, skv, d}};
  a.sm_scale = 0.3f;
  a.block_sizes.block_q = a.block_sizes.block_kv = 16;
  std::vector<float> out(hq * sq * d), lse(hq * sq);
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, sq, d}),
                            TensorView<float, 2>(lse.data(), {hq, sq}));
  for (size_t n = 0; n < out.size(); ++n) ASSERT_NEAR(out[n], expected.out[n], 1e-5) << n;
  for (size_t n = 0; n < lse.size(); ++n) ASSERT_NEAR(lse[n], expected.lse[n], 1e-5) << n;
}

TEST(SplashForward, FullyMaskedRowsGiveZeroAndMinusInf) {
  const std::int64_t hq = 2, s = 12, d = 4;
  std::vector<float> q(hq * s * d, 0.5f), k(s * d, 0.25f), v(s * d, 3.0f), sinks = {0.75f, -1.0f};
  // Causal with offset -3: rows 0..2 attend to nothing.
  const CausalMask mask{{s, s}, -3};
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {hq, s, d}};
  a.k = {k.data(), {1, s, d}};
  a.v = {v.data(), {1, s, d}};
  a.is_mqa = true;
  a.block_sizes.block_q = 4;
  a.block_sizes.block_kv = 4;
  std::vector<float> out(hq * s * d, 9.0f), lse(hq * s, 9.0f);
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, s, d}),
                            TensorView<float, 2>(lse.data(), {hq, s}));
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < s; ++r) {
      const float lse_r = lse[at(h * s + r)];
      if (r < 3) {
        EXPECT_TRUE(std::isinf(lse_r) && lse_r < 0);
        for (std::int64_t e = 0; e < d; ++e) EXPECT_EQ(out[at((h * s + r) * d + e)], 0.0f);
      } else {
        // All logits equal (0.5 * 0.25 * 4 = 0.5): lse = 0.5 + log(r - 2); out = mean(v) = 3.
        EXPECT_NEAR(lse_r, 0.5 + std::log(static_cast<double>(r - 2)), 1e-6);
        for (std::int64_t e = 0; e < d; ++e) EXPECT_NEAR(out[at((h * s + r) * d + e)], 3.0f, 1e-6);
      }
    }
  // With sinks: output 0 and lse = sink for the empty rows.
  a.sinks = {sinks.data(), {hq}};
  attnref::splash_attention(a, mask, TensorView<float, 3>(out.data(), {hq, s, d}),
                            TensorView<float, 2>(lse.data(), {hq, s}));
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < 3; ++r) {
      EXPECT_FLOAT_EQ(lse[at(h * s + r)], sinks[at(h)]);
      for (std::int64_t e = 0; e < d; ++e) EXPECT_EQ(out[at((h * s + r) * d + e)], 0.0f);
    }
  // Row 3 sees one key (logit 0.5) and the sink: out = 3 * e^0.5 / (e^0.5 + e^sink).
  const double w = std::exp(0.5) / (std::exp(0.5) + std::exp(0.75));
  EXPECT_NEAR(out[(0 * s + 3) * d], 3.0 * w, 1e-6);
  EXPECT_NEAR(lse[3], std::log(std::exp(0.5) + std::exp(0.75)), 1e-6);
}

TEST(SplashForward, HandWorkedTwoKeys) {
  // One head, one query [1, 0], keys [1, 0] and [0, 1], values [1, 2] and [3, 4], soft cap 0.5:
  // logits 1 -> 0.5*tanh(2) and 0 -> 0; p = softmax; out = p0*[1,2] + p1*[3,4].
  const float q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
  SplashAttentionArgs<float> a;
  a.q = {q, {1, 1, 2}};
  a.k = {k, {1, 2, 2}};
  a.v = {v, {1, 2, 2}};
  a.soft_cap = 0.5f;
  float out[2], lse[1];
  attnref::splash_attention(a, attnref::FullMask{{1, 2}}, TensorView<float, 3>(out, {1, 1, 2}),
                            TensorView<float, 2>(lse, {1, 1}));
  const double x0 = 0.5 * std::tanh(2.0);
  const double p0 = std::exp(x0) / (std::exp(x0) + 1.0);
  EXPECT_NEAR(out[0], p0 * 1 + (1 - p0) * 3, 1e-6);
  EXPECT_NEAR(out[1], p0 * 2 + (1 - p0) * 4, 1e-6);
  EXPECT_NEAR(lse[0], std::log(std::exp(x0) + 1.0), 1e-6);
}

TEST(SplashForward, StridedViewsGiveTheSameNumbers) {
  // q stored token-major [Sq, Hq, D] and viewed as [Hq, Sq, D] through strides.
  const std::int64_t hq = 2, s = 10, d = 4;
  std::mt19937 rng(9);
  std::vector<double> qd, kd, vd;
  splash_ref::fill(qd, hq * s * d, rng, -1, 1);
  splash_ref::fill(kd, s * d, rng, -1, 1);
  splash_ref::fill(vd, s * d, rng, -1, 1);
  auto q = to<float>(qd), k = to<float>(kd), v = to<float>(vd);
  std::vector<float> q_tm(q.size());
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < s; ++r)
      for (std::int64_t e = 0; e < d; ++e)
        q_tm[at((r * hq + h) * d + e)] = q[at((h * s + r) * d + e)];
  SplashAttentionArgs<float> a;
  a.k = {k.data(), {1, s, d}};
  a.v = {v.data(), {1, s, d}};
  a.block_sizes.block_q = 4;
  a.block_sizes.block_kv = 4;
  std::vector<float> o1(hq * s * d), o2(hq * s * d);
  a.q = {q.data(), {hq, s, d}};
  attnref::splash_attention(a, CausalMask{{s, s}}, TensorView<float, 3>(o1.data(), {hq, s, d}));
  a.q = {q_tm.data(), {hq, s, d}, {d, hq * d, 1}, static_cast<std::int64_t>(q_tm.size())};
  // Output written head-minor as well.
  std::vector<float> o_tm(hq * s * d);
  attnref::splash_attention(a, CausalMask{{s, s}},
                            TensorView<float, 3>(o_tm.data(), {hq, s, d}, {d, hq * d, 1}));
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < s; ++r)
      for (std::int64_t e = 0; e < d; ++e)
        EXPECT_EQ(o_tm[at((r * hq + h) * d + e)], o1[at((h * s + r) * d + e)]);
}

TEST(SplashForward, KvReadInPlaceOrConvertedGiveTheSameBits) {
  // f32 K/V with a unit dim stride are read in place; stored dim-major ([Hkv, D, S] viewed as
  // [Hkv, S, D]) they are copied into the kernel's tiles first. Same values, same bits.
  const std::int64_t hq = 2, s = 11, d = 4;
  std::mt19937 rng(12);
  std::vector<double> qd, kd, vd;
  splash_ref::fill(qd, hq * s * d, rng, -2, 2);
  splash_ref::fill(kd, s * d, rng, -2, 2);
  splash_ref::fill(vd, s * d, rng, -2, 2);
  auto q = to<float>(qd), k = to<float>(kd), v = to<float>(vd);
  std::vector<float> k_dm(k.size()), v_dm(v.size());
  for (std::int64_t r = 0; r < s; ++r)
    for (std::int64_t e = 0; e < d; ++e) {
      k_dm[at(e * s + r)] = k[at(r * d + e)];
      v_dm[at(e * s + r)] = v[at(r * d + e)];
    }
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {hq, s, d}};
  a.block_sizes.block_q = 4;
  a.block_sizes.block_kv = 4;
  std::vector<float> o1(hq * s * d), o2(hq * s * d), l1(hq * s), l2(hq * s);
  a.k = {k.data(), {1, s, d}};
  a.v = {v.data(), {1, s, d}};
  attnref::splash_attention(a, CausalMask{{s, s}}, TensorView<float, 3>(o1.data(), {hq, s, d}),
                            TensorView<float, 2>(l1.data(), {hq, s}));
  a.k = {k_dm.data(), {1, s, d}, {s * d, 1, s}};
  a.v = {v_dm.data(), {1, s, d}, {s * d, 1, s}};
  attnref::splash_attention(a, CausalMask{{s, s}}, TensorView<float, 3>(o2.data(), {hq, s, d}),
                            TensorView<float, 2>(l2.data(), {hq, s}));
  for (std::size_t i = 0; i < o1.size(); ++i) EXPECT_EQ(o1[i], o2[i]) << "out element " << i;
  for (std::size_t i = 0; i < l1.size(); ++i) EXPECT_EQ(l1[i], l2[i]) << "logsumexp row " << i;
}

TEST(SplashForward, ValidatesBeforeRunning) {
  std::vector<float> q(2 * 8 * 4), k(8 * 4), v(8 * 4), out(2 * 8 * 4);
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {2, 8, 4}};
  a.k = {k.data(), {1, 8, 4}};
  a.v = {v.data(), {1, 8, 4}};
  try {
    attnref::splash_attention(a, CausalMask{{8, 7}}, TensorView<float, 3>(out.data(), {2, 8, 4}));
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), attnref::ErrorCode::kMaskShape);
  }
  try {
    attnref::splash_attention(a, CausalMask{{8, 8}}, TensorView<float, 3>(out.data(), {2, 8, 3}));
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), attnref::ErrorCode::kShapeMismatch);
    EXPECT_EQ(e.status().message(), "out has shape (2, 8, 3); expected (2, 8, 4)");
  }
  // Under the jax profile, 8 % 128 != 0 is an error; under reference it runs.
  a.block_sizes = attnref::SplashBlockSizes::get_default();
  // Kernels take no profile: JAX's rules are a check before the call.
  EXPECT_THROW(attnref::validate_splash(a, CausalMask{{8, 8}}, Profile::kJax), attnref::ShapeError);
  EXPECT_NO_THROW(attnref::splash_attention(a, CausalMask{{8, 8}},
                                            TensorView<float, 3>(out.data(), {2, 8, 4})));
  // A MaskInfo built for other blocks is rejected.
  const attnref::MaskInfo info = attnref::make_mask_info(CausalMask{{8, 8}}, 4, 4);
  try {
    attnref::SplashPlan<float> plan;
    attnref::throw_if_error(attnref::make_splash_plan(a, info, &plan));
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), attnref::ErrorCode::kInvalidBlockSize);
    EXPECT_EQ(e.status().message(),
              "the MaskInfo was built for blocks (4, 4) but block_sizes say (128, 128)");
  }
}

TEST(SplashForward, HugeBlocksOverShortSequences) {
  // Regression (fuzz_splash): the reference profile accepts any positive block size, but a
  // 2^40 block made the mask classification allocate bq * bkv bytes per pattern. The result
  // must equal that of small blocks, forward and backward.
  const std::int64_t hq = 2, s = 10, d = 3;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(hq * s * d), k(s * d), v(s * d), dout(hq * s * d);
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = u(rng);
  const CausalMask mask{{s, s}};
  SplashAttentionArgs<float> a;
  a.q = {q.data(), {hq, s, d}};
  a.k = {k.data(), {1, s, d}};
  a.v = {v.data(), {1, s, d}};
  a.is_mqa = true;
  auto run = [&](std::int64_t block, std::vector<float>* out, std::vector<float>* grads) {
    a.block_sizes = {};
    a.block_sizes.block_q = a.block_sizes.block_kv = block;
    out->assign(hq * s * d, 0.0f);
    std::vector<float> lse(hq * s);
    EXPECT_TRUE(attnref::check_splash_backward(a, mask, Profile::kReference).ok());
    attnref::splash_attention(a, mask, TensorView<float, 3>(out->data(), {hq, s, d}),
                              TensorView<float, 2>(lse.data(), {hq, s}));
    grads->assign(hq * s * d + 2 * s * d, 0.0f);
    float* g = grads->data();
    attnref::splash_attention_backward(
        a, mask, TensorView<const float, 3>(out->data(), {hq, s, d}),
        TensorView<const float, 2>(lse.data(), {hq, s}),
        TensorView<const float, 3>(dout.data(), {hq, s, d}),
        attnref::SplashGradients<float>{TensorView<float, 3>(g, {hq, s, d}),
                                        TensorView<float, 3>(g + hq * s * d, {1, s, d}),
                                        TensorView<float, 3>(g + hq * s * d + s * d, {1, s, d}),
                                        {}});
  };
  std::vector<float> out_small, grads_small, out_huge, grads_huge;
  run(4, &out_small, &grads_small);
  run(std::int64_t{1} << 40, &out_huge, &grads_huge);
  for (size_t n = 0; n < out_small.size(); ++n) ASSERT_NEAR(out_huge[n], out_small[n], 1e-5) << n;
  for (size_t n = 0; n < grads_small.size(); ++n)
    ASSERT_NEAR(grads_huge[n], grads_small[n], 1e-5) << n;
}

}  // namespace
