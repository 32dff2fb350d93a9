// SPDX-License-Identifier: Apache-2.0
// Test-only float64 oracle of splash attention, forward and backward, from the spec's dense
// math (§2.5, §2.6, §2.7), read straight from the arguments. The mask is a callable
// `allowed(h, r, t) -> bool` (query head, query row, key row), so a caller can evaluate it
// independently of the library's masks; segment ids and sinks come from the arguments.
//   x[h, r, t]  = cap(sm_scale * q[h, r] . k[kv(h), t]) + slope[h] * (t - r) where allowed,
//                 segments agree and (with a sliding window W) r - W < t <= r; the bias is
//                 -slope[h] * |t - r| with the absolute ALiBi convention, and inside the cap,
//                 cap(sm_scale * q . k + bias), with soft_cap_order kAlibiThenCap
//   lse[h, r]   = log(exp(sink[h]) + sum_t exp(x)),  -inf when nothing is visible
//   out[h, r]   = sum_t exp(x - lse) v[kv(h), t],     0 when nothing is visible
// Gradients are those of sum(out * dout), with di = sum_d out * dout over the caller's `out`
// (the flash form the kernel uses). Independent of the kernels: plain loops over dense copies.
// Non-finite inputs (docs/hostile-inputs.md): a row whose largest logit (visible keys and sink)
// is NaN (any NaN), +inf, or -inf (all -inf: 0/0) has out and lse NaN; otherwise IEEE
// arithmetic: a -inf logit has weight 0, NaN/Inf in a visible V row reach the sum. Masked pairs
// take no part at all. The backward runs the formula as written (a NaN lse gives NaN terms).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <attnref/validate/splash.hpp>

#include "common.hpp"

namespace attnref {
namespace reference {

/// Forward results, plus error scales for callers that size tolerances (the fuzz harness); lo,
/// hi are [Hq, Sq, Dv].
struct SplashForwardResult : ValueRange {
  std::vector<double> out;     ///< [Hq, Sq, Dv]
  std::vector<double> lse;     ///< [Hq, Sq]
  double max_logit_mag = 0.0;  ///< largest sum_e |sm_scale q_e k_e| + |bias|, visible pairs
};

/// Gradients, plus their sums of absolute terms (the rounding scale of each element).
struct SplashBackwardResult {
  std::vector<double> dq, dk, dv, dsinks;  ///< [Hq, Sq, Dqk], [Hkv, Skv, Dqk], [Hkv, Skv, Dv], [Hq]
  std::vector<double> dq_mag, dk_mag, dv_mag, dsinks_mag;
};

/// Dense float64 copy of a splash call's inputs, and the visibility of each (h, r, t).
template <class Allowed>
struct SplashDense {
  std::int64_t hq = 0, hkv = 1, sq = 0, skv = 0, dqk = 0, dv = 0;
  std::vector<double> q, k, v, sinks;  // q [Hq, Sq, Dqk], k [Hkv, Skv, Dqk], v [Hkv, Skv, Dv]
  std::vector<std::int32_t> q_seg, kv_seg;
  double scale = 1.0;
  std::optional<double> soft_cap;
  std::optional<std::int64_t> window;
  std::vector<double> slopes;  // ALiBi, [Hq] or empty
  AlibiConvention alibi = AlibiConvention::kSigned;
  SoftCapOrder order = SoftCapOrder::kCapThenAlibi;
  const Allowed* allowed = nullptr;

  template <class Q, class KV>
  SplashDense(const SplashAttentionArgs<Q, KV>& a, const Allowed& allowed_)
      : hq(a.num_q_heads()),
        hkv(a.is_mqa ? 1 : a.num_kv_heads()),
        sq(a.q_seq_len()),
        skv(a.kv_seq_len()),
        dqk(a.head_dim_qk()),
        dv(a.head_dim_v()),
        scale(static_cast<double>(a.sm_scale)),
        alibi(a.alibi_convention),
        order(a.soft_cap_order),
        allowed(&allowed_) {
    if (a.soft_cap) soft_cap = static_cast<double>(*a.soft_cap);
    window = a.sliding_window;
    if (!a.alibi_slopes.empty_view())
      for (std::int64_t h = 0; h < hq; ++h)
        slopes.push_back(static_cast<double>(a.alibi_slopes(h)));
    for (std::int64_t h = 0; h < hq; ++h)
      for (std::int64_t r = 0; r < sq; ++r)
        for (std::int64_t e = 0; e < dqk; ++e) q.push_back(to_double(a.q(h, r, e)));
    for (std::int64_t h = 0; h < hkv; ++h)
      for (std::int64_t t = 0; t < skv; ++t) {
        for (std::int64_t e = 0; e < dqk; ++e) k.push_back(to_double(a.k(h, t, e)));
        for (std::int64_t e = 0; e < dv; ++e) v.push_back(to_double(a.v(h, t, e)));
      }
    if (a.has_sinks())
      for (std::int64_t h = 0; h < hq; ++h) sinks.push_back(static_cast<double>(a.sinks(h)));
    if (a.has_segment_ids()) {
      for (std::int64_t r = 0; r < sq; ++r) q_seg.push_back(a.q_segment_ids(r));
      for (std::int64_t t = 0; t < skv; ++t) kv_seg.push_back(a.kv_segment_ids(t));
    }
  }

