// SPDX-License-Identifier: Apache-2.0
/// @file head_groups.hpp
/// The GQA map of the kernels, built on `kv_head_of` (validate/heads.hpp): query heads
/// [h * G, (h + 1) * G) read KV head h. Every kernel loop that pairs a query head with its KV
/// head goes through this, in either direction.
#pragma once

#include <cstdint>

#include "attnref/validate/heads.hpp"

namespace attnref {
namespace detail {

/// Query heads grouped by the KV head they read. Precondition: `check_heads(hq, hkv).ok()`.
struct HeadGroups {
  std::int64_t num_q_heads = 1;
  std::int64_t num_kv_heads = 1;

  /// Query heads per KV head (G).
  constexpr std::int64_t group() const noexcept { return group_size(num_q_heads, num_kv_heads); }
  /// The KV head that query head `qh` reads.
  constexpr std::int64_t kv_head(std::int64_t qh) const noexcept {
    return kv_head_of(qh, num_q_heads, num_kv_heads);
  }
  /// The g-th of the G query heads that read KV head `kv`.
  constexpr std::int64_t q_head(std::int64_t kv, std::int64_t g) const noexcept {
    return kv * group() + g;
  }
  /// The position of query head `qh` within its group, in [0, G).
  constexpr std::int64_t member(std::int64_t qh) const noexcept {
    return qh - q_head(kv_head(qh), 0);
  }
};

}  // namespace detail
}  // namespace attnref
