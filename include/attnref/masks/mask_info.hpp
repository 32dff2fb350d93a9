// SPDX-License-Identifier: Apache-2.0
/// @file mask_info.hpp
/// Block classification of a mask (JAX's MaskInfo, spec §3.2-3.5): for block sizes (bq, bkv),
/// each (head, q block, kv block) tile is empty (skipped), partial (its pattern is stored,
/// deduplicated by content) or full (no mask evaluation). The "next non-empty block" DMA
/// bookkeeping of the TPU is not needed on a CPU; `kv_blocks(h, i)` / `q_blocks(h, j)` list the
/// non-empty tiles of a row/column instead (JAX's shrunk `data_next`).
///
/// Under `Profile::kReference` the last block of an axis may be ragged (a sequence length need
/// not be a multiple of the block size); `Profile::kJax` enforces M3..M7.
///
/// Example:
/// @code
///   attnref::MaskInfo info;
///   attnref::Status s = attnref::build_mask_info(attnref::CausalMask{{64, 64}}, 16, 16,
///                                                attnref::Profile::kJax, &info);
///   // info.kind(0, 1, 0) == attnref::BlockKind::kFull; info.num_partial_blocks() == 1
/// @endcode
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/mask_blocks.hpp"
#include "attnref/validate/splash.hpp"

namespace attnref {

/// What a tile of the mask holds. The values are JAX's block_mask values.
enum class BlockKind : std::uint8_t { kEmpty = 0, kPartial = 1, kFull = 2 };

/// Tile counts of a MaskInfo, over all `num_heads` rows of it.
struct BlockCounts {
  std::int64_t empty = 0;
  std::int64_t partial = 0;
  std::int64_t full = 0;
};

/// The classified block grid of a mask. `num_heads` is 1 when every query head shares one mask
/// (query head h then reads row 0), else the mask's head count.
struct MaskInfo {
  std::int64_t num_heads = 0;                ///< 1 (shared) or the number of distinct-by-head rows
  std::int64_t q_seq_len = 0;                ///< Sq
  std::int64_t kv_seq_len = 0;               ///< Skv
  std::int64_t block_q = 0;                  ///< bq
  std::int64_t block_kv = 0;                 ///< bkv
  std::int64_t num_q_blocks = 0;             ///< ceil(Sq / bq)
  std::int64_t num_kv_blocks = 0;            ///< ceil(Skv / bkv)
  std::vector<std::uint8_t> block_mask;      ///< [num_heads, num_q_blocks, num_kv_blocks] BlockKind
  std::vector<std::int32_t> mask_next;       ///< same shape: partial pattern index (0 elsewhere)
  std::vector<std::uint8_t> partial_blocks;  ///< [num_partial, pattern_rows, pattern_cols],
                                             ///< 1 = may attend; positions past a ragged edge
                                             ///< are 0
  /// Rows and columns of a stored pattern: min(bq, Sq) and min(bkv, Skv), i.e. (bq, bkv) unless
  /// a block is larger than its whole sequence (reference profile), so a huge block size never
  /// sizes memory beyond the mask itself.
  std::int64_t pattern_rows = 0;
  std::int64_t pattern_cols = 0;

