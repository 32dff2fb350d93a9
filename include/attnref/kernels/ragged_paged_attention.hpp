// SPDX-License-Identifier: Apache-2.0
/// @file ragged_paged_attention.hpp
/// Ragged paged attention on the CPU: prefill and decode sequences in one ragged batch over one
/// shared page pool, the exact math of JAX's `ragged_paged_attention` (spec §4.4) with f32
/// accumulation (f64 for double inputs).
///
/// Example:
/// @code
///   attnref::RaggedPagedAttentionArgs<float> args;     // views over the engine's buffers
///   args.q = {q.data(), {max_tokens, 32, 128}};          // [T, Hq, D]
///   attnref::TensorView<const float, 4> kv_pages(kv.data(), {pages, 16, 16, 128});  // [P, S,
///   2*Hkv, D] attnref::throw_if_error(attnref::ragged_kv_views(kv_pages, &args.k_pages,
///   &args.v_pages)); args.kv_lens = {kv_lens.data(), {max_seqs}}; args.page_indices =
///   {table.data(), {max_seqs, pages_per_seq}}; args.cu_q_lens = {cu.data(), {max_seqs + 1}};
///   args.num_seqs_value = live_seqs;
///   args.sm_scale = 1.0f / std::sqrt(128.0f);
///   std::vector<float> out(q.size());
///   attnref::ragged_paged_attention(args, {out.data(), {max_tokens, 32, 128}});  // throws
///   std::vector<float> lse(max_tokens * 32);  // optional: the logsumexp of every row too
///   attnref::ragged_paged_attention(args, {out.data(), {max_tokens, 32, 128}},
///                                   {lse.data(), {max_tokens, 32}});
/// @endcode
///
/// The optional logsumexp [max_num_batched_tokens, num_q_heads] (f32) is the natural log of each
/// row's softmax denominator over its visible keys; padding rows (at or past
/// `cu_q_lens[num_seqs]`) get -inf, as a row with no visible key. Results over disjoint key sets
/// merge exactly with it (kernels/merge_attention_states.hpp).
///
/// Engine features (the logits pipeline of kernels/detail/online_softmax.hpp, in its order):
/// `alibi_slopes` add slope[qh] * (c - pos) after the cap (pos = kv_len - q_len + r;
/// `soft_cap_order` kAlibiThenCap: before it, c * tanh((x + bias) / c); `alibi_convention`
/// kAbsolute, -slope[qh] * |c - pos|, is the same bias, as every visible key has c <= pos);
/// `sinks` add exp(sink[qh]) to each live row's denominator (no value row; the logsumexp
/// includes it; padding rows stay 0 and -inf).
///
/// How it runs: for each live sequence and each KV head, the G query heads sharing that KV head
/// and all q_len rows of the sequence form one (q_len * G) x D row block. K/V are read a block
/// of pages at a time (only the tokens some row can see: never past kv_len, never before the
/// earliest sliding window, never an unused page), each page once per group, and folded in with
/// the kernels' shared online-softmax step (kernels/detail/online_softmax.hpp; the same visible
/// range code for every row). A `RaggedWorkItem` describes a sequence's rows; only the tiling
/// depends on the row block's size: a block of at most `kRaggedSmallRows` rows (a decode
/// sequence, or a short prefill chunk; `ragged_decode_item`) walks the pages once for all KV
/// heads (or, with fewer items than threads, for a range of them) with register-blocked tiles,
/// up to 128 tokens per softmax step whatever the page size;
/// a larger one (`ragged_prefill_item`) gathers 128-token blocks per KV head for matrix products
/// and skips the rows a block cannot affect. Work items go to an executor (serial by default;
/// see core/executor.hpp).
///
/// Non-finite inputs (docs/hostile-inputs.md; the rule of every family): NaN or +inf in a live q
/// row, or in the K row of a key the row sees, makes that output row NaN (as do logits all -inf:
/// every live row sees at least its own position); NaN/Inf in the V row of a key the row sees go
/// through the weighted sum as IEEE does, and never reach a row that does not see that key.
/// Nothing past kv_len, before the earliest window, or in padding rows is read.
#pragma once

#include <algorithm>
#include <array>
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
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/executor_arg.hpp"
#include "attnref/kernels/detail/head_groups.hpp"
#include "attnref/kernels/detail/online_softmax.hpp"
#include "attnref/kernels/detail/row_scales.hpp"
#include "attnref/kernels/detail/tile_products.hpp"
#include "attnref/kernels/detail/work_order.hpp"
#include "attnref/validate/ragged.hpp"

