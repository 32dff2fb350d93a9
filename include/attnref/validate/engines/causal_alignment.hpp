// SPDX-License-Identifier: Apache-2.0
/// @file causal_alignment.hpp
/// Where a causal mask puts its diagonal when a request has more keys than queries (a chunked
/// prefill, a cached prefix): query row i of q_len sees keys t <= kv_len - q_len + i
/// (bottom-right: the queries are the last q_len of the kv_len tokens) or t <= i (top-left).
/// They agree when q_len == kv_len. The reference kernels compute both: splash's
/// `CausalMask{shape, offset}` with the offset `causal_mask_offset` gives, the ragged kernel
/// bottom-right.
///
/// Example:
/// @code
///   const attnref::CausalMask mask{
///       {q_len, kv_len}, attnref::causal_mask_offset(attnref::CausalAlignment::kBottomRight,
///                                                     q_len, kv_len)};  // FlashAttention-2
/// @endcode
#pragma once

#include <cstdint>

namespace attnref {

/// Which corner of the (q_len, kv_len) score matrix a causal mask's diagonal ends in.
enum class CausalAlignment : int {
  /// Row i sees t <= kv_len - q_len + i (FlashAttention-2 since v2.1, FlashAttention-3,
  /// FlashInfer, vLLM, FlashMLA, JAX's ragged paged attention; decode by construction).
  kBottomRight,
  /// Row i sees t <= i (FlashAttention-2 before v2.1, PyTorch SDPA's is_causal=True, splash's
  /// `CausalMask` with offset 0).
  kTopLeft,
};

/// The offset of splash's `CausalMask` (`q + offset >= kv`) that aligns it as `a` says.
constexpr std::int64_t causal_mask_offset(CausalAlignment a, std::int64_t q_len,
                                          std::int64_t kv_len) noexcept {
  return a == CausalAlignment::kBottomRight ? kv_len - q_len : 0;
}

}  // namespace attnref