  /// What the splash checks need of it (validate/mask_blocks.hpp).
  MaskTiling tiling() const noexcept {
    return {num_heads, q_seq_len, kv_seq_len, block_q, block_kv};
  }
  /// Row of this MaskInfo that query head `h` reads.
  std::int64_t row_of(std::int64_t h) const noexcept { return num_heads == 1 ? 0 : h; }
  std::int64_t flat(std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return (row_of(h) * num_q_blocks + i) * num_kv_blocks + j;
  }
  /// Kind of tile (i, j) for query head h.
  BlockKind kind(std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return static_cast<BlockKind>(block_mask[static_cast<size_t>(flat(h, i, j))]);
  }
  /// The stored pattern of a partial tile, row-major [pattern_rows, pattern_cols].
  const std::uint8_t* partial_block(std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return partial_blocks.data() +
           static_cast<size_t>(mask_next[static_cast<size_t>(flat(h, i, j))]) *
               static_cast<size_t>(pattern_rows * pattern_cols);
  }
  std::int64_t num_partial_blocks() const noexcept {
    const std::int64_t tile = pattern_rows * pattern_cols;
    return tile > 0 ? static_cast<std::int64_t>(partial_blocks.size()) / tile : 0;
  }
  /// Rows of q block i (bq, or fewer for a ragged last block).
  std::int64_t q_rows(std::int64_t i) const noexcept {
    return std::min(block_q, q_seq_len - i * block_q);
  }
  /// Columns of kv block j (bkv, or fewer for a ragged last block).
  std::int64_t kv_cols(std::int64_t j) const noexcept {
    return std::min(block_kv, kv_seq_len - j * block_kv);
  }
  /// Non-empty kv blocks of q block i for query head h, ascending (JAX's shrunk forward grid).
  std::vector<std::int64_t> kv_blocks(std::int64_t h, std::int64_t i) const {
    std::vector<std::int64_t> out;
    for (std::int64_t j = 0; j < num_kv_blocks; ++j)
      if (kind(h, i, j) != BlockKind::kEmpty) out.push_back(j);
    return out;
  }
  /// Non-empty q blocks of kv block j for query head h, ascending (JAX's shrunk dkv grid).
  std::vector<std::int64_t> q_blocks(std::int64_t h, std::int64_t j) const {
    std::vector<std::int64_t> out;
    for (std::int64_t i = 0; i < num_q_blocks; ++i)
      if (kind(h, i, j) != BlockKind::kEmpty) out.push_back(i);
    return out;
  }
  /// Tile counts over all rows of the MaskInfo.
  BlockCounts counts() const noexcept {
    BlockCounts c;
    for (std::uint8_t b : block_mask) {
      if (b == 0)
        ++c.empty;
      else if (b == 1)
        ++c.partial;
      else
        ++c.full;
    }
    return c;
  }
};

namespace detail {

/// Pattern deduplication state shared by all heads of one `build_mask_info` call.
struct PatternTable {
  std::unordered_map<std::string, std::int32_t> index;  ///< pattern bytes -> pattern number
  std::string tile;                                     ///< scratch [pattern_rows, pattern_cols]
};

/// Classifies every tile of one single-head mask into `kinds` / `next` ([num_q_blocks,
/// num_kv_blocks] each), appending patterns not seen before to `info.partial_blocks`.
inline void classify_head(const AnyMask& mask, MaskInfo& info, std::uint8_t* kinds,
                          std::int32_t* next, PatternTable& patterns) {
  const std::int64_t bq = info.block_q;
  const std::int64_t bkv = info.block_kv;
  const std::int64_t ld = info.pattern_cols;  // pattern_rows x pattern_cols holds any tile
  std::string& tile = patterns.tile;
  tile.assign(static_cast<size_t>(info.pattern_rows * ld), '\0');
  auto* bytes = reinterpret_cast<std::uint8_t*>(&tile[0]);
  for (std::int64_t i = 0; i < info.num_q_blocks; ++i) {
    const std::int64_t rows = info.q_rows(i);
    for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
      const std::int64_t cols = info.kv_cols(j);
      std::fill(tile.begin(), tile.end(), '\0');
      mask.fill_tile(i * bq, i * bq + rows, j * bkv, j * bkv + cols, bytes, ld);
      std::int64_t allowed = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) allowed += bytes[r * ld + c];
      const auto at = static_cast<size_t>(i * info.num_kv_blocks + j);
      next[at] = 0;
      if (allowed == 0) {
        kinds[at] = static_cast<std::uint8_t>(BlockKind::kEmpty);
      } else if (allowed == rows * cols) {
        kinds[at] = static_cast<std::uint8_t>(BlockKind::kFull);
      } else {
        kinds[at] = static_cast<std::uint8_t>(BlockKind::kPartial);
        auto found = patterns.index.find(tile);
        if (found == patterns.index.end()) {
          const auto number = static_cast<std::int32_t>(patterns.index.size());
          found = patterns.index.emplace(tile, number).first;
          info.partial_blocks.insert(info.partial_blocks.end(), bytes, bytes + tile.size());
        }
        next[at] = found->second;
      }
    }
  }
}

/// FNV-1a over `size` bytes, continuing from `hash`.
inline std::uint64_t fnv1a(const void* data, size_t size,
                           std::uint64_t hash = 14695981039346656037ull) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t k = 0; k < size; ++k) hash = (hash ^ p[k]) * 1099511628211ull;
  return hash;
}

