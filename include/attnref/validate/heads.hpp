// SPDX-License-Identifier: Apache-2.0
/// @file heads.hpp
/// Grouped-query attention as a mapping in one place: the divisibility check with a hint listing
/// the valid KV head counts (and its throwing form `validate_heads`), and `kv_head_of`, the only
/// place a query head meets its KV head.
///
/// Example:
/// @code
///   static_assert(attnref::check_heads(32, 8).ok());   // Llama-3-8B
///   attnref::Status s = attnref::check_heads(8, 6);    // error: "... Got 8 and 6."
/// @endcode
#pragma once

#include <cstdint>

#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"

namespace attnref {

/// Checks a (num_q_heads, num_kv_heads) pair: both positive, and num_q_heads a multiple of
/// num_kv_heads. `jax_check` names the JAX check being mirrored (P2 by default; splash S5 and
/// ragged R6 share the rule). Never divides by zero.
constexpr Status check_heads(std::int64_t num_q_heads, std::int64_t num_kv_heads,
                             const char* jax_check = "P2") noexcept {
  if (num_q_heads <= 0) {
    return Status(ErrorCode::kInvalidHeadCount, "", "num_q_heads must be positive. Got {0}.",
                  "a model has at least one query head", {num_q_heads}, {}, "num_q_heads");
  }
  if (num_kv_heads <= 0) {
    return Status(ErrorCode::kInvalidHeadCount, "", "num_kv_heads must be positive. Got {0}.",
                  "valid num_kv_heads for {1} query heads: {k1}", {num_kv_heads, num_q_heads}, {},
                  "num_kv_heads");
  }
  if (num_q_heads % num_kv_heads != 0) {
    return Status(ErrorCode::kGqaNotDivisible, jax_check,
                  "Number of Q heads must be divisible by number of KV heads. Got {0} and {1}.",
                  "valid num_kv_heads for {0} query heads: {k0}", {num_q_heads, num_kv_heads});
  }
  return Status();
}

/// Query heads per KV head. Precondition: `check_heads(num_q_heads, num_kv_heads).ok()`.
constexpr std::int64_t group_size(std::int64_t num_q_heads, std::int64_t num_kv_heads) noexcept {
  return num_q_heads / num_kv_heads;
}

/// The KV head that query head `q_head` reads: query heads [h*G, (h+1)*G) share KV head h.
/// Precondition: `check_heads(num_q_heads, num_kv_heads).ok()`.
constexpr std::int64_t kv_head_of(std::int64_t q_head, std::int64_t num_q_heads,
                                  std::int64_t num_kv_heads) noexcept {
  return q_head / group_size(num_q_heads, num_kv_heads);
}

/// Checks that two head dimensions agree (q vs K/V): both positive and equal.
constexpr Status check_head_dim(std::int64_t q_head_dim, std::int64_t kv_head_dim,
                                const char* jax_check = "P3") noexcept {
  if (q_head_dim <= 0 || kv_head_dim <= 0) {
    return Status(ErrorCode::kInvalidHeadDim, "", "head_dim must be positive. Got {0} and {1}.",
                  "head_dim is the size of one head's vectors, e.g. 64 or 128",
                  {q_head_dim, kv_head_dim});
  }
  if (q_head_dim != kv_head_dim) {
    return Status(ErrorCode::kHeadDimMismatch, jax_check,
                  "head_dim of Q must be the same as that of K/V. Got {0} and {1}.",
                  "q [..., {0}] and the K/V pages [..., {1}] come from different models or "
                  "layers; pass K/V of head_dim {0}",
                  {q_head_dim, kv_head_dim});
  }
  return Status();
}

/// Throwing wrapper of `check_heads`: throws `ShapeError` (or calls the error handler).
inline void validate_heads(std::int64_t num_q_heads, std::int64_t num_kv_heads) {
  throw_if_error(check_heads(num_q_heads, num_kv_heads));
}

}  // namespace attnref
