// SPDX-License-Identifier: Apache-2.0
/// @file model_config.hpp
/// Build-time check of an attention configuration, `constexpr` so constant configurations are
/// checked by `static_assert`.
///
/// Example:
/// @code
///   constexpr attnref::AttentionConfig kLlama3_8b{32, 8, 128, {}, 16};  // head_dim_v = head_dim
///   static_assert(attnref::check_config(kLlama3_8b).ok());
/// @endcode
#pragma once

#include <cstdint>
#include <optional>

#include "attnref/core/status.hpp"
#include "attnref/validate/heads.hpp"

namespace attnref {

/// The shape of one attention layer, independent of any batch.
struct AttentionConfig {
  std::int64_t num_q_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;               ///< q and K head_dim
  std::optional<std::int64_t> head_dim_v;  ///< V head_dim; absent means "same as head_dim"
  std::optional<std::int64_t> page_size;   ///< tokens per KV page; absent means "not paged"
};

/// Heads (positive, divisible), head dims (positive), page size (positive when given).
constexpr Status check_config(const AttentionConfig& c) noexcept {
  ATTNREF_RETURN_IF_ERROR(check_heads(c.num_q_heads, c.num_kv_heads));
  if (c.head_dim <= 0) {
    return Status(ErrorCode::kInvalidHeadDim, "", "head_dim must be positive. Got {0}.",
                  "head_dim is the size of one head's vectors, e.g. 64 or 128", {c.head_dim});
  }
  if (c.head_dim_v && *c.head_dim_v <= 0) {
    return Status(ErrorCode::kInvalidHeadDim, "", "head_dim_v must be positive. Got {0}.",
                  "leave head_dim_v unset when V has the same head_dim as K", {*c.head_dim_v});
  }
  if (c.page_size && *c.page_size <= 0) {
    return Status(ErrorCode::kInvalidPageSize, "", "page_size must be positive. Got {0}.",
                  "leave page_size unset for a non-paged cache", {*c.page_size});
  }
  return Status();
}

}  // namespace attnref
