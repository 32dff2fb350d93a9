// SPDX-License-Identifier: Apache-2.0
/// @file vllm.hpp
/// vLLM's paged KV cache and block tables, described as attnref views with strides only (no
/// copies): the cache becomes logical K and V `[num_kv_heads, num_blocks, block_size, head_size]`
/// views, `block_table` and `seq_lens` become `page_indices` and `lengths`. No Eigen; not pulled
/// in by the umbrella header.
///
/// Cache forms (vLLM's *logical* shapes; pass the tensor's own strides, `tensor.stride()`, so any
/// stride order vLLM picks, NHD or HND, reads correctly):
///  - `kNhd`: `key_cache`, `value_cache` each `[num_blocks, block_size, num_kv_heads, head_size]`;
///  - `kHnd`: `key_cache`, `value_cache` each `[num_blocks, num_kv_heads, block_size, head_size]`;
///  - `kKvFirst`: one `kv_cache` `[2, num_blocks, block_size, num_kv_heads, head_size]` (v1
///    FlashAttention backend);
///  - `kBlockFirst`: one `kv_cache` `[num_blocks, 2, block_size, num_kv_heads, head_size]` (v1
///    FlashInfer backend: K and V adjacent in each block, so the block stride is twice a dense
///    block's).
///
/// Example (v1 FlashInfer-backend cache, rows of the block table padded with -1):
/// @code
///   attnref::VllmKvCache<float> cache;
///   cache.layout = attnref::VllmKvLayout::kBlockFirst;
///   cache.kv_cache = {kv.data(), {num_blocks, 2, block_size, hkv, d}};
///   cache.block_size = block_size;    // from the engine config: catches a cache in the wrong
///   cache.num_kv_heads = hkv;         // layout (vllm #3585)
///   attnref::VllmBlockTable<int32_t> table{{bt.data(), {num_seqs, max_blocks}},
///                                          {seq_lens.data(), {num_seqs}},
///                                          attnref::PaddingPolicy::kSkip};
///   attnref::PagedAttentionArgs<float> args;
///   if (attnref::Status s = attnref::vllm_paged_args(cache, table, q, &args); !s.ok()) return s;
///   attnref::paged_attention(args, out);
/// @endcode
#pragma once

#include <array>
#include <cstdint>

#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/interop/page_table.hpp"
#include "attnref/validate/paged.hpp"
#include "attnref/validate/ragged.hpp"

