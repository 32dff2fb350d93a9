// SPDX-License-Identifier: Apache-2.0
/// @file page_table.hpp
/// Pieces every page-table adapter shares: the padding policy for entries past a sequence's live
/// pages (-1 and friends), the check of a dense `[batch, max_pages]` table against its lengths,
/// the page-stride check of a KV cache, and `DensePageTable`, adapter-owned storage for a
/// converted table. No Eigen; not pulled in by the umbrella header.
///
/// Example (a vLLM-style table whose rows end in -1):
/// @code
///   attnref::TensorView<const int32_t, 2> table(block_table.data(), {num_seqs, max_blocks});
///   attnref::TensorView<const int32_t, 1> lens(seq_lens.data(), {num_seqs});
///   attnref::Status s = attnref::check_dense_page_table(table, lens, block_size, num_blocks,
///                                                       attnref::PaddingPolicy::kSkip);
/// @endcode
#pragma once

#include <cstdint>
#include <vector>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// What a page-table entry past a sequence's live pages may hold. attnref never guesses that -1
/// (or any other value) means "padding": the caller says so.
enum class PaddingPolicy {
  /// Default. Every entry of every row must be a page in `[0, total_pages)`, live or not: a -1
  /// anywhere is an error. Right for tables padded with a valid page (0) and for JAX's kernel,
  /// which DMAs whole compute blocks.
  kReject,
  /// Entries past `ceil(length / page_size)` are never read and may hold anything (-1, stale ids).
  /// Live entries are checked as always: a -1 inside the live region is still an error.
  kSkip,
};

/// "reject" or "skip".
constexpr const char* to_string(PaddingPolicy policy) noexcept {
  return policy == PaddingPolicy::kReject ? "reject" : "skip";
}

/// Checks a dense page table and its lengths (metadata tier, O(batch x max_pages)):
///  - both views valid, `lengths` has one entry per row of `table` (`kBatchMismatch`);
///  - `page_size > 0` (`kInvalidPageSize`), `total_pages >= 0` (`kNegativeExtent`);
///  - `lengths[b] >= 0` (`kLengthOutOfRange`);
///  - `ceil(lengths[b] / page_size) <= max_pages` (`kPageTableTooNarrow`);
///  - every live entry in `[0, total_pages)`, and under `kReject` every other entry too
///    (`kPageIndexOutOfRange`).
/// `table_name` and `lengths_name` name the tensors in messages ("block_table", "seq_lens"); they
/// must outlive the returned Status (string literals do).
template <class Index>
Status check_dense_page_table(const TensorView<const Index, 2>& table,
                              const TensorView<const Index, 1>& lengths, std::int64_t page_size,
                              std::int64_t total_pages, PaddingPolicy policy,
                              const char* table_name = "page_indices",
                              const char* lengths_name = "lengths") {
  ATTNREF_RETURN_IF_ERROR(check_view(table, table_name));
  ATTNREF_RETURN_IF_ERROR(check_view(lengths, lengths_name));
  const std::int64_t batch = table.extents[0];
  const std::int64_t width = table.extents[1];
  if (lengths.extents[0] != batch) {
    return Status(ErrorCode::kBatchMismatch, "",
                  "{f} has {0} entries but the page table has {1} rows",
                  "one length per sequence, one page-table row per sequence",
                  {lengths.extents[0], batch}, {}, lengths_name);
  }
  if (page_size <= 0) {
    return Status(ErrorCode::kInvalidPageSize, "", "page_size must be positive. Got {0}.",
                  "pass the cache's page (block) size in tokens", {page_size});
  }
  if (total_pages < 0) {
    return Status(ErrorCode::kNegativeExtent, "", "total_pages must be >= 0. Got {0}.",
                  "pass the number of pages (blocks) in the cache", {total_pages});
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = lengths(b);
    if (length < 0) {
      return Status(ErrorCode::kLengthOutOfRange, "", "{f}[{0}]={1} is negative",
                    "a sequence length counts tokens in the cache: 0 or more", {b, length}, {},
                    lengths_name);
    }
    const std::int64_t live = ceil_div(length, page_size);
    if (live > width) {
      return Status(ErrorCode::kPageTableTooNarrow, "",
                    "{f} is too narrow: sequence {0} of length {1} needs {2} pages of {3} tokens "
                    "but a row has {4} entries",
                    "widen the table to at least {2} columns (the kernel would read past the end "
                    "of the row), or fix the length",
                    {b, length, live, page_size, width}, {}, table_name);
    }
    const std::int64_t checked = policy == PaddingPolicy::kReject ? width : live;
    for (std::int64_t j = 0; j < checked; ++j) {
      const std::int64_t page = table(b, j);
      if (page >= 0 && page < total_pages) continue;
      if (j < live) {
        return Status(ErrorCode::kPageIndexOutOfRange, "",
                      "{f}[{0}, {1}]={2} is outside [0, {3}) (total_pages)",
                      "entry {1} is a live page of sequence {0} (length {4}): it is read, so it "
                      "must point at an allocated page; padding values are never legal here",
                      {b, j, page, total_pages, length}, {}, table_name);
      }
      return Status(ErrorCode::kPageIndexOutOfRange, "",
                    "{f}[{0}, {1}]={2} is outside [0, {3}) (total_pages); PaddingPolicy::kReject "
                    "checks every entry",
                    "entry {1} lies past the {5} live pages of sequence {0} (length {4}); if the "
                    "engine pads rows with a sentinel, say so with PaddingPolicy::kSkip",
                    {b, j, page, total_pages, length, live}, {}, table_name);
    }
  }
  return Status();
}

