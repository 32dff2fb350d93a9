// SPDX-License-Identifier: Apache-2.0
/// @file online_softmax.hpp
/// The one kernel core shared by the paged, splash and ragged kernels:
///  - `LogitTransform`: the logits pipeline, `x -> cap(scale * x)` with `cap(x) = c tanh(x / c)`;
///  - `visible_keys`: the keys a query position may see (causal, optional sliding window);
///  - `fold_logits`: one online-softmax step of one row (flash attention's running max m and sum
///    l), where a logit of -inf may be a masked key with probability exactly 0;
///  - `OnlineSoftmax`: m, l and the unnormalised output o of a block of rows, started empty or
///    from a sink logit (m = sink, l = 1), with its normalisation and logsumexp;
///  - `probabilities_from_lse`: the backward's recomputation of a row of probabilities.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <Eigen/Core>

namespace attnref {
namespace detail {

template <class Acc>
using RowMajorMatrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// `x -> cap(scale * x)`: the logits of every kernel go through this (a scale of 1 is skipped,
/// which is exact).
template <class Acc>
struct LogitTransform {
  Acc scale = Acc(1);
  bool capped = false;
  Acc cap = Acc(1);

  LogitTransform() = default;
  LogitTransform(float sm_scale, const std::optional<float>& soft_cap)
      : scale(static_cast<Acc>(sm_scale)),
        capped(soft_cap.has_value()),
        cap(soft_cap ? static_cast<Acc>(*soft_cap) : Acc(1)) {}

  /// Applies the soft cap only (for callers that folded the scale into q).
  template <class X>
  void cap_only(X&& x) const {
    if (capped) x = (x.array() / cap).tanh().matrix() * cap;
  }
  /// Scale, then soft cap, in place.
  template <class X>
  void apply(X&& x) const {
    if (scale != Acc(1)) x *= scale;
    cap_only(x);
  }
};

/// A half-open key range [lo, hi).
struct KeyRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::int64_t size() const noexcept { return hi > lo ? hi - lo : 0; }
};

/// Keys visible from query position `pos` within [lo, hi): t <= pos, and with a sliding window
/// W also t > pos - W (design.md: `pos - W < t <= pos`).
inline KeyRange visible_keys(std::int64_t pos, const std::optional<std::int64_t>& window,
                             std::int64_t lo, std::int64_t hi) noexcept {
  KeyRange r;
  r.hi = std::min(hi, pos + 1);
  r.lo = window ? std::max(lo, pos - *window + 1) : lo;
  return r;
}

/// exp(x - shift) of a row, exactly 0 where x is -inf (a masked key). Eigen's vectorised exp
/// clamps its argument, so exp(-inf) would not be 0, and a select is not vectorised (it would
/// make every exp scalar): rows without a masked key take the vectorised path.
template <bool kMayMask, class Acc, class Row>
inline void exp_shifted(Row&& x, Acc shift) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  if (kMayMask && (x.array() == neg_inf).any()) {
    x = (x.array() == neg_inf).select(Acc(0), (x.array() - shift).exp()).matrix();
  } else {
    x = (x.array() - shift).exp().matrix();
  }
}

/// One online-softmax step of one row: folds the logits `x` into the running max `m` and sum
/// `l`, leaves exp(x - m_new) in `x` and returns the factor by which the row's old output must
/// be scaled. With `kMayMask` a logit of -inf is a masked key with probability exactly 0 (splash
/// masks inside a tile); the paged and ragged kernels pass only visible keys. A row with nothing
/// visible so far is left as it is (factor 1).
template <bool kMayMask, class Acc, class Row>
inline Acc fold_logits(Row&& x, Acc& m, Acc& l) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const Acc m_new = std::max(m, x.maxCoeff());
  if (m_new == neg_inf) {
    x.setZero();
    return Acc(1);
  }
  const Acc alpha = std::exp(m - m_new);  // exp(-inf) = 0 on the first step
  exp_shifted<kMayMask>(x, m_new);
  l = alpha * l + x.sum();
  m = m_new;
  return alpha;
}

/// 1 / l, or 0 for a row that saw nothing (its output is 0).
template <class Acc>
inline Acc inverse_sum(Acc l) noexcept {
  return l > Acc(0) ? Acc(1) / l : Acc(0);
}

/// The natural logsumexp m + log(l), or -inf for a row that saw nothing (and no sink).
template <class Acc>
inline float logsumexp_of(Acc m, Acc l) noexcept {
  return l > Acc(0) ? static_cast<float>(m + std::log(l)) : -std::numeric_limits<float>::infinity();
}

/// The backward's probabilities of one row from the forward's logsumexp: exp(x - lse), 0 where
/// masked (-inf) and for a row with no visible key (lse = -inf: no gradient).
template <class Acc, class Row, class Out>
inline void probabilities_from_lse(const Row& x, Acc lse, Out&& p) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  if (lse == neg_inf) {
    p.setZero();
    return;
  }
  p = x;
  exp_shifted<true>(p, lse);
}

/// Online-softmax state of `rows` query rows with value dimension `dim_v`.
template <class Acc>
struct OnlineSoftmax {
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> m;  ///< [rows] running max of the logits
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> l;  ///< [rows] running sum of exp(logit - m)
  RowMajorMatrix<Acc> o;                    ///< [rows, dim_v] running sum of exp(logit - m) * v

  /// Nothing seen: m = -inf, l = 0, o = 0.
  void reset(std::int64_t rows, std::int64_t dim_v) {
    m.setConstant(rows, -std::numeric_limits<Acc>::infinity());
    l.setZero(rows);
    o.setZero(rows, dim_v);
  }
  /// A sink logit seen (one extra logit with a zero value row): m = sink, l = 1, o = 0.
  void reset(std::int64_t rows, std::int64_t dim_v, Acc sink) {
    m.setConstant(rows, sink);
    l.setOnes(rows);
    o.setZero(rows, dim_v);
  }
  /// Folds a tile of logits `scores` [rows, n] (with `kMayMask`, -inf: masked) and rescales o;
  /// `scores` become the tile's probabilities relative to the new max, for the caller to add
  /// `scores * V` to o.
  template <bool kMayMask, class Scores>
  void fold(Scores& scores) {
    for (Eigen::Index r = 0; r < scores.rows(); ++r) {
      const Acc alpha = fold_logits<kMayMask>(scores.row(r), m[r], l[r]);
      if (alpha != Acc(1)) o.row(r) *= alpha;
    }
  }
  Acc inverse_sum_of(Eigen::Index r) const noexcept { return inverse_sum(l[r]); }
  float logsumexp(Eigen::Index r) const noexcept { return logsumexp_of(m[r], l[r]); }
};

}  // namespace detail
}  // namespace attnref