namespace attnref {

namespace detail {

/// Tokens per step: scratch is sized by this, never by the page size (a valid call with huge
/// pages and short sequences must not allocate a page's worth of scratch).
inline constexpr std::int64_t kRaggedChunkTokens = 128;

/// Keys gathered per block of the many-rows path: whole pages up to about 128 tokens, or 128
/// tokens of a larger page.
inline std::int64_t ragged_block_tokens(std::int64_t page_size) noexcept {
  if (page_size >= kRaggedChunkTokens) return kRaggedChunkTokens;
  return (kRaggedChunkTokens + page_size - 1) / page_size * page_size;
}

/// Row blocks of at most this many rows (decode: q_len x G) take the dot-product path.
inline constexpr Eigen::Index kRaggedSmallRows = 16;

/// Elements of each of the few-rows path's per-chunk scratch buffers (the K and V conversion
/// rows, Hkv x chunk x D, and the scores, 16 x Hkv x chunk): 1 MiB of f32. 128 tokens up to
/// Hkv x max(D, 16) = 2048 (16 heads of 128), fewer beyond, never fewer than one.
inline constexpr std::int64_t kRaggedFewRowsScratch = 262144;

/// Tokens per softmax step of the few-rows path, over as many pages as they span: at most
/// `tokens` (the item's keys), and few enough for kRaggedFewRowsScratch.
inline std::int64_t ragged_few_rows_chunk(std::int64_t num_kv_heads, std::int64_t dim,
                                          std::int64_t tokens) noexcept {
  const std::int64_t width = std::max<std::int64_t>(dim, kRaggedSmallRows);
  const std::int64_t per_token = std::max<std::int64_t>(1, num_kv_heads) * width;
  const std::int64_t fits = std::max<std::int64_t>(1, kRaggedFewRowsScratch / per_token);
  return std::max<std::int64_t>(1, std::min(std::min(kRaggedChunkTokens, fits), tokens));
}

/// Reads one K or V element as the accumulator type, dequantized as JAX does when a scale is
/// given: `q_dtype(float(x) * scale)`.
template <class Acc, class Q, class KV>
inline Acc load_kv(const KV& x, bool scaled, float scale) noexcept {
  if (!scaled) return load_as<Acc>(x);
  if constexpr (std::is_same<Q, double>::value) {
    return load_as<double>(x) * static_cast<double>(scale);
  } else {
    const float v = load_as<float>(x) * scale;
    return load_as<Acc>(store_as<Q>(v));
  }
}

/// Per-thread buffers of the ragged kernel, sized by one sequence's row block and one page
/// block (never by the cache). Kept thread_local and grown on demand, so a steady-state serving
/// loop does not allocate.
template <class Acc>
struct RaggedScratch {
  using Matrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vector = Eigen::Matrix<Acc, Eigen::Dynamic, 1>;
  /// One path's buffers: query rows, their output sums, their logits, their softmax state
  /// (running max m, sum l, rescale alpha) and a block of K/V rows.
  struct Tiles {
    Matrix q, acc, logits, k, v;
    Vector m, l, alpha;
    /// Grows rows for the same width; a new width takes only this call's rows (keeping an
    /// earlier call's row count would size the buffer by that call: found by the fuzzers' work
    /// budget).
    static void fit_matrix(Matrix& x, Eigen::Index rows, Eigen::Index cols) {
      if (x.cols() != cols || x.rows() < rows) x.resize(rows, cols);
    }
    /// For `rows` query rows of `dim`, `cols` logits a row, `keys` K/V rows of `dim`.
    void fit(Eigen::Index rows, Eigen::Index cols, Eigen::Index keys, Eigen::Index dim) {
      fit_matrix(q, rows, dim);
      fit_matrix(acc, rows, dim);
      fit_matrix(logits, rows, cols);
      for (Vector* x : {&m, &l, &alpha})
        if (x->rows() < rows) x->resize(rows);
      fit_matrix(k, keys, dim);
      fit_matrix(v, keys, dim);
    }
  };
  // Many-rows path: one KV head's rows of one sequence, a block of gathered K/V.
  Tiles many;
  // Few-rows path: every KV head's rows of one sequence, one chunk of tokens (over pages).
  Tiles few;
  /// The tokens [t, t + n) of one page within a few-rows chunk: widened in registers from
  /// `page` at `slot`, or converted (or f32 in place) at k + h * head_step (v likewise), ld apart.
  struct Piece {
    std::int64_t t = 0, n = 0, page = 0, slot = 0;
    bool widen = false;
    const Acc* k = nullptr;
    const Acc* v = nullptr;
    std::int64_t ld = 0, head_step = 0;
  };
  std::vector<Piece> pieces;
};

/// One work item: the rows of one sequence and the KV heads they are run for. Both paths (few
/// rows: decode; many rows: prefill) work on this description.
struct RaggedWorkItem {
  std::int64_t seq = 0;            ///< sequence index
  std::int64_t row0 = 0;           ///< first token row in q and out
  std::int64_t q_len = 0;          ///< rows of the sequence
  std::int64_t kv_len = 0;         ///< keys of the sequence
  std::int64_t first_pos = 0;      ///< position of row 0: kv_len - q_len (bottom-right aligned)
  KeyRange keys;                   ///< keys some row can see: [earliest window start, kv_len)
  std::int64_t kv_head_begin = 0;  ///< KV heads [begin, end) of this item
  std::int64_t kv_head_end = 0;
};

/// The constants of one call, shared by every work item.
template <class Q, class KV, class Index>
struct RaggedCall {
  using Acc = AccumulatorOf<Q, KV>;
  const RaggedPagedAttentionArgs<Q, KV, Index>& a;
  const TensorView<Q, 3>& out;
  const TensorView<float, 2>& lse;  ///< empty: not written
  HeadGroups heads;
  std::int64_t dim, page_size;
  LogitTransform<Acc> logits;
  std::optional<std::int64_t> window;
  bool k_scaled, v_scaled;
  float k_scale, v_scale;
  bool q_contiguous, kv_contiguous;
  /// K and V step the same between heads and between slots (JAX's combined pool, any dense
  /// cache), so one (ld, head_step) pair serves both in place.
  bool kv_shared_strides;
  /// The decode path applies k_scale and v_scale to its products, not to every element
  /// (row_scales.hpp): f32 queries over 8-bit pages with finite scales (bf16 queries round each
  /// dequantized element to bf16 first, which only the element-wise path can do).
  bool scales_factored;
  /// 16/8-bit pages feed the decode path's tile products directly, widened in registers: f32
  /// accumulation, contiguous rows, and no scale or factored scales.
  bool kv_widen;
  /// Bytes from one KV head's pages to the next's, in K and in V.
  std::int64_t k_head_bytes, v_head_bytes;

