// SPDX-License-Identifier: Apache-2.0
/// @file online_softmax.hpp
/// The one kernel core shared by the paged, splash and ragged kernels. The logits pipeline, in
/// this order in every family (design.md): scale -> soft cap -> ALiBi (ALiBi -> soft cap with
/// `SoftCapOrder::kAlibiThenCap`) -> visible range (length, causal, window, mask) -> sinks ->
/// softmax and logsumexp.
///  - `LogitTransform`: `x -> cap(scale * x)` with `cap(x) = c tanh(x / c)`, and with a bias
///    (ALiBi) `cap(scale * x) + bias` or, in the order `SoftCapOrder::kAlibiThenCap`,
///    `cap(scale * x + bias)`;
///  - `add_alibi`: the ALiBi bias of one row, `slope * (key_pos - query_pos)` or, with
///    `AlibiConvention::kAbsolute`, `-slope * |key_pos - query_pos|`;
///  - `visible_keys`: the keys a query position may see (causal, optional sliding window);
///  - `start_row`: a row's running (m, l) before any key, empty or with its sink logit;
///  - `fold_logits`: one online-softmax step of one row (flash attention's running max m and sum
///    l), where a logit of -inf may be a masked key with probability exactly 0;
///  - `OnlineSoftmax`: m, l and the unnormalised output o of a block of rows, started empty or
///    from a sink logit (m = sink, l = 1), with its normalisation and logsumexp;
///  - `probabilities_from_lse`: the backward's recomputation of a row of probabilities.
///
/// Non-finite inputs (docs/hostile-inputs.md, "NaN and Inf in live inputs"; the same rule in
/// every family): a row's result is what the plain float64 formula gives under IEEE arithmetic.
/// A NaN or +inf among the row's logits (its visible keys' and its sink) makes the row NaN
/// (output and logsumexp); a -inf logit is a key of weight exactly 0; a row whose logits are all
/// -inf is 0/0, NaN; a row with no logit at all (no visible key, no sink) is 0 with logsumexp
/// -inf. NaN/Inf in a visible V row go through the weighted sum as IEEE does (0 * NaN = NaN).
/// The max below propagates NaN (std::max(m, NaN) is m, which used to zero such rows), and the
/// row's final (m, l) decides: `inverse_sum` and `logsumexp_of`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "attnref/validate/logit_conventions.hpp"

namespace attnref {
namespace detail {

template <class Acc>
using RowMajorMatrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// `x -> cap(scale * x)`, and with a bias `cap(scale * x) + bias` or (`bias_first`)
/// `cap(scale * x + bias)`: the logits of every kernel go through this (a scale of 1 is skipped,
/// which is exact).
template <class Acc>
struct LogitTransform {
  Acc scale = Acc(1);
  bool capped = false;
  Acc cap = Acc(1);
  bool bias_first = false;  ///< SoftCapOrder::kAlibiThenCap: the cap sees the biased logit

