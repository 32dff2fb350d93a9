// SPDX-License-Identifier: Apache-2.0
/// @file flashinfer.hpp
/// FlashInfer's CSR page table (`kv_indptr`, `kv_indices`, `kv_last_page_len`) converted, with
/// every invariant checked, into attnref's own descriptors: lengths `[batch]` and a dense page
/// table `[batch, pages_per_sequence]` that plug into `PagedAttentionArgs`. FlashInfer's NHD
/// `[P, S, Hkv, D]` and HND `[P, Hkv, S, D]` caches are views from `kv_pages_view` with
/// `KvLayout::kNhd` / `KvLayout::kHnd`. No Eigen; not pulled in by the umbrella header.
///
/// FlashInfer's length of sequence b is `(pages_b - 1) * page_size + kv_last_page_len[b]` with
/// `pages_b = kv_indptr[b + 1] - kv_indptr[b]`, and 0 when `pages_b == 0`. FlashInfer checks none
/// of what follows (flashinfer #320); this header checks all of it.
///
/// Example:
/// @code
///   attnref::FlashInferPageTable<int32_t> csr;
///   csr.kv_indptr = {indptr.data(), {batch + 1}};
///   csr.kv_indices = {indices.data(), {nnz}};
///   csr.kv_last_page_len = {last.data(), {batch}};
///   auto k = attnref::kv_pages_view(k_cache.data(), attnref::KvLayout::kNhd, hkv, pages, 16, d);
///   auto v = attnref::kv_pages_view(v_cache.data(), attnref::KvLayout::kNhd, hkv, pages, 16, d);
///   attnref::DensePageTable<int32_t> table;      // owns lengths and the dense table
///   attnref::PagedAttentionArgs<float> args;
///   if (attnref::Status s = attnref::flashinfer_paged_args(csr, q, k, v, &table, &args); !s.ok())
///     return s;
///   attnref::paged_attention(args, out);
/// @endcode
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/interop/page_table.hpp"
#include "attnref/validate/paged.hpp"
#include "attnref/validate/ragged.hpp"

namespace attnref {

/// FlashInfer's paged-KV metadata in CSR form (views over the engine's host buffers).
template <class Index = std::int32_t>
struct FlashInferPageTable {
  static_assert(is_index_dtype<Index>, "FlashInfer indices are int32_t or int64_t");
  TensorView<const Index, 1> kv_indptr;         ///< [batch + 1]: 0, then running page counts
  TensorView<const Index, 1> kv_indices;        ///< [nnz]: page ids of every sequence, in order
  TensorView<const Index, 1> kv_last_page_len;  ///< [batch]: tokens in each last page
  /// Optional [batch]: the engine's own lengths. When given, each sequence must hold exactly
  /// `ceil(seq_lens[b] / page_size)` pages and its CSR length must equal `seq_lens[b]`; this
  /// catches an eagerly allocated extra page (pegainfer #291). Leave empty to skip.
  TensorView<const Index, 1> seq_lens;