namespace attnref {

/// Which of vLLM's logical cache shapes a `VllmKvCache` holds.
enum class VllmKvLayout {
  kNhd,         ///< K, V each [num_blocks, block_size, num_kv_heads, head_size]
  kHnd,         ///< K, V each [num_blocks, num_kv_heads, block_size, head_size]
  kKvFirst,     ///< one tensor [2, num_blocks, block_size, num_kv_heads, head_size]
  kBlockFirst,  ///< one tensor [num_blocks, 2, block_size, num_kv_heads, head_size]
};

/// "nhd", "hnd", "kv_first" or "block_first".
constexpr const char* to_string(VllmKvLayout layout) noexcept {
  switch (layout) {
    case VllmKvLayout::kNhd:
      return "nhd";
    case VllmKvLayout::kHnd:
      return "hnd";
    case VllmKvLayout::kKvFirst:
      return "kv_first";
    case VllmKvLayout::kBlockFirst:
      return "block_first";
  }
  return "unknown";
}

/// One layer's vLLM KV cache. Set the tensors of `layout` and leave the others empty.
template <class T>
struct VllmKvCache {
  VllmKvLayout layout = VllmKvLayout::kNhd;
  TensorView<const T, 4> key_cache;    ///< kNhd: [num_blocks, block_size, num_kv_heads, head_size]
                                       ///< kHnd: [num_blocks, num_kv_heads, block_size, head_size]
  TensorView<const T, 4> value_cache;  ///< same shape as key_cache
  TensorView<const T, 5> kv_cache;     ///< kKvFirst: [2, num_blocks, block_size, num_kv_heads,
                                       ///< head_size]; kBlockFirst: [num_blocks, 2, block_size,
                                       ///< num_kv_heads, head_size]
  /// The engine's configuration, checked against the tensor's shape; -1 = not declared. Declare
  /// them: a cache handed over in the other layout is caught only this way.
  std::int64_t block_size = -1;
  std::int64_t num_kv_heads = -1;
  std::int64_t head_size = -1;
  /// Declares that every block is one contiguous run of block_size x num_kv_heads x head_size
  /// elements (what kernels assuming `block stride == block_size x token stride` need). The
  /// block stride is then checked against it.
  bool dense_blocks = false;
};

/// vLLM's per-step block table and lengths.
template <class Index = std::int32_t>
struct VllmBlockTable {
  TensorView<const Index, 2> block_table;  ///< [num_seqs, max_blocks]
  TensorView<const Index, 1> seq_lens;     ///< [num_seqs]
  /// What entries past a sequence's live blocks hold: `kReject` (default) demands valid block ids
  /// everywhere; `kSkip` lets them hold anything (vLLM pads with -1 or stale ids).
  PaddingPolicy padding = PaddingPolicy::kReject;
};

/// vLLM's per-step metadata of a ragged batch (chunked prefill and decode requests together, as
/// its v1 attention metadata holds them): what `RaggedPagedAttentionArgs` reads besides q and
/// the cache.
template <class Index = std::int32_t>
struct VllmRaggedMetadata {
  TensorView<const Index, 2> block_table;      ///< [max_num_seqs, max_blocks]; padding may hold -1
  TensorView<const Index, 1> seq_lens;         ///< [max_num_seqs]: KV tokens, this step's included
  TensorView<const Index, 1> query_start_loc;  ///< [max_num_seqs + 1]: 0, then running q counts
  std::int64_t num_seqs = 0;                   ///< live requests (vLLM's num_reqs)
};

namespace detail {

constexpr bool declared_mismatch(std::int64_t declared, std::int64_t actual) noexcept {
  return declared >= 0 && declared != actual;
}

constexpr std::int64_t declared_or(std::int64_t declared, std::int64_t actual) noexcept {
  return declared >= 0 ? declared : actual;
}

/// `vllm_kv_views` for the separate layouts (nhd, hnd): key_cache and value_cache.
template <class T>
Status vllm_separate_kv_views(const VllmKvCache<T>& c, TensorView<const T, 4>* k_pages,
                              TensorView<const T, 4>* v_pages) {
  ATTNREF_RETURN_IF_ERROR(check_view(c.key_cache, "key_cache"));
  ATTNREF_RETURN_IF_ERROR(check_view(c.value_cache, "value_cache"));
  const auto& e = c.key_cache.extents;
  const auto& ev = c.value_cache.extents;
  if (!same_extents(e, ev)) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "key_cache has shape ({0}, {1}, {2}, {3}) but value_cache ({4}, {5}, {6}, {7})",
                  "K and V caches of one layer share one shape",
                  {e[0], e[1], e[2], e[3], ev[0], ev[1], ev[2], ev[3]});
  }
  const bool nhd = c.layout == VllmKvLayout::kNhd;
  const std::int64_t num_blocks = e[0];
  const std::int64_t block_size = nhd ? e[1] : e[2];
  const std::int64_t heads = nhd ? e[2] : e[1];
  const std::int64_t dim = e[3];
  if (declared_mismatch(c.block_size, block_size) || declared_mismatch(c.num_kv_heads, heads) ||
      declared_mismatch(c.head_size, dim)) {
    const std::int64_t want_bs = declared_or(c.block_size, block_size);
    const std::int64_t want_h = declared_or(c.num_kv_heads, heads);
    const std::int64_t want_d = declared_or(c.head_size, dim);
    // The shape is the other 4-D layout's: say so.
    const bool swapped =
        e[1] == (nhd ? want_h : want_bs) && e[2] == (nhd ? want_bs : want_h) && e[3] == want_d;
    const char* hint = swapped ? (nhd ? "the shape is the hnd layout [num_blocks, num_kv_heads, "
                                        "block_size, head_size]; pass VllmKvLayout::kHnd"
                                      : "the shape is the nhd layout [num_blocks, block_size, "
                                        "num_kv_heads, head_size]; pass VllmKvLayout::kNhd")
                               : "check block_size, num_kv_heads and head_size against the "
                                 "engine's config, and the cache's layout";
    return Status(ErrorCode::kShapeMismatch, "",
                  nhd ? "key_cache has shape ({0}, {1}, {2}, {3}) but layout nhd [num_blocks, "
                        "block_size, num_kv_heads, head_size] expects ({0}, {4}, {5}, {6})"
                      : "key_cache has shape ({0}, {1}, {2}, {3}) but layout hnd [num_blocks, "
                        "num_kv_heads, block_size, head_size] expects ({0}, {5}, {4}, {6})",
                  hint, {e[0], e[1], e[2], e[3], want_bs, want_h, want_d}, {}, "key_cache");
  }
  const auto& s = c.key_cache.strides;
  const auto& sv = c.value_cache.strides;
  // Logical order: head, block, slot, dim.
  const std::array<std::int64_t, 4> k_strides =
      nhd ? std::array<std::int64_t, 4>{s[2], s[0], s[1], s[3]}
          : std::array<std::int64_t, 4>{s[1], s[0], s[2], s[3]};
  const std::array<std::int64_t, 4> v_strides =
      nhd ? std::array<std::int64_t, 4>{sv[2], sv[0], sv[1], sv[3]}
          : std::array<std::int64_t, 4>{sv[1], sv[0], sv[2], sv[3]};
  const std::array<std::int64_t, 4> logical{heads, num_blocks, block_size, dim};
  *k_pages = TensorView<const T, 4>(c.key_cache.data, logical, k_strides, c.key_cache.buffer_size);
  *v_pages =
      TensorView<const T, 4>(c.value_cache.data, logical, v_strides, c.value_cache.buffer_size);
  return Status();
}

