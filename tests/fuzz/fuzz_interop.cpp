// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of what an engine hands attnref besides the attention call itself: fuzz bytes
// become
//  - a FlashInfer CSR page table (kv_indptr, kv_indices, kv_last_page_len, optional seq_lens;
//    int32 or int64) over a pool of pages, then its check, its conversion into adapter-owned
//    storage and its conversion into caller storage (interop/flashinfer.hpp);
//  - a vLLM block table with its seq_lens and padding policy (int32 or int64;
//    interop/vllm.hpp, interop/page_table.hpp), and a vLLM cache in each of its four forms
//    (separate NHD / HND tensors, combined K/V-first / block-first, heads before slots or not)
//    turned into logical K/V views;
//  - two attention states and their merge, float or half, in place or into separate outputs
//    (kernels/merge_attention_states.hpp).
// Each view may be made hostile: a hostile extent or stride (stride 0 included), a short
// buffer, null data; metadata values are drawn near their limits (-1, 0, page_size + 1, INT64_MAX,
// values past int32 truncated to int32 ...). Widened draws (the Wide byte): huge extents over
// stride-0 views (INT64_MAX sequences), int64 metadata past int32, and special logsumexps.
//
// Every buffer holds exactly the elements its view's `buffer_size` claims, so AddressSanitizer
// sees any read past it.
//
// Invariants:
//  - the CSR and block-table checks give the error code of a plain re-reading of their
//    documented rules, in their documented order (and ok exactly when it does); a valid CSR
//    table reports the longest sequence's page count;
//  - a conversion writes exactly the plain conversion (each row the sequence's pages, then the
//    pad value; lengths (pages - 1) * page_size + kv_last_page_len) on success, and nothing on
//    error; caller storage too narrow, of another batch, overlapping or invalid is refused;
//  - vLLM cache views: every element of the logical K and V views is the cache's element of the
//    same (block, slot, head, d) and lies in its buffer; pages do not overlap (and are dense
//    when declared); a consistent, unmutated cache is accepted; nothing is written on error;
//  - merge: try_merge_attention_states returns check_merge_states' status and writes nothing on
//    error; on success every element equals the float64 merge within the stored type's
//    rounding, a state with logsumexp -inf is not read (its row holds NaN) and the other state
//    comes out exactly, and a NaN or +inf logsumexp gives a NaN row and logsumexp;
//  - every error renders; work stays within the budget of the buffers behind the call.
// A call whose valid views claim more than 2^22 metadata entries (stride-0 views of huge
// extents) is not made: walking what the caller claims is the caller's cost, not a bug.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <attnref/core/executor.hpp>
#include <attnref/interop/flashinfer.hpp>
#include <attnref/interop/page_table.hpp>
#include <attnref/interop/vllm.hpp>
#include <attnref/kernels/merge_attention_states.hpp>

#include "fuzz_common.hpp"

namespace {

using namespace attnref_fuzz;  // the shared harness pieces (fuzz_common.hpp)
using I128 = __int128;

constexpr std::int64_t kMaxClaimed = std::int64_t{1} << 22;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// A 1-D index view over `values` (as Index: values past its range wrap, as an engine's
/// narrowing copy would), row-major or strided by 2, sometimes mutated.
template <class Index>
void index_view(Reader& r, const std::vector<std::int64_t>& values, std::int64_t near, bool hostile,
                Buffer<Index, 1>* b) {
  Geometry<1> g;
  g.extents = {static_cast<std::int64_t>(values.size())};
  g.strides = {r.chance(32) ? 2 : 1};
  if (hostile) mutate(r, g, near);
  make_buffer(g, static_cast<Index>(-1), b);
  const std::int64_t n = std::min(g.extents[0], static_cast<std::int64_t>(values.size()));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t off = safe_offset(g, {i}, b->size);
    if (off >= 0)
      b->data[static_cast<size_t>(off)] = static_cast<Index>(values[static_cast<size_t>(i)]);
  }
}

/// Whether nested loops over these extents stay small: the product of the extents, each taken
/// as at least 1 (a zero extent inside stops no outer loop), is at most kMaxElements.
template <size_t R>
bool walkable(const std::array<std::int64_t, R>& e) {
  std::int64_t n = 1;
  for (const std::int64_t x : e) n = sat_mul(n, std::max<std::int64_t>(x, 1));
  return n <= kMaxElements;
}

/// A metadata value near its limit.
std::int64_t hostile_meta(Reader& r, const Wide& w, std::int64_t near) {
  if (w.int64_meta() && r.flag()) return past_int32(r);
  return hostile_int(r, near);
}

/// One entry of `v` (if any) becomes a metadata value near `near`, or near its own value.
inline void hostile_entry(Reader& r, const Wide& w, std::int64_t near,
                          std::vector<std::int64_t>* v) {
  if (v->empty()) return;
  std::int64_t& x = (*v)[static_cast<size_t>(r.range(0, static_cast<std::int64_t>(v->size()) - 1))];
  x = hostile_meta(r, w, r.flag() ? near : x);
}