  std::int64_t batch() const noexcept { return kv_last_page_len.extents[0]; }
};

/// Options for converting a CSR table into a dense one.
struct DenseTableOptions {
  /// Width of the dense table; -1 = the most pages any sequence holds. Under `Profile::kJax`
  /// pick a multiple of `pages_per_compute_block`.
  std::int64_t pages_per_sequence = -1;
  /// What the entries past a sequence's pages hold. The default 0 is a valid page whenever the
  /// pool has one, so the table passes `PaddingPolicy::kReject` and JAX's whole-block reads;
  /// the kernels never read those entries.
  std::int64_t pad_value = 0;
};

namespace detail {

/// `check_flashinfer_page_table`'s first step, O(1): the views, the entry counts of kv_indptr
/// and seq_lens against the batch, page_size and total_pages.
template <class Index>
Status check_flashinfer_table_shapes(const FlashInferPageTable<Index>& t, std::int64_t page_size,
                                     std::int64_t total_pages) {
  ATTNREF_RETURN_IF_ERROR(check_view(t.kv_indptr, "kv_indptr"));
  ATTNREF_RETURN_IF_ERROR(check_view(t.kv_indices, "kv_indices"));
  ATTNREF_RETURN_IF_ERROR(check_view(t.kv_last_page_len, "kv_last_page_len"));
  const bool has_seq_lens = !t.seq_lens.empty_view();
  if (has_seq_lens) ATTNREF_RETURN_IF_ERROR(check_view(t.seq_lens, "seq_lens"));
  const std::int64_t batch = t.batch();
  // batch + 1 is checked: a stride-0 kv_last_page_len view may claim INT64_MAX sequences.
  std::int64_t indptr_len = 0;
  if (!checked_add(batch, 1, &indptr_len)) {
    return Status(ErrorCode::kBatchMismatch, "",
                  "kv_last_page_len has {0} entries, so kv_indptr would need one more than int64 "
                  "holds",
                  "a batch is a real number of sequences; check kv_last_page_len's view", {batch},
                  {}, "kv_last_page_len");
  }
  if (t.kv_indptr.extents[0] != indptr_len) {
    return Status(ErrorCode::kBatchMismatch, "",
                  "kv_indptr has {0} entries; expected batch + 1 = {1} (kv_last_page_len has {2})",
                  "kv_indptr holds a leading 0 and one running page count per sequence",
                  {t.kv_indptr.extents[0], indptr_len, batch}, {}, "kv_indptr");
  }
  if (has_seq_lens && t.seq_lens.extents[0] != batch) {
    return Status(ErrorCode::kBatchMismatch, "",
                  "seq_lens has {0} entries but kv_last_page_len has {1}",
                  "one length per sequence", {t.seq_lens.extents[0], batch}, {}, "seq_lens");
  }
  if (page_size <= 0) {
    return Status(ErrorCode::kInvalidPageSize, "", "page_size must be positive. Got {0}.",
                  "pass the cache's page size in tokens", {page_size});
  }
  if (total_pages < 0) {
    return Status(ErrorCode::kNegativeExtent, "", "total_pages must be >= 0. Got {0}.",
                  "pass the number of pages in the cache", {total_pages});
  }
  return Status();
}

/// The row pointers, O(batch): kv_indptr starts at 0, never decreases and ends at the number of
/// kv_indices entries. `*widest` gets the most pages any sequence holds.
template <class Index>
Status check_flashinfer_indptr(const FlashInferPageTable<Index>& t, std::int64_t* widest) {
  const std::int64_t batch = t.batch();
  const std::int64_t nnz = t.kv_indices.extents[0];
  if (t.kv_indptr(0) != 0) {
    return Status(ErrorCode::kInvalidIndptr, "", "kv_indptr[0]={0}; a CSR row pointer starts at 0",
                  "pass the indptr of this batch alone, starting at 0; to use a slice of a larger "
                  "kv_indices buffer, offset the kv_indices view instead",
                  {static_cast<std::int64_t>(t.kv_indptr(0))}, {}, "kv_indptr");
  }
  *widest = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t begin = t.kv_indptr(b);
    const std::int64_t end = t.kv_indptr(b + 1);
    if (end < begin) {
      return Status(ErrorCode::kInvalidIndptr, "",
                    "kv_indptr decreases at sequence {0}: kv_indptr[{0}]={1} > kv_indptr[{2}]={3}",
                    "kv_indptr[b + 1] - kv_indptr[b] is the page count of sequence b and must not "
                    "be negative",
                    {b, begin, b + 1, end}, {}, "kv_indptr");
    }
    if (end - begin > *widest) *widest = end - begin;
  }
  if (t.kv_indptr(batch) != nnz) {
    return Status(ErrorCode::kInvalidIndptr, "",
                  "kv_indptr[{0}]={1} but kv_indices has {2} entries; the last row pointer is "
                  "the number of pages",
                  "pass kv_indices viewed to exactly kv_indptr[batch] entries (a longer "
                  "preallocated buffer needs a shorter view)",
                  {batch, static_cast<std::int64_t>(t.kv_indptr(batch)), nnz}, {}, "kv_indptr");
  }
  return Status();
}

/// Sequence b's `seq_lens` entry against its CSR description: `pages` pages, the last holding
/// `last` tokens, `length` tokens in all.
template <class Index>
Status check_flashinfer_seq_len(const FlashInferPageTable<Index>& t, std::int64_t b,
                                std::int64_t page_size, std::int64_t pages, std::int64_t last,
                                std::int64_t length) {
  const std::int64_t want = t.seq_lens(b);
  if (want < 0) {
    return Status(ErrorCode::kLengthOutOfRange, "", "seq_lens[{0}]={1} is negative",
                  "a sequence length counts tokens in the cache: 0 or more", {b, want}, {},
                  "seq_lens");
  }
  const std::int64_t want_pages = ceil_div(want, page_size);
  if (pages != want_pages) {
    return Status(ErrorCode::kPageCountMismatch, "",
                  "sequence {0} holds {1} pages in kv_indptr but seq_lens[{0}]={2} needs "
                  "ceil({2} / {3}) = {4}",
                  "an eagerly allocated page (or a missing one) makes the kernel read a page "
                  "of garbage; hand the kernel exactly the pages the tokens occupy",
                  {b, pages, want, page_size, want_pages}, {}, "kv_indptr");
  }
  if (length != want) {
    return Status(ErrorCode::kInvalidLastPageLen, "",
                  "kv_last_page_len[{0}]={1} gives length {2} but seq_lens[{0}]={3} (page_size "
                  "{4})",
                  "kv_last_page_len[b] = seq_lens[b] - (pages - 1) * page_size = {5}",
                  {b, last, length, want, page_size, want - (pages - 1) * page_size}, {},
                  "kv_last_page_len");
  }
  return Status();
}

/// Sequence b, O(its pages): its pages in [0, total_pages), its last page's fill, its length
/// within `Index`, then (when given) its `seq_lens` entry. Precondition: the row pointers passed.
template <class Index>
Status check_flashinfer_sequence(const FlashInferPageTable<Index>& t, std::int64_t b,
                                 std::int64_t page_size, std::int64_t total_pages) {
  const std::int64_t begin = t.kv_indptr(b);
  const std::int64_t pages = t.kv_indptr(b + 1) - begin;
  for (std::int64_t i = begin; i < begin + pages; ++i) {
    const std::int64_t page = t.kv_indices(i);
    if (page < 0 || page >= total_pages) {
      return Status(ErrorCode::kPageIndexOutOfRange, "",
                    "kv_indices[{0}]={1} is outside [0, {2}) (total_pages)",
                    "entry {0} is page {3} of sequence {4}; every CSR entry is live, so a "
                    "padding value such as -1 has no place in kv_indices",
                    {i, page, total_pages, i - begin, b}, {}, "kv_indices");
    }
  }
  const std::int64_t last = t.kv_last_page_len(b);
  if (pages > 0 && (last < 1 || last > page_size)) {
    return Status(ErrorCode::kInvalidLastPageLen, "",
                  "kv_last_page_len[{0}]={1} is outside [1, {2}] (page_size) for a sequence "
                  "with {3} pages",
                  "the last page holds 1 to page_size tokens: seq_len - (pages - 1) * "
                  "page_size; a full last page is page_size, not 0",
                  {b, last, page_size, pages}, {}, "kv_last_page_len");
  }
  if (pages == 0 && (last < 0 || last > page_size)) {
    return Status(ErrorCode::kInvalidLastPageLen, "",
                  "kv_last_page_len[{0}]={1} is outside [0, {2}] (page_size) for a sequence "
                  "with no pages",
                  "a sequence without pages has length 0; its kv_last_page_len is ignored but "
                  "must still be a page fill",
                  {b, last, page_size}, {}, "kv_last_page_len");
  }
  std::int64_t length = 0;
  if (pages > 0 &&
      (!checked_mul(pages - 1, page_size, &length) || !checked_add(length, last, &length) ||
       length > std::numeric_limits<Index>::max())) {
    return Status(
        ErrorCode::kSizeOverflow, "",
        "sequence {0}: ({1} pages - 1) x page_size {2} + kv_last_page_len {3} "
        "overflows the index type (max {4})",
        "a length must fit the index type; use int64 indices or check the page "
        "counts",
        {b, pages, page_size, last, static_cast<std::int64_t>(std::numeric_limits<Index>::max())},
        {}, "kv_last_page_len");
  }
  if (t.seq_lens.empty_view()) return Status();
  return check_flashinfer_seq_len(t, b, page_size, pages, last, length);
}

}  // namespace detail

