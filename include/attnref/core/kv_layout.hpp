// SPDX-License-Identifier: Apache-2.0
/// @file kv_layout.hpp
/// KV-cache page layouts as strides. Every kernel reads pages through a logical
/// `[num_kv_heads, total_pages, page_size, head_dim]` view; a layout only changes the strides.
///
/// Example (vLLM / FlashInfer NHD cache of 1024 pages, 16 tokens, 8 KV heads, head_dim 128):
/// @code
///   auto k = attnref::kv_pages_view(k_cache, attnref::KvLayout::kNhd, 8, 1024, 16, 128);
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// Physical order of a page pool's axes.
enum class KvLayout {
  kJax,  ///< `[num_kv_heads, total_pages, page_size, head_dim]` (JAX Pallas, head-major)
  kNhd,  ///< `[total_pages, page_size, num_kv_heads, head_dim]` (vLLM, FlashInfer NHD)
  kHnd,  ///< `[total_pages, num_kv_heads, page_size, head_dim]` (FlashInfer HND)
};

/// "jax", "nhd" or "hnd".
constexpr const char* to_string(KvLayout layout) noexcept {
  return layout == KvLayout::kJax ? "jax" : layout == KvLayout::kNhd ? "nhd" : "hnd";
}

/// Parses "jax", "nhd" or "hnd"; returns false for anything else.
inline bool parse_kv_layout(const char* text, KvLayout* out) noexcept {
  if (std::strcmp(text, "jax") == 0)
    *out = KvLayout::kJax;
  else if (std::strcmp(text, "nhd") == 0)
    *out = KvLayout::kNhd;
  else if (std::strcmp(text, "hnd") == 0)
    *out = KvLayout::kHnd;
  else
    return false;
  return true;
}

/// A logical `[num_kv_heads, total_pages, page_size, head_dim]` view over a dense page pool
/// stored in `layout`. `buffer_size` (elements, -1 = unknown) lets `check_view` bound it.
template <class T>
constexpr TensorView<T, 4> kv_pages_view(T* data, KvLayout layout, std::int64_t num_kv_heads,
                                         std::int64_t total_pages, std::int64_t page_size,
                                         std::int64_t head_dim,
                                         std::int64_t buffer_size = -1) noexcept {
  const std::array<std::int64_t, 4> logical{num_kv_heads, total_pages, page_size, head_dim};
  std::array<std::int64_t, 4> physical{};
  switch (layout) {
    case KvLayout::kJax:
      physical = {num_kv_heads, total_pages, page_size, head_dim};
      break;
    case KvLayout::kNhd:
      physical = {total_pages, page_size, num_kv_heads, head_dim};
      break;
    case KvLayout::kHnd:
      physical = {total_pages, num_kv_heads, page_size, head_dim};
      break;
  }
  const std::array<std::int64_t, 4> s = row_major_strides<4>(physical);
  std::array<std::int64_t, 4> strides{};  // logical order: head, page, slot, dim
  switch (layout) {
    case KvLayout::kJax:
      strides = {s[0], s[1], s[2], s[3]};
      break;
    case KvLayout::kNhd:
      strides = {s[2], s[0], s[1], s[3]};
      break;
    case KvLayout::kHnd:
      strides = {s[1], s[0], s[2], s[3]};
      break;
  }
  return TensorView<T, 4>(data, logical, strides, buffer_size);
}

/// The logical `[num_kv_heads, total_pages, page_size, last]` view of a dense pool whose
/// physical shape, in `layout`'s axis order, is `physical` (e.g. a `.npy` file's shape).
template <class T>
constexpr TensorView<T, 4> kv_pages_view(T* data, KvLayout layout,
                                         const std::array<std::int64_t, 4>& physical,
                                         std::int64_t buffer_size = -1) noexcept {
  switch (layout) {
    case KvLayout::kNhd:  // [pages, slots, heads, dim]
      return kv_pages_view(data, layout, physical[2], physical[0], physical[1], physical[3],
                           buffer_size);
    case KvLayout::kHnd:  // [pages, heads, slots, dim]
      return kv_pages_view(data, layout, physical[1], physical[0], physical[2], physical[3],
                           buffer_size);
    case KvLayout::kJax:
      break;
  }
  return kv_pages_view(data, layout, physical[0], physical[1], physical[2], physical[3],
                       buffer_size);
}

/// The K and V views `[num_kv_heads, total_pages, page_size, head_dim]` of JAX's combined ragged
/// pool `kv_pages` `[total_pages, page_size, 2 * num_kv_heads, head_dim]`, which holds K of KV
/// head h at combined head 2h and V at 2h+1. Any strides: both views keep the pool's page, slot
/// and dim strides and step two combined heads per KV head; V starts one combined head later.
/// Checks JAX's R12 (an even combined head count, JAX's text) and the pool view itself
/// (`check_view`, named "kv_pages"); on error the outputs are left untouched. O(1), no data read.
template <class T>
constexpr Status ragged_kv_views(const TensorView<T, 4>& kv_pages, TensorView<T, 4>* k_pages,
                                 TensorView<T, 4>* v_pages) noexcept {
  const std::int64_t combined = kv_pages.extents[2];
  // R12: JAX's bare `assert num_combined_kv_heads % 2 == 0`.
  if (combined % 2 != 0) {
    return Status(ErrorCode::kShapeMismatch, "R12",
                  "num_combined_kv_heads={0} must be even: kv_pages interleaves K and V of each "
                  "KV head on axis 2.",
                  "kv_pages is [total_pages, page_size, 2 * num_kv_heads, head_dim] with K of KV "
                  "head h at 2h and V at 2h+1",
                  {combined}, {}, "kv_pages");
  }
  ATTNREF_RETURN_IF_ERROR(check_view(kv_pages, "kv_pages"));
  const auto& s = kv_pages.strides;
  std::int64_t head_stride = 0;
  if (!checked_mul(s[2], 2, &head_stride)) {
    return Status(ErrorCode::kSizeOverflow, "",
                  "{f}: twice the stride of axis 2 ({0}) overflows int64",
                  "check the strides of kv_pages", {s[2]}, {}, "kv_pages");
  }
  const std::array<std::int64_t, 4> extents{combined / 2, kv_pages.extents[0], kv_pages.extents[1],
                                            kv_pages.extents[3]};
  const std::array<std::int64_t, 4> strides{head_stride, s[0], s[1], s[3]};
  // V's first element is combined head 1 of the pool; it exists (and so does the pointer) only
  // when the pool has elements, which check_view proved lie inside the buffer.
  const bool has_v = kv_pages.numel_or_zero() > 0;
  T* v_data = has_v ? kv_pages.data + s[2] : kv_pages.data;
  std::int64_t v_buffer = kv_pages.buffer_size;
  if (has_v && v_buffer >= 0) v_buffer -= s[2];
  *k_pages = TensorView<T, 4>(kv_pages.data, extents, strides, kv_pages.buffer_size);
  *v_pages = TensorView<T, 4>(v_data, extents, strides, v_buffer);
  return Status();
}

}  // namespace attnref
