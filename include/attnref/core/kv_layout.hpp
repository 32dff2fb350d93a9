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

#include <cstdint>
#include <cstring>

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

}  // namespace attnref
