// SPDX-License-Identifier: Apache-2.0
// Test-only: a plain float64 splash attention written from the spec's dense math (§2.5, §2.6,
// §2.7), independent of the library's kernels, used by the differential tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

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

/// Dense row-major problem in double: q [Hq,Sq,Dqk], k [Hkv,Skv,Dqk], v [Hkv,Skv,Dv].
struct Problem {
  std::int64_t hq = 1, hkv = 1, sq = 1, skv = 1, dqk = 1, dv = 1;
  std::vector<double> q, k, v;
  std::vector<std::int32_t> q_seg, kv_seg;  // empty: none
  std::vector<double> sinks;                // empty: none
  double soft_cap = 0;                      // 0: none
  double scale = 1;
  std::function<bool(std::int64_t h, std::int64_t r, std::int64_t t)> allowed;  // mask only

  double& Q(std::int64_t h, std::int64_t r, std::int64_t d) { return q[(h * sq + r) * dqk + d]; }
  double& K(std::int64_t h, std::int64_t t, std::int64_t d) { return k[(h * skv + t) * dqk + d]; }
  double& V(std::int64_t h, std::int64_t t, std::int64_t d) { return v[(h * skv + t) * dv + d]; }
  std::int64_t kv_head(std::int64_t h) const { return h / (hq / hkv); }
  bool ok(std::int64_t h, std::int64_t r, std::int64_t t) const {
    if (!q_seg.empty() && q_seg[r] != kv_seg[t]) return false;
    return allowed(h, r, t);
  }
  /// Capped logit (x) and tanh(xu / c) (d) at (h, r, t).
  double logit(std::int64_t h, std::int64_t r, std::int64_t t, double* d = nullptr) {
    double x = 0;
    for (std::int64_t e = 0; e < dqk; ++e) x += Q(h, r, e) * K(kv_head(h), t, e);
    x *= scale;
    if (soft_cap != 0) {
      const double th = std::tanh(x / soft_cap);
      if (d) *d = th;
      x = soft_cap * th;
    }
    return x;
  }
};

struct Forward {
  std::vector<double> out;  // [Hq,Sq,Dv]
  std::vector<double> lse;  // [Hq,Sq]
};

inline Forward forward(Problem& p) {
  Forward f;
  f.out.assign(p.hq * p.sq * p.dv, 0.0);
  f.lse.assign(p.hq * p.sq, -std::numeric_limits<double>::infinity());
  for (std::int64_t h = 0; h < p.hq; ++h)
    for (std::int64_t r = 0; r < p.sq; ++r) {
      std::vector<double> x(p.skv);
      double m = -std::numeric_limits<double>::infinity();
      bool any = false;
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.ok(h, r, t)) continue;
        x[t] = p.logit(h, r, t);
        m = std::max(m, x[t]);
        any = true;
      }
      const bool sink = !p.sinks.empty();
      if (!any && !sink) continue;  // no allowed key: out 0, lse -inf
      if (sink) m = std::max(m, p.sinks[h]);
      double l = sink ? std::exp(p.sinks[h] - m) : 0.0;
      for (std::int64_t t = 0; t < p.skv; ++t)
        if (p.ok(h, r, t)) l += std::exp(x[t] - m);
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.ok(h, r, t)) continue;
        const double w = std::exp(x[t] - m) / l;
        for (std::int64_t d = 0; d < p.dv; ++d)
          f.out[(h * p.sq + r) * p.dv + d] += w * p.V(p.kv_head(h), t, d);
      }
      f.lse[h * p.sq + r] = m + std::log(l);
    }
  return f;
}

struct Backward {
  std::vector<double> dq, dk, dv, dsinks;
};

/// Gradients of sum(out * dout), from the dense formulas.
inline Backward backward(Problem& p, const Forward& f, const std::vector<double>& dout) {
  Backward b;
  b.dq.assign(p.hq * p.sq * p.dqk, 0.0);
  b.dk.assign(p.hkv * p.skv * p.dqk, 0.0);
  b.dv.assign(p.hkv * p.skv * p.dv, 0.0);
  b.dsinks.assign(p.sinks.size(), 0.0);
  for (std::int64_t h = 0; h < p.hq; ++h) {
    const std::int64_t kh = p.kv_head(h);
    for (std::int64_t r = 0; r < p.sq; ++r) {
      const double lse = f.lse[h * p.sq + r];
      if (std::isinf(lse)) continue;
      const double* o = &f.out[(h * p.sq + r) * p.dv];
      const double* g = &dout[(h * p.sq + r) * p.dv];
      double di = 0;
      for (std::int64_t d = 0; d < p.dv; ++d) di += o[d] * g[d];
      if (!p.sinks.empty()) b.dsinks[h] -= std::exp(p.sinks[h] - lse) * di;
      for (std::int64_t t = 0; t < p.skv; ++t) {
        if (!p.ok(h, r, t)) continue;
        double th = 0;
        const double x = p.logit(h, r, t, &th);
        const double pr = std::exp(x - lse);
        double dp = 0;
        for (std::int64_t d = 0; d < p.dv; ++d) {
          b.dv[(kh * p.skv + t) * p.dv + d] += pr * g[d];
          dp += g[d] * p.V(kh, t, d);
        }
        double ds = pr * (dp - di);
        if (p.soft_cap != 0) ds *= 1 - th * th;
        for (std::int64_t e = 0; e < p.dqk; ++e) {
          b.dq[(h * p.sq + r) * p.dqk + e] += p.scale * ds * p.K(kh, t, e);
          b.dk[(kh * p.skv + t) * p.dqk + e] += p.scale * ds * p.Q(h, r, e);
        }
      }
    }
  }
  return b;
}

/// Fills `x` with uniform values in [lo, hi).
inline void fill(std::vector<double>& x, std::size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  x.resize(n);
  for (auto& e : x) e = u(rng);
}

}  // namespace splash_ref