  RaggedCall(const RaggedPagedAttentionArgs<Q, KV, Index>& args, const TensorView<Q, 3>& o,
             const TensorView<float, 2>& logsumexp)
      : a(args),
        out(o),
        lse(logsumexp),
        heads{args.num_q_heads(), args.num_kv_heads()},
        dim(args.head_dim()),
        page_size(args.page_size()),
        logits(args.sm_scale, args.soft_cap, args.soft_cap_order),
        window(args.sliding_window),
        k_scaled(args.k_scale.has_value()),
        v_scaled(args.v_scale.has_value()),
        k_scale(args.k_scale.value_or(1.0f)),
        v_scale(args.v_scale.value_or(1.0f)),
        q_contiguous(args.q.strides[2] == 1),
        kv_contiguous(args.k_pages.strides[3] == 1 && args.v_pages.strides[3] == 1),
        kv_shared_strides(args.k_pages.strides[0] == args.v_pages.strides[0] &&
                          args.k_pages.strides[2] == args.v_pages.strides[2]),
        scales_factored(std::is_same<Q, float>::value && kScaledElements<std::remove_cv_t<KV>> &&
                        std::isfinite(k_scale) && std::isfinite(v_scale)),
        kv_widen(kWidenable && kv_contiguous && (!(k_scaled || v_scaled) || scales_factored)),
        k_head_bytes(args.k_pages.strides[0] * static_cast<std::int64_t>(sizeof(KV))),
        v_head_bytes(args.v_pages.strides[0] * static_cast<std::int64_t>(sizeof(KV))) {}

  static constexpr bool kWidenable = kWidenableRows<Acc, std::remove_cv_t<KV>>;
  /// Tokens from `slot` of `page`, KV head h, of K or V, as a row source widened in registers
  /// (unscaled: the decode path applies the scales to the products).
  WideRows<std::remove_cv_t<KV>> wide_rows(const TensorView<const KV, 4>& pages, std::int64_t h,
                                           std::int64_t page, std::int64_t slot) const noexcept {
    return {{&pages(h, page, slot, 0), pages.strides[2]}};
  }

  /// Whether `widens_exactly` (widen.hpp) holds for K and V of n tokens from `slot` of `page`,
  /// KV heads [h0, h1); a piece where it does not is converted instead.
  bool piece_widens_exactly(std::int64_t page, std::int64_t slot, std::int64_t n, std::int64_t h0,
                            std::int64_t h1) const {
    for (std::int64_t h = h0; h < h1; ++h)
      if (!widens_exactly(&a.k_pages(h, page, slot, 0), a.k_pages.strides[2], n, dim) ||
          !widens_exactly(&a.v_pages(h, page, slot, 0), a.v_pages.strides[2], n, dim))
        return false;
    return true;
  }

