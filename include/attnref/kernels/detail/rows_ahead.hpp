// SPDX-License-Identifier: Apache-2.0
/// @file rows_ahead.hpp
/// K or V rows that a tile product asks the memory system for while it computes, because the
/// kernel will read them soon: decode streams every page once, and when its arithmetic and its
/// cache misses take turns, neither runs at full speed. The kernels point this at the rows a
/// fixed distance ahead in the same stream, across page boundaries (the hardware prefetchers
/// stop at each page). Only a hint: no row is read, and an empty `RowsAhead` does nothing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {
namespace detail {

/// Bytes of one cache line, the unit a prefetch asks for.
inline constexpr std::int64_t kCacheLineBytes = 64;

// GCC 12 deletes a loop whose body is only prefetches when its bounds are loaded from a struct
// (it finds the loop has no effect); the empty volatile asm, which emits nothing, keeps it.
#if defined(__GNUC__)
#define ATTNREF_AHEAD_INLINE __attribute__((always_inline)) inline
#define ATTNREF_PREFETCH_INTO(p, locality) \
  do {                                     \
    __builtin_prefetch((p), 0, locality);  \
    asm volatile("");                      \
  } while (false)
#else
#define ATTNREF_AHEAD_INLINE inline
#define ATTNREF_PREFETCH_INTO(p, locality) static_cast<void>(p)
#endif
/// Asks for the line at p into L1, or into L2 only (x86 prefetcht0 and prefetcht1).
#define ATTNREF_PREFETCH(p) ATTNREF_PREFETCH_INTO(p, 3)
#define ATTNREF_PREFETCH_L2(p) ATTNREF_PREFETCH_INTO(p, 2)

// The distances and levels below are measured choices; the measurements are in
// docs/benchmarks.md ("Prefetch distances").

/// How far ahead of the rows it reads a kernel asks for rows into L1: 8 KiB of the stream (64
/// tokens of int8 K at D = 128), the fastest of 4, 8, 16 and 32 KiB.
inline constexpr std::int64_t kAheadBytes = 8192;

/// How far ahead rows asked into L2 only are (`ahead_into_l1` false): 16 KiB (32 tokens of f32 K
/// at D = 128, 64 of bf16), which L2 has room for and which beat 8 KiB for 16-bit rows.
inline constexpr std::int64_t kAheadBytesL2 = 16384;

/// Whether rows of `element_bytes`-byte elements are asked into L1, or into L2 only (x86
/// prefetcht1: the line waits in L2 without taking an L1 line): L2 suits f32 and 16-bit rows,
/// while 8-bit rows, bound by arithmetic, run faster from L1.
constexpr bool ahead_into_l1(std::int64_t element_bytes) noexcept { return element_bytes == 1; }

/// Tokens ahead for a kernel that reads the rows of every KV head of a page in turn before it
/// moves on (ragged decode): one page of 16 tokens, whatever the row size. The other heads' rows
/// are read between the prefetch and the read, so 16 tokens are time enough, and a short
/// sequence (a decode batch holds many) is covered from its second page on, where the byte
/// distances (32-64 tokens) would leave its first 2-4 pages unasked.
inline constexpr std::int64_t kTokensAheadHeadsInTurn = 16;

/// Whether such a kernel (ragged decode) asks for the rows of `element_bytes`-byte elements in
/// two streams: a head's rows a page on all at once into L2 before it reads the head's rows of
/// this page, and the next head's rows of this page into L1 as it reads; or in one stream, the
/// head's rows a page on as it reads. 16-bit rows keep one stream: a head's 16 bf16 rows are 64
/// lines asked for at once, and that burst stalls on a full L2 miss queue.
constexpr bool two_streams_ahead(std::int64_t element_bytes) noexcept { return element_bytes != 2; }

/// Tokens ahead for rows of `row_bytes` bytes of `element_bytes`-byte elements: kAheadBytes of
/// them, or kAheadBytesL2 where they go into L2 only, at least one token.
inline std::int64_t tokens_ahead(std::int64_t row_bytes, std::int64_t element_bytes) noexcept {
  const std::int64_t bytes = ahead_into_l1(element_bytes) ? kAheadBytes : kAheadBytesL2;
  return row_bytes > 0 ? std::max<std::int64_t>(1, bytes / row_bytes) : 1;
}

/// Row t (t < rows) at `base + t * ld_bytes`, or at `listed[t]` when the rows lie on several
/// pages; `row_bytes` long.
struct RowsAhead {
  const char* base = nullptr;
  const char* const* listed = nullptr;
  std::int64_t ld_bytes = 0;
  std::int64_t row_bytes = 0;
  std::int64_t rows = 0;
  bool into_l1 = true;

