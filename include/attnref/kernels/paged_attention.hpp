// SPDX-License-Identifier: Apache-2.0
/// @file paged_attention.hpp
/// Paged attention (decode), the reference kernel. One query token per sequence; K/V live in
/// fixed-size pages behind a page table; grouped-query attention.
///
/// out[b, qh, :] = sum_{t < lengths[b]} softmax_t(cap(sm_scale * q[b, qh] . k_t)) v_t,
/// with k_t = k_pages[kv_head_of(qh), page_indices[b, t / S], t % S, :], v_t the same row of
/// v_pages, cap(x) = c tanh(x / c) when a soft cap c is set, and a zero row when lengths[b] == 0.
/// out is [batch, num_q_heads, head_dim_v]: V's head_dim, q's and K's except for MLA, where v_t
/// is 512 of a 576-wide latent row (V a view of K's memory; docs/integration.md). The optional
/// logsumexp [batch, num_q_heads] (f32) is the natural log of the softmax's denominator,
/// log sum_{t < lengths[b]} exp(cap(sm_scale * q[b, qh] . k_t)), and -inf when lengths[b] == 0;
/// with it, results over disjoint pages merge exactly (kernels/merge_attention_states.hpp).
///
/// Engine features (the logits pipeline of kernels/detail/online_softmax.hpp, in its order):
/// `alibi_slopes` add slope[qh] * (t - (lengths[b] - 1)) after the cap (`soft_cap_order`
/// kAlibiThenCap: before it, c * tanh((x + bias) / c); `alibi_convention` kAbsolute,
/// -slope[qh] * |t - (lengths[b] - 1)|, is the same bias, as no key lies right of the query);
/// a `sliding_window` W keeps the keys t > lengths[b] - 1 - W (FlashInfer's window_left is
/// W - 1), and neither those keys nor pages wholly before them are read; `sinks` add
/// exp(sink[qh]) to the denominator (no value row), so a sequence of length 0 gives 0 and
/// logsumexp sink[qh].
///
/// Non-finite inputs (docs/hostile-inputs.md): NaN or +inf in q[b, qh] or in the K row (or its
/// int8 scales) of a token t < lengths[b] makes that output row NaN (a NaN or +inf logit, or
/// logits all -inf); NaN/Inf in a live V row (or its scales) go through the weighted sum as IEEE
/// does. Nothing past lengths[b] is read, so it never affects the result.
///
/// The grouped-head inner loop: for each (sequence, KV head) the G query heads sharing the KV
/// head are processed together, page by page, with an online softmax, so every K/V page is read
/// once per group. Nothing past `lengths[b]` is read: not the rest of the last page, not the
/// unused pages.
///
/// Example:
/// @code
///   attnref::PagedAttentionArgs<float> args;  // q, k_pages, v_pages, lengths, page_indices
///   ...
///   std::vector<float> out_buf(batch * num_q_heads * args.head_dim_v());
///   attnref::TensorView<float, 3> out(out_buf.data(), {batch, num_q_heads, args.head_dim_v()});
///   attnref::paged_attention(args, out);  // validates (reference profile), then runs
///   std::vector<float> lse_buf(batch * num_q_heads);  // optional: the logsumexp too
///   attnref::paged_attention(args, out, attnref::TensorView<float, 2>(lse_buf.data(),
///                                                                     {batch, num_q_heads}));
/// @endcode
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/executor_arg.hpp"
#include "attnref/kernels/detail/head_groups.hpp"
#include "attnref/kernels/detail/online_softmax.hpp"
#include "attnref/kernels/detail/row_scales.hpp"
#include "attnref/kernels/detail/tile_products.hpp"
#include "attnref/kernels/detail/work_order.hpp"
#include "attnref/kernels/merge_attention_states.hpp"
#include "attnref/validate/paged.hpp"