/// Checks the page stride of a logical `[num_kv_heads, total_pages, page_size, head_dim]` cache
/// view (shape tier, O(1)). Always: with more than one page, the page stride must step over one
/// page of one head, `(page_size - 1) * stride[2] + (head_dim - 1) * stride[3] + 1` elements;
/// anything less makes pages overlap, a stride bug (`kInvalidPageStride`). With `dense_pages`
/// (the caller promises each page is one contiguous run, as kernels that assume
/// `block stride == block_size x token stride` need), the page stride must equal
/// `page_size x num_kv_heads x head_dim`.
/// Precondition: `check_view(view, name).ok()`.
template <class T>
Status check_page_stride(const TensorView<T, 4>& view, const char* name, bool dense_pages) {
  const auto& e = view.extents;
  const auto& s = view.strides;
  if (e[1] <= 1 || e[0] == 0 || e[2] == 0 || e[3] == 0) return Status();
  const std::int64_t span = (e[2] - 1) * s[2] + (e[3] - 1) * s[3] + 1;  // no overflow: view valid
  if (s[1] < span) {
    return Status(ErrorCode::kInvalidPageStride, "",
                  "{f}: page stride {0} is smaller than one page of one head, which spans {1} "
                  "elements ({2} tokens at token stride {3})",
                  "the page (block) stride must step over a whole page; for a dense "
                  "[num_blocks, block_size, num_kv_heads, head_dim] cache it is "
                  "block_size * num_kv_heads * head_dim",
                  {s[1], span, e[2], s[2]}, {}, name);
  }
  if (dense_pages) {
    const std::int64_t dense = e[2] * e[0] * e[3];
    if (s[1] != dense) {
      return Status(ErrorCode::kInvalidPageStride, "",
                    "{f}: page stride {0} differs from a dense page's {1} elements (page_size {2} "
                    "x num_kv_heads {3} x head_dim {4}), and dense pages were declared",
                    "the cache interleaves K and V per block or pads its blocks; describe it with "
                    "its real strides and do not declare dense pages, or repack it",
                    {s[1], dense, e[2], e[0], e[3]}, {}, name);
    }
  }
  return Status();
}

/// A dense page table and its lengths, owned (what an adapter writes when the caller brings no
/// storage). Row `b` holds the live pages of sequence `b`, then padding entries.
template <class Index>
struct DensePageTable {
  std::vector<Index> lengths_storage;       ///< [batch]
  std::vector<Index> page_indices_storage;  ///< [batch * pages_per_sequence], row-major
  std::int64_t batch = 0;
  std::int64_t pages_per_sequence = 0;

  /// [batch]
  TensorView<const Index, 1> lengths() const noexcept {
    return {lengths_storage.data(), {batch}, static_cast<std::int64_t>(lengths_storage.size())};
  }
  /// [batch, pages_per_sequence]
  TensorView<const Index, 2> page_indices() const noexcept {
    return {page_indices_storage.data(),
            {batch, pages_per_sequence},
            static_cast<std::int64_t>(page_indices_storage.size())};
  }
};

}  // namespace attnref