/// An earlier head that is cheap to find equal to head h (`same_as`): head 0, head h - 1, or one
/// of the first `scan_limit` heads that were classified (`classified`, in head order, head 0
/// first). h itself when there is none.
inline size_t cheap_equal_head(const std::vector<AnyMask>& heads, size_t h,
                               const std::vector<size_t>& classified, std::int64_t scan_limit) {
  if (h == 0) return h;
  const AnyMask& m = heads[h];
  if (heads[0].same_as(m)) return 0;
  if (heads[h - 1].same_as(m)) return h - 1;
  const auto scans = std::min<size_t>(classified.size(), static_cast<size_t>(scan_limit));
  for (size_t c = 1; c < scans; ++c)  // classified[0] is head 0: done above
    if (heads[classified[c]].same_as(m)) return classified[c];
  return h;
}

/// The rows of distinct content of a MaskInfo being built, [num_rows, row_size] block kinds and
/// pattern numbers each, found again by a hash of their content.
struct DistinctRows {
  size_t row_size = 0;
  std::vector<std::uint8_t> kinds;
  std::vector<std::int32_t> next;
  std::unordered_map<std::uint64_t, std::vector<std::int64_t>> by_hash;
  std::int64_t num_rows = 0;

  /// The row holding this content (`row_size` kinds and pattern numbers): one stored earlier
  /// whose content is equal, or a new one.
  std::int64_t add(const std::vector<std::uint8_t>& row_kinds,
                   const std::vector<std::int32_t>& row_next) {
    const std::uint64_t hash =
        fnv1a(row_next.data(), row_size * sizeof(std::int32_t), fnv1a(row_kinds.data(), row_size));
    std::vector<std::int64_t>& candidates = by_hash[hash];
    for (std::int64_t r : candidates) {
      const auto at = static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * row_size);
      if (std::equal(row_kinds.begin(), row_kinds.end(), kinds.begin() + at) &&
          std::equal(row_next.begin(), row_next.end(), next.begin() + at))
        return r;
    }
    candidates.push_back(num_rows);
    kinds.insert(kinds.end(), row_kinds.begin(), row_kinds.end());
    next.insert(next.end(), row_next.begin(), row_next.end());
    return num_rows++;
  }

  /// Moves the rows into `info`: one shared row (`shared`: every head is head 0's mask), else
  /// one row per head, head h's being row `row_of_head[h]`.
  void store(MaskInfo& info, const std::vector<std::int64_t>& row_of_head, bool shared) {
    info.num_heads = shared ? 1 : static_cast<std::int64_t>(row_of_head.size());
    if (shared) {
      info.block_mask.swap(kinds);
      info.mask_next.swap(next);
      return;
    }
    info.block_mask.resize(row_of_head.size() * row_size);
    info.mask_next.resize(row_of_head.size() * row_size);
    for (size_t h = 0; h < row_of_head.size(); ++h) {
      const auto src = static_cast<std::ptrdiff_t>(static_cast<size_t>(row_of_head[h]) * row_size);
      const auto dst = static_cast<std::ptrdiff_t>(h * row_size);
      std::copy_n(kinds.begin() + src, row_size, info.block_mask.begin() + dst);
      std::copy_n(next.begin() + src, row_size, info.mask_next.begin() + dst);
    }
  }
};

/// The single-head masks of `mask`: its heads for a MultiHeadMask, else itself.
template <class M>
std::vector<AnyMask> head_masks_of(const M& mask) {
  std::vector<AnyMask> heads;
  if constexpr (std::is_same<M, MultiHeadMask>::value) {
    heads.reserve(static_cast<size_t>(mask.num_heads()));
    for (std::int64_t h = 0; h < mask.num_heads(); ++h) heads.push_back(mask.head(h));
  } else {
    heads.push_back(AnyMask(mask));
  }
  return heads;
}

}  // namespace detail