  /// The visible keys of the row at position `pos` within [lo, hi).
  KeyRange visible(std::int64_t pos, std::int64_t lo, std::int64_t hi) const noexcept {
    return visible_keys(pos, window, lo, hi);
  }
  /// Starts the running (m, l) of a row of query head `qh`: empty, or with its sink.
  void start(std::int64_t qh, Acc& m, Acc& l) const noexcept {
    if (a.sinks.empty_view()) {
      start_row<Acc>(m, l, nullptr);
    } else {
      const Acc sink = static_cast<Acc>(a.sinks(qh));
      start_row(m, l, &sink);
    }
  }
  /// The online-softmax step of one row of query head `qh` at position `pos` over keys
  /// [lo, lo + x.size()): the logits of its visible keys go through the logits pipeline (scale,
  /// soft cap, ALiBi) and are folded into (m, l); `x` is left with their probabilities and 0
  /// elsewhere. Returns the factor for the row's old output.
  template <class Row>
  Acc softmax_row(Row&& x, std::int64_t qh, std::int64_t pos, std::int64_t lo, Acc& m,
                  Acc& l) const {
    const KeyRange vis = visible(pos, lo, lo + static_cast<std::int64_t>(x.size()));
    if (vis.size() <= 0) {  // nothing visible in this block: the row's state is unchanged
      x.setZero();
      return Acc(1);
    }
    const Eigen::Index v0 = static_cast<Eigen::Index>(vis.lo - lo);
    const Eigen::Index nv = static_cast<Eigen::Index>(vis.size());
    auto seg = x.segment(v0, nv);
    logits.apply(seg, [&](auto& y) {
      if (!a.alibi_slopes.empty_view())
        add_alibi(y, static_cast<Acc>(a.alibi_slopes(qh)), vis.lo, pos, a.alibi_convention);
    });
    const Acc alpha = fold_logits<false>(seg, m, l);
    x.head(v0).setZero();
    x.tail(x.size() - v0 - nv).setZero();
    return alpha;
  }
};

/// One contiguous row of `dim` elements to the accumulator type, vectorised.
template <class Acc, class KV>
inline void widen_row(const KV* src, std::int64_t dim, Acc* dst) {
  if constexpr (std::is_same<KV, Eigen::bfloat16>::value && std::is_same<Acc, float>::value) {
    widen_bf16(src, dim, dst);
  } else if constexpr (is_fp8_dtype<KV>) {  // a table lookup per code
    for (std::int64_t d = 0; d < dim; ++d) dst[d] = static_cast<Acc>(src[d].to_float());
  } else {
    using Row = Eigen::Array<Acc, Eigen::Dynamic, 1>;
    using SrcRow = Eigen::Array<KV, Eigen::Dynamic, 1>;
    const Eigen::Index len = static_cast<Eigen::Index>(dim);
    Eigen::Map<Row>(dst, len) = Eigen::Map<const SrcRow>(src, len).template cast<Acc>();
  }
}

/// Converts K and V of `count` tokens from `slot0` of `page`, KV head h, into rows
/// buf_row0 + t * buf_step of the buffers, dequantized, or with `unscaled` as the codes' values
/// (the decode path's factored scales). Gathering beats reading f32 rows in place: a page is
/// read front to back, which the hardware prefetcher follows.
template <class Q, class KV, class Index, class Matrix>
void gather_kv_rows(const RaggedCall<Q, KV, Index>& c, std::int64_t page, std::int64_t slot0,
                    std::int64_t count, std::int64_t h, Matrix& kd_buf, Matrix& vd_buf,
                    std::int64_t buf_row0, std::int64_t buf_step, bool unscaled = false) {
  using Acc = typename RaggedCall<Q, KV, Index>::Acc;
  const auto& kp = c.a.k_pages;
  const auto& vp = c.a.v_pages;
  const bool k_scaled = c.k_scaled && !unscaled, v_scaled = c.v_scaled && !unscaled;
  for (std::int64_t t = 0; t < count; ++t) {
    const Eigen::Index br = static_cast<Eigen::Index>(buf_row0 + t * buf_step);
    Acc* kd = kd_buf.row(br).data();
    Acc* vd = vd_buf.row(br).data();
    if (c.kv_contiguous) {
      const KV* ks = &kp(h, page, slot0 + t, 0);
      const KV* vs = &vp(h, page, slot0 + t, 0);
      if (k_scaled) {
        for (std::int64_t d = 0; d < c.dim; ++d) kd[d] = load_kv<Acc, Q>(ks[d], true, c.k_scale);
      } else {
        widen_row(ks, c.dim, kd);
      }
      if (v_scaled) {
        for (std::int64_t d = 0; d < c.dim; ++d) vd[d] = load_kv<Acc, Q>(vs[d], true, c.v_scale);
      } else {
        widen_row(vs, c.dim, vd);
      }
    } else {
      for (std::int64_t d = 0; d < c.dim; ++d) {
        kd[d] = load_kv<Acc, Q>(kp(h, page, slot0 + t, d), k_scaled, c.k_scale);
        vd[d] = load_kv<Acc, Q>(vp(h, page, slot0 + t, d), v_scaled, c.v_scale);
      }
    }
  }
}

/// K/V of tokens [lo, hi) of one page for KV heads [h0, h1), as a pointer per head: KV head h's
/// rows start at `k + h * head_step` (`v` likewise), `ld` apart. In place for an f32 (f64) pool
/// with contiguous rows, K and V sharing head and slot strides, and no dequantization; else
/// converted token-major (the page read front to back) into the scratch rows row0 + t * Hkv + h
/// (unscaled when the scales are factored).
template <class Q, class KV, class Index, class Acc>
void page_kv_heads(const RaggedCall<Q, KV, Index>& c, std::int64_t page, std::int64_t lo,
                   std::int64_t hi, std::int64_t h0, std::int64_t h1, RaggedScratch<Acc>& sc,
                   std::int64_t row0, const Acc** k, const Acc** v, std::int64_t* ld,
                   std::int64_t* head_step) {
  const std::int64_t hkv = c.heads.num_kv_heads, slot = lo % c.page_size;
  if constexpr (std::is_same<std::remove_cv_t<KV>, Acc>::value) {
    if (c.kv_contiguous && c.kv_shared_strides && !c.k_scaled && !c.v_scaled) {
      *k = &c.a.k_pages(0, page, slot, 0);
      *v = &c.a.v_pages(0, page, slot, 0);
      *ld = c.a.k_pages.strides[2];
      *head_step = c.a.k_pages.strides[0];
      return;
    }
  }
  for (std::int64_t t = 0; t < hi - lo; ++t)
    for (std::int64_t h = h0; h < h1; ++h)
      gather_kv_rows(c, page, slot + t, 1, h, sc.few.k, sc.few.v, row0 + t * hkv + h, 0,
                     c.scales_factored);
  *k = sc.few.k.row(static_cast<Eigen::Index>(row0)).data();
  *v = sc.few.v.row(static_cast<Eigen::Index>(row0)).data();
  *ld = hkv * c.dim;
  *head_step = c.dim;
}

/// Whether `rows` rows of `dim` elements, `ld` apart, are all finite (vectorised).
template <class Acc>
bool kv_rows_finite(const Acc* v, std::int64_t ld, Eigen::Index rows, std::int64_t dim) {
  using Rows = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  return Eigen::Map<const Rows, Eigen::Unaligned, Eigen::OuterStride<>>(
             v, rows, static_cast<Eigen::Index>(dim), Eigen::OuterStride<>(ld))
      .allFinite();
}

/// acc.row(acc0 + k) += the probabilities of the keys row k sees (probs.row(p0 + k)) times
/// their V rows, for the `n` rows of a block whose V rows [lo, hi) (at `v`, `ld` apart) hold
/// NaN/Inf: the block product would add 0 * NaN for the keys a row does not see. Row k is query
/// row r0 + k / group of the item. Only taken for bad data; the all-finite path keeps its one
/// product.
template <class Q, class KV, class Index, class Probs, class Matrix, class Acc>
void add_visible_products(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it,
                          const Probs& probs, Eigen::Index p0, Matrix& acc, Eigen::Index acc0,
                          Eigen::Index n, std::int64_t group, std::int64_t r0, std::int64_t lo,
                          std::int64_t hi, const Acc* v, std::int64_t ld) {
  const Eigen::Index dim = static_cast<Eigen::Index>(c.dim);
  for (Eigen::Index k = 0; k < n; ++k) {
    const KeyRange vis =
        c.visible(it.first_pos + r0 + static_cast<std::int64_t>(k) / group, lo, hi);
    for (std::int64_t t = vis.lo; t < vis.hi; ++t) {
      const Eigen::Map<const Eigen::Matrix<Acc, 1, Eigen::Dynamic>> vrow(v + (t - lo) * ld, dim);
      acc.row(acc0 + k) += probs(p0 + k, static_cast<Eigen::Index>(t - lo)) * vrow;
    }
  }
}

/// The rows of `pages` (KV head 0 of the item's sequence) kTokensAheadHeadsInTurn after token t
/// (the decode item reads every KV head's rows of a page in turn), up to n of them within one
/// page, before the item's last key: none past it. Into L2: a page's rows of every KV head are
/// more than L1 keeps until they are read.
template <class Q, class KV, class Index>
RowsAhead ragged_rows_ahead(const RaggedCall<Q, KV, Index>& c, const TensorView<const KV, 4>& pages,
                            const RaggedWorkItem& it, std::int64_t t, std::int64_t n) {
  RowsAhead r = sequence_rows_ahead(
      pages, 0, t, n, it.kv_len, [&](std::int64_t j) { return c.a.page_indices(it.seq, j); },
      /*heads_in_turn=*/true);
  r.into_l1 = false;
  return r;
}

/// The rows the tile products of KV head h (of heads [.., h_end)) ask for as they read rows
/// [slot, slot + n) of `page`, given head 0's rows a page on (`page_on`, `ragged_rows_ahead`):
/// head h's rows a page on, or, with two streams (`two_streams_ahead`), those asked for at once
/// and head h + 1's rows of this page into L1 as they read (none after the last head).
template <class KV>
RowsAhead head_rows_ahead(const RowsAhead& page_on, std::int64_t head_bytes,
                          const TensorView<const KV, 4>& pages, std::int64_t h, std::int64_t h_end,
                          std::int64_t page, std::int64_t slot, std::int64_t n) {
  const RowsAhead own = page_on.shifted(h * head_bytes);
  if constexpr (!two_streams_ahead(static_cast<std::int64_t>(sizeof(KV)))) {
    return own;
  } else {
    own.fetch_all();
    if (h + 1 >= h_end) return {};
    RowsAhead next = page_rows_ahead(pages, h + 1, page, slot, n);
    next.into_l1 = true;
    return next;
  }
}

/// The scratch row of query row r, query head qh of a decode item (`ragged_decode_item`):
/// kv_head(qh) * rows + r * G + member(qh).
template <class Q, class KV, class Index>
Eigen::Index decode_row(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it, std::int64_t r,
                        std::int64_t qh) {
  return static_cast<Eigen::Index>(c.heads.kv_head(qh) * it.q_len * c.heads.group() +
                                   r * c.heads.group() + c.heads.member(qh));
}

/// `ragged_decode_item`'s start: the query rows of the item's KV heads into `sc.few.q`, their
/// outputs zeroed and their softmax states started.
template <class Q, class KV, class Index, class Acc>
void decode_start(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it,
                  RaggedScratch<Acc>& sc) {
  const std::int64_t group = c.heads.group(), dim = c.dim;
  const std::int64_t qh0 = it.kv_head_begin * group, qh1 = it.kv_head_end * group;
  const Eigen::Index rows = static_cast<Eigen::Index>(it.q_len * group);
  for (std::int64_t r = 0; r < it.q_len; ++r)
    for (std::int64_t qh = qh0; qh < qh1; ++qh) {
      Acc* dst = sc.few.q.row(decode_row(c, it, r, qh)).data();
      for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(c.a.q(it.row0 + r, qh, d));
    }
  sc.few.acc
      .middleRows(rows * static_cast<Eigen::Index>(it.kv_head_begin),
                  rows * static_cast<Eigen::Index>(it.kv_head_end - it.kv_head_begin))
      .setZero();
  for (std::int64_t r = 0; r < it.q_len; ++r)
    for (std::int64_t qh = qh0; qh < qh1; ++qh) {
      const Eigen::Index row = decode_row(c, it, r, qh);
      c.start(qh, sc.few.m[row], sc.few.l[row]);
    }
}

/// `ragged_decode_item`'s end: the item's output rows (and logsumexp) from the softmax states.
template <class Q, class KV, class Index, class Acc>
void decode_finish(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it,
                   const RaggedScratch<Acc>& sc) {
  const std::int64_t group = c.heads.group();
  for (std::int64_t r = 0; r < it.q_len; ++r)
    for (std::int64_t qh = it.kv_head_begin * group; qh < it.kv_head_end * group; ++qh) {
      const Eigen::Index row = decode_row(c, it, r, qh);
      const Acc inv = inverse_sum(sc.few.m[row], sc.few.l[row], true);  // every row sees a key
      for (std::int64_t d = 0; d < c.dim; ++d)
        c.out(it.row0 + r, qh, d) =
            store_as<Q>(sc.few.acc(row, static_cast<Eigen::Index>(d)) * inv);
      if (!c.lse.empty_view())
        c.lse(it.row0 + r, qh) = logsumexp_of(sc.few.m[row], sc.few.l[row], true);
    }
}

/// Few rows (decode): the item's KV heads (all of them unless the sequence was split between
/// threads) together, page by page, so a token-major page is read front to back once, with
/// register-blocked tile products. One softmax step takes a chunk of `ragged_few_rows_chunk`
/// tokens over as many pages as it spans (a step per page of 16 made decode 12-22% slower). Row
/// h * rows + r * G + g holds query head q_head(h, g) of row r. Each head's rows are computed
/// alone, so any split of the heads gives the same bits.
template <class Q, class KV, class Index, class Acc>
void ragged_decode_item(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it,
                        RaggedScratch<Acc>& sc) {
  const std::int64_t hkv = c.heads.num_kv_heads, group = c.heads.group(), dim = c.dim;
  const std::int64_t h0 = it.kv_head_begin, h1 = it.kv_head_end;
  const std::int64_t chunk = ragged_few_rows_chunk(hkv, dim, it.keys.size());
  const Eigen::Index rows = static_cast<Eigen::Index>(it.q_len * group);
  // The item's rows [first, first + all): KV heads [h0, h1).
  const Eigen::Index first = rows * static_cast<Eigen::Index>(h0);
  const Eigen::Index all = rows * static_cast<Eigen::Index>(h1 - h0);
  sc.few.fit(static_cast<Eigen::Index>(kRaggedSmallRows * hkv), static_cast<Eigen::Index>(chunk),
             static_cast<Eigen::Index>(chunk * hkv), static_cast<Eigen::Index>(dim));
  decode_start(c, it, sc);
  const std::int64_t lds = sc.few.logits.cols();
  for (std::int64_t lo = it.keys.lo, hi = 0; lo < it.kv_len && !stop_requested(); lo = hi) {
    // Tokens [lo, hi), at most `chunk` of them over as many pages: one softmax step.
    hi = advance_within(lo, chunk, it.kv_len);
    const Eigen::Index nk = static_cast<Eigen::Index>(hi - lo);
    sc.pieces.clear();
    for (std::int64_t t = lo; t < hi;) {
      typename RaggedScratch<Acc>::Piece p;
      p.t = t;
      p.page = c.a.page_indices(it.seq, t / c.page_size);
      p.slot = t % c.page_size;
      p.n = std::min(c.page_size - p.slot, hi - t);
      p.widen = c.kv_widen && c.piece_widens_exactly(p.page, p.slot, p.n, h0, h1);
      if (!p.widen)
        page_kv_heads(c, p.page, t, t + p.n, h0, h1, sc, (t - lo) * hkv, &p.k, &p.v, &p.ld,
                      &p.head_step);
      // Head h's rows a page on are head 0's, h head strides on (one page-table lookup a piece).
      const RowsAhead k_page_on = ragged_rows_ahead(c, c.a.k_pages, it, t, p.n);
      for (std::int64_t h = h0; h < h1; ++h) {
        const Eigen::Index base = static_cast<Eigen::Index>(h) * rows;
        auto scores = [&](const auto& k_rows) {
          qk_rows<Acc>(
              sc.few.q.row(base).data(), dim, rows, k_rows, p.n, dim,
              sc.few.logits.row(base).data() + (t - lo), lds,
              head_rows_ahead(k_page_on, c.k_head_bytes, c.a.k_pages, h, h1, p.page, p.slot, p.n));
        };
        if constexpr (RaggedCall<Q, KV, Index>::kWidenable) {
          if (p.widen) {
            scores(c.wide_rows(c.a.k_pages, h, p.page, p.slot));
            continue;
          }
        }
        scores(AccRows<Acc>{{p.k + h * p.head_step, p.ld}});
      }
      sc.pieces.push_back(p);
      t += p.n;
    }
    auto logits = sc.few.logits.block(first, 0, all, nk);
    if (c.scales_factored && c.k_scaled) logits *= c.k_scale;
    bool partial = false;  // some row does not see every key of the chunk
    for (Eigen::Index row = first; row < first + all; ++row) {
      const std::int64_t pos = it.first_pos + (row % rows) / group;
      partial = partial || c.visible(pos, lo, hi).size() < nk;
      const std::int64_t qh = c.heads.q_head(row / rows, row % group);
      sc.few.alpha[row] =
          c.softmax_row(logits.row(row - first), qh, pos, lo, sc.few.m[row], sc.few.l[row]);
    }
    sc.few.acc.middleRows(first, all) =
        sc.few.alpha.segment(first, all).asDiagonal() * sc.few.acc.middleRows(first, all);
    if (c.scales_factored && c.v_scaled) logits *= c.v_scale;  // the probabilities, for V
    for (auto& p : sc.pieces) {
      const std::int64_t col = p.t - lo;
      // A chunk some row sees only partly checks its V rows for NaN/Inf on converted rows.
      const bool v_in_registers = p.widen && !partial;
      if (p.widen && partial)
        page_kv_heads(c, p.page, p.t, p.t + p.n, h0, h1, sc, col * hkv, &p.k, &p.v, &p.ld,
                      &p.head_step);
      const RowsAhead v_page_on = ragged_rows_ahead(c, c.a.v_pages, it, p.t, p.n);
      for (std::int64_t h = h0; h < h1; ++h) {
        const Eigen::Index base = static_cast<Eigen::Index>(h) * rows;
        const Acc* probs = sc.few.logits.row(base).data() + col;
        const RowsAhead ahead =
            head_rows_ahead(v_page_on, c.v_head_bytes, c.a.v_pages, h, h1, p.page, p.slot, p.n);
        if constexpr (RaggedCall<Q, KV, Index>::kWidenable) {
          if (v_in_registers) {
            pv_rows<Acc>(probs, lds, rows, c.wide_rows(c.a.v_pages, h, p.page, p.slot), p.n, dim,
                         sc.few.acc.row(base).data(), dim, ahead);
            continue;
          }
        }
        const Acc* v = p.v + h * p.head_step;
        if (partial && !kv_rows_finite(v, p.ld, p.n, dim)) {
          add_visible_products(c, it, sc.few.logits.middleCols(col, p.n), base, sc.few.acc, base,
                               rows, group, 0, p.t, p.t + p.n, v, p.ld);
          continue;
        }
        pv_rows<Acc>(probs, lds, rows, AccRows<Acc>{{v, p.ld}}, p.n, dim,
                     sc.few.acc.row(base).data(), dim, ahead);
      }
    }
  }
  decode_finish(c, it, sc);
}

/// Rows of a prefill item that see any key of [lo, hi): pos >= lo and pos - W < hi - 1.
template <class Q, class KV, class Index>
std::pair<std::int64_t, std::int64_t> rows_seeing(const RaggedCall<Q, KV, Index>& c,
                                                  const RaggedWorkItem& it, std::int64_t lo,
                                                  std::int64_t hi) {
  const std::int64_t r_lo = std::max<std::int64_t>(0, lo - it.first_pos);
  std::int64_t r_hi = it.q_len;
  // hi - 1 - first_pos + W; a window near INT64_MAX (valid: R7 only asks W > 0) would overflow
  // it, and then no row is excluded.
  std::int64_t w_hi = 0;
  if (c.window && checked_add(hi - 1 - it.first_pos, *c.window, &w_hi)) r_hi = std::min(r_hi, w_hi);
  return {r_lo, r_hi};
}

/// Many rows (prefill): KV head h of the item, 128-token blocks of gathered K/V (blocks aligned
/// to page boundaries) and matrix products, skipping the rows a block cannot affect. Row
/// r * G + g holds query head q_head(h, g) of row r.
template <class Q, class KV, class Index, class Acc>
void ragged_prefill_item(const RaggedCall<Q, KV, Index>& c, const RaggedWorkItem& it,
                         std::int64_t h, RaggedScratch<Acc>& sc) {
  const std::int64_t group = c.heads.group(), dim = c.dim, page_size = c.page_size;
  const std::int64_t block = ragged_block_tokens(page_size);
  const Eigen::Index rows = static_cast<Eigen::Index>(it.q_len * group);
  const auto keys = static_cast<Eigen::Index>(block);
  sc.many.fit(rows, keys, keys, static_cast<Eigen::Index>(dim));
  for (std::int64_t r = 0; r < it.q_len; ++r)
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t qh = c.heads.q_head(h, g);
      Acc* dst = sc.many.q.row(static_cast<Eigen::Index>(r * group + g)).data();
      if (c.q_contiguous) {
        const Q* src = &c.a.q(it.row0 + r, qh, 0);
        for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(src[d]);
      } else {
        for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(c.a.q(it.row0 + r, qh, d));
      }
    }
  sc.many.acc.topRows(rows).setZero();
  for (Eigen::Index row = 0; row < rows; ++row)
    c.start(c.heads.q_head(h, row % group), sc.many.m[row], sc.many.l[row]);
  // Blocks of `block` tokens from the start of the page of the first visible key, beginning
  // with the one that holds it: the blocks before it hold no visible key (starting at the page's
  // first block made a window of 2 keys at the end of a page of 2^40 tokens walk 2^33 blocks).
  const std::int64_t slot = it.keys.lo % page_size;
  for (std::int64_t c0 = it.keys.lo - slot % block, c1 = 0; c0 < it.kv_len && !stop_requested();
       c0 = c1) {
    c1 = advance_within(c0, block, it.kv_len);
    const std::int64_t lo = std::max(c0, it.keys.lo), hi = c1;
    const auto [r_lo, r_hi] = rows_seeing(c, it, lo, hi);
    if (r_lo >= r_hi) continue;
    const Eigen::Index nk = static_cast<Eigen::Index>(hi - lo);
    const Eigen::Index br = static_cast<Eigen::Index>(r_lo * group);
    const Eigen::Index nr = static_cast<Eigen::Index>((r_hi - r_lo) * group);
    for (std::int64_t t = lo; t < hi;) {  // K and V of keys [lo, hi), page by page
      const std::int64_t page = c.a.page_indices(it.seq, t / page_size);
      const std::int64_t slot0 = t % page_size;
      const std::int64_t run = std::min(page_size - slot0, hi - t);
      gather_kv_rows(c, page, slot0, run, h, sc.many.k, sc.many.v, t - lo, 1);
      t += run;
    }
    auto logits = sc.many.logits.block(0, 0, nr, nk);
    logits.noalias() = sc.many.q.middleRows(br, nr) * sc.many.k.topRows(nk).transpose();
    bool partial = false;  // some row does not see every key of the block
    for (Eigen::Index row = 0; row < nr; ++row) {
      const std::int64_t pos = it.first_pos + r_lo + static_cast<std::int64_t>(row) / group;
      partial = partial || c.visible(pos, lo, hi).size() < nk;
      const std::int64_t qh = c.heads.q_head(h, row % group);
      sc.many.alpha[row] =
          c.softmax_row(logits.row(row), qh, pos, lo, sc.many.m[br + row], sc.many.l[br + row]);
    }
    auto acc_rows = sc.many.acc.middleRows(br, nr);
    acc_rows = sc.many.alpha.head(nr).asDiagonal() * acc_rows;
    if (partial && !kv_rows_finite(sc.many.v.data(), dim, nk, dim)) {
      add_visible_products(c, it, sc.many.logits, 0, sc.many.acc, br, nr, group, r_lo, lo, hi,
                           sc.many.v.data(), dim);
    } else {
      acc_rows.noalias() += logits * sc.many.v.topRows(nk);
    }
  }
  // Normalize and store. Every row sees at least its own position (q_len <= kv_len).
  for (std::int64_t r = 0; r < it.q_len; ++r)
    for (std::int64_t g = 0; g < group; ++g) {
      const Eigen::Index row = static_cast<Eigen::Index>(r * group + g);
      const Acc inv = inverse_sum(sc.many.m[row], sc.many.l[row], true);
      const std::int64_t qh = c.heads.q_head(h, g);
      for (std::int64_t d = 0; d < dim; ++d)
        c.out(it.row0 + r, qh, d) =
            store_as<Q>(sc.many.acc(row, static_cast<Eigen::Index>(d)) * inv);
      if (!c.lse.empty_view())
        c.lse(it.row0 + r, qh) = logsumexp_of(sc.many.m[row], sc.many.l[row], true);
    }
}

/// The work items: a few-rows (decode) sequence is one item with all its KV heads; a many-rows
/// sequence is one item per KV head. Sequences with no rows have none. With fewer items than
/// `concurrency`, each few-rows item is cut into up to ceil(concurrency / items) ranges of KV
/// heads (at most one per head), so a batch of one long decode sequence keeps every thread busy;
/// the heads are independent, so the output is the same bits.
template <class Q, class KV, class Index>
std::vector<RaggedWorkItem> ragged_work_items(const RaggedCall<Q, KV, Index>& c, int concurrency) {
  std::vector<RaggedWorkItem> items;
  const std::int64_t hkv = c.heads.num_kv_heads;
  for (std::int64_t i = 0; i < c.a.num_seqs_count(); ++i) {
    RaggedWorkItem it;
    it.seq = i;
    it.row0 = c.a.cu_q_lens(i);
    it.q_len = c.a.cu_q_lens(i + 1) - it.row0;
    if (it.q_len == 0) continue;
    it.kv_len = c.a.kv_lens(i);
    it.first_pos = it.kv_len - it.q_len;
    it.keys = {c.window ? std::max<std::int64_t>(0, it.first_pos - *c.window + 1) : 0, it.kv_len};
    if (it.q_len * c.heads.group() <= kRaggedSmallRows) {
      it.kv_head_end = hkv;
      items.push_back(it);
    } else {
      for (std::int64_t h = 0; h < hkv; ++h) {
        it.kv_head_begin = h;
        it.kv_head_end = h + 1;
        items.push_back(it);
      }
    }
  }
  const auto count = static_cast<std::int64_t>(items.size());
  if (count == 0 || count >= concurrency) return items;
  const std::int64_t parts = std::min(hkv, ceil_div(std::int64_t{concurrency}, count));
  std::vector<RaggedWorkItem> split;
  for (const RaggedWorkItem& it : items) {
    if (it.q_len * c.heads.group() > kRaggedSmallRows) {  // a many-rows item: one head already
      split.push_back(it);
      continue;
    }
    for (std::int64_t k = 0; k < parts; ++k) {
      RaggedWorkItem part = it;
      part.kv_head_begin = hkv * k / parts;
      part.kv_head_end = hkv * (k + 1) / parts;
      split.push_back(part);
    }
  }
  return split;
}

/// The unchecked ragged kernel: `ragged_paged_attention_unchecked`'s body (see there).
template <class Q, class KV, class Index, class Executor>
void ragged_run(const RaggedPagedAttentionArgs<Q, KV, Index>& a, const TensorView<Q, 3>& out,
                const TensorView<float, 2>& lse, Executor&& executor) {
  using Acc = AccumulatorOf<Q, KV>;
  // No token row (max_num_batched_tokens 0): nothing to write, O(1) whatever the head counts.
  if (out.holds_no_elements()) return;
  const RaggedCall<Q, KV, Index> call(a, out, lse);
  // Padding rows are defined as zero, their logsumexp as -inf (no visible key).
  for (std::int64_t t = a.cu_q_lens(a.num_seqs_count()); t < a.max_num_batched_tokens(); ++t)
    for (std::int64_t h = 0; h < a.num_q_heads(); ++h) {
      for (std::int64_t d = 0; d < call.dim; ++d) out(t, h, d) = store_as<Q>(Acc(0));
      if (!lse.empty_view()) lse(t, h) = -std::numeric_limits<float>::infinity();
    }
  const std::vector<RaggedWorkItem> items = ragged_work_items(call, executor.concurrency());
  const auto n = static_cast<std::int64_t>(items.size());
  // An item's work: its query-head rows times the keys they read.
  const std::vector<std::int64_t> order =
      longest_first(n, executor.concurrency(), [&](std::int64_t k) {
        const RaggedWorkItem& it = items[static_cast<std::size_t>(k)];
        return static_cast<double>(it.q_len) * static_cast<double>(call.heads.group()) *
               static_cast<double>(it.kv_head_end - it.kv_head_begin) *
               static_cast<double>(it.keys.size());
      });
  executor.parallel_for(n, [&](std::int64_t k) {
    thread_local RaggedScratch<Acc> scratch;
    const RaggedWorkItem& it = items[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
    if (it.q_len * call.heads.group() <= kRaggedSmallRows) {
      ragged_decode_item(call, it, scratch);
    } else {
      for (std::int64_t h = it.kv_head_begin; h < it.kv_head_end; ++h)
        ragged_prefill_item(call, it, h, scratch);
    }
  });
}

}  // namespace detail

/// Runs ragged paged attention without validating: for callers that ran `check_ragged` (any
/// profile) and `check_ragged_output` once and reuse the same metadata. Inputs that fail the
/// checks are undefined behaviour (out-of-range reads).
/// `out`: [max_num_batched_tokens, num_q_heads, head_dim]; rows at or past
/// `cu_q_lens[num_seqs]` are written as zero. `logsumexp` (empty: not written):
/// [max_num_batched_tokens, num_q_heads], -inf on those padding rows. `executor` (see
/// core/executor.hpp) runs the (sequence, KV heads) items; the result does not depend on it.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void ragged_paged_attention_unchecked(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                      TensorView<Q, 3> out, TensorView<float, 2> logsumexp = {},
                                      Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  detail::ragged_run(args, out, logsumexp, std::forward<Executor>(executor));
}