/// A 1-D view that claims `n` entries of one element (stride 0): huge valid views.
template <class Index>
void repeated_view(std::int64_t n, Index value, Buffer<Index, 1>* b) {
  Geometry<1> g;
  g.extents = {n};
  g.strides = {0};
  make_buffer(g, value, b);
}

// --- FlashInfer CSR ---------------------------------------------------------------------------

/// The rules of check_flashinfer_page_table, read plainly (128-bit arithmetic, no early exits
/// shared with the library), in its documented order. nullopt: the views claim more entries
/// than the harness walks (the call is not made).
template <class Index>
std::optional<ErrorCode> plain_csr(const attnref::FlashInferPageTable<Index>& t,
                                   std::int64_t page_size, std::int64_t total_pages,
                                   std::int64_t* widest) {
  for (const auto* v : {&t.kv_indptr, &t.kv_indices, &t.kv_last_page_len}) {
    const Status s = attnref::check_view(*v, "");
    if (!s.ok()) return s.code();
  }
  const bool has_seq_lens = !t.seq_lens.empty_view();
  if (has_seq_lens) {
    const Status s = attnref::check_view(t.seq_lens, "");
    if (!s.ok()) return s.code();
  }
  const I128 batch = t.kv_last_page_len.extents[0];
  const I128 nnz = t.kv_indices.extents[0];
  if (batch + 1 > std::numeric_limits<std::int64_t>::max()) return ErrorCode::kBatchMismatch;
  if (t.kv_indptr.extents[0] != batch + 1) return ErrorCode::kBatchMismatch;
  if (has_seq_lens && t.seq_lens.extents[0] != batch) return ErrorCode::kBatchMismatch;
  if (page_size <= 0) return ErrorCode::kInvalidPageSize;
  if (total_pages < 0) return ErrorCode::kNegativeExtent;
  if (batch > kMaxClaimed) return std::nullopt;
  const auto n = static_cast<std::int64_t>(batch);
  if (t.kv_indptr(0) != 0) return ErrorCode::kInvalidIndptr;
  I128 most = 0;
  for (std::int64_t b = 0; b < n; ++b) {
    const I128 pages = static_cast<I128>(t.kv_indptr(b + 1)) - t.kv_indptr(b);
    if (pages < 0) return ErrorCode::kInvalidIndptr;
    most = std::max(most, pages);
  }
  if (t.kv_indptr(n) != nnz) return ErrorCode::kInvalidIndptr;
  if (nnz > kMaxClaimed) return std::nullopt;
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t begin = t.kv_indptr(b), end = t.kv_indptr(b + 1);
    for (std::int64_t i = begin; i < end; ++i)
      if (t.kv_indices(i) < 0 || t.kv_indices(i) >= total_pages)
        return ErrorCode::kPageIndexOutOfRange;
    const I128 pages = end - begin, last = t.kv_last_page_len(b);
    if (pages > 0 ? (last < 1 || last > page_size) : (last < 0 || last > page_size))
      return ErrorCode::kInvalidLastPageLen;
    const I128 length = pages > 0 ? (pages - 1) * page_size + last : 0;
    if (length > std::numeric_limits<Index>::max()) return ErrorCode::kSizeOverflow;
    if (has_seq_lens) {
      const I128 want = t.seq_lens(b);
      if (want < 0) return ErrorCode::kLengthOutOfRange;
      if (pages != (want + page_size - 1) / page_size) return ErrorCode::kPageCountMismatch;
      if (length != want) return ErrorCode::kInvalidLastPageLen;
    }
  }
  *widest = static_cast<std::int64_t>(most);
  return ErrorCode::kOk;
}

/// Checks that row b of a converted table holds sequence b's pages, then `pad`, and that its
/// length is the CSR length.
template <class Index, class Lengths, class Pages>
void check_converted(const attnref::FlashInferPageTable<Index>& t, std::int64_t page_size,
                     const Lengths& lengths, const Pages& pages, std::int64_t width, Index pad) {
  for (std::int64_t b = 0; b < t.batch(); ++b) {
    const std::int64_t begin = t.kv_indptr(b), count = t.kv_indptr(b + 1) - begin;
    const std::int64_t want = count == 0 ? 0 : (count - 1) * page_size + t.kv_last_page_len(b);
    ATTNREF_FUZZ_CHECK(static_cast<std::int64_t>(lengths(b)) == want,
                       "converted length differs from the CSR length");
    for (std::int64_t j = 0; j < width; ++j) {
      const Index expected = j < count ? t.kv_indices(begin + j) : pad;
      ATTNREF_FUZZ_CHECK(pages(b, j) == expected, "converted page-table entry differs");
    }
  }
}