/// Classifies `mask` (a single-head mask or a MultiHeadMask) into tiles of (block_q, block_kv).
/// Runs the mask's own checks, then `check_mask_blocks`. If every head is head 0's mask (same
/// AnyMask object, or `==` of a built-in mask, as JAX deduplicates), `num_heads` is 1. Partial
/// patterns are deduplicated by content and numbered in order of first appearance (heads in
/// order, then tiles row-major), as JAX does.
///
/// Cost: a head that is a cheap-to-find equal of an earlier head (head 0, the previous head, or
/// one of the first max(16, Sq * Skv) heads classified) reuses its row; any other head is
/// classified (Sq * Skv mask evaluations) and its row deduplicated by a hash of its content
/// (block kinds and pattern numbers; equal hashes are compared in full). So the work is
/// O(distinct heads * Sq * Skv) for a few distinct masks and never worse than
/// O(num_heads * Sq * Skv): linear in the heads, not quadratic.
template <class M>
Status build_mask_info(const M& mask, std::int64_t block_q, std::int64_t block_kv, Profile profile,
                       MaskInfo* out, const MaskSharding& sharding = {}) {
  ATTNREF_RETURN_IF_ERROR(check_mask(mask));
  const MaskShape shape = mask_shape(mask);
  const std::int64_t heads = mask_num_heads(mask);
  ATTNREF_RETURN_IF_ERROR(
      check_mask_blocks(shape[0], shape[1], heads, block_q, block_kv, profile, sharding));
  // A stored pattern is at most the whole mask: blocks larger than a sequence (allowed under the
  // reference profile) must not size memory (a 2^20 x 2^20 block over a 10 x 10 mask).
  const std::int64_t pattern_rows = std::min(block_q, shape[0]);
  const std::int64_t pattern_cols = std::min(block_kv, shape[1]);
  std::int64_t tile = 0;
  if (!checked_mul(pattern_rows, pattern_cols, &tile)) {
    return Status(ErrorCode::kSizeOverflow, "", "block_q ({0}) x block_kv ({1}) overflows int64",
                  "use block sizes such as 128", {pattern_rows, pattern_cols});
  }
  const std::vector<AnyMask> head_masks = detail::head_masks_of(mask);
  MaskInfo info;
  info.q_seq_len = shape[0];
  info.kv_seq_len = shape[1];
  info.block_q = block_q;
  info.block_kv = block_kv;
  info.pattern_rows = pattern_rows;
  info.pattern_cols = pattern_cols;
  info.num_q_blocks = ceil_div(shape[0], block_q);
  info.num_kv_blocks = ceil_div(shape[1], block_kv);
  detail::DistinctRows rows;
  rows.row_size = static_cast<size_t>(info.num_q_blocks * info.num_kv_blocks);
  std::vector<std::int64_t> row_of_head(head_masks.size(), 0);  // heads onto distinct rows
  // Heads that were classified (no cheap equal found), in head order: the ones scanned by
  // `same_as`. Scanning more of them than one classification costs would not pay.
  std::vector<size_t> classified;
  std::int64_t scan_limit = 0;
  if (!checked_mul(shape[0], shape[1], &scan_limit))
    scan_limit = std::numeric_limits<std::int64_t>::max();
  scan_limit = std::max<std::int64_t>(scan_limit, 16);
  std::vector<std::uint8_t> kinds(rows.row_size);
  std::vector<std::int32_t> next(rows.row_size);
  detail::PatternTable patterns;
  bool all_head_zero = true;  // every head same_as head 0: one shared row (num_heads 1)
  for (size_t h = 0; h < head_masks.size(); ++h) {
    const size_t equal = detail::cheap_equal_head(head_masks, h, classified, scan_limit);
    if (h > 0 && equal != 0) all_head_zero = false;
    if (equal != h) {
      row_of_head[h] = row_of_head[equal];
      continue;
    }
    detail::classify_head(head_masks[h], info, kinds.data(), next.data(), patterns);
    classified.push_back(h);
    row_of_head[h] = rows.add(kinds, next);
  }
  rows.store(info, row_of_head, all_head_zero);
  *out = std::move(info);
  return Status();
}

/// Throwing wrapper of `build_mask_info`.
template <class M>
MaskInfo make_mask_info(const M& mask, std::int64_t block_q, std::int64_t block_kv,
                        Profile profile = Profile::kReference, const MaskSharding& sharding = {}) {
  MaskInfo info;
  throw_if_error(build_mask_info(mask, block_q, block_kv, profile, &info, sharding));
  return info;
}

/// `check_splash(args, info.tiling(), profile)` (validate/splash.hpp): the forward checks against
/// a pre-built MaskInfo; the splash kernels call it with a plan's MaskInfo.
template <class Q, class KV>
Status check_splash(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, Profile profile) {
  return check_splash(a, info.tiling(), profile);
}

}  // namespace attnref