/// `vllm_kv_views` for the combined layouts (kv_first, block_first): one kv_cache.
template <class T>
Status vllm_combined_kv_views(const VllmKvCache<T>& c, TensorView<const T, 4>* k_pages,
                              TensorView<const T, 4>* v_pages) {
  ATTNREF_RETURN_IF_ERROR(check_view(c.kv_cache, "kv_cache"));
  const auto& e = c.kv_cache.extents;
  const auto& s = c.kv_cache.strides;
  const bool kv_first = c.layout == VllmKvLayout::kKvFirst;
  const size_t kv_dim = kv_first ? 0 : 1;
  const size_t block_dim = kv_first ? 1 : 0;
  if (e[kv_dim] != 2) {
    return Status(ErrorCode::kShapeMismatch, "",
                  kv_first ? "kv_cache dimension 0 has extent {0}; layout kv_first [2, "
                             "num_blocks, block_size, num_kv_heads, head_size] needs 2 (K, V)"
                           : "kv_cache dimension 1 has extent {0}; layout block_first "
                             "[num_blocks, 2, block_size, num_kv_heads, head_size] needs 2 "
                             "(K, V)",
                  "a combined cache stacks exactly K and V; check the layout and the shape",
                  {e[kv_dim]}, {}, "kv_cache");
  }
  const std::int64_t num_blocks = e[block_dim];
  const std::int64_t block_size = e[2];
  const std::int64_t heads = e[3];
  const std::int64_t dim = e[4];
  if (declared_mismatch(c.block_size, block_size) || declared_mismatch(c.num_kv_heads, heads) ||
      declared_mismatch(c.head_size, dim)) {
    return Status(ErrorCode::kShapeMismatch, "",
                  kv_first ? "kv_cache has shape ({0}, {1}, {2}, {3}, {4}) but layout kv_first "
                             "[2, num_blocks, block_size, num_kv_heads, head_size] expects (2, "
                             "{1}, {5}, {6}, {7})"
                           : "kv_cache has shape ({0}, {1}, {2}, {3}, {4}) but layout "
                             "block_first [num_blocks, 2, block_size, num_kv_heads, head_size] "
                             "expects ({0}, 2, {5}, {6}, {7})",
                  "check block_size, num_kv_heads and head_size against the engine's config, "
                  "and the cache's layout (an HND stride order keeps this logical shape; only "
                  "the strides change)",
                  {e[0], e[1], e[2], e[3], e[4], declared_or(c.block_size, block_size),
                   declared_or(c.num_kv_heads, heads), declared_or(c.head_size, dim)},
                  {}, "kv_cache");
  }
  // Logical order: head, block, slot, dim; K and V alike.
  const std::array<std::int64_t, 4> strides{s[3], s[block_dim], s[2], s[4]};
  const T* k_data = c.kv_cache.data;
  const std::int64_t k_buffer = c.kv_cache.buffer_size;
  // V starts one K/V stride in, which check_view proved lies inside a cache that holds
  // elements. An empty cache's stride was never bounded (2^62 is valid there), so its V view,
  // empty too, starts where K does instead of at an address past the buffer.
  const bool holds_elements = c.kv_cache.numel_or_zero() > 0;
  const T* v_data = holds_elements ? k_data + s[kv_dim] : k_data;
  const std::int64_t v_buffer = k_buffer < 0 || !holds_elements ? k_buffer : k_buffer - s[kv_dim];
  const std::array<std::int64_t, 4> logical{heads, num_blocks, block_size, dim};
  *k_pages = TensorView<const T, 4>(k_data, logical, strides, k_buffer);
  *v_pages = TensorView<const T, 4>(v_data, logical, strides, v_buffer);
  return Status();
}

}  // namespace detail