template <class Index>
void csr_case(Reader& r, Rng& rng, const Wide& w) {
  (void)rng;
  std::int64_t page_size = r.range(1, 20);
  std::int64_t total_pages = r.range(0, 12);
  const std::int64_t batch = r.range(0, 6);
  std::vector<std::int64_t> indptr{0}, indices, last, seq_lens;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t pages = total_pages == 0 ? 0 : r.range(0, 5);
    for (std::int64_t j = 0; j < pages; ++j) indices.push_back(r.range(0, total_pages - 1));
    indptr.push_back(static_cast<std::int64_t>(indices.size()));
    const std::int64_t fill = pages == 0 ? r.range(0, page_size) : r.range(1, page_size);
    last.push_back(fill);
    seq_lens.push_back(pages == 0 ? 0 : (pages - 1) * page_size + fill);
  }
  const bool with_seq_lens = r.flag();

  // Hostile values: one entry of one array, or a size parameter.
  const int mutations = r.chance(160) ? r.range(1, 3) : 0;
  bool hostile_views[4] = {false, false, false, false};
  for (int m = 0; m < mutations; ++m) {
    switch (r.u8() % 8) {
      case 0:
        hostile_entry(r, w, static_cast<std::int64_t>(indices.size()), &indptr);
        break;
      case 1:
        hostile_entry(r, w, total_pages, &indices);
        break;
      case 2:
        hostile_entry(r, w, page_size, &last);
        break;
      case 3:
        hostile_entry(r, w, page_size, &seq_lens);
        break;
      case 4:
        page_size = hostile_meta(r, w, page_size);
        break;
      case 5:
        total_pages = hostile_meta(r, w, total_pages);
        break;
      default:
        hostile_views[r.u8() % 4] = true;
    }
  }
  Buffer<Index, 1> indptr_b, indices_b, last_b, seq_b;
  index_view(r, indptr, batch, hostile_views[0], &indptr_b);
  index_view(r, indices, total_pages, hostile_views[1], &indices_b);
  index_view(r, last, batch, hostile_views[2], &last_b);
  index_view(r, seq_lens, batch, hostile_views[3], &seq_b);
  if (w.huge_zero()) {  // stride-0 views claiming huge batches (INT64_MAX: batch + 1 overflows)
    const std::int64_t huge = huge_extent(r);
    repeated_view<Index>(huge, static_cast<Index>(r.range(0, 2)), &last_b);
    if (r.flag()) repeated_view<Index>(r.flag() ? huge : sat_add(huge, 1), Index(0), &indptr_b);
  }
  attnref::FlashInferPageTable<Index> t;
  t.kv_indptr = indptr_b.cview();
  t.kv_indices = indices_b.cview();
  t.kv_last_page_len = last_b.cview();
  if (with_seq_lens) t.seq_lens = seq_b.cview();

  std::int64_t plain_widest = -1;
  const std::optional<ErrorCode> want = plain_csr(t, page_size, total_pages, &plain_widest);
  if (!want) return;
  DataSize data;
  data.add(indptr_b).add(indices_b).add(last_b).add(seq_b);
  std::int64_t widest = -1;
  Status s;
  {
    BudgetScope scope("check_flashinfer_page_table", data);
    s = attnref::check_flashinfer_page_table(t, page_size, total_pages, &widest);
  }
  check_error_renders(s);
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr)  // what the call was (debugging)
    std::fprintf(stderr, "csr: batch %lld, nnz %lld, page_size %lld, total_pages %lld: %s\n",
                 static_cast<long long>(t.batch()), static_cast<long long>(t.kv_indices.extents[0]),
                 static_cast<long long>(page_size), static_cast<long long>(total_pages),
                 attnref::error_code_name(s.code()));
  ATTNREF_FUZZ_CHECK(s.code() == *want, "CSR check differs from the plain rules: got " +
                                            s.to_string() + ", plain " +
                                            attnref::error_code_name(*want));
  if (s.ok()) ATTNREF_FUZZ_CHECK(widest == plain_widest, "wrong longest sequence");

  // Adapter-owned storage: the width asked for, -1 (the longest), or one too few.
  attnref::DenseTableOptions options;
  switch (r.u8() % 4) {
    case 0:
      options.pages_per_sequence = -1;
      break;
    case 1:
      options.pages_per_sequence = plain_widest - 1;
      break;
    default:
      options.pages_per_sequence = plain_widest + r.range(0, 3);
  }
  options.pad_value = r.range(-1, 3);
  const std::int64_t width =
      options.pages_per_sequence < 0 ? plain_widest : options.pages_per_sequence;
  if (!s.ok() || sat_mul(t.batch(), std::max<std::int64_t>(width, 1)) <= kMaxElements) {
    attnref::DensePageTable<Index> owned;
    owned.batch = -7;  // untouched on error
    Status so;
    {
      DataSize owned_data = data;
      owned_data.add_raw(sat_mul(t.batch(), std::max<std::int64_t>(width, 0) + 1),
                         static_cast<std::int64_t>(sizeof(Index)));
      BudgetScope scope("flashinfer_to_dense (owned)", owned_data);
      so = attnref::flashinfer_to_dense(t, page_size, total_pages, &owned, options);
    }
    check_error_renders(so);
    if (!s.ok()) {
      ATTNREF_FUZZ_CHECK(so.code() == s.code(),
                         "owned conversion of an invalid table: " + so.to_string());
    } else if (width < plain_widest) {
      ATTNREF_FUZZ_CHECK(so.code() == ErrorCode::kPageTableTooNarrow,
                         "too narrow: " + so.to_string());
    } else {
      ATTNREF_FUZZ_CHECK(so.ok(), "owned conversion of a valid table failed: " + so.to_string());
      ATTNREF_FUZZ_CHECK(owned.batch == t.batch() && owned.pages_per_sequence == width,
                         "owned table of the wrong shape");
      check_converted(t, page_size, owned.lengths(), owned.page_indices(), width,
                      static_cast<Index>(options.pad_value));
      if (total_pages > 0 && options.pad_value >= 0 && options.pad_value < total_pages) {
        const Status dense =
            attnref::check_dense_page_table(owned.page_indices(), owned.lengths(), page_size,
                                            total_pages, attnref::PaddingPolicy::kReject);
        ATTNREF_FUZZ_CHECK(dense.ok(),
                           "converted table fails the dense check: " + dense.to_string());
      }
    }
    if (!so.ok()) ATTNREF_FUZZ_CHECK(owned.batch == -7, "owned storage written on error");
  }

  // Caller storage: [rows, cols] with rows and cols near the real batch and width.
  if (t.batch() < 0 || t.batch() > kMaxElements) return;
  const std::int64_t rows = r.chance(24) ? t.batch() + r.range(0, 2) - 1 : t.batch();
  const std::int64_t cols = std::max<std::int64_t>(0, plain_widest + r.range(0, 3) - 1);
  if (rows < 0 || sat_mul(rows, cols + 1) > kMaxElements) return;
  const int hostile_chance = 24;
  const Geometry<1> lg = output_geometry<1>(r, {rows}, hostile_chance);
  Geometry<2> pg = output_geometry<2>(r, {rows, cols}, hostile_chance);
  Buffer<Index, 1> lengths_b;
  Buffer<Index, 2> pages_b;
  make_buffer(lg, Index(99), &lengths_b);
  make_buffer(pg, Index(99), &pages_b);
  TensorView<Index, 1> lengths = lengths_b.view;
  TensorView<Index, 2> pages = pages_b.view;
  const bool shared = r.chance(16);  // lengths inside the table's buffer
  if (shared)
    lengths = TensorView<Index, 1>(pages_b.data.get(), lg.extents, lg.strides, pages_b.size);
  const auto before_l = snapshot(lengths_b);
  const auto before_p = snapshot(pages_b);
  const Index pad = static_cast<Index>(r.range(-1, 3));
  Status sc;
  {
    data.add(lengths_b).add(pages_b);
    BudgetScope scope("flashinfer_to_dense (caller storage)", data);
    sc = attnref::flashinfer_to_dense<Index>(t, page_size, total_pages, lengths, pages, pad);
  }
  check_error_renders(sc);
  // The documented order: the table, each output view, their overlap, the batch, the width.
  ErrorCode want_out = s.code();
  if (want_out == ErrorCode::kOk) want_out = attnref::check_output_view(lengths, "").code();
  if (want_out == ErrorCode::kOk) want_out = attnref::check_output_view(pages, "").code();
  if (want_out == ErrorCode::kOk && attnref::views_share_memory(lengths, pages))
    want_out = ErrorCode::kOverlappingOutput;
  if (want_out == ErrorCode::kOk &&
      (lengths.extents[0] != t.batch() || pages.extents[0] != t.batch()))
    want_out = ErrorCode::kBatchMismatch;
  if (want_out == ErrorCode::kOk && pages.extents[1] < plain_widest)
    want_out = ErrorCode::kPageTableTooNarrow;
  ATTNREF_FUZZ_CHECK(sc.code() == want_out, "caller-storage conversion: got " + sc.to_string() +
                                                ", expected " + attnref::error_code_name(want_out));
  if (sc.ok()) {
    check_converted(t, page_size, lengths, pages, pages.extents[1], pad);
  } else {
    ATTNREF_FUZZ_CHECK(unchanged(lengths_b, before_l) && unchanged(pages_b, before_p),
                       "caller storage written on error");
  }
}