  std::int64_t kv_head(std::int64_t h) const { return h / (hq / hkv); }
  double Q(std::int64_t h, std::int64_t r, std::int64_t e) const {
    return q[static_cast<size_t>((h * sq + r) * dqk + e)];
  }
  double K(std::int64_t h, std::int64_t t, std::int64_t e) const {
    return k[static_cast<size_t>((h * skv + t) * dqk + e)];
  }
  double V(std::int64_t h, std::int64_t t, std::int64_t e) const {
    return v[static_cast<size_t>((h * skv + t) * dv + e)];
  }
  bool visible(std::int64_t h, std::int64_t r, std::int64_t t) const {
    if (!q_seg.empty() && q_seg[static_cast<size_t>(r)] != kv_seg[static_cast<size_t>(t)])
      return false;
    if (window && !(r - *window < t && t <= r)) return false;
    return (*allowed)(h, r, t);
  }
  /// The capped logit at (h, r, t) and the ALiBi bias, in `order`; `th` gets tanh(u / cap) of
  /// the logit u the cap sees (0 without a cap; biased with kAlibiThenCap), `mag` the sum of
  /// |sm_scale * q_e * k_e| (plus |bias|).
  double logit(std::int64_t h, std::int64_t r, std::int64_t t, double* th, double* mag) const {
    double x = 0.0, m = 0.0;
    for (std::int64_t e = 0; e < dqk; ++e) {
      x += Q(h, r, e) * K(kv_head(h), t, e);
      m += std::fabs(Q(h, r, e) * K(kv_head(h), t, e));
    }
    x *= scale;
    *mag = std::fabs(scale) * m;
    *th = 0.0;
    double bias = 0.0;
    if (!slopes.empty()) {
      bias = alibi_bias(slopes[static_cast<size_t>(h)], t, r, alibi);
      *mag += std::fabs(bias);  // rounded in float too: it scales the error like a logit
    }
    if (order == SoftCapOrder::kAlibiThenCap) x += bias;
    if (soft_cap) {
      *th = std::tanh(x / *soft_cap);
      x = *soft_cap * *th;
    }
    return order == SoftCapOrder::kAlibiThenCap ? x : x + bias;
  }
};

/// Plain float64 splash forward.
template <class Q, class KV, class Allowed>
SplashForwardResult splash_forward(const SplashAttentionArgs<Q, KV>& a, const Allowed& allowed) {
  const SplashDense<Allowed> p(a, allowed);
  const double inf = std::numeric_limits<double>::infinity();
  SplashForwardResult f;
  f.out.assign(static_cast<size_t>(p.hq * p.sq * p.dv), 0.0);
  f.reset(f.out.size());
  f.lse.assign(static_cast<size_t>(p.hq * p.sq), -inf);
  std::vector<double> x(static_cast<size_t>(p.skv));
  for (std::int64_t h = 0; h < p.hq; ++h)
    for (std::int64_t r = 0; r < p.sq; ++r) {
      const bool sink = !p.sinks.empty();
      double m = sink ? p.sinks[static_cast<size_t>(h)] : -inf;
      bool any = false;
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.visible(h, r, t)) continue;
        double th = 0.0, mag = 0.0;
        x[static_cast<size_t>(t)] = p.logit(h, r, t, &th, &mag);
        f.max_logit_mag = std::max(f.max_logit_mag, mag);
        const double xt = x[static_cast<size_t>(t)];
        m = (std::isnan(xt) || std::isnan(m)) ? std::nan("") : std::max(m, xt);
        any = true;
      }
      if (!any && !sink) continue;  // nothing visible: out 0, lse -inf
      if (!std::isfinite(m)) {      // NaN / +inf logit, or all -inf: a NaN row
        for (std::int64_t d = 0; d < p.dv; ++d)
          f.out[static_cast<size_t>((h * p.sq + r) * p.dv + d)] = std::nan("");
        f.lse[static_cast<size_t>(h * p.sq + r)] = std::nan("");
        continue;
      }
      double l = sink ? std::exp(p.sinks[static_cast<size_t>(h)] - m) : 0.0;
      for (std::int64_t t = 0; t < p.skv; ++t)
        if (p.visible(h, r, t)) l += std::exp(x[static_cast<size_t>(t)] - m);
      const size_t row = static_cast<size_t>((h * p.sq + r) * p.dv);
      bool first = true;
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.visible(h, r, t)) continue;
        const double w = std::exp(x[static_cast<size_t>(t)] - m) / l;
        for (std::int64_t d = 0; d < p.dv; ++d) {
          const size_t i = row + static_cast<size_t>(d);
          const double v = p.V(p.kv_head(h), t, d);
          f.out[i] += w * v;
          f.add(i, v, first);
        }
        first = false;
      }
      f.lse[static_cast<size_t>(h * p.sq + r)] = m + std::log(l);
    }
  return f;
}