/// Checks a CSR page table (metadata tier, O(batch + nnz)) against a pool of `total_pages` pages
/// of `page_size` tokens, and returns in `*max_pages` (if non-null) the most pages any sequence
/// holds. Each broken invariant has its own error:
///  - views valid; `kv_indptr` has `batch + 1` entries, `seq_lens` (if given) `batch`
///    (`kBatchMismatch`); `page_size > 0` (`kInvalidPageSize`); `total_pages >= 0`;
///  - `kv_indptr[0] == 0`, non-decreasing, `kv_indptr[batch] == nnz` (`kInvalidIndptr`);
///  - every `kv_indices` entry in `[0, total_pages)` (`kPageIndexOutOfRange`): all are live;
///  - `1 <= kv_last_page_len[b] <= page_size` when sequence b has pages, `0 <= ... <= page_size`
///    when it has none (its length is 0) (`kInvalidLastPageLen`);
///  - the length fits `Index` (`kSizeOverflow`);
///  - with `seq_lens`: `seq_lens[b] >= 0` (`kLengthOutOfRange`), pages == ceil(seq_lens[b] /
///    page_size) (`kPageCountMismatch`), and the CSR length equals `seq_lens[b]`
///    (`kInvalidLastPageLen`).
template <class Index>
Status check_flashinfer_page_table(const FlashInferPageTable<Index>& t, std::int64_t page_size,
                                   std::int64_t total_pages, std::int64_t* max_pages = nullptr) {
  ATTNREF_RETURN_IF_ERROR(detail::check_flashinfer_table_shapes(t, page_size, total_pages));
  std::int64_t widest = 0;
  ATTNREF_RETURN_IF_ERROR(detail::check_flashinfer_indptr(t, &widest));
  for (std::int64_t b = 0; b < t.batch(); ++b)
    ATTNREF_RETURN_IF_ERROR(detail::check_flashinfer_sequence(t, b, page_size, total_pages));
  if (max_pages != nullptr) *max_pages = widest;
  return Status();
}