namespace attnref {
namespace detail {

/// Tokens scored per online-softmax step: several small pages share one softmax update, and a
/// large page is taken in pieces, so scratch never depends on the page size.
inline constexpr std::int64_t kChunkTokens = 128;

/// Elements of one converted K or V piece: rows are taken `kPieceElements / D` at a time (at
/// least one), so the conversion scratch is bounded by one row of the input or 64 KiB of f32.
inline constexpr std::int64_t kPieceElements = 16384;

inline std::int64_t piece_rows(std::int64_t dim) noexcept {
  return dim >= kPieceElements ? 1 : std::min(kChunkTokens, kPieceElements / dim);
}

/// Tokens per softmax step for a group of `group` query heads: kChunkTokens, fewer for very
/// large groups, so the score tile [group, chunk] stays within max(group, kPieceElements).
inline std::int64_t chunk_tokens(std::int64_t group) noexcept {
  return group >= kPieceElements ? 1 : std::min(kChunkTokens, kPieceElements / group);
}

/// The K and V rows of one chunk when it spans several pages (f32 rows: any chunk,
/// `lists_chunk`), as an address per token (and the rows asked for ahead likewise), with their
/// factored scales gathered: one tile product then covers the chunk. With a call per 16-token page,
/// K and V in L2, decode took 8-16% longer than over one page per sequence (f32 8%, int8 16%, e4m3
/// 13%). Filled by `list_chunk`.
struct ChunkRows {
  std::vector<const char*> k, v, k_ahead, v_ahead;  // [chunk] each
  std::vector<float> k_scales, v_scales;            // [chunk] each, when gathered
  RowScales k_factored, v_factored;
  RowsAhead k_rows_ahead, v_rows_ahead;
  void reserve(std::int64_t chunk) {
    for (auto* list : {&k, &v, &k_ahead, &v_ahead}) list->resize(static_cast<size_t>(chunk));
    k_scales.resize(static_cast<size_t>(chunk));
    v_scales.resize(static_cast<size_t>(chunk));
  }
};

/// Per-thread scratch of the paged kernel, sized by one group, one chunk of scores and one piece
/// of converted rows: never by the cache, the page size or the batch. Kept thread_local and
/// reused across calls, so a steady-state call allocates nothing. Aligned to the packet size
/// (Eigen's allocator): a misaligned packet load crosses a cache line every other time, which
/// measured 10-30% slower tile products on AVX2.
template <class Acc>
struct PagedScratch {
  // [G, D], 2 x [G, chunk_tokens(G)], [piece_rows(D), D], [piece_rows(Dv), Dv]: a chunk's
  // scores stay while the next chunk's are computed (`attend_pages`)
  std::vector<Acc, Eigen::aligned_allocator<Acc>> q, scores, k, v;
  std::vector<Acc> alpha;  // [G] the factors of a softmax step for the rows' outputs
  OnlineSoftmax<Acc> state;
  ChunkRows chunks[2];
  void reserve(std::int64_t group, std::int64_t dim, std::int64_t dim_v) {
    q.resize(static_cast<size_t>(group * dim));
    scores.resize(static_cast<size_t>(2 * group * chunk_tokens(group)));
    k.resize(static_cast<size_t>(piece_rows(dim) * dim));
    v.resize(static_cast<size_t>(piece_rows(dim_v) * dim_v));
    alpha.resize(static_cast<size_t>(group));
    for (ChunkRows& c : chunks) c.reserve(chunk_tokens(group));
  }
  /// The scores of chunk buffer i (0 or 1), [G, chunk] with row stride chunk.
  Acc* scores_of(int i, std::int64_t group, std::int64_t chunk) noexcept {
    return scores.data() + i * group * chunk;
  }
};

/// Token rows [first, first + rows) of page `page` of KV head `head` as contiguous-dim Acc rows:
/// returns the first row and sets `*ld` to the row stride. Float pages already in Acc with unit
/// dim stride are used in place; anything else (other dtypes, int8 dequantization, bf16
/// rounding, strided dims) is converted into `scratch` [rows, D]. An empty `scales` view over
/// int8 pages gives the codes' values (the caller applies the scales: row_scales.hpp).
template <class Acc, class KV, std::enable_if_t<!is_fp8_dtype<KV>, int> = 0>
const Acc* page_rows(const TensorView<const KV, 4>& pages, const TensorView<const float, 4>& scales,
                     std::int64_t head, std::int64_t page, std::int64_t first, std::int64_t rows,
                     bool round_to_bf16_first, Acc* scratch, std::int64_t* ld) {
  const std::int64_t dim = pages.extents[3];
  const KV* base =
      pages.data + head * pages.strides[0] + page * pages.strides[1] + first * pages.strides[2];
  if constexpr (std::is_same<KV, Acc>::value) {
    if (!round_to_bf16_first && pages.strides[3] == 1) {
      *ld = pages.strides[2];
      return base;
    }
  }
  using AccRow = Eigen::Array<Acc, Eigen::Dynamic, 1>;
  for (std::int64_t t = 0; t < rows; ++t) {
    const KV* row = base + t * pages.strides[2];
    Eigen::Map<AccRow> dst(scratch + t * dim, dim);
    if (pages.strides[3] == 1) {
      const Eigen::Map<const Eigen::Array<KV, Eigen::Dynamic, 1>> src(row, dim);
      if (std::is_same<KV, std::int8_t>::value && scales.empty_view()) {  // scale factored out
        dst = src.template cast<Acc>();
      } else if constexpr (std::is_same<KV, std::int8_t>::value) {
        const float* s = &scales(head, page, first + t, 0);
        if (scales.extents[3] == 1) {
          dst = ((src.template cast<float>() * s[0]) / 127.5f).template cast<Acc>();
        } else {
          const Eigen::Map<const Eigen::ArrayXf, 0, Eigen::InnerStride<>> sv(
              s, dim, Eigen::InnerStride<>(scales.strides[3]));
          dst = ((src.template cast<float>() * sv) / 127.5f).template cast<Acc>();
        }
      } else if constexpr (std::is_same<KV, Eigen::bfloat16>::value &&
                           std::is_same<Acc, float>::value) {
        widen_bf16(row, dim, scratch + t * dim);
      } else {
        dst = src.template cast<Acc>();
      }
    } else {
      for (std::int64_t d = 0; d < dim; ++d) {
        const KV w = row[d * pages.strides[3]];
        if (std::is_same<KV, std::int8_t>::value && scales.empty_view()) {
          dst[d] = load_as<Acc>(w);
        } else if constexpr (std::is_same<KV, std::int8_t>::value) {
          const std::int64_t sd = scales.extents[3] == 1 ? 0 : d;
          dst[d] = static_cast<Acc>(dequantize_int8(w, scales(head, page, first + t, sd)));
        } else {
          dst[d] = load_as<Acc>(w);
        }
      }
    }
    if constexpr (!std::is_same<KV, std::int8_t>::value) {
      if (round_to_bf16_first)
        for (std::int64_t d = 0; d < dim; ++d)
          dst[d] = static_cast<Acc>(round_to_bf16(static_cast<float>(dst[d])));
    }
  }
  *ld = dim;
  return scratch;
}

/// The same rows of fp8 pages, always converted: fp8(w) * s in f32, s from `scales` at
/// (head, page, first + t, 0 or d), or 1 when the scales view is empty.
template <class Acc, class KV, std::enable_if_t<is_fp8_dtype<KV>, int> = 0>
const Acc* page_rows(const TensorView<const KV, 4>& pages, const TensorView<const float, 4>& scales,
                     std::int64_t head, std::int64_t page, std::int64_t first, std::int64_t rows,
                     bool /*round_to_bf16_first: fp8 values are exact in bf16*/, Acc* scratch,
                     std::int64_t* ld) {
  const std::int64_t dim = pages.extents[3];
  const KV* base =
      pages.data + head * pages.strides[0] + page * pages.strides[1] + first * pages.strides[2];
  const bool scaled = !scales.empty_view();
  const bool per_element = scaled && scales.extents[3] != 1;
  const std::int64_t step = pages.strides[3];
  for (std::int64_t t = 0; t < rows; ++t) {
    const KV* row = base + t * pages.strides[2];
    Acc* out = scratch + t * dim;
    const float* s = scaled ? &scales(head, page, first + t, 0) : nullptr;
    if (per_element) {
      for (std::int64_t d = 0; d < dim; ++d)
        out[d] = static_cast<Acc>(row[d * step].to_float() * s[d * scales.strides[3]]);
    } else if (step == 1) {  // the common case: a tight loop of table lookups
      const float s0 = scaled ? *s : 1.0f;
      for (std::int64_t d = 0; d < dim; ++d) out[d] = static_cast<Acc>(row[d].to_float() * s0);
    } else {
      const float s0 = scaled ? *s : 1.0f;
      for (std::int64_t d = 0; d < dim; ++d)
        out[d] = static_cast<Acc>(row[d * step].to_float() * s0);
    }
  }
  *ld = dim;
  return scratch;
}

/// The scales of token rows [first, first + n) of page `page`, KV head `head`, when they are
/// factored out of the tile products (row_scales.hpp): f32 accumulation over 8-bit pages with
/// one finite scale per token or per tensor. Empty otherwise: unscaled pages (fp8 without scales
/// is w * 1), per-element scales, a non-finite scale among the rows, or f64 accumulation.
template <class Acc, class KV>
RowScales factored_scales(const TensorView<const float, 4>& scales, std::int64_t head,
                          std::int64_t page, std::int64_t first, std::int64_t n) {
  if (!std::is_same<Acc, float>::value || !kScaledElements<KV> || scales.empty_view() ||
      scales.extents[3] != 1)
    return {};
  const RowScales r{&scales(head, page, first, 0), scales.strides[2]};
  return r.finite(n) ? r : RowScales{};
}

/// Calls fn(rows, row_scales) with token rows [first, first + n) of page `page` of KV head
/// `head` as a row source for the tile products, and the scales the caller must apply to their
/// products (empty when the rows are dequantized already). The rows are widened in registers
/// for 16/8-bit pages with a unit dim stride, no bf16 rounding first, no element-wise scales
/// and codes `widen_packet` gives exactly (widen.hpp); anything else is converted by `page_rows`
/// into `scratch`. Both give the same bits.
template <class Acc, class KV, class Fn>
void with_page_rows(const TensorView<const KV, 4>& pages, const TensorView<const float, 4>& scales,
                    std::int64_t head, std::int64_t page, std::int64_t first, std::int64_t n,
                    bool round_to_bf16_first, Acc* scratch, Fn&& fn) {
  const RowScales factored = factored_scales<Acc, KV>(scales, head, page, first, n);
  if constexpr (kWidenableRows<Acc, KV>) {
    const bool elementwise_scales = kScaledElements<KV> && !scales.empty_view() && !factored;
    if (pages.strides[3] == 1 && !round_to_bf16_first && !elementwise_scales) {
      const WideRows<KV> rows{{&pages(head, page, first, 0), pages.strides[2]}};
      if (widens_exactly(rows.rows.data, rows.rows.ld, n, pages.extents[3])) {
        fn(rows, factored);
        return;
      }
    }
  }
  std::int64_t ld = 0;
  const Acc* rows = page_rows<Acc>(pages, factored ? TensorView<const float, 4>{} : scales, head,
                                   page, first, n, round_to_bf16_first, scratch, &ld);
  fn(AccRows<Acc>{{rows, ld}}, factored);
}

/// Calls fn(page slot j, first row, rows) for the pieces covering tokens [t0, t1): within one
/// page, and at most `max_rows` rows each.
template <class Fn>
inline void for_each_piece(std::int64_t t0, std::int64_t t1, std::int64_t page_size,
                           std::int64_t max_rows, Fn&& fn) {
  for (std::int64_t t = t0; t < t1;) {
    const std::int64_t j = t / page_size, first = t % page_size;
    const std::int64_t rows = std::min(std::min(page_size - first, t1 - t), max_rows);
    fn(j, first, rows);
    t += rows;
  }
}

/// Whether rows of KV can reach the tile products of accumulator Acc through a list of row
/// addresses: read in place (KV is Acc) or widened in registers.
template <class Acc, class KV>
inline constexpr bool kListableRows = kWidenableRows<Acc, KV> || std::is_same<Acc, KV>::value;

/// Whether the rows of KV are read in place by accumulator Acc (f32 pages, f32 accumulation).
template <class Acc, class KV>
inline constexpr bool kRowsInPlace = std::is_same<Acc, KV>::value;

/// Whether every chunk of this call may be listed (`list_chunk`): pages smaller than a chunk
/// or rows read in place, rows read in place or widened in registers (unit dim stride, no bf16
/// rounding first), and scales none, one per token or one per tensor.
template <class Acc, class Q, class KV, class Index>
bool chunks_listable(const PagedAttentionArgs<Q, KV, Index>& a, bool round_kv, std::int64_t chunk) {
  if constexpr (!kListableRows<Acc, KV>) {
    return false;
  } else {
    const auto per_token = [](const TensorView<const float, 4>& scales) {
      return scales.empty_view() || scales.extents[3] == 1;
    };
    const bool small_pages_or_in_place = a.page_size() < chunk || kRowsInPlace<Acc, KV>;
    return small_pages_or_in_place && !round_kv && a.k_pages.strides[3] == 1 &&
           a.v_pages.strides[3] == 1 && per_token(a.k_scales) && per_token(a.v_scales);
  }
}

/// Whether a listable call lists chunk [t0, t1) (`list_chunk`): one that spans pages, and with
/// rows read in place any chunk. Within one page, listed f32 rows are faster than one strided
/// piece (about 3% at the reference shape), and listed widened rows slower (3-5% in L2; int8
/// also gathers its scales).
template <class Acc, class KV>
bool lists_chunk(std::int64_t t0, std::int64_t t1, std::int64_t page_size) noexcept {
  return kRowsInPlace<Acc, KV> || t0 / page_size != (t1 - 1) / page_size;
}

/// Calls fn(page, slot, n, i) for the runs of tokens [t0, t1) that lie in one page each: n
/// tokens from `slot` of page `page` (the j-th page of the sequence is `page_of(j)`), the first
/// of them token t0 + i. One division per call (a division per page was a tenth of the listing).
template <class PageOf, class Fn>
void for_each_page_run(std::int64_t t0, std::int64_t t1, std::int64_t page_size, PageOf&& page_of,
                       Fn&& fn) {
  if (t0 >= t1) return;
  std::int64_t j = t0 / page_size, slot = t0 % page_size;
  for (std::int64_t t = t0; t < t1; ++j, slot = 0) {
    const std::int64_t n = std::min(page_size - slot, t1 - t);
    fn(page_of(j), slot, n, t - t0);
    t += n;
  }
}

/// The addresses of n rows of K or V (KV head h) from `slot` of `page`, into `out`. Each through
/// the view's own offset: a slot stride in bytes may not fit in int64 when a page holds one
/// token (a legal stride on a dimension of extent 1; found by fuzz_paged).
template <class T>
void list_rows(const TensorView<const T, 4>& pages, std::int64_t h, std::int64_t page,
               std::int64_t slot, std::int64_t n, const char** out) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = reinterpret_cast<const char*>(&pages(h, page, slot + i, 0));
}

/// Where the factored scales (row_scales.hpp) of a listed chunk come from: none for unscaled
/// pages, the one scale of a per-tensor view as it is, else one per token, gathered.
enum class ChunkScales { kNone, kPerTensor, kGathered };

inline ChunkScales chunk_scales(bool scaled_elements, const TensorView<const float, 4>& scales) {
  if (!scaled_elements || scales.empty_view()) return ChunkScales::kNone;
  return scales.strides[1] == 0 && scales.strides[2] == 0 ? ChunkScales::kPerTensor
                                                          : ChunkScales::kGathered;
}

/// Lists tokens [t0, t1) of sequence b, KV head h, into `c` (`ChunkRows`), with the rows
/// `tokens_ahead` after them before t_end. False when a piece of them must go through
/// `with_page_rows` instead: a non-finite scale, or codes `widen_packet` does not give exactly.
/// Precondition: `chunks_listable`.
template <class Q, class KV, class Index>
bool list_chunk(const PagedAttentionArgs<Q, KV, Index>& a, std::int64_t b, std::int64_t h,
                std::int64_t t0, std::int64_t t1, std::int64_t t_end, ChunkRows& c) {
  const auto page_of = [&](std::int64_t j) { return a.page_indices(b, j); };
  const std::int64_t dim = a.head_dim(), dim_v = a.head_dim_v(), page_size = a.page_size();
  const ChunkScales k_kind = chunk_scales(kScaledElements<KV>, a.k_scales);
  const ChunkScales v_kind = chunk_scales(kScaledElements<KV>, a.v_scales);
  bool exact = true;
  for_each_page_run(
      t0, t1, page_size, page_of,
      [&](std::int64_t page, std::int64_t slot, std::int64_t n, std::int64_t i) {
        list_rows(a.k_pages, h, page, slot, n, c.k.data() + i);
        list_rows(a.v_pages, h, page, slot, n, c.v.data() + i);
        if (k_kind == ChunkScales::kGathered)
          for (std::int64_t r = 0; r < n; ++r)
            c.k_scales[static_cast<size_t>(i + r)] = a.k_scales(h, page, slot + r, 0);
        if (v_kind == ChunkScales::kGathered)
          for (std::int64_t r = 0; r < n; ++r)
            c.v_scales[static_cast<size_t>(i + r)] = a.v_scales(h, page, slot + r, 0);
        if constexpr (std::is_same<KV, float8_e4m3fn>::value && !kWidensE4m3NanCodes)
          exact = exact &&
                  widens_exactly(&a.k_pages(h, page, slot, 0), a.k_pages.strides[2], n, dim) &&
                  widens_exactly(&a.v_pages(h, page, slot, 0), a.v_pages.strides[2], n, dim_v);
      });
  const auto factored = [&](ChunkScales kind, const TensorView<const float, 4>& scales,
                            const std::vector<float>& gathered) {
    if (kind == ChunkScales::kPerTensor) return RowScales{&scales(h, 0, 0, 0), 0};
    return kind == ChunkScales::kGathered ? RowScales{gathered.data(), 1} : RowScales{};
  };
  c.k_factored = factored(k_kind, a.k_scales, c.k_scales);
  c.v_factored = factored(v_kind, a.v_scales, c.v_scales);
  if (!exact || (c.k_factored && !c.k_factored.finite(t1 - t0)) ||
      (c.v_factored && !c.v_factored.finite(t1 - t0)))
    return false;
  constexpr auto kBytes = static_cast<std::int64_t>(sizeof(KV));
  const std::int64_t ahead = tokens_ahead(dim * kBytes, kBytes);
  const std::int64_t u0 = advance_within(t0, ahead, t_end), u1 = advance_within(t1, ahead, t_end);
  for_each_page_run(u0, u1, page_size, page_of,
                    [&](std::int64_t page, std::int64_t slot, std::int64_t n, std::int64_t i) {
                      list_rows(a.k_pages, h, page, slot, n, c.k_ahead.data() + i);
                      list_rows(a.v_pages, h, page, slot, n, c.v_ahead.data() + i);
                    });
  const auto rows_ahead = [&](const std::vector<const char*>& list, std::int64_t row_dim) {
    RowsAhead r;
    r.listed = list.data();
    r.row_bytes = row_dim * kBytes;
    r.rows = u1 - u0;
    r.into_l1 = ahead_into_l1(kBytes);
    return r;
  };
  c.k_rows_ahead = rows_ahead(c.k_ahead, dim);
  c.v_rows_ahead = rows_ahead(c.v_ahead, dim_v);
  return true;
}

/// The rows of `pages` (KV head h of sequence b) `tokens_ahead` after token t, up to n of them
/// within one page, before token t_end: none past it.
template <class Q, class KV, class Index>
RowsAhead paged_rows_ahead(const PagedAttentionArgs<Q, KV, Index>& a,
                           const TensorView<const KV, 4>& pages, std::int64_t b, std::int64_t h,
                           std::int64_t t, std::int64_t n, std::int64_t t_end) {
  return sequence_rows_ahead(pages, h, t, n, t_end,
                             [&](std::int64_t j) { return a.page_indices(b, j); });
}

/// The tokens of pages [page_begin, page_end) of sequence b that its decode query (position
/// length - 1) sees: before the length, inside the sliding window. page_begin * page_size cannot
/// overflow: the shape tier proved pages_per_sequence * page_size fits in int64.
template <class Q, class KV, class Index>
KeyRange paged_keys(const PagedAttentionArgs<Q, KV, Index>& a, std::int64_t b,
                    std::int64_t page_begin, std::int64_t page_end) {
  const std::int64_t length = a.lengths(b), pps = a.pages_per_sequence();
  return visible_keys(length - 1, a.sliding_window,
                      std::min(std::min(page_begin, pps) * a.page_size(), length),
                      std::min(page_end, pps) * a.page_size());
}

/// Asks for the per-token K and V scales of tokens [t0, t1) of sequence b, KV head h (the next
/// chunk's): each page's scales lie at a random place like the page, and the first read of
/// each was a cache miss (15% of int8 decode's samples with pages of 16). The first and the
/// last token's line of each page: 16 scales can straddle two lines.
template <class Q, class KV, class Index>
void scales_ahead(const PagedAttentionArgs<Q, KV, Index>& a, std::int64_t b, std::int64_t h,
                  std::int64_t t0, std::int64_t t1) {
  if constexpr (PagedAttentionArgs<Q, KV, Index>::kScaled) {
    // None, or one per tensor (zero strides: vLLM's fp8 k_scale): nothing to ask for.
    if (a.k_scales.empty_view() || (a.k_scales.strides[2] == 0 && a.v_scales.strides[2] == 0))
      return;
    const std::int64_t page_size = a.page_size();
    for (std::int64_t t = t0; t < t1;) {
      const std::int64_t page = a.page_indices(b, t / page_size), slot = t % page_size;
      const std::int64_t last = std::min(page_size - slot, t1 - t) - 1;  // may be a line further
      ATTNREF_PREFETCH(&a.k_scales(h, page, slot, 0));
      ATTNREF_PREFETCH(&a.k_scales(h, page, slot + last, 0));
      ATTNREF_PREFETCH(&a.v_scales(h, page, slot, 0));
      ATTNREF_PREFETCH(&a.v_scales(h, page, slot + last, 0));
      t += last + 1;
    }
  }
}

/// A listed chunk's rows (`ChunkRows`) as a row source for the tile products.
template <class Acc, class KV>
using ListedChunkRows =
    std::conditional_t<std::is_same<Acc, KV>::value, AccRows<Acc, ListedRows<KV>>,
                       WideRows<KV, ListedRows<KV>>>;

/// The scores of a listed chunk `c` of n tokens into `scores` [group, chunk], scaled as the
/// per-piece path scales them (the same sums in the same order).
template <class Acc, bool kDivide, class KV>
void listed_scores(const PagedScratch<Acc>& s, const ChunkRows& c, Acc* scores, std::int64_t group,
                   std::int64_t dim, std::int64_t n, std::int64_t chunk) {
  if constexpr (kListableRows<Acc, KV>) {  // else never listed (`chunks_listable`)
    qk_rows<Acc>(s.q.data(), dim, group, ListedChunkRows<Acc, KV>{{c.k.data()}}, n, dim, scores,
                 chunk, c.k_rows_ahead);
    if constexpr (std::is_same<Acc, float>::value)
      if (c.k_factored) scale_columns<kDivide>(scores, chunk, group, n, c.k_factored);
  }
}

/// Tokens [i0, i1) of a listed chunk `c`: their probabilities (columns i0.. of `probs` [group,
/// chunk], scaled already) times their V rows (`dim_v` wide), added to the output; the rows
/// ahead of those tokens asked for.
template <class Acc, class KV>
void listed_values(PagedScratch<Acc>& s, const ChunkRows& c, const Acc* probs, std::int64_t group,
                   std::int64_t dim_v, std::int64_t i0, std::int64_t i1, std::int64_t chunk) {
  if constexpr (kListableRows<Acc, KV>) {  // else never listed (`chunks_listable`)
    RowsAhead ahead = c.v_rows_ahead;
    ahead.listed += i0;
    ahead.rows = std::max<std::int64_t>(0, std::min(ahead.rows, i1) - i0);
    pv_rows<Acc>(probs + i0, chunk, group, ListedChunkRows<Acc, KV>{{c.v.data() + i0}}, i1 - i0,
                 dim_v, s.state.o.data(), dim_v, ahead);
  }
}

/// Runs of tokens a chunk's P·V is cut into, with the rows of the next chunk's softmax step
/// spread between them (`attend_pages`). The step asks for no rows: run in one piece between
/// the tiles, it left the memory system idle for most of its length, as the rows asked for
/// before it arrive long before it ends. 2 for rows of 4-byte elements or wider, whose decode
/// waits on memory; 1 (the step after the whole P·V) for 16-bit and 8-bit rows, which their
/// arithmetic bounds on the AVX-512 Xeon, where each cut costs a reload of the P·V
/// accumulators. Two runs take 3-4% off f32 decode from memory; 4 are no faster than 2.
template <class KV>
constexpr std::int64_t value_runs(std::int64_t group) noexcept {
  return sizeof(KV) >= 4 ? std::min<std::int64_t>(group, 2) : 1;
}

/// Tokens [t0, t1) of one softmax step of `attend_pages`: their scores in buffer `buffer` of the
/// scratch and, when listed, their rows there too.
struct PagedChunk {
  std::int64_t t0 = 0, t1 = 0;
  int buffer = 0;
  bool listed = false;
};

/// What `attend_pages` works on: the G query heads of sequence b that read KV head h, its keys
/// before t_end, in chunks of `chunk` tokens; K/V rounded to bf16 when `round_kv`.
struct PagedItem {
  std::int64_t b = 0, h = 0, group = 0, chunk = 0, t_end = 0;
  bool round_kv = false;
};

/// The scores of a chunk `c` not listed, read page piece by page piece, into `scores` [group,
/// chunk], scaled as `listed_scores` scales them; the K rows ahead asked for as they are read.
template <class Acc, bool kDivide, class Q, class KV, class Index>
void piece_scores(const PagedAttentionArgs<Q, KV, Index>& a, const PagedItem& w,
                  const PagedChunk& c, PagedScratch<Acc>& s, Acc* scores) {
  const std::int64_t dim = a.head_dim(), page_size = a.page_size();
  for_each_piece(c.t0, c.t1, page_size, piece_rows(dim),
                 [&](std::int64_t j, std::int64_t first, std::int64_t n) {
                   const std::int64_t t = j * page_size + first;
                   with_page_rows<Acc>(
                       a.k_pages, a.k_scales, w.h, a.page_indices(w.b, j), first, n, w.round_kv,
                       s.k.data(), [&](const auto& k, const RowScales& k_scales) {
                         Acc* piece = scores + (t - c.t0);
                         qk_rows<Acc>(s.q.data(), dim, w.group, k, n, dim, piece, w.chunk,
                                      paged_rows_ahead(a, a.k_pages, w.b, w.h, t, n, w.t_end));
                         if constexpr (std::is_same<Acc, float>::value)
                           if (k_scales)
                             scale_columns<kDivide>(piece, w.chunk, w.group, n, k_scales);
                       });
                 });
}

/// Tokens [i0, i1) of a chunk `c` not listed, read page piece by page piece: their
/// probabilities (columns i0.. of `probs` [group, chunk]) times their V rows, added to the
/// output; the V rows ahead asked for as they are read.
template <class Acc, bool kDivide, class Q, class KV, class Index>
void piece_values(const PagedAttentionArgs<Q, KV, Index>& a, const PagedItem& w,
                  const PagedChunk& c, PagedScratch<Acc>& s, Acc* probs, std::int64_t i0,
                  std::int64_t i1) {
  const std::int64_t dim_v = a.head_dim_v(), page_size = a.page_size();
  for_each_piece(c.t0 + i0, c.t0 + i1, page_size, piece_rows(dim_v),
                 [&](std::int64_t j, std::int64_t first, std::int64_t m) {
                   const std::int64_t t = j * page_size + first;
                   with_page_rows<Acc>(
                       a.v_pages, a.v_scales, w.h, a.page_indices(w.b, j), first, m, w.round_kv,
                       s.v.data(), [&](const auto& v, const RowScales& v_scales) {
                         Acc* p = probs + (t - c.t0);  // not needed after this
                         if constexpr (std::is_same<Acc, float>::value)
                           if (v_scales) scale_columns<kDivide>(p, w.chunk, w.group, m, v_scales);
                         pv_rows<Acc>(p, w.chunk, w.group, v, m, dim_v, s.state.o.data(), dim_v,
                                      paged_rows_ahead(a, a.v_pages, w.b, w.h, t, m, w.t_end));
                       });
                 });
}

/// `attend_pages`' start: the G query rows of sequence b that read KV head h into `s.q`, and an
/// empty online-softmax state, holding the sinks when `with_sinks` (the range starting at page 0).
template <class Acc, class Q, class KV, class Index>
void start_group(const PagedAttentionArgs<Q, KV, Index>& a, std::int64_t b, std::int64_t h,
                 bool with_sinks, PagedScratch<Acc>& s) {
  const HeadGroups heads{a.num_q_heads(), a.num_kv_heads()};
  const std::int64_t group = heads.group(), dim = a.head_dim();
  for (std::int64_t g = 0; g < group; ++g)
    for (std::int64_t d = 0; d < dim; ++d)
      s.q[static_cast<size_t>(g * dim + d)] = load_as<Acc>(a.q(b, heads.q_head(h, g), d));
  s.state.reset(group, a.head_dim_v());
  if (with_sinks && !a.sinks.empty_view())
    for (std::int64_t g = 0; g < group; ++g)
      s.state.start_with_sink(g, static_cast<Acc>(a.sinks(heads.q_head(h, g))));
}

/// Folds the tokens of pages [page_begin, page_end) of sequence b into the online-softmax state
/// of the G query heads that read KV head h, one chunk of chunk_tokens(G) tokens per
/// softmax step. Reads only the rows `paged_keys` gives, and asks for the K (V) rows some tokens
/// ahead as it reads K (V): the hardware prefetchers stop at each page. The range starting at
/// page 0 holds the sinks (so a split-KV merge counts each once).
///
/// A chunk's P·V runs after the next chunk's Q·K, and with f32 rows the next chunk's softmax
/// step runs between two halves of it (`value_runs`). Each output row is still rescaled after
/// the previous chunk's values and before its own, so every sum is the one of a step-by-step
/// fold, bit for bit.
template <class Acc, class Q, class KV, class Index>
void attend_pages(const PagedAttentionArgs<Q, KV, Index>& a, std::int64_t b, std::int64_t h,
                  std::int64_t page_begin, std::int64_t page_end, PagedScratch<Acc>& s) {
  const HeadGroups heads{a.num_q_heads(), a.num_kv_heads()};
  const std::int64_t group = heads.group();
  const std::int64_t dim = a.head_dim(), dim_v = a.head_dim_v(), page_size = a.page_size();
  const std::int64_t length = a.lengths(b);
  const bool round_kv = a.round_kv_to_bf16 && !PagedAttentionArgs<Q, KV, Index>::kScaled;
  constexpr bool kDivide = std::is_same<KV, std::int8_t>::value;  // JAX's (w * s) / 127.5
  const LogitTransform<Acc> logits(a.sm_scale, a.soft_cap, a.soft_cap_order);
  start_group(a, b, h, page_begin == 0, s);
  const KeyRange keys = paged_keys(a, b, page_begin, page_end);
  const std::int64_t t_begin = keys.lo, t_end = std::max(keys.lo, keys.hi);
  if (t_begin >= t_end) return;
  const std::int64_t chunk = chunk_tokens(group);
  const bool listable = chunks_listable<Acc>(a, round_kv, chunk);
  const PagedItem item{b, h, group, chunk, t_end, round_kv};

  using Chunk = PagedChunk;
  const auto logits_of = [&](const Chunk& c) {
    return Eigen::Map<RowMajorMatrix<Acc>, Eigen::Unaligned, Eigen::OuterStride<>>(
        s.scores_of(c.buffer, group, chunk), group, c.t1 - c.t0, Eigen::OuterStride<>(chunk));
  };
  // Chunk c's logits: its Q·K, scaled, soft-capped and ALiBi-biased.
  const auto add_logits = [&](Chunk& c) {
    ChunkRows& rows = s.chunks[c.buffer];
    Acc* scores = s.scores_of(c.buffer, group, chunk);
    scales_ahead(a, b, h, c.t1, advance_within(c.t1, chunk, t_end));
    c.listed = listable && lists_chunk<Acc, KV>(c.t0, c.t1, page_size) &&
               list_chunk(a, b, h, c.t0, c.t1, t_end, rows);
    if (c.listed)
      listed_scores<Acc, kDivide, KV>(s, rows, scores, group, dim, c.t1 - c.t0, chunk);
    else
      piece_scores<Acc, kDivide>(a, item, c, s, scores);
    auto x = logits_of(c);
    logits.apply(x, [&](auto& y) {
      if (a.alibi_slopes.empty_view()) return;
      for (std::int64_t g = 0; g < group; ++g)
        add_alibi(y.row(g), static_cast<Acc>(a.alibi_slopes(heads.q_head(h, g))), c.t0, length - 1,
                  a.alibi_convention);
    });
  };
  // Row g of chunk c's softmax step: its logits become probabilities; the factor for its
  // output waits in `alpha` until the previous chunk's values are in.
  const auto fold_row = [&](const Chunk& c, std::int64_t g) {
    s.alpha[static_cast<size_t>(g)] = s.state.template fold_row<false>(g, logits_of(c).row(g));
  };
  const auto rescale_outputs = [&] {
    for (std::int64_t g = 0; g < group; ++g)
      s.state.rescale_row(g, s.alpha[static_cast<size_t>(g)]);
  };
  // Chunk c's probabilities times its V rows, added to the output in `value_runs` runs of
  // tokens; between(g) for each row g of the group, spread evenly after the runs.
  const auto add_values = [&](const Chunk& c, auto&& between) {
    Acc* probs = s.scores_of(c.buffer, group, chunk);
    const ChunkRows& rows = s.chunks[c.buffer];
    const std::int64_t n = c.t1 - c.t0;
    if constexpr (std::is_same<Acc, float>::value)
      if (c.listed && rows.v_factored)
        scale_columns<kDivide>(probs, chunk, group, n, rows.v_factored);
    const std::int64_t runs = value_runs<KV>(group);
    for (std::int64_t r = 0; r < runs; ++r) {
      const std::int64_t i0 = n * r / runs, i1 = n * (r + 1) / runs;
      if (c.listed)
        listed_values<Acc, KV>(s, rows, probs, group, dim_v, i0, i1, chunk);
      else
        piece_values<Acc, kDivide>(a, item, c, s, probs, i0, i1);
      for (std::int64_t g = group * r / runs; g < group * (r + 1) / runs; ++g) between(g);
    }
  };

  Chunk current{t_begin, advance_within(t_begin, chunk, t_end), 0};
  add_logits(current);
  for (std::int64_t g = 0; g < group; ++g) fold_row(current, g);
  rescale_outputs();
  while (current.t1 < t_end) {
    if (stop_requested()) return;  // a stopped call's outputs are discarded
    Chunk next{current.t1, advance_within(current.t1, chunk, t_end), current.buffer ^ 1};
    add_logits(next);
    add_values(current, [&](std::int64_t g) { fold_row(next, g); });
    rescale_outputs();
    current = next;
  }
  add_values(current, [](std::int64_t) {});
}

/// How many page ranges each (sequence, KV head) is split into: 1 unless there are fewer items
/// than threads (small batches), then enough to keep every thread busy (flash-decoding).
inline std::int64_t kv_splits(std::int64_t items, int concurrency, std::int64_t max_pages) {
  if (concurrency <= 1 || items <= 0 || items >= concurrency || max_pages <= 1) return 1;
  const std::int64_t want = (2 * concurrency + items - 1) / items;
  return std::min(want, max_pages);
}

/// The unchecked paged kernel: `paged_attention_unchecked`'s body (see there). Work is split over
/// (sequence, KV head) pairs and run on `executor`; when there are fewer pairs than threads, each
/// sequence's pages are split too and the partial softmax states merged by log-sum-exp.
template <class Q, class KV, class Index, class Executor>
void paged_run(const PagedAttentionArgs<Q, KV, Index>& a, const TensorView<Q, 3>& out,
               const TensorView<float, 2>& logsumexp, Executor&& executor) {
  using Acc = AccumulatorOf<Q, KV>;
  if (out.holds_no_elements()) return;  // batch 0: O(1), whatever the head or page counts
  const std::int64_t batch = a.batch(), num_kv_heads = a.num_kv_heads();
  const HeadGroups heads{a.num_q_heads(), num_kv_heads};
  const std::int64_t group = heads.group();
  const std::int64_t dim = a.head_dim(), dim_v = a.head_dim_v();  // out is [.., dim_v]
  const std::int64_t items = batch * num_kv_heads;
  const std::int64_t splits = kv_splits(items, executor.concurrency(), a.pages_per_sequence());
  const auto write_row = [&](std::int64_t b, std::int64_t h, std::int64_t g, const Acc* o,
                             Acc scale, float lse) {
    for (std::int64_t d = 0; d < dim_v; ++d)
      out(b, heads.q_head(h, g), d) = store_as<Q>(o[d] * scale);
    if (!logsumexp.empty_view()) logsumexp(b, heads.q_head(h, g)) = lse;
  };

  if (splits == 1) {
    const std::vector<std::int64_t> order =
        longest_first(items, executor.concurrency(), [&](std::int64_t item) {
          return static_cast<double>(
              paged_keys(a, item / num_kv_heads, 0, a.pages_per_sequence()).size());
        });
    executor.parallel_for(items, [&](std::int64_t k) {
      thread_local PagedScratch<Acc> scratch;
      const std::int64_t item = order[static_cast<std::size_t>(k)];
      scratch.reserve(group, dim, dim_v);
      const std::int64_t b = item / num_kv_heads, h = item % num_kv_heads;
      attend_pages(a, b, h, 0, a.pages_per_sequence(), scratch);
      const auto& st = scratch.state;
      const bool has_logits = a.lengths(b) > 0 || !a.sinks.empty_view();
      for (std::int64_t g = 0; g < group; ++g)
        write_row(b, h, g, st.o.data() + g * dim_v, st.inverse_sum_of(g, has_logits),
                  st.logsumexp(g, has_logits));
    });
    return;
  }

  // Split-KV: partial (max, sum, unnormalised output) per (item, split), then a merge.
  const std::int64_t per_split = ceil_div(a.pages_per_sequence(), splits);
  const std::int64_t stride = group * (2 + dim_v);  // m[G], l[G], o[G, Dv]
  thread_local std::vector<Acc> partials;
  partials.resize(static_cast<size_t>(items * splits * stride));
  Acc* partial = partials.data();
  executor.parallel_for(items * splits, [&](std::int64_t task) {
    thread_local PagedScratch<Acc> scratch;
    scratch.reserve(group, dim, dim_v);
    const std::int64_t item = task / splits, split = task % splits;
    const std::int64_t b = item / num_kv_heads, h = item % num_kv_heads;
    attend_pages(a, b, h, split * per_split, (split + 1) * per_split, scratch);
    Acc* dst = partial + task * stride;
    const auto& st = scratch.state;
    for (std::int64_t g = 0; g < group; ++g) {
      dst[g] = st.m[g];
      dst[group + g] = st.l[g];
    }
    std::copy(st.o.data(), st.o.data() + group * dim_v, dst + 2 * group);
  });
  executor.parallel_for(items, [&](std::int64_t item) {
    thread_local std::vector<Acc> merged;
    merged.assign(static_cast<size_t>(dim_v), Acc(0));
    const std::int64_t b = item / num_kv_heads, h = item % num_kv_heads;
    // Split s has logits iff it read a token or holds the sinks (an all -inf split has l = 0
    // too, and its o may hold 0 * NaN from a live V row: it is merged, not skipped).
    const auto has_logits = [&](std::int64_t s) {
      return (s == 0 && !a.sinks.empty_view()) ||
             paged_keys(a, b, s * per_split, (s + 1) * per_split).size() > 0;
    };
    for (std::int64_t g = 0; g < group; ++g) {
      const auto state_of = [&](std::int64_t s) {
        const Acc* src = partial + (item * splits + s) * stride;
        return PartialState<Acc>{src[g], src[group + g], src + 2 * group + g * dim_v,
                                 !has_logits(s)};
      };
      const MergedState<Acc> m = merge_partial_states<Acc>(splits, dim_v, state_of, merged.data());
      write_row(b, h, g, merged.data(), m.inverse_sum(), m.logsumexp());
    }
  });
}

}  // namespace detail

