// SPDX-License-Identifier: Apache-2.0
/// @file logit_conventions.hpp
/// Where engines give ALiBi and the soft cap different meanings, as options of every family's
/// args (the reference kernels compute each), and their check:
///  - `AlibiConvention`: the bias `slope * (key_pos - query_pos)` (signed, attnref's default) or
///    `-slope * |key_pos - query_pos|` (absolute, FlashAttention-2 without a causal mask). They
///    differ only for keys right of the query, which a causal mask hides;
///  - `SoftCapOrder`: the soft cap before ALiBi, `c * tanh(s / c) + bias` (attnref's default),
///    or after it, `c * tanh((s + bias) / c)` (FlashInfer's DefaultAttention); `s` is the scaled
///    logit `sm_scale * q.k`.
///
/// Example:
/// @code
///   args.alibi_convention = attnref::AlibiConvention::kAbsolute;  // FlashAttention-2
///   args.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;    // FlashInfer
/// @endcode
#pragma once

#include "attnref/core/status.hpp"

namespace attnref {

/// How ALiBi biases a logit.
enum class AlibiConvention : int {
  kSigned,    ///< `slope * (key_pos - query_pos)` (attnref, FlashInfer, vLLM paged)
  kAbsolute,  ///< `-slope * |key_pos - query_pos|` (FlashAttention-2, non-causal)
};

/// Which comes first when a layer has both a soft cap and ALiBi.
enum class SoftCapOrder : int {
  kCapThenAlibi,  ///< `c * tanh(s / c) + bias` (attnref, FlashAttention-2)
  kAlibiThenCap,  ///< `c * tanh((s + bias) / c)` (FlashInfer's DefaultAttention)
};

/// Both conventions are enumerators (a value cast from an integer may be neither).
constexpr Status check_logit_conventions(AlibiConvention alibi, SoftCapOrder order) noexcept {
  const int a = static_cast<int>(alibi), o = static_cast<int>(order);
  if (a != static_cast<int>(AlibiConvention::kSigned) &&
      a != static_cast<int>(AlibiConvention::kAbsolute)) {
    return Status(ErrorCode::kInvalidConvention, "",
                  "alibi_convention must be one of [signed, absolute]. Got {0}.",
                  "use AlibiConvention::kSigned or AlibiConvention::kAbsolute", {a}, {},
                  "alibi_convention");
  }
  if (o != static_cast<int>(SoftCapOrder::kCapThenAlibi) &&
      o != static_cast<int>(SoftCapOrder::kAlibiThenCap)) {
    return Status(ErrorCode::kInvalidConvention, "",
                  "soft_cap_order must be one of [cap_then_alibi, alibi_then_cap]. Got {0}.",
                  "use SoftCapOrder::kCapThenAlibi or SoftCapOrder::kAlibiThenCap", {o}, {},
                  "soft_cap_order");
  }
  return Status();
}

}  // namespace attnref