/// Converts a CSR table into caller-provided storage: `lengths` `[batch]` and `page_indices`
/// `[batch, width]`. Row b gets the pages of sequence b, then `pad_value` up to `width`. Checks
/// the table (`check_flashinfer_page_table`), both output views (`check_output_view`: valid, no
/// two elements at one address) and that they share no memory (`kOverlappingOutput`), and that
/// `width` holds the longest sequence (`kPageTableTooNarrow`). Writes nothing on error.
template <class Index>
Status flashinfer_to_dense(const FlashInferPageTable<Index>& t, std::int64_t page_size,
                           std::int64_t total_pages, TensorView<Index, 1> lengths,
                           TensorView<Index, 2> page_indices, Index pad_value = 0) {
  std::int64_t widest = 0;
  ATTNREF_RETURN_IF_ERROR(check_flashinfer_page_table(t, page_size, total_pages, &widest));
  ATTNREF_RETURN_IF_ERROR(check_output_view(lengths, "lengths"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(page_indices, "page_indices"));
  ATTNREF_RETURN_IF_ERROR(check_disjoint_outputs(lengths, page_indices, "page_indices",
                                                 "{f} and lengths share memory"));
  const std::int64_t batch = t.batch();
  if (lengths.extents[0] != batch || page_indices.extents[0] != batch) {
    return Status(ErrorCode::kBatchMismatch, "",
                  "output lengths has {0} entries and page_indices {1} rows; the CSR table has "
                  "{2} sequences",
                  "size the outputs [batch] and [batch, pages_per_sequence]",
                  {lengths.extents[0], page_indices.extents[0], batch}, {}, "page_indices");
  }
  const std::int64_t width = page_indices.extents[1];
  if (widest > width) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t pages = t.kv_indptr(b + 1) - t.kv_indptr(b);
      if (pages <= width) continue;
      return Status(ErrorCode::kPageTableTooNarrow, "",
                    "page_indices is too narrow: sequence {0} holds {1} pages but a row has {2} "
                    "entries",
                    "make the dense table at least {3} pages wide (the longest sequence)",
                    {b, pages, width, widest}, {}, "page_indices");
    }
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t begin = t.kv_indptr(b);
    const std::int64_t pages = t.kv_indptr(b + 1) - begin;
    const std::int64_t last = t.kv_last_page_len(b);
    lengths(b) = static_cast<Index>(pages == 0 ? 0 : (pages - 1) * page_size + last);
    for (std::int64_t j = 0; j < width; ++j)
      page_indices(b, j) = j < pages ? t.kv_indices(begin + j) : pad_value;
  }
  return Status();
}

