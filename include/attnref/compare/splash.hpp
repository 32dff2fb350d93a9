// SPDX-License-Identifier: Apache-2.0
/// @file compare/splash.hpp
/// Compares a user's splash attention output (and logsumexp) with attnref's reference and says
/// where it differs and why (compare/report.hpp, compare/hypotheses.hpp). Rows are localized
/// one by one; the causal diagonal and local window hypotheses need the mask's parameters
/// (`SplashMaskParams`), which a `MultiHeadMask` does not expose.
///
/// Example:
/// @code
///   attnref::compare::SplashMaskParams causal;
///   causal.kind = attnref::compare::SplashMaskParams::Kind::kCausal;
///   attnref::compare::Report r;
///   attnref::Status s =
///       attnref::compare::try_compare_splash(args, mask, causal, got, {}, {}, &r);
/// @endcode
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnref/compare/hypotheses.hpp"
#include "attnref/compare/report.hpp"
#include "attnref/core/status.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"

namespace attnref {
namespace compare {

/// What the mask is, when it is a causal or local mask.
struct SplashMaskParams {
  enum class Kind { kOther, kCausal, kLocal };
  Kind kind = Kind::kOther;
  std::int64_t offset = 0;
  std::optional<std::int64_t> left, right;  ///< kLocal
  /// The mask with `offset` and `left` replaced where given.
  MultiHeadMask make(MaskShape shape, std::optional<std::int64_t> new_offset,
                     std::optional<std::int64_t> new_left) const {
    const std::int64_t o = new_offset ? *new_offset : offset;
    if (kind == Kind::kCausal) return MultiHeadMask{CausalMask{shape, o}};
    return MultiHeadMask{LocalMask{shape, new_left ? new_left : left, right, o}};
  }
};

/// The `[num_q_heads, q_seq_len, head_dim_v]` output shape of splash attention: one sequence
/// whose row r sits at key position r + offset.
template <class Q, class KV>
OutputShape splash_output_shape(const SplashAttentionArgs<Q, KV>& a, std::int64_t offset) {
  OutputShape s;
  s.heads = a.num_q_heads();
  s.dim = a.head_dim_v();
  s.head_major = true;
  for (std::int64_t r = 0; r < a.q_seq_len(); ++r)
    s.rows.push_back({0, r + offset, RowKind::kPlain});
  return s;
}

/// Compares `got` ([num_q_heads, q_seq_len, head_dim_v], C order) and, when not empty,
/// `got_lse` ([num_q_heads, q_seq_len]) with the reference for `a` and `mask` and writes the
/// report. `params` describes `mask` when it is a causal or local mask (its diagonal and window
/// hypotheses). Validates (reference profile) and the sizes first; on error `report` is
/// untouched.
/// A call run as an item of a `StoppableExecutor` (an interactive interrupt) returns early once
/// it stops, `report` untouched; under any other executor it runs to the end.
template <class Q, class KV>
Status try_compare_splash(const SplashAttentionArgs<Q, KV>& a, const MultiHeadMask& mask,
                          const SplashMaskParams& params, const std::vector<double>& got,
                          const std::vector<double>& got_lse, const Options& opt, Report* report) {
  ATTNREF_RETURN_IF_ERROR(check_splash(a, mask, Profile::kReference));
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dv = a.head_dim_v();
  ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got.size(), hq * sq * dv, "got"));
  if (!got_lse.empty())
    ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got_lse.size(), hq * sq, "got_lse"));
  // `a` is checked: the reference runs from a plan without checking it again, into outputs
  // sized here.
  SplashPlan<Q, KV> plan;
  plan.args = a;
  ATTNREF_RETURN_IF_ERROR(build_mask_info(mask, a.block_sizes.block_q, a.block_sizes.block_kv,
                                          Profile::kReference, &plan.info, a.sharding));
  std::vector<Q> ref(static_cast<std::size_t>(hq * sq * dv));
  std::vector<float> ref_lse(static_cast<std::size_t>(hq * sq));
  splash_attention_unchecked(plan, TensorView<Q, 3>(ref.data(), {hq, sq, dv}),
                             TensorView<float, 2>(ref_lse.data(), {hq, sq}));
  if (attnref::detail::stop_requested()) return Status();  // `ref` is incomplete
  Report r;
  const bool diagonal = params.kind != SplashMaskParams::Kind::kOther;
  const OutputShape shape = splash_output_shape(a, diagonal ? params.offset : 0);
  const RowErrors e = detail::tally_reference(shape, got, ref, got_lse, ref_lse, opt, &r);
  if (r.ok()) {
    *report = r;
    return Status();
  }

  Features f = detail::common_features(a, a.head_dim_qk(), got_lse);
  if (diagonal) f.splash_offset = params.offset;
  f.q_seq_len = sq;
  f.kv_seq_len = a.kv_seq_len();
  if (params.kind == SplashMaskParams::Kind::kLocal) f.local_left = params.left;
  f.swap_first = a.head_dim_qk() == a.head_dim_v() ? "k" : "";  // else K and V cannot swap
  f.swap_second = "v";

  const Subset subset = pick_subset(
      shape, e,
      [&](std::int64_t) {
        return saturating_mul(saturating_mul(sq, a.kv_seq_len()), a.head_dim_qk());
      },
      opt, &r);
  const Predict predict = [&](const Change& c, const Subset& s, std::vector<double>* out,
                              std::vector<double>* lse, std::string* why) {
    const auto nh = static_cast<std::int64_t>(s.heads.size());
    std::vector<Q> o(static_cast<std::size_t>(sq * dv));
    std::vector<float> l(static_cast<std::size_t>(sq));
    out->assign(static_cast<std::size_t>(nh * sq * dv), 0.0);
    lse->assign(static_cast<std::size_t>(nh * sq), 0.0);
    for (std::int64_t hi = 0; hi < nh; ++hi) {
      const std::int64_t qh = s.heads[static_cast<std::size_t>(hi)];
      const std::int64_t kv_head = detail::kv_head_of(c, qh, hq, a.num_kv_heads());
      SplashAttentionArgs<Q, KV> b = a;
      b.q = one_head(a.q, qh);
      b.k = one_head(c.swap_kv ? a.v : a.k, kv_head);
      b.v = one_head(c.swap_kv ? a.k : a.v, kv_head);
      detail::set_head_options(a, qh, c, &b);
      b.sharding = MaskSharding{};
      const MultiHeadMask m =
          c.diagonal_offset || c.local_left
              ? params.make(MaskShape{sq, a.kv_seq_len()}, c.diagonal_offset, c.local_left)
              : MultiHeadMask{mask.head(mask.num_heads() == 1 ? 0 : qh)};
      const Status st = try_splash_attention(b, m, TensorView<Q, 3>(o.data(), {1, sq, dv}),
                                             TensorView<float, 2>(l.data(), {1, sq}));
      if (!st.ok()) {
        *why = st.message();
        return false;
      }
      for (std::int64_t i = 0; i < sq * dv; ++i)
        (*out)[static_cast<std::size_t>(hi * sq * dv + i)] =
            detail::value_of(o[static_cast<std::size_t>(i)]);
      for (std::int64_t i = 0; i < sq; ++i)
        (*lse)[static_cast<std::size_t>(hi * sq + i)] = l[static_cast<std::size_t>(i)];
    }
    return true;
  };
  try_changes(candidate_changes(f), shape, subset, got, got_lse, opt, predict, &r);
  if (!attnref::detail::stop_requested()) *report = r;
  return Status();
}

}  // namespace compare
}  // namespace attnref
