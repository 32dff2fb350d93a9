// SPDX-License-Identifier: Apache-2.0
/// @file mask_blocks.hpp
/// The block grid of a splash mask: JAX's sharding arguments, the tiling facts of a classified
/// mask (`MaskTiling`) and the block-size checks M3..M7 (`Profile::kJax`) that JAX makes when it
/// builds a MaskInfo. O(1), no containers; shared by the splash validators and by MaskInfo
/// building (masks/mask_info.hpp).
///
/// Example:
/// @code
///   attnref::Status s = attnref::check_mask_blocks(1024, 1024, 1, 128, 128,
///   attnref::Profile::kJax);
/// @endcode
#pragma once

#include <cstdint>

#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"

namespace attnref {

/// JAX's sharding arguments: no numerical effect, checked under `Profile::kJax` (M5..M7).
struct MaskSharding {
  std::int64_t head_shards = 1;   ///< devices the heads are split over
  std::int64_t q_seq_shards = 1;  ///< devices the query sequence is split over
};

/// What the splash checks need of a classified mask (masks/mask_info.hpp's MaskInfo, whose
/// `tiling()` gives it): its head count, its shape and the blocks it was classified into.
struct MaskTiling {
  std::int64_t num_heads = 0;   ///< 1 (one mask shared by all heads) or the mask's head count
  std::int64_t q_seq_len = 0;   ///< Sq
  std::int64_t kv_seq_len = 0;  ///< Skv
  std::int64_t block_q = 0;     ///< bq
  std::int64_t block_kv = 0;    ///< bkv
};

/// Block-size checks of a mask grid: sizes positive (always), then JAX's M3..M7 under
/// `Profile::kJax`. `num_heads` is the mask's head count (M7). O(1).
inline Status check_mask_blocks(std::int64_t q_seq_len, std::int64_t kv_seq_len,
                                std::int64_t num_heads, std::int64_t block_q, std::int64_t block_kv,
                                Profile profile, const MaskSharding& sharding = {}) {
  if (block_q <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "", "q_block_size={0} must be positive.",
                  "use e.g. 128, or any positive size under the reference profile", {block_q}, {},
                  "block_q");
  }
  if (block_kv <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "", "kv_block_size={0} must be positive.",
                  "use e.g. 128, or any positive size under the reference profile", {block_kv}, {},
                  "block_kv");
  }
  if (sharding.head_shards <= 0 || sharding.q_seq_shards <= 0) {
    return Status(ErrorCode::kInvalidMaskParameter, "",
                  "head_shards={0} and q_seq_shards={1} must be positive.",
                  "use 1 on a single device", {sharding.head_shards, sharding.q_seq_shards});
  }
  if (profile != Profile::kJax) return Status();
  if (q_seq_len % block_q != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "M3",
                  "q_block_size={0} should divide q_seq_len={1}.",
                  "pick block_q among the divisors of {1}: {k1} (the reference profile allows a "
                  "ragged last block)",
                  {block_q, q_seq_len});
  }
  if (kv_seq_len % block_kv != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "M4",
                  "kv_block_size={0} should divide kv_seq_len={1}.",
                  "pick block_kv among the divisors of {1}: {k1} (the reference profile allows a "
                  "ragged last block)",
                  {block_kv, kv_seq_len});
  }
  if (q_seq_len % sharding.q_seq_shards != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "M5",
                  "q_seq_shards={0} should divide q_seq_len={1}.", "valid q_seq_shards: {k1}",
                  {sharding.q_seq_shards, q_seq_len});
  }
  const std::int64_t per_shard = q_seq_len / sharding.q_seq_shards;
  if (per_shard % block_q != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "M6",
                  "q_block_size={0} should divide q_seq_len_per_shard={1}.",
                  "pick block_q among the divisors of {1}: {k1}", {block_q, per_shard});
  }
  if (num_heads % sharding.head_shards != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "M7",
                  "head_shards={0} should divide head_count={1}.", "valid head_shards: {k1}",
                  {sharding.head_shards, num_heads});
  }
  return Status();
}

}  // namespace attnref