  LogitTransform() = default;
  LogitTransform(float sm_scale, const std::optional<float>& soft_cap,
                 SoftCapOrder order = SoftCapOrder::kCapThenAlibi)
      : scale(static_cast<Acc>(sm_scale)),
        capped(soft_cap.has_value()),
        cap(soft_cap ? static_cast<Acc>(*soft_cap) : Acc(1)),
        bias_first(order == SoftCapOrder::kAlibiThenCap) {}

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
  /// The soft cap and a bias in the transform's order, in place; `add_bias(x)` adds the bias
  /// (or nothing). For callers that folded the scale into q.
  template <class X, class AddBias>
  void cap_and_bias(X&& x, AddBias&& add_bias) const {
    if (bias_first) {
      add_bias(x);
      cap_only(x);
    } else {
      cap_only(x);
      add_bias(x);
    }
  }
  /// Scale, then `cap_and_bias`, in place.
  template <class X, class AddBias>
  void apply(X&& x, AddBias&& add_bias) const {
    if (scale != Acc(1)) x *= scale;
    cap_and_bias(x, add_bias);
  }
};

/// Adds the ALiBi bias `slope * (key - query_pos)` (`kAbsolute`: `-slope * |key - query_pos|`)
/// to a row of logits whose element c is key `key0 + c`. A masked logit (-inf) stays -inf. The
/// distance is exact in int64 and rounded once to Acc, so both conventions give the same bits
/// for keys up to the query.
template <class Acc, class Row>
inline void add_alibi(Row&& x, Acc slope, std::int64_t key0, std::int64_t query_pos,
                      AlibiConvention convention = AlibiConvention::kSigned) {
  if (convention == AlibiConvention::kAbsolute) {
    for (Eigen::Index c = 0; c < x.size(); ++c) {
      const std::int64_t d = key0 + static_cast<std::int64_t>(c) - query_pos;
      x(c) -= slope * static_cast<Acc>(d < 0 ? -d : d);
    }
    return;
  }
  for (Eigen::Index c = 0; c < x.size(); ++c)
    x(c) += slope * static_cast<Acc>(key0 + static_cast<std::int64_t>(c) - query_pos);
}

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

/// exp(x - shift) of a row, exactly 0 where x is -inf (a masked key) with `kMayMask`. Eigen's
/// vectorised exp clamps its argument, so exp(-inf) would not be 0; a select over the row is not
/// vectorised (every exp would be scalar), nor is an any(-inf) test (it took half of the splash
/// forward's softmax time). A contiguous row therefore goes packet by packet: exp, then the
/// lanes that held -inf cleared with a compare mask; the tail element by element.
template <bool kMayMask, class Acc, class Row>
inline void exp_shifted(Row&& x, Acc shift) {
  using Eigen::internal::pset1;
  using Packet = typename Eigen::internal::packet_traits<Acc>::type;
  constexpr int W = Eigen::internal::packet_traits<Acc>::size;
  constexpr bool kPackets = std::decay_t<Row>::InnerStrideAtCompileTime == 1 && W > 1 &&
                            Eigen::internal::packet_traits<Acc>::HasExp;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  if constexpr (kPackets) {
    Acc* p = x.data();
    const Eigen::Index n = x.size();
    const Packet shift_p = pset1<Packet>(shift), neg_inf_p = pset1<Packet>(neg_inf);
    Eigen::Index i = 0;
    for (; i + W <= n; i += W) {
      const Packet v = Eigen::internal::ploadu<Packet>(p + i);
      Packet e = Eigen::internal::pexp(Eigen::internal::psub(v, shift_p));
      if constexpr (kMayMask)
        e = Eigen::internal::pandnot(e, Eigen::internal::pcmp_eq(v, neg_inf_p));
      Eigen::internal::pstoreu(p + i, e);
    }
    for (; i < n; ++i) p[i] = kMayMask && p[i] == neg_inf ? Acc(0) : std::exp(p[i] - shift);
  } else if (kMayMask && (x.array() == neg_inf).any()) {
    x = (x.array() == neg_inf).select(Acc(0), (x.array() - shift).exp()).matrix();
  } else {
    x = (x.array() - shift).exp().matrix();
  }
}

/// max(a, b), NaN when either is NaN (std::max(a, NaN) is a: a NaN logit would be dropped).
template <class Acc>
inline Acc max_or_nan(Acc a, Acc b) noexcept {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<Acc>::quiet_NaN();
  return std::max(a, b);
}

/// The largest logit of a row, NaN when one is NaN. A contiguous row goes packet by packet
/// with two short chains, a plain max and an OR of the lanes that are NaN (the NaN-propagating
/// max is a compare and a blend after the max, all on the chain), in two pairs of accumulators;
/// then one test and a reduction by shuffles (Eigen's `maxCoeff<PropagateNaN>` reduces its last
/// packet element by element: about 30% of `fold_logits`' samples on 8-bit decode).
template <class Acc, class Row>
inline Acc max_logit(const Row& x) {
  using Packet = typename Eigen::internal::packet_traits<Acc>::type;
  constexpr int W = Eigen::internal::packet_traits<Acc>::size;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  if constexpr (std::decay_t<Row>::InnerStrideAtCompileTime == 1 && W > 1) {
    using Eigen::internal::pcmp_lt_or_nan;  // x < x or unordered: the NaN lanes
    using Eigen::internal::pmax;            // the max of the lanes that are not NaN
    using Eigen::internal::por;
    const Acc* p = x.data();
    const Eigen::Index n = x.size();
    Eigen::Index i = 0;
    Acc m = neg_inf;
    if (n >= W) {
      Packet max0 = Eigen::internal::ploadu<Packet>(p), max1 = max0;
      Packet nan0 = pcmp_lt_or_nan(max0, max0), nan1 = nan0;
      for (i = W; i + 2 * W <= n; i += 2 * W) {
        const Packet a = Eigen::internal::ploadu<Packet>(p + i);
        const Packet b = Eigen::internal::ploadu<Packet>(p + i + W);
        max0 = pmax(max0, a);
        max1 = pmax(max1, b);
        nan0 = por(nan0, pcmp_lt_or_nan(a, a));
        nan1 = por(nan1, pcmp_lt_or_nan(b, b));
      }
      if (i + W <= n) {
        const Packet a = Eigen::internal::ploadu<Packet>(p + i);
        max0 = pmax(max0, a);
        nan0 = por(nan0, pcmp_lt_or_nan(a, a));
        i += W;
      }
      if (Eigen::internal::predux_any(por(nan0, nan1)))
        return std::numeric_limits<Acc>::quiet_NaN();
      m = Eigen::internal::predux_max(pmax(max0, max1));
    }
    for (; i < n; ++i) m = max_or_nan(m, p[i]);
    return m;
  } else {
    return x.size() == 0 ? neg_inf : x.template maxCoeff<Eigen::PropagateNaN>();
  }
}

/// One online-softmax step of one row: folds the logits `x` into the running max `m` and sum
/// `l`, leaves exp(x - m_new) in `x` and returns the factor by which the row's old output must
/// be scaled. With `kMayMask` a logit of -inf is a masked key with probability exactly 0 (splash
/// masks inside a tile); the paged and ragged kernels pass only visible keys. A row whose logits
/// so far are all -inf (or none) is left as it is (factor 1). A NaN or +inf logit makes m NaN or
/// +inf for good (the max propagates NaN, vectorised), which `inverse_sum` turns into a NaN row.
template <bool kMayMask, class Acc, class Row>
inline Acc fold_logits(Row&& x, Acc& m, Acc& l) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const Acc m_new = max_or_nan(m, max_logit<Acc>(x));
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

/// The factor that normalises a row with final running max m and sum l: 1 / l when m is
/// finite; 0 for a row without logits (`has_logits` false: no visible key and no sink; its
/// output is 0); NaN when m is NaN or +inf (a NaN or +inf logit), or -inf for a row that had
/// logits (all -inf: 0/0). Decided on m, not l, so no step of the fold needs a branch per
/// element.
template <class Acc>
inline Acc inverse_sum(Acc m, Acc l, bool has_logits) noexcept {
  if (std::isfinite(m)) return Acc(1) / l;
  if (m == -std::numeric_limits<Acc>::infinity() && !has_logits) return Acc(0);
  return std::numeric_limits<Acc>::quiet_NaN();
}

/// The natural logsumexp m + log(l) when m is finite; -inf for a row without logits; NaN
/// otherwise (as `inverse_sum`).
template <class Acc>
inline float logsumexp_of(Acc m, Acc l, bool has_logits) noexcept {
  if (std::isfinite(m)) return static_cast<float>(m + std::log(l));
  if (m == -std::numeric_limits<Acc>::infinity() && !has_logits)
    return -std::numeric_limits<float>::infinity();
  return std::numeric_limits<float>::quiet_NaN();
}

/// The backward's probabilities of one row from the forward's logsumexp: exp(x - lse), 0 where
/// masked (-inf) and for a row with no visible key (lse = -inf: no gradient); NaN where not
/// -inf for a NaN row (lse NaN), written out rather than left to the vectorised exp (the caller
/// knows which -inf are masked and which came from the data).
template <class Acc, class Row, class Out>
inline void probabilities_from_lse(const Row& x, Acc lse, Out&& p) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  if (lse == neg_inf) {
    p.setZero();
    return;
  }
  if (std::isnan(lse)) {
    for (Eigen::Index c = 0; c < x.size(); ++c)
      p(c) = x(c) == neg_inf ? Acc(0) : std::numeric_limits<Acc>::quiet_NaN();
    return;
  }
  p = x;
  exp_shifted<true>(p, lse);
}

/// The running max and sum of a row before any key: m = -inf, l = 0; with a sink logit `sink`
/// (one extra logit whose value row is zero) m = sink, l = 1. A NaN sink makes the row NaN.
template <class Acc>
inline void start_row(Acc& m, Acc& l, const Acc* sink) noexcept {
  m = sink ? *sink : -std::numeric_limits<Acc>::infinity();
  l = sink ? Acc(1) : Acc(0);
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
  /// Row r starts from the sink logit `sink` (see `start_row`); its output stays 0.
  void start_with_sink(Eigen::Index r, Acc sink) noexcept { start_row(m[r], l[r], &sink); }
  /// Folds a tile of logits `scores` [rows, n] (with `kMayMask`, -inf: masked) and rescales o;
  /// `scores` become the tile's probabilities relative to the new max, for the caller to add
  /// `scores * V` to o.
  template <bool kMayMask, class Scores>
  void fold(Scores& scores) {
    for (Eigen::Index r = 0; r < scores.rows(); ++r)
      rescale_row(r, fold_row<kMayMask>(r, scores.row(r)));
  }
  /// `fold` of row r alone, leaving o as it is: returns the factor for `rescale_row` (a kernel
  /// that adds the previous tile's values to o after folding the next tile's logits).
  template <bool kMayMask, class Row>
  Acc fold_row(Eigen::Index r, Row&& x) {
    return fold_logits<kMayMask>(std::forward<Row>(x), m[r], l[r]);
  }
  /// Row r of o times the factor `fold_row` returned.
  void rescale_row(Eigen::Index r, Acc alpha) {
    if (alpha != Acc(1)) o.row(r) *= alpha;
  }
  /// See `inverse_sum`; `has_logits`: row r had a visible key or a sink.
  Acc inverse_sum_of(Eigen::Index r, bool has_logits) const noexcept {
    return inverse_sum(m[r], l[r], has_logits);
  }
  float logsumexp(Eigen::Index r, bool has_logits) const noexcept {
    return logsumexp_of(m[r], l[r], has_logits);
  }
};

}  // namespace detail
}  // namespace attnref