/// Converts a CSR table into adapter-owned storage (`*out`, resized). The width is
/// `options.pages_per_sequence`, or the longest sequence's page count when -1.
template <class Index>
Status flashinfer_to_dense(const FlashInferPageTable<Index>& t, std::int64_t page_size,
                           std::int64_t total_pages, DensePageTable<Index>* out,
                           const DenseTableOptions& options = {}) {
  std::int64_t widest = 0;
  ATTNREF_RETURN_IF_ERROR(check_flashinfer_page_table(t, page_size, total_pages, &widest));
  const std::int64_t width = options.pages_per_sequence < 0 ? widest : options.pages_per_sequence;
  const std::int64_t batch = t.batch();
  std::int64_t cells = 0;
  if (!checked_mul(batch, width, &cells)) {
    return Status(ErrorCode::kSizeOverflow, "",
                  "a dense table of {0} rows x {1} pages overflows int64",
                  "check pages_per_sequence", {batch, width});
  }
  DensePageTable<Index> table;
  table.batch = batch;
  table.pages_per_sequence = width;
  table.lengths_storage.resize(static_cast<size_t>(batch));
  table.page_indices_storage.resize(static_cast<size_t>(cells));
  TensorView<Index, 1> lengths(table.lengths_storage.data(), {batch});
  TensorView<Index, 2> pages(table.page_indices_storage.data(), {batch, width});
  ATTNREF_RETURN_IF_ERROR(flashinfer_to_dense(t, page_size, total_pages, lengths, pages,
                                              static_cast<Index>(options.pad_value)));
  *out = std::move(table);
  return Status();
}

namespace detail {

/// The dense table of `t` over the pool `k_pages` (its page size and page count), into `*table`,
/// after `k_pages` itself is checked.
template <class KV, class Index>
Status flashinfer_pool_table(const FlashInferPageTable<Index>& t,
                             const TensorView<const KV, 4>& k_pages, DensePageTable<Index>* table,
                             const DenseTableOptions& options) {
  ATTNREF_RETURN_IF_ERROR(check_view(k_pages, "k_pages"));
  return flashinfer_to_dense(t, k_pages.extents[2], k_pages.extents[1], table, options);
}

}  // namespace detail

/// Fills `*args` with `q`, the K/V page views (logical `[num_kv_heads, total_pages, page_size,
/// head_dim]`, e.g. from `kv_pages_view(..., KvLayout::kNhd, ...)`) and the converted table, whose
/// storage `*table` owns (keep it alive as long as `*args`). Page size and total pages come from
/// `k_pages`. Other fields of `*args` (soft cap, scale, ...) are left as they are. The shape tier
/// and the kernels' own checks still run when `args` is used.
template <class Q, class KV, class Index>
Status flashinfer_paged_args(const FlashInferPageTable<Index>& t, TensorView<const Q, 3> q,
                             TensorView<const KV, 4> k_pages, TensorView<const KV, 4> v_pages,
                             DensePageTable<Index>* table, PagedAttentionArgs<Q, KV, Index>* args,
                             const DenseTableOptions& options = {}) {
  ATTNREF_RETURN_IF_ERROR(detail::flashinfer_pool_table(t, k_pages, table, options));
  args->q = q;
  args->k_pages = k_pages;
  args->v_pages = v_pages;
  args->lengths = table->lengths();
  args->page_indices = table->page_indices();
  return Status();
}

/// The ragged form of `flashinfer_paged_args`, for a chunked-prefill step: FlashInfer's
/// `qo_indptr` `[batch + 1]` (0, then running query counts) becomes cu_q_lens, the converted
/// table's lengths kv_lens, and num_seqs is the batch. `q` is `[num_tokens, num_q_heads,
/// head_dim]`, its rows in `qo_indptr`'s order. `*table` owns the dense table (keep it alive as
/// long as `*args`). Other fields of `*args` are left as they are; `check_ragged` (run by the
/// kernels) checks the rest, qo_indptr included.
template <class Q, class KV, class Index>
Status flashinfer_ragged_args(const FlashInferPageTable<Index>& t,
                              TensorView<const Index, 1> qo_indptr, TensorView<const Q, 3> q,
                              TensorView<const KV, 4> k_pages, TensorView<const KV, 4> v_pages,
                              DensePageTable<Index>* table,
                              RaggedPagedAttentionArgs<Q, KV, Index>* args,
                              const DenseTableOptions& options = {}) {
  ATTNREF_RETURN_IF_ERROR(detail::flashinfer_pool_table(t, k_pages, table, options));
  args->q = q;
  args->k_pages = k_pages;
  args->v_pages = v_pages;
  args->kv_lens = table->lengths();
  args->page_indices = table->page_indices();
  args->cu_q_lens = qo_indptr;
  args->num_seqs = {};
  args->num_seqs_value = table->batch;
  return Status();
}

}  // namespace attnref