/// Describes a vLLM cache as logical K and V `[num_kv_heads, num_blocks, block_size, head_size]`
/// views over the same memory (shape tier, O(1)). Checks:
///  - the layout's tensors are given and valid (`check_view`: extents, strides, buffer size),
///    the others empty (`kShapeMismatch`);
///  - key_cache and value_cache have one shape; the combined dimension is 2 (`kShapeMismatch`);
///  - the declared block_size / num_kv_heads / head_size match the shape (`kShapeMismatch`,
///    naming the layout, and the other layout when the shape is that one's);
///  - the block stride holds a block, and equals a dense block when declared
///    (`kInvalidPageStride`, see `check_page_stride`).
template <class T>
Status vllm_kv_views(const VllmKvCache<T>& c, TensorView<const T, 4>* k_pages,
                     TensorView<const T, 4>* v_pages) {
  const bool separate = c.layout == VllmKvLayout::kNhd || c.layout == VllmKvLayout::kHnd;
  if (separate && !c.kv_cache.empty_view()) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "kv_cache was given but layouts nhd and hnd take key_cache and value_cache",
                  "use VllmKvLayout::kKvFirst or kBlockFirst for a combined K/V tensor", {}, {},
                  "kv_cache");
  }
  if (!separate && (!c.key_cache.empty_view() || !c.value_cache.empty_view())) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "key_cache/value_cache were given but layouts kv_first and block_first take one "
                  "kv_cache",
                  "use VllmKvLayout::kNhd or kHnd for separate K and V tensors", {}, {},
                  "key_cache");
  }
  TensorView<const T, 4> k, v;
  ATTNREF_RETURN_IF_ERROR(separate ? detail::vllm_separate_kv_views(c, &k, &v)
                                   : detail::vllm_combined_kv_views(c, &k, &v));
  const char* k_name = separate ? "key_cache" : "kv_cache (K)";
  const char* v_name = separate ? "value_cache" : "kv_cache (V)";
  ATTNREF_RETURN_IF_ERROR(check_page_stride(k, k_name, c.dense_blocks));
  ATTNREF_RETURN_IF_ERROR(check_page_stride(v, v_name, c.dense_blocks));
  *k_pages = k;
  *v_pages = v;
  return Status();
}

/// Checks a block table against a cache of `num_blocks` blocks of `block_size` tokens (metadata
/// tier, O(num_seqs x max_blocks)): `check_dense_page_table` with the table's padding policy,
/// naming `block_table` and `seq_lens`. Covers `seq_lens[b] <= max_blocks * block_size`
/// (`kPageTableTooNarrow`) and live block ids in `[0, num_blocks)`.
template <class Index>
Status check_vllm_block_table(const VllmBlockTable<Index>& t, std::int64_t block_size,
                              std::int64_t num_blocks) {
  return check_dense_page_table(t.block_table, t.seq_lens, block_size, num_blocks, t.padding,
                                "block_table", "seq_lens");
}

/// Fills `*args` with `q`, the cache's K/V views and the block table's views (no copies: `*args`
/// points into the engine's buffers), after `vllm_kv_views` and `check_vllm_block_table`. Other
/// fields of `*args` are left as they are. Writes nothing on error.
template <class Q, class KV, class Index>
Status vllm_paged_args(const VllmKvCache<KV>& cache, const VllmBlockTable<Index>& table,
                       TensorView<const Q, 3> q, PagedAttentionArgs<Q, KV, Index>* args) {
  TensorView<const KV, 4> k, v;
  ATTNREF_RETURN_IF_ERROR(vllm_kv_views(cache, &k, &v));
  ATTNREF_RETURN_IF_ERROR(check_vllm_block_table(table, k.extents[2], k.extents[1]));
  args->q = q;
  args->k_pages = k;
  args->v_pages = v;
  args->lengths = table.seq_lens;
  args->page_indices = table.block_table;
  return Status();
}

/// Fills `*args` with `q` `[num_tokens, num_q_heads, head_size]`, the cache's K/V views (after
/// `vllm_kv_views`) and the ragged metadata's views (no copies), for a chunked-prefill step over
/// a separate-K/V vLLM cache. kv_lens are `seq_lens`, cu_q_lens `query_start_loc`, num_seqs the
/// host count. The metadata is checked where ragged checks it (`check_ragged`, which the kernels
/// run): only live blocks are read, so padding entries may hold anything. Other fields of `*args`
/// are left as they are. Writes nothing on error.
template <class Q, class KV, class Index>
Status vllm_ragged_args(const VllmKvCache<KV>& cache, const VllmRaggedMetadata<Index>& m,
                        TensorView<const Q, 3> q, RaggedPagedAttentionArgs<Q, KV, Index>* args) {
  TensorView<const KV, 4> k, v;
  ATTNREF_RETURN_IF_ERROR(vllm_kv_views(cache, &k, &v));
  args->q = q;
  args->k_pages = k;
  args->v_pages = v;
  args->kv_lens = m.seq_lens;
  args->page_indices = m.block_table;
  args->cu_q_lens = m.query_start_loc;
  args->num_seqs = {};
  args->num_seqs_value = m.num_seqs;
  return Status();
}

}  // namespace attnref
