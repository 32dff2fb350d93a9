// SPDX-License-Identifier: Apache-2.0
/// @file options.hpp
/// Options every family shares, and their checks: JAX's default mask value, the megacore split,
/// soft cap, sliding window, mask value and sm_scale; `check_shared_options` runs every family's
/// safety checks of them and of the per-head options. O(1), no tensor data, no containers.
///
/// Example:
/// @code
///   if (attnref::Status s = attnref::check_soft_cap(args.soft_cap); !s.ok()) ...
///   attnref::check_mask_value(attnref::kDefaultMaskValue);  // ok
/// @endcode
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "attnref/core/status.hpp"
#include "attnref/validate/head_options.hpp"
#include "attnref/validate/logit_conventions.hpp"

namespace attnref {

/// JAX's DEFAULT_MASK_VALUE, -0.7 * float32 max, rounded to float32.
inline constexpr float kDefaultMaskValue = -2.3819763e+38f;

/// JAX's megacore split. No numerical effect; only the `jax` profile checks it (P8..P10).
enum class MegacoreMode : int { kNone = 0, kKvHead = 1, kBatch = 2 };

/// Soft cap: absent, or finite and non-zero. `jax_check` names the JAX check it mirrors, if any
/// (ragged's R8).
inline Status check_soft_cap(const std::optional<float>& soft_cap, const char* jax_check = "") {
  if (soft_cap && (*soft_cap == 0.0f || !std::isfinite(*soft_cap))) {
    return Status(ErrorCode::kInvalidSoftCap, jax_check,
                  "soft_cap={r0} must not be 0.0 and must be finite.",
                  "leave soft_cap unset to turn the soft cap off (JAX's kernel divides by it)", {},
                  {static_cast<double>(*soft_cap)}, "soft_cap");
  }
  return Status();
}

/// Sliding window W (keys `pos - W < t <= pos`): absent, or at least 1. `jax_check` names the
/// JAX check it mirrors, if any (ragged's R7); the text is R7's in every family.
inline Status check_sliding_window(const std::optional<std::int64_t>& window,
                                   const char* jax_check = "") {
  if (window && *window <= 0) {
    return Status(ErrorCode::kInvalidSlidingWindow, jax_check,
                  "sliding_window={0} must be positive.",
                  "a window of w keeps the last w positions, the query's own included; leave it "
                  "unset for full causal attention",
                  {*window}, {}, "sliding_window");
  }
  return Status();
}

/// Mask value: finite and negative (NaN, +-inf, 0 and positive values do not mask).
inline Status check_mask_value(float mask_value) {
  if (!std::isfinite(mask_value) || !(mask_value < 0.0f)) {
    return Status(ErrorCode::kInvalidMaskValue, "",
                  "mask_value={r0} must be a finite negative number.",
                  "use the default -2.3819763e+38 (-0.7 * float32 max)", {},
                  {static_cast<double>(mask_value)}, "mask_value");
  }
  return Status();
}

/// Under the `jax` profile: `given` says an option that the family's JAX kernel does not have
/// was set (ALiBi anywhere; sinks and a sliding window in paged attention; sinks in ragged),
/// so JAX could not run the call. `message_format` names the kernel, a literal such as
/// "JAX's paged_attention has no {f} option."; `field` names the option. All three are
/// literals (a Status stores them).
inline Status check_option_in_jax(bool given, const char* message_format, const char* field,
                                  const char* hint_format =
                                      "drop {f} to ask what JAX's kernel accepts, or check "
                                      "under the reference profile, whose kernels apply it") {
  if (!given) return Status();
  return Status(ErrorCode::kOptionNotInJax, "", message_format, hint_format, {}, {}, field);
}

/// sm_scale: finite.
inline Status check_sm_scale(float sm_scale) {
  if (!std::isfinite(sm_scale)) {
    return Status(ErrorCode::kInvalidScale, "", "sm_scale={r0} must be finite.",
                  "pass 1/sqrt(head_dim) for standard attention, or 1.0 as JAX does", {},
                  {static_cast<double>(sm_scale)}, "sm_scale");
  }
  return Status();
}

namespace detail {

/// The safety checks every family's args share, in this order: mask value, sm_scale, sliding
/// window, the shape of the sinks, the logit conventions, the shape of the ALiBi slopes. A family
/// whose JAX checks came first and already passed the window (ragged's R7) or the sinks
/// (splash's S11) passes them here again.
template <class Args>
Status check_shared_options(const Args& a, std::int64_t num_q_heads) {
  ATTNREF_RETURN_IF_ERROR(check_mask_value(a.mask_value));
  ATTNREF_RETURN_IF_ERROR(check_sm_scale(a.sm_scale));
  ATTNREF_RETURN_IF_ERROR(check_sliding_window(a.sliding_window));
  ATTNREF_RETURN_IF_ERROR(check_sinks_shape(a.sinks, num_q_heads));
  ATTNREF_RETURN_IF_ERROR(check_logit_conventions(a.alibi_convention, a.soft_cap_order));
  return check_alibi_slopes_shape(a.alibi_slopes, num_q_heads);
}

/// Under the `jax` profile: the ALiBi slopes and the logit conventions, which no JAX kernel has
/// (`check_option_in_jax` on each, with the family's `message_format`).
template <class Args>
Status check_alibi_in_jax(const Args& a, const char* message_format) {
  ATTNREF_RETURN_IF_ERROR(
      check_option_in_jax(!a.alibi_slopes.empty_view(), message_format, "alibi_slopes"));
  ATTNREF_RETURN_IF_ERROR(check_option_in_jax(a.alibi_convention != AlibiConvention::kSigned,
                                              message_format, "alibi_convention"));
  return check_option_in_jax(a.soft_cap_order != SoftCapOrder::kCapThenAlibi, message_format,
                             "soft_cap_order");
}

/// Element-wise equality of two extent arrays.
template <std::size_t N>
constexpr bool same_extents(const std::array<std::int64_t, N>& a,
                            const std::array<std::int64_t, N>& b) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// The option checks lived here before they were public; kept for existing callers.
using ::attnref::check_mask_value;
using ::attnref::check_sm_scale;
using ::attnref::check_soft_cap;

}  // namespace detail

}  // namespace attnref
