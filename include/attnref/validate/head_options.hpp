// SPDX-License-Identifier: Apache-2.0
/// @file head_options.hpp
/// Options with one value per query head, shared by every family, and their checks:
///  - attention sinks `[num_q_heads]` (f32): one extra logit per head in the softmax
///    denominator, with no value row. Shape here; NaN/Inf only in the opt-in data tier, as
///    splash has always done (a NaN sink makes its rows NaN, the rule of bad data);
///  - ALiBi slopes `[num_q_heads]` (f32): the bias `slope[qh] * (key_pos - query_pos)` added
///    after the soft cap (the args' `alibi_convention` and `soft_cap_order` select an engine's
///    variant: logit_conventions.hpp). Shape here (O(1)); finiteness in the metadata tier
///    (O(Hq)): a non-finite slope is not data a layer produced but a wrong configuration.
///
/// Example:
/// @code
///   if (attnref::Status s = attnref::check_alibi_slopes_shape(args.alibi_slopes, 8); !s.ok())
///     ...
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>

#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// Sinks: empty, or a valid `[num_q_heads]` view. `jax_check`: splash's S11; none elsewhere.
inline Status check_sinks_shape(const TensorView<const float, 1>& sinks, std::int64_t num_q_heads,
                                const char* jax_check = "") {
  if (sinks.empty_view()) return Status();
  if (sinks.extents[0] != num_q_heads) {
    return Status(ErrorCode::kSinksShape, jax_check,
                  "sinks must have shape ({1},), one logit per query head. Got ({0},).",
                  "one attention-sink logit per query head (gpt-oss, vLLM `sinks`)",
                  {sinks.extents[0], num_q_heads});
  }
  return check_view(sinks, "sinks");
}

/// Sinks, values (data tier): every sink finite. Precondition: `check_sinks_shape` passed.
inline Status check_sink_values(const TensorView<const float, 1>& sinks) {
  if (sinks.empty_view()) return Status();
  for (std::int64_t h = 0; h < sinks.extents[0]; ++h) {
    if (!std::isfinite(sinks(h))) {
      return Status(ErrorCode::kNonFiniteData, "", "sinks[{0}] is not finite",
                    "an attention-sink logit is NaN/Inf; every query head's sink enters its "
                    "softmax",
                    {h}, {}, "sinks");
    }
  }
  return Status();
}

/// ALiBi slopes, shape: empty, or a valid `[num_q_heads]` view.
inline Status check_alibi_slopes_shape(const TensorView<const float, 1>& slopes,
                                       std::int64_t num_q_heads) {
  if (slopes.empty_view()) return Status();
  if (slopes.extents[0] != num_q_heads) {
    return Status(ErrorCode::kAlibiSlopesShape, "",
                  "alibi_slopes must have shape ({1},), one slope per query head. Got ({0},).",
                  "ALiBi takes one slope per query head (vLLM's and FlashInfer's alibi_slopes)",
                  {slopes.extents[0], num_q_heads}, {}, "alibi_slopes");
  }
  return check_view(slopes, "alibi_slopes");
}

/// ALiBi slopes, values: every slope finite. Precondition: `check_alibi_slopes_shape` passed.
inline Status check_alibi_slope_values(const TensorView<const float, 1>& slopes) {
  if (slopes.empty_view()) return Status();
  for (std::int64_t h = 0; h < slopes.extents[0]; ++h) {
    if (!std::isfinite(slopes(h))) {
      return Status(ErrorCode::kInvalidAlibiSlope, "", "alibi_slopes[{0}]={r0} must be finite.",
                    "ALiBi slopes are small positive numbers, e.g. 2^(-8 h / num_heads)", {h},
                    {static_cast<double>(slopes(h))}, "alibi_slopes");
    }
  }
  return Status();
}

}  // namespace attnref