// --- vLLM block table -------------------------------------------------------------------------

/// The rules of check_dense_page_table, read plainly, in its documented order.
template <class Index>
std::optional<ErrorCode> plain_block_table(const attnref::VllmBlockTable<Index>& t,
                                           std::int64_t block_size, std::int64_t num_blocks) {
  for (const Status& s :
       {attnref::check_view(t.block_table, ""), attnref::check_view(t.seq_lens, "")})
    if (!s.ok()) return s.code();
  const std::int64_t batch = t.block_table.extents[0], width = t.block_table.extents[1];
  if (t.seq_lens.extents[0] != batch) return ErrorCode::kBatchMismatch;
  if (block_size <= 0) return ErrorCode::kInvalidPageSize;
  if (num_blocks < 0) return ErrorCode::kNegativeExtent;
  if (batch > kMaxClaimed || sat_mul(batch, width) > kMaxClaimed) return std::nullopt;
  for (std::int64_t b = 0; b < batch; ++b) {
    const I128 len = t.seq_lens(b);
    if (len < 0) return ErrorCode::kLengthOutOfRange;
    const I128 live = (len + block_size - 1) / block_size;
    if (live > width) return ErrorCode::kPageTableTooNarrow;
    const std::int64_t checked =
        t.padding == attnref::PaddingPolicy::kReject ? width : static_cast<std::int64_t>(live);
    for (std::int64_t j = 0; j < checked; ++j)
      if (t.block_table(b, j) < 0 || t.block_table(b, j) >= num_blocks)
        return ErrorCode::kPageIndexOutOfRange;
  }
  return ErrorCode::kOk;
}