  /// The same rows `bytes` further on (another head of the same pages), or none. Rows at
  /// `base` only.
  RowsAhead shifted(std::int64_t bytes) const noexcept {
    RowsAhead r = *this;
    if (r.base != nullptr) r.base += bytes;
    return r;
  }

  /// Asks for every line of row t, if there is a row t.
  ATTNREF_AHEAD_INLINE void fetch_row(std::int64_t t) const noexcept {
    if (t >= rows) return;
    const char* row = listed != nullptr ? listed[t] : base + t * ld_bytes;
    if (into_l1)
      for (std::int64_t b = 0; b < row_bytes; b += kCacheLineBytes) ATTNREF_PREFETCH(row + b);
    else
      for (std::int64_t b = 0; b < row_bytes; b += kCacheLineBytes) ATTNREF_PREFETCH_L2(row + b);
  }

  /// Asks for every row at once.
  void fetch_all() const noexcept {
    for (std::int64_t t = 0; t < rows; ++t) fetch_row(t);
  }
};

/// Rows [slot, slot + n) of page `page`, KV head h, of a [heads, pages, page_size, D] view of
/// pages (any strides), cut at the page's end. Rows with a strided head dim are not asked for.
template <class T>
RowsAhead page_rows_ahead(const TensorView<const T, 4>& pages, std::int64_t h, std::int64_t page,
                          std::int64_t slot, std::int64_t n) {
  RowsAhead r;
  if (pages.strides[3] != 1) return r;
  r.base = reinterpret_cast<const char*>(&pages(h, page, slot, 0));
  r.ld_bytes = pages.strides[2] * static_cast<std::int64_t>(sizeof(T));
  r.row_bytes = pages.extents[3] * static_cast<std::int64_t>(sizeof(T));
  r.rows = std::min(n, pages.extents[2] - slot);
  r.into_l1 = ahead_into_l1(static_cast<std::int64_t>(sizeof(T)));
  return r;
}

/// The rows of `pages` (KV head h) `tokens_ahead` after token t of a sequence whose j-th page is
/// `page_of(j)` (kTokensAheadHeadsInTurn after it for a kernel that reads every KV head's rows
/// of a page in turn), up to n of them within one page, before token `end`: none past it, so
/// only pages the kernel itself reads are looked up. Rows of long pages are asked for too, although
/// the hardware prefetchers follow a page's stream once trained: they run only a few lines ahead,
/// so the stream stalls while the tile products compute (docs/benchmarks.md, "Prefetch
/// distances").
template <class T, class PageOf>
RowsAhead sequence_rows_ahead(const TensorView<const T, 4>& pages, std::int64_t h, std::int64_t t,
                              std::int64_t n, std::int64_t end, PageOf&& page_of,
                              bool heads_in_turn = false) {
  constexpr auto kBytes = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t u = advance_within(
      t, heads_in_turn ? kTokensAheadHeadsInTurn : tokens_ahead(pages.extents[3] * kBytes, kBytes),
      end);
  if (u >= end) return {};
  const std::int64_t page_size = pages.extents[2];
  return page_rows_ahead(pages, h, page_of(u / page_size), u % page_size, std::min(n, end - u));
}

}  // namespace detail
}  // namespace attnref