/// `ragged_paged_attention_unchecked(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
void ragged_paged_attention_unchecked(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                      TensorView<Q, 3> out, Executor&& executor) {
  detail::ragged_run(args, out, TensorView<float, 2>{}, std::forward<Executor>(executor));
}

/// Validates (`check_ragged` with `Profile::kReference`, then `check_ragged_output`), then runs.
/// Returns the first failed check; `out` and `logsumexp` are untouched on error.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
Status try_ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                  TensorView<Q, 3> out, TensorView<float, 2> logsumexp = {},
                                  Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_ragged(args, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(check_ragged_output(args, out, logsumexp));
  detail::ragged_run(args, out, logsumexp, std::forward<Executor>(executor));
  return Status();
}

/// `try_ragged_paged_attention(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
Status try_ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                  TensorView<Q, 3> out, Executor&& executor) {
  return try_ragged_paged_attention(args, out, TensorView<float, 2>{},
                                    std::forward<Executor>(executor));
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                            TensorView<Q, 3> out, TensorView<float, 2> logsumexp = {},
                            Executor&& executor = Executor{}) {
  throw_if_error(
      try_ragged_paged_attention(args, out, logsumexp, std::forward<Executor>(executor)));
}

/// `ragged_paged_attention(args, out, {}, executor)`.
template <class Q, class KV, class Index, class Executor, detail::EnableIfExecutor<Executor> = 0>
void ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                            TensorView<Q, 3> out, Executor&& executor) {
  throw_if_error(try_ragged_paged_attention(args, out, TensorView<float, 2>{},
                                            std::forward<Executor>(executor)));
}

}  // namespace attnref