/// Runs paged attention without validating. Precondition: `check_paged(args, profile).ok()` for
/// some profile, and `out` a valid `[batch, num_q_heads, head_dim_v]` view and `logsumexp` empty
/// or a valid `[batch, num_q_heads]` one (see `check_paged_output`). Use it to validate once and
/// run many times.
///
/// Work is split over (sequence, KV head) pairs and run on `executor`; when there are fewer pairs
/// than threads, each sequence's pages are split too and the partial softmax states merged by
/// log-sum-exp. Any thread count gives the same result up to rounding.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void paged_attention_unchecked(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                               TensorView<float, 2> logsumexp = {},
                               Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  detail::paged_run(a, out, logsumexp, executor);
}

/// `paged_attention_unchecked(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
void paged_attention_unchecked(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                               Executor&& executor) {
  paged_attention_unchecked(a, out, TensorView<float, 2>{}, std::forward<Executor>(executor));
}

/// Validates with `Profile::kReference` (shapes, metadata, output views), then runs. Returns
/// the first error without touching `out` or `logsumexp`.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
Status try_paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                           TensorView<float, 2> logsumexp = {}, Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_paged(a, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(check_paged_output(a, out, logsumexp));
  detail::paged_run(a, out, logsumexp, executor);
  return Status();
}

/// `try_paged_attention(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
Status try_paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                           Executor&& executor) {
  return try_paged_attention(a, out, TensorView<float, 2>{}, std::forward<Executor>(executor));
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                     TensorView<float, 2> logsumexp = {}, Executor&& executor = Executor{}) {
  throw_if_error(try_paged_attention(a, out, logsumexp, std::forward<Executor>(executor)));
}

/// `paged_attention(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
void paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out,
                     Executor&& executor) {
  throw_if_error(
      try_paged_attention(a, out, TensorView<float, 2>{}, std::forward<Executor>(executor)));
}

}  // namespace attnref
