// SPDX-License-Identifier: Apache-2.0
/// @file kv_rows.hpp
/// Checks of the rows a paged or ragged kernel reads, shared by both families (their page
/// tables and lengths differ; what makes a read page or row bad does not):
///  - shape tier: a positive page size, and a page table's reach (pages per sequence x page
///    size) within int64;
///  - metadata tier: every page a sequence reads lies in `[0, total_pages)`;
///  - data tier: a bad element in a live K/V row, reported with where it is (sequence, token,
///    page, slot, KV head, dim) and, for fp8 pages, the code itself; NaN/Inf in live rows of a
///    rank-3 tensor such as q (splash uses that one too).
#pragma once

#include <cstdint>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {
namespace detail {

/// The page pool's page size is positive, and `pages_per_seq` pages of it hold a length that
/// fits int64. `overflow_format` (a literal) names the page table's width as the family does;
/// `page_size_field` names the tensor the page size comes from ("" for none).
inline Status check_page_capacity(std::int64_t pages_per_seq, std::int64_t page_size,
                                  const char* overflow_format, const char* page_size_field) {
  if (page_size <= 0) {
    return Status(ErrorCode::kInvalidPageSize, "", "page_size must be positive. Got {0}.",
                  "page_size is dimension 2 of the logical [num_kv_heads, total_pages, page_size, "
                  "head_dim] pages",
                  {page_size}, {}, page_size_field);
  }
  std::int64_t capacity = 0;
  if (!checked_mul(pages_per_seq, page_size, &capacity)) {
    return Status(ErrorCode::kSizeOverflow, "", overflow_format,
                  "check page_indices' second dimension", {pages_per_seq, page_size});
  }
  return Status();
}

/// `kNonFiniteData` for element `x` (NaN/Inf, or an fp8 NaN/infinity code) of `name`
/// ("k_pages" or "v_pages") at token t of sequence `seq`, stored at (h, page, slot, d).
template <class KV>
constexpr Status non_finite_kv_row(const KV& x, const char* name, std::int64_t seq, std::int64_t t,
                                   std::int64_t page, std::int64_t slot, std::int64_t h,
                                   std::int64_t d) noexcept {
  if constexpr (is_fp8_dtype<KV>) {
    constexpr const char* kHint =
        dtype_of<KV> == DType::kFloat8E4M3FN
            ? "float8_e4m3fn has no infinity and codes 127 and 255 (0x7f, 0xff) are NaN: a "
              "live cache row holds an unwritten page or a value the quantizer did not saturate"
            : "float8_e5m2 codes 124..127 and 252..255 (exponent bits all set) are +-inf or "
              "NaN: a live cache row holds an unwritten page or an overflowing value";
    return Status(ErrorCode::kNonFiniteData, "",
                  "{f} holds the {d7} code {6}, which is not a finite number, at sequence {0}, "
                  "token {1} (page {2}, slot {3}), kv head {4}, dim {5}",
                  kHint,
                  {seq, t, page, slot, h, d, static_cast<std::int64_t>(x.bits),
                   static_cast<std::int64_t>(dtype_of<KV>)},
                  {}, name);
  } else {
    (void)x;
    return Status(ErrorCode::kNonFiniteData, "",
                  "{f} is not finite at sequence {0}, token {1} (page {2}, slot {3}), kv head "
                  "{4}, dim {5}",
                  "a live cache row holds NaN/Inf: an unwritten or corrupted page",
                  {seq, t, page, slot, h, d}, {}, name);
  }
}

/// `kPageIndexOutOfRange` for the first of pages `[first, live)` of sequence `seq` in
/// `page_indices` (`[sequences, pages_per_sequence]`) outside `[0, total_pages)`. `hint` says why
/// the page is read ({4} is `length`: "... because lengths[{0}]={4} ...").
template <class Index>
Status check_live_pages(const TensorView<const Index, 2>& page_indices, std::int64_t seq,
                        std::int64_t first, std::int64_t live, std::int64_t total_pages,
                        std::int64_t length, const char* hint) noexcept {
  for (std::int64_t j = first; j < live; ++j) {
    const std::int64_t page = page_indices(seq, j);
    if (page < 0 || page >= total_pages) {
      return Status(ErrorCode::kPageIndexOutOfRange, "",
                    "page_indices[{0}, {1}]={2} is outside [0, {3}) (total_pages)", hint,
                    {seq, j, page, total_pages, length}, {}, "page_indices");
    }
  }
  return Status();
}

/// `kNonFiniteData` for the first bad element of token t's K or V row (K first) of KV head h,
/// stored at (h, page, slot, 0..dim) for K and (h, page, slot, 0..v_pages' last extent) for V
/// (paged MLA: V narrower than K).
template <class KvPages>
Status check_kv_row(const KvPages& k_pages, const KvPages& v_pages, std::int64_t seq,
                    std::int64_t t, std::int64_t page, std::int64_t slot, std::int64_t h,
                    std::int64_t dim) noexcept {
  const std::int64_t dim_v = v_pages.extents[3];
  for (std::int64_t d = 0; d < dim || d < dim_v; ++d) {
    const bool k_ok = d >= dim || element_is_finite(k_pages(h, page, slot, d));
    const bool v_ok = d >= dim_v || element_is_finite(v_pages(h, page, slot, d));
    if (!k_ok || !v_ok) {
      return non_finite_kv_row(k_ok ? v_pages(h, page, slot, d) : k_pages(h, page, slot, d),
                               k_ok ? "v_pages" : "k_pages", seq, t, page, slot, h, d);
    }
  }
  return Status();
}

/// `kNonFiniteData` for the first NaN/Inf of `view` (`name`) in its first `rows` rows (first
/// index), all of its other two: "q[3, 1, 7] is not finite".
template <class T>
Status check_finite_rows(const TensorView<T, 3>& view, std::int64_t rows, const char* name,
                         const char* hint) noexcept {
  const auto& e = view.extents;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < e[1]; ++j)
      for (std::int64_t d = 0; d < e[2]; ++d)
        if (!element_is_finite(view(i, j, d))) {
          return Status(ErrorCode::kNonFiniteData, "", "{f}[{0}, {1}, {2}] is not finite", hint,
                        {i, j, d}, {}, name);
        }
  return Status();
}

}  // namespace detail
}  // namespace attnref