/// Plain float64 splash backward: gradients of sum(out * dout) given the forward's `out`
/// [Hq, Sq, Dv] (the kernel's own, or the oracle's) and `lse` [Hq, Sq].
template <class Q, class KV, class Allowed>
SplashBackwardResult splash_backward(const SplashAttentionArgs<Q, KV>& a, const Allowed& allowed,
                                     const std::vector<double>& out, const std::vector<double>& lse,
                                     const std::vector<double>& dout) {
  const SplashDense<Allowed> p(a, allowed);
  SplashBackwardResult g;
  g.dq.assign(static_cast<size_t>(p.hq * p.sq * p.dqk), 0.0);
  g.dk.assign(static_cast<size_t>(p.hkv * p.skv * p.dqk), 0.0);
  g.dv.assign(static_cast<size_t>(p.hkv * p.skv * p.dv), 0.0);
  g.dsinks.assign(p.sinks.size(), 0.0);
  g.dq_mag = g.dq;
  g.dk_mag = g.dk;
  g.dv_mag = g.dv;
  g.dsinks_mag = g.dsinks;
  for (std::int64_t h = 0; h < p.hq; ++h) {
    const std::int64_t kh = p.kv_head(h);
    for (std::int64_t r = 0; r < p.sq; ++r) {
      const double row_lse = lse[static_cast<size_t>(h * p.sq + r)];
      if (std::isinf(row_lse)) continue;  // nothing visible and no sink: no gradient
      const size_t orow = static_cast<size_t>((h * p.sq + r) * p.dv);
      double di = 0.0, di_mag = 0.0;
      for (std::int64_t d = 0; d < p.dv; ++d) {
        const double od = out[orow + static_cast<size_t>(d)] * dout[orow + static_cast<size_t>(d)];
        di += od;
        di_mag += std::fabs(od);
      }
      if (!p.sinks.empty()) {
        const double e = std::exp(p.sinks[static_cast<size_t>(h)] - row_lse);
        g.dsinks[static_cast<size_t>(h)] -= e * di;
        g.dsinks_mag[static_cast<size_t>(h)] += e * di_mag;
      }
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.visible(h, r, t)) continue;
        double th = 0.0, mag = 0.0;
        const double pr = std::exp(p.logit(h, r, t, &th, &mag) - row_lse);
        double dp = 0.0, dp_mag = 0.0;
        for (std::int64_t d = 0; d < p.dv; ++d) {
          const double gd = dout[orow + static_cast<size_t>(d)];
          const size_t at = static_cast<size_t>((kh * p.skv + t) * p.dv + d);
          g.dv[at] += pr * gd;
          g.dv_mag[at] += pr * std::fabs(gd);
          dp += gd * p.V(kh, t, d);
          dp_mag += std::fabs(gd * p.V(kh, t, d));
        }
        double ds = pr * (dp - di), ds_mag = pr * (dp_mag + di_mag);
        if (p.soft_cap) {
          ds *= 1.0 - th * th;
          ds_mag *= 1.0 - th * th;
        }
        for (std::int64_t e = 0; e < p.dqk; ++e) {
          const size_t qa = static_cast<size_t>((h * p.sq + r) * p.dqk + e);
          const size_t ka = static_cast<size_t>((kh * p.skv + t) * p.dqk + e);
          g.dq[qa] += p.scale * ds * p.K(kh, t, e);
          g.dq_mag[qa] += std::fabs(p.scale * p.K(kh, t, e)) * ds_mag;
          g.dk[ka] += p.scale * ds * p.Q(h, r, e);
          g.dk_mag[ka] += std::fabs(p.scale * p.Q(h, r, e)) * ds_mag;
        }
      }
    }
  }
  return g;
}

}  // namespace reference
}  // namespace attnref