template <class Index>
void block_table_case(Reader& r, Rng& rng, const Wide& w) {
  (void)rng;
  std::int64_t block_size = r.range(1, 20);
  std::int64_t num_blocks = r.range(0, 12);
  const std::int64_t batch = r.range(0, 5);
  const std::int64_t width = r.range(0, 5);
  const bool skip = r.flag();
  const std::int64_t dead =
      skip ? hostile_meta(r, w, -1) : r.range(0, std::max<std::int64_t>(0, num_blocks - 1));
  std::vector<std::int64_t> lens(static_cast<size_t>(batch)),
      table(static_cast<size_t>(batch * width), dead);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t cap = num_blocks == 0 ? 0 : width * block_size;
    const std::int64_t len = r.range(0, cap);
    lens[static_cast<size_t>(b)] = len;
    for (std::int64_t j = 0; j * block_size < len; ++j)
      table[static_cast<size_t>(b * width + j)] = r.range(0, num_blocks - 1);
  }
  const int mutations = r.chance(160) ? r.range(1, 3) : 0;
  Geometry<2> tg;
  tg.extents = {batch, width};
  tg.strides = padded_strides<2>(tg.extents, r.range(0, 2));
  Geometry<1> lg;
  lg.extents = {batch};
  lg.strides = {1};
  for (int m = 0; m < mutations; ++m) {
    switch (r.u8() % 6) {
      case 0:
        hostile_entry(r, w, num_blocks, &table);
        break;
      case 1:  // near the table's capacity, or near a page boundary
        hostile_entry(r, w, r.flag() ? sat_mul(width, block_size) : block_size, &lens);
        break;
      case 2:
        block_size = hostile_meta(r, w, block_size);
        break;
      case 3:
        num_blocks = hostile_meta(r, w, num_blocks);
        break;
      case 4:
        mutate(r, tg, width);
        break;
      default:
        mutate(r, lg, batch);
    }
  }
  Buffer<Index, 2> table_b;
  Buffer<Index, 1> lens_b;
  make_buffer(tg, static_cast<Index>(dead), &table_b);
  make_buffer(lg, Index(-1), &lens_b);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t lo = safe_offset(lg, {b}, lens_b.size);
    if (lo >= 0)
      lens_b.data[static_cast<size_t>(lo)] = static_cast<Index>(lens[static_cast<size_t>(b)]);
    for (std::int64_t j = 0; j < width; ++j) {
      const std::int64_t off = safe_offset(tg, {b, j}, table_b.size);
      if (off >= 0)
        table_b.data[static_cast<size_t>(off)] =
            static_cast<Index>(table[static_cast<size_t>(b * width + j)]);
    }
  }
  if (w.huge_zero()) {  // a stride-0 table claiming huge rows and no columns
    Geometry<2> g;
    g.extents = {huge_extent(r), 0};
    g.strides = {0, 1};
    make_buffer(g, Index(0), &table_b);
    if (r.flag()) repeated_view<Index>(g.extents[0], Index(0), &lens_b);
  }
  attnref::VllmBlockTable<Index> t;
  t.block_table = table_b.cview();
  t.seq_lens = lens_b.cview();
  t.padding = skip ? attnref::PaddingPolicy::kSkip : attnref::PaddingPolicy::kReject;
  const std::optional<ErrorCode> want = plain_block_table(t, block_size, num_blocks);
  if (!want) return;
  DataSize data;
  data.add(table_b).add(lens_b);
  Status s;
  {
    BudgetScope scope("check_vllm_block_table", data);
    s = attnref::check_vllm_block_table(t, block_size, num_blocks);
  }
  check_error_renders(s);
  ATTNREF_FUZZ_CHECK(s.code() == *want, "block-table check differs from the plain rules: got " +
                                            s.to_string() + ", plain " +
                                            attnref::error_code_name(*want));
}

// --- vLLM caches ------------------------------------------------------------------------------

