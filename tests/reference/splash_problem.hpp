// SPDX-License-Identifier: Apache-2.0
// Test support for the splash family: a dense float64 problem (q, k, v, segment ids, sinks,
// options and a mask callable), conversions between it and a kernel-side dtype, and its
// forward / backward through the one oracle of reference/splash.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "splash.hpp"

namespace splash_ref {

/// Element-wise conversions between the float64 problem and a kernel-side dtype.
template <class T>
std::vector<T> to(const std::vector<double>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<T>(x[i]);
  return out;
}
template <class T>
std::vector<double> back(const std::vector<T>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]);
  return out;
}

/// Dense row-major problem in double: q [Hq,Sq,Dqk], k [Hkv,Skv,Dqk], v [Hkv,Skv,Dv]. Sinks
/// and the scale are read by the oracle as float (what the arguments carry): keep them
/// float-representable.
struct Problem {
  std::int64_t hq = 1, hkv = 1, sq = 1, skv = 1, dqk = 1, dv = 1;
  std::vector<double> q, k, v;
  std::vector<std::int32_t> q_seg, kv_seg;  // empty: none
  std::vector<double> sinks;                // empty: none
  double soft_cap = 0;                      // 0: none
  double scale = 1;
  std::optional<std::int64_t> window;  // sliding window W
  std::vector<double> slopes;          // ALiBi [Hq]; empty: none
  attnref::AlibiConvention alibi_convention = attnref::AlibiConvention::kSigned;
  attnref::SoftCapOrder soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  std::function<bool(std::int64_t h, std::int64_t r, std::int64_t t)> allowed;  // mask only

  /// The problem as float64 arguments (views of this problem, `sinks_f32` and `slopes_f32`).
  attnref::SplashAttentionArgs<double> args(std::vector<float>* sinks_f32,
                                            std::vector<float>* slopes_f32) const {
    attnref::SplashAttentionArgs<double> a;
    a.q = {q.data(), {hq, sq, dqk}};
    a.k = {k.data(), {hkv, skv, dqk}};
    a.v = {v.data(), {hkv, skv, dv}};
    a.sm_scale = static_cast<float>(scale);
    if (soft_cap != 0) a.soft_cap = static_cast<float>(soft_cap);
    if (!q_seg.empty()) {
      a.q_segment_ids = {q_seg.data(), {sq}};
      a.kv_segment_ids = {kv_seg.data(), {skv}};
    }
    sinks_f32->assign(sinks.size(), 0.0f);
    for (size_t h = 0; h < sinks.size(); ++h) (*sinks_f32)[h] = static_cast<float>(sinks[h]);
    if (!sinks.empty()) a.sinks = {sinks_f32->data(), {hq}};
    a.sliding_window = window;
    slopes_f32->assign(slopes.size(), 0.0f);
    for (size_t h = 0; h < slopes.size(); ++h) (*slopes_f32)[h] = static_cast<float>(slopes[h]);
    if (!slopes.empty()) a.alibi_slopes = {slopes_f32->data(), {hq}};
    a.alibi_convention = alibi_convention;
    a.soft_cap_order = soft_cap_order;
    return a;
  }
};

/// Forward of the problem: out [Hq,Sq,Dv] and lse [Hq,Sq].
inline attnref::reference::SplashForwardResult forward(const Problem& p) {
  std::vector<float> sinks, slopes;
  return attnref::reference::splash_forward(p.args(&sinks, &slopes), p.allowed);
}

/// Gradients of sum(out * dout) at the forward `f`.
inline attnref::reference::SplashBackwardResult backward(
    const Problem& p, const attnref::reference::SplashForwardResult& f,
    const std::vector<double>& dout) {
  std::vector<float> sinks, slopes;
  return attnref::reference::splash_backward(p.args(&sinks, &slopes), p.allowed, f.out, f.lse,
                                             dout);
}

/// Fills `x` with uniform values in [lo, hi).
inline void fill(std::vector<double>& x, std::size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  x.resize(n);
  for (auto& e : x) e = u(rng);
}

}  // namespace splash_ref