/// A vLLM cache in one of its four forms over exactly sized buffers whose elements are their own
/// offsets, then `vllm_kv_views`. On success every element of the logical K and V views is the
/// source tensor's element of the same (block, slot, head, d), and is read (AddressSanitizer);
/// the page stride spans a page (and is a dense page's when declared). A consistent, unmutated
/// cache must be accepted. On error neither view is written.
void vllm_views_case(Reader& r, Rng& rng, const Wide& w) {
  (void)rng;
  const auto layout = static_cast<attnref::VllmKvLayout>(r.u8() % 4);
  const bool separate =
      layout == attnref::VllmKvLayout::kNhd || layout == attnref::VllmKvLayout::kHnd;
  const std::int64_t nb = r.range(0, 4), bs = r.range(1, 5), heads = r.range(1, 3),
                     dim = r.range(1, 6);
  const std::int64_t pad = r.chance(64) ? r.range(1, 2) : 0;
  const bool hnd_order = !separate && r.flag();  // combined tensor with heads before slots
  attnref::VllmKvCache<float> c;
  c.layout = layout;
  const auto declare = [&](std::int64_t truth) {
    const int k = r.u8() % 8;
    return k < 4 ? -1 : k < 7 ? truth : hostile_int(r, truth);
  };
  c.block_size = declare(bs);
  c.num_kv_heads = declare(heads);
  c.head_size = declare(dim);
  c.dense_blocks = r.chance(64);
  const bool consistent = (c.block_size < 0 || c.block_size == bs) &&
                          (c.num_kv_heads < 0 || c.num_kv_heads == heads) &&
                          (c.head_size < 0 || c.head_size == dim);

  Geometry<4> kg, vg;
  Geometry<5> cg;
  std::int64_t page_stride = 0;  // of the logical K view, as built here
  if (separate) {
    const bool nhd = layout == attnref::VllmKvLayout::kNhd;
    kg.extents = nhd ? std::array<std::int64_t, 4>{nb, bs, heads, dim}
                     : std::array<std::int64_t, 4>{nb, heads, bs, dim};
    kg.strides = padded_strides<4>(kg.extents, pad);
    vg = kg;
    page_stride = kg.strides[0];
  } else {
    const bool kv_first = layout == attnref::VllmKvLayout::kKvFirst;
    cg.extents = kv_first ? std::array<std::int64_t, 5>{2, nb, bs, heads, dim}
                          : std::array<std::int64_t, 5>{nb, 2, bs, heads, dim};
    // Physical order: the logical one, or with heads before slots (vLLM's HND stride order).
    const std::array<std::int64_t, 5> physical =
        hnd_order ? std::array<std::int64_t, 5>{cg.extents[0], cg.extents[1], heads, bs, dim}
                  : cg.extents;
    cg.strides = padded_strides<5>(physical, pad);
    if (hnd_order) std::swap(cg.strides[2], cg.strides[3]);
    page_stride = cg.strides[kv_first ? 1 : 0];
    if (w.huge_zero() && nb == 0) cg.strides[kv_first ? 0 : 1] = huge_extent(r);  // unbounded
  }
  bool mutated = false;
  if (r.chance(48)) {
    mutated = true;
    if (separate)
      mutate_nth(r, r.u8() % 2, -1, mutation_target(kg, dim), mutation_target(vg, dim));
    else
      mutate(r, cg, dim);
  }
  Buffer<float, 4> kb, vb;
  Buffer<float, 5> cb;
  if (separate) {
    make_buffer(kg, 0.0f, &kb);
    make_buffer(vg, 0.0f, &vb);
    c.key_cache = kb.cview();
    c.value_cache = vb.cview();
  } else {
    make_buffer(cg, 0.0f, &cb);
    c.kv_cache = cb.cview();
  }
  const std::int64_t dense = bs * heads * dim;
  const bool expect_ok =
      !mutated && consistent && (!c.dense_blocks || nb <= 1 || page_stride == dense);

  TensorView<const float, 4> k, v;
  Status s;
  {
    DataSize data;
    data.add(kb).add(vb).add(cb);
    BudgetScope scope("vllm_kv_views", data);
    s = attnref::vllm_kv_views(c, &k, &v);
  }
  check_error_renders(s);
  if (expect_ok) ATTNREF_FUZZ_CHECK(s.ok(), "a consistent vLLM cache refused: " + s.to_string());
  if (!s.ok()) {
    ATTNREF_FUZZ_CHECK(k.data == nullptr && v.data == nullptr,
                       "vllm_kv_views wrote a view on error");
    return;
  }
  const auto& e = k.extents;  // [heads, blocks, slots, dim]
  ATTNREF_FUZZ_CHECK(v.extents == e, "K and V views of different shapes");
  if (!walkable(e)) return;
  double sum = 0.0;
  for (std::int64_t h = 0; h < e[0]; ++h)
    for (std::int64_t b = 0; b < e[1]; ++b)
      for (std::int64_t t = 0; t < e[2]; ++t)
        for (std::int64_t d = 0; d < e[3]; ++d) {
          const float *want_k = nullptr, *want_v = nullptr;
          if (separate) {
            const bool nhd = layout == attnref::VllmKvLayout::kNhd;
            want_k = nhd ? &c.key_cache(b, t, h, d) : &c.key_cache(b, h, t, d);
            want_v = nhd ? &c.value_cache(b, t, h, d) : &c.value_cache(b, h, t, d);
          } else if (layout == attnref::VllmKvLayout::kKvFirst) {
            want_k = &c.kv_cache(0, b, t, h, d);
            want_v = &c.kv_cache(1, b, t, h, d);
          } else {
            want_k = &c.kv_cache(b, 0, t, h, d);
            want_v = &c.kv_cache(b, 1, t, h, d);
          }
          ATTNREF_FUZZ_CHECK(&k(h, b, t, d) == want_k && &v(h, b, t, d) == want_v,
                             "a logical K/V element is not the cache's element");
          sum += static_cast<double>(k(h, b, t, d) + v(h, b, t, d));  // read: ASan checks
        }
  ATTNREF_FUZZ_CHECK(sum == 0.0, "the cache's elements changed");
  if (e[1] > 1 && e[0] > 0 && e[2] > 0 && e[3] > 0) {
    for (const auto* view : {&k, &v}) {
      const auto& st = view->strides;
      ATTNREF_FUZZ_CHECK(st[1] >= (e[2] - 1) * st[2] + (e[3] - 1) * st[3] + 1,
                         "accepted pages that overlap");
      if (c.dense_blocks)
        ATTNREF_FUZZ_CHECK(st[1] == e[2] * e[0] * e[3], "accepted non-dense pages declared dense");
    }
  }
}

// --- merging attention states -----------------------------------------------------------------

/// A logsumexp: mostly finite, sometimes -inf (no key), rarely NaN, +inf or huge.
float draw_lse(Reader& r, const Wide& w) {
  const int k = r.u8();
  if (k < 48) return -kInf;
  if (w.special_options() && k < 96) return special_real(r);
  if (k < 56) return kNaN;
  if (k < 60) return kInf;
  if (k < 64) return r.flag() ? 1e30f : -1e30f;
  return static_cast<float>(r.range(-400, 400)) / 8.0f;
}

template <class T>
double as_double(const T& x) {
  return static_cast<double>(static_cast<float>(x));
}

template <class T>
void merge_case(Reader& r, Rng& rng, const Wide& w) {
  std::int64_t rows = r.range(0, 4), heads = r.range(0, 4), dim = r.range(0, 20);
  if (w.huge_zero()) {  // a huge extent next to a zero one
    switch (r.u8() % 3) {
      case 0:
        rows = huge_extent(r);
        heads = 0;
        break;
      case 1:
        heads = huge_extent(r);
        dim = r.range(0, 1) * dim;
        rows = 0;
        break;
      default:
        dim = huge_extent(r);
        rows = r.flag() ? 0 : rows;
        heads = rows == 0 ? heads : 0;
    }
  }
  const int hostile_chance = 20;
  Geometry<3> oa_g = layout3(r, rows, heads, dim), ob_g = layout3(r, rows, heads, dim);
  Geometry<2> la_g, lb_g;
  la_g.extents = lb_g.extents = {rows, heads};
  la_g.strides = padded_strides<2>(la_g.extents, r.range(0, 1));
  lb_g.strides = padded_strides<2>(lb_g.extents, r.range(0, 1));
  if (r.chance(hostile_chance))
    mutate_nth(r, r.u8() % 4, -1, mutation_target(oa_g, dim), mutation_target(ob_g, dim),
               mutation_target(la_g, heads), mutation_target(lb_g, heads));
  Buffer<T, 3> oa, ob;
  Buffer<float, 2> la, lb;
  make_buffer(oa_g, T(0.0f), &oa);
  make_buffer(ob_g, T(0.0f), &ob);
  make_buffer(la_g, 0.0f, &la);
  make_buffer(lb_g, 0.0f, &lb);
  for (std::int64_t i = 0; i < oa.size; ++i)
    oa.data[static_cast<size_t>(i)] = T(rng.small() * 4.0f);
  for (std::int64_t i = 0; i < ob.size; ++i)
    ob.data[static_cast<size_t>(i)] = T(rng.small() * 4.0f);
  for (std::int64_t i = 0; i < la.size; ++i) la.data[static_cast<size_t>(i)] = draw_lse(r, w);
  for (std::int64_t i = 0; i < lb.size; ++i) lb.data[static_cast<size_t>(i)] = draw_lse(r, w);

  attnref::MergeStatesArgs<T> a;
  a.out_a = oa.cview();
  a.lse_a = la.cview();
  a.out_b = ob.cview();
  a.lse_b = lb.cview();
  const bool inputs_valid = attnref::check_merge_inputs(a).ok();
  // A state with lse -inf is not read: its row holds NaN.
  const bool small = walkable(std::array<std::int64_t, 3>{rows, heads, dim});
  if (inputs_valid && small) {
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t d = 0; d < dim; ++d) {
          if (a.lse_a(n, h) == -kInf) oa.view(n, h, d) = T(kNaN);
          if (a.lse_b(n, h) == -kInf) ob.view(n, h, d) = T(kNaN);
        }
  }

  // Outputs: separate, in place over a's or b's views, or without lse.
  Buffer<T, 3> out_b;
  Buffer<float, 2> lse_b;
  TensorView<T, 3> out;
  TensorView<float, 2> lse;
  const int mode = r.u8() % 5;
  const bool separate_out = mode != 1 && mode != 2;
  if (separate_out) {
    make_buffer(output_geometry<3>(r, {rows, heads, dim}, hostile_chance), T(7.0f), &out_b);
    out = out_b.view;
  } else {
    out = mode == 1 ? oa.view : ob.view;
  }
  if (mode != 3) {
    if (mode == 1 && r.flag()) {
      lse = la.view;
    } else {
      make_buffer(output_geometry<2>(r, {rows, heads}, hostile_chance), 7.0f, &lse_b);
      lse = lse_b.view;
    }
  }
  if (mode == 4 && oa.size > 1 && oa_g.extents == out.extents)  // partly over out_a
    out = TensorView<T, 3>(oa.data.get() + 1, oa_g.extents, oa_g.strides, oa.size - 1);

  // The float64 merge, from the inputs as they are before the call (it may run in place).
  const bool all_valid = attnref::check_merge_states(a, out, lse).ok() && small;
  std::vector<double> want_out, want_lse;
  std::vector<char> exact;         // one state saw no key: the other comes out exactly
  std::vector<double> want_scale;  // |out_a| + |out_b|: the rounding of a weighted sum
  if (all_valid) {
    want_out.resize(static_cast<size_t>(rows * heads * dim));
    want_lse.resize(static_cast<size_t>(rows * heads));
    exact.resize(static_cast<size_t>(rows * heads));
    want_scale.resize(want_out.size());
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t h = 0; h < heads; ++h) {
        const double x = a.lse_a(n, h), y = a.lse_b(n, h);
        const size_t row = static_cast<size_t>(n * heads + h);
        const bool bad = std::isnan(x) || std::isnan(y) || x == kInf || y == kInf;
        const double m = std::max(x, y);
        const double wa = x == -kInf ? 0.0 : std::exp(x - m),
                     wb = y == -kInf ? 0.0 : std::exp(y - m);
        want_lse[row] = bad ? kNaN : m == -kInf ? -kInf : m + std::log(wa + wb);
        exact[row] = !bad && (x == -kInf || y == -kInf);
        for (std::int64_t d = 0; d < dim; ++d) {
          double v = 0.0, scale = 0.0;
          if (bad) {
            v = kNaN;
          } else if (y == -kInf) {
            v = x == -kInf ? 0.0 : as_double(a.out_a(n, h, d));
          } else if (x == -kInf) {
            v = as_double(a.out_b(n, h, d));
          } else {
            const double va = as_double(a.out_a(n, h, d)), vb = as_double(a.out_b(n, h, d));
            v = (wa * va + wb * vb) / (wa + wb);
            scale = std::fabs(va) + std::fabs(vb);
          }
          const size_t at = row * static_cast<size_t>(dim) + static_cast<size_t>(d);
          want_out[at] = v;
          want_scale[at] = scale;
        }
      }
  }

  const auto before_oa = snapshot(oa), before_ob = snapshot(ob), before_out = snapshot(out_b);
  const auto before_la = snapshot(la), before_lse = snapshot(lse_b);
  DataSize data;
  data.add(oa).add(ob).add(la).add(lb).add(out_b).add(lse_b);
  const Status expected = attnref::check_merge_states(a, out, lse);
  Status s;
  {
    BudgetScope scope("try_merge_attention_states", data);
    switch (r.u8() % 3) {
      case 0:
        s = attnref::try_merge_attention_states(a, out, lse);
        break;
      case 1:
        s = attnref::try_merge_attention_states(a, out, lse, counted(ClaimedConcurrency{3}));
        break;
      default:
        s = attnref::try_merge_attention_states(a, out, lse, counted(PoolRef{}));
    }
  }
  check_error_renders(s);
  ATTNREF_FUZZ_CHECK(s.code() == expected.code(), "try_merge_attention_states: " + s.to_string() +
                                                      " but the check says " +
                                                      expected.to_string());
  if (!s.ok()) {
    ATTNREF_FUZZ_CHECK(unchanged(oa, before_oa) && unchanged(ob, before_ob) &&
                           unchanged(out_b, before_out) && unchanged(la, before_la) &&
                           unchanged(lse_b, before_lse),
                       "merge wrote on error");
    return;
  }
  if (!all_valid) return;  // valid, but too large to compare (extents that no element backs)
  const double eps = store_eps<T>();
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t h = 0; h < heads; ++h) {
      const size_t row = static_cast<size_t>(n * heads + h);
      const std::string where = "row " + std::to_string(n) + " head " + std::to_string(h);
      if (!lse.empty_view()) {
        const double got = lse(n, h), wl = want_lse[row];
        ATTNREF_FUZZ_CHECK(std::isnan(wl)
                               ? std::isnan(got)
                               : got == wl || std::fabs(got - wl) <= 1e-6 * (1 + std::fabs(wl)),
                           "merged logsumexp differs: " + where + " got " + std::to_string(got) +
                               " want " + std::to_string(wl));
      }
      for (std::int64_t d = 0; d < dim; ++d) {
        const size_t at = row * static_cast<size_t>(dim) + static_cast<size_t>(d);
        const double got = as_double(out(n, h, d)), wv = want_out[at];
        const bool close = std::isnan(wv) ? std::isnan(got)
                           : exact[row]   ? got == wv
                                          : std::fabs(got - wv) <= 8 * eps * (1 + want_scale[at]);
        ATTNREF_FUZZ_CHECK(close, "merged output differs: " + where + " got " +
                                      std::to_string(got) + " want " + std::to_string(wv));
      }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr attnref_fuzz::CaseFn kCases[] = {
      csr_case<std::int32_t>,
      csr_case<std::int64_t>,
      block_table_case<std::int32_t>,
      block_table_case<std::int64_t>,
      merge_case<float>,
      merge_case<Eigen::half>,
      vllm_views_case,
  };
  return attnref_fuzz::run_one(data, size, kCases);
}
