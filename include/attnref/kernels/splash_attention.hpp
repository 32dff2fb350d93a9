// SPDX-License-Identifier: Apache-2.0
/// @file splash_attention.hpp
/// Splash attention reference kernels (spec §2.5, §2.6): block-sparse masked attention over
/// q `[Hq, Sq, Dqk]`, k `[Hkv, Skv, Dqk]`, v `[Hkv, Skv, Dv]`, forward (+ logsumexp) and
/// backward (dq, dk, dv, dsinks).
///
/// Semantics (design.md §6):
///  - logits `x = sm_scale * q.k` (no implicit 1/sqrt(d)), then the soft cap `c * tanh(x / c)`,
///    then ALiBi `+ slope[h] * (j - i)` (query row i, key j; the backward's cap derivative takes
///    the logit without it); `soft_cap_order` kAlibiThenCap adds ALiBi first,
///    `c * tanh((x + bias) / c)` (the derivative then takes the biased logit);
///    `alibi_convention` kAbsolute biases by `-slope[h] * |j - i|` (keys right of the query
///    differ); then the mask (mask AND segment ids AND, with a sliding window W,
///    `i - W < j <= i`: tiles, and columns of a tile, that no row's window reaches are never
///    read);
///  - a masked position has probability exactly 0. For JAX's default mask_value this equals
///    JAX's result on every row with an allowed key; `mask_value` is validated only;
///  - a sink `s_h` is one extra logit with a zero value vector;
///  - a row with no allowed key and no sink gives output 0 and logsumexp -inf (JAX: undefined);
///  - non-finite inputs (docs/hostile-inputs.md; the rule of every family): NaN or +inf in a q
///    row, in the K row of a key the row sees, or in the sink makes the row NaN (output and
///    logsumexp), as do logits (visible keys' and sink) that are all -inf; NaN/Inf in the V row of
///    a key the row sees go through the weighted sum as IEEE does and never reach a row that does
///    not see that key, also inside a partly masked tile. The backward gives the gradients of the
///    same formula: NaN where a NaN row or value enters, finite elsewhere;
///  - accumulation in f32 (f64 when an input is double); out in q's dtype, logsumexp f32;
///  - results depend on the block sizes only through rounding, and not at all on the executor.
///    Empty tiles are skipped without reading K/V; full tiles evaluate no mask; the query heads
///    that share a KV head reuse each K/V sub-block.
///
/// The API (the same three forms as paged and ragged, each with an optional executor):
///  - `make_splash_plan(args, mask, &plan)`: checks under `Profile::kReference` and classifies
///    the mask once (forward tiles, and backward tiles when the dkv blocks differ); the plan is
///    reused by forward and backward. A caller who wants JAX's rules calls
///    `check_splash(args, mask, Profile::kJax)` (or `check_splash_backward`) first;
///  - forward: `try_splash_attention(plan, out, lse, exec) -> Status`, `splash_attention(...)`
///    (throws), `splash_attention_unchecked(...)`, and `(args, mask, out, lse, exec)` overloads
///    that build the plan; each also as `(..., out, exec)` without the logsumexp;
///  - backward: `try_splash_attention_backward(plan, out, lse, dout, grads, exec)`,
///    `splash_attention_backward(...)`, `splash_attention_backward_unchecked(...)`, and the
///    `(args, mask, ...)` overloads;
///  - output checks: `check_splash_output(args, out, lse)`,
///    `check_splash_backward_output(args, out, lse, dout, grads)`.
///
/// Example:
/// @code
///   attnref::SplashAttentionArgs<float> args;
///   args.q = {q.data(), {8, 1024, 128}};
///   args.k = {k.data(), {2, 1024, 128}};
///   args.v = {v.data(), {2, 1024, 128}};
///   args.sm_scale = 1.0f / std::sqrt(128.0f);
///   attnref::SplashPlan<float> plan;
///   attnref::throw_if_error(attnref::make_splash_plan(args, attnref::CausalMask{{1024, 1024}},
///                                                     &plan));
///   std::vector<float> out(8 * 1024 * 128), lse(8 * 1024);
///   attnref::ThreadPoolExecutor pool(4);
///   attnref::splash_attention(plan, attnref::TensorView<float, 3>(out.data(), {8, 1024, 128}),
///                             attnref::TensorView<float, 2>(lse.data(), {8, 1024}), pool);
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
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/executor_arg.hpp"
#include "attnref/kernels/detail/head_groups.hpp"
#include "attnref/kernels/detail/online_softmax.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/masks/mask_info.hpp"
#include "attnref/validate/splash.hpp"

namespace attnref {

/// A checked splash call: the arguments and the mask's block classification, built once by
/// `make_splash_plan` and reused by the forward and backward kernels.
template <class Q, class KV = Q>
struct SplashPlan {
  SplashAttentionArgs<Q, KV> args;  ///< checked under Profile::kReference
  MaskInfo info;                    ///< forward tiles (block_q, block_kv)
  /// Backward tiles (block_q_dkv, block_kv_dkv), only when they differ from the forward ones.
  std::optional<MaskInfo> info_dkv;
  /// Why the backward cannot run with this plan (ok: it can); the forward does not depend on it.
  Status backward_status;

  /// The tiles the backward pass runs over.
  const MaskInfo& backward_info() const noexcept { return info_dkv ? *info_dkv : info; }
};

namespace detail {

template <class Acc>
using SplashMatrix = RowMajorMatrix<Acc>;

/// Rows [row0, row0 + rows) of head `head` of a [H, S, D] view, converted to Acc and scaled.
template <class Acc, class T>
void load_rows(const TensorView<const T, 3>& view, std::int64_t head, std::int64_t row0,
               std::int64_t rows, Acc scale, SplashMatrix<Acc>& dst) {
  const std::int64_t dim = view.extents[2];
  dst.resize(rows, dim);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* src = view.data + view.offset(head, row0 + r, 0);
    const std::int64_t stride = view.strides[2];
    Acc* out = dst.data() + r * dim;
    if constexpr (std::is_same<T, Eigen::bfloat16>::value && std::is_same<Acc, float>::value) {
      if (stride == 1) {  // the same bits as the loop below, vectorised
        widen_bf16(src, dim, out);
        if (scale != Acc(1))
          for (std::int64_t d = 0; d < dim; ++d) out[d] *= scale;
        continue;
      }
    }
    for (std::int64_t d = 0; d < dim; ++d) out[d] = load_as<Acc>(src[d * stride]) * scale;
  }
}

template <class Acc>
using SplashRows = Eigen::Map<const SplashMatrix<Acc>, Eigen::Unaligned, Eigen::OuterStride<>>;

/// The same rows as `load_rows` (unscaled), as a matrix: the view's own memory when it already
/// holds Acc rows with a unit dim stride (no copy: with one query head per KV head the tiles'
/// copies took about 7% of the forward's samples, and dropping them saved about 3%), else
/// converted into `scratch`. The GEMMs read either the same way, so the bits do not depend on
/// which (tested).
template <class Acc, class T>
SplashRows<Acc> rows_view(const TensorView<const T, 3>& view, std::int64_t head, std::int64_t row0,
                          std::int64_t rows, SplashMatrix<Acc>& scratch) {
  const std::int64_t dim = view.extents[2];
  if constexpr (std::is_same<T, Acc>::value) {
    if (view.strides[2] == 1)
      return SplashRows<Acc>(view.data + view.offset(head, row0, 0), rows, dim,
                             Eigen::OuterStride<>(view.strides[1]));
  }
  load_rows<Acc>(view, head, row0, rows, Acc(1), scratch);
  return SplashRows<Acc>(scratch.data(), rows, dim, Eigen::OuterStride<>(dim));
}

/// The query heads of each KV head (MQA: every query head reads KV head 0).
template <class Q, class KV>
HeadGroups splash_heads(const SplashAttentionArgs<Q, KV>& a) {
  return HeadGroups{a.num_q_heads(), a.is_mqa ? 1 : a.num_kv_heads()};
}

/// The keys [t0, t0 + cols) that q row `r` sees through the sliding window (`r - W < t <= r`),
/// as columns [lo, hi) of the block; all of them without a window. No overflow: r >= 0.
template <class Q, class KV>
KeyRange window_cols_of_row(const SplashAttentionArgs<Q, KV>& a, std::int64_t r, std::int64_t t0,
                            std::int64_t cols) noexcept {
  if (!a.sliding_window) return {0, cols};
  const KeyRange k = visible_keys(r, a.sliding_window, t0, t0 + cols);
  return k.size() > 0 ? KeyRange{k.lo - t0, k.hi - t0} : KeyRange{0, 0};
}

/// The columns [lo, hi) of the block of keys [t0, t0 + cols) that some q row of
/// [r0, r0 + rows) sees through the sliding window; K/V outside them are never read.
template <class Q, class KV>
KeyRange window_cols(const SplashAttentionArgs<Q, KV>& a, std::int64_t r0, std::int64_t rows,
                     std::int64_t t0, std::int64_t cols) noexcept {
  if (!a.sliding_window || rows <= 0) return {0, cols};
  // The rows' windows [r - W + 1, r] slide by one per row: their union is one range.
  const std::int64_t lo = std::max(t0, r0 - *a.sliding_window + 1);  // r0 >= 0: no overflow
  const std::int64_t hi = std::min(t0 + cols, r0 + rows);
  return hi > lo ? KeyRange{lo - t0, hi - t0} : KeyRange{0, 0};
}

/// Whether the sliding window hides some element of a [rows, cols] block at q row r0, key t0.
template <class Q, class KV>
bool window_cuts(const SplashAttentionArgs<Q, KV>& a, std::int64_t r0, std::int64_t rows,
                 std::int64_t t0, std::int64_t cols) noexcept {
  if (!a.sliding_window || rows <= 0 || cols <= 0) return false;
  // Some key after the first row, or some key too old for the last row: r - W < t.
  return t0 + cols - 1 > r0 || t0 <= r0 + rows - 1 - *a.sliding_window;
}

/// Calls fn(r, c) for each masked element of a [rows, cols] block of tile (i, j) of query head
/// h: the partial tile's pattern, then the segment ids, then the sliding window (an element may
/// come more than once). Rows start at absolute q row `r0`; columns at absolute kv position
/// `t0`, column `tile_col0` of the tile.
template <class Q, class KV, class Fn>
void for_each_masked(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
                     std::int64_t i, std::int64_t j, std::int64_t r0, std::int64_t t0,
                     std::int64_t tile_col0, Eigen::Index rows, Eigen::Index cols, Fn&& fn) {
  if (info.kind(h, i, j) == BlockKind::kPartial) {
    const std::uint8_t* p = info.partial_block(h, i, j);
    for (Eigen::Index r = 0; r < rows; ++r) {
      const std::uint8_t* pr = p + r * info.pattern_cols + tile_col0;
      for (Eigen::Index c = 0; c < cols; ++c)
        if (!pr[c]) fn(r, c);
    }
  }
  if (a.has_segment_ids()) {
    for (Eigen::Index r = 0; r < rows; ++r) {
      const std::int32_t qs = a.q_segment_ids(r0 + r);
      for (Eigen::Index c = 0; c < cols; ++c)
        if (a.kv_segment_ids(t0 + c) != qs) fn(r, c);
    }
  }
  if (window_cuts(a, r0, rows, t0, cols)) {
    for (Eigen::Index r = 0; r < rows; ++r) {
      const KeyRange w = window_cols_of_row(a, r0 + r, t0, cols);
      for (Eigen::Index c = 0; c < cols; ++c)
        if (c < w.lo || c >= w.hi) fn(r, c);
    }
  }
}

/// Whether some element of tile (i, j) of query head h may be masked (a partial tile, segment
/// ids, or a sliding window that cuts it): then its K/V rows are read for rows that do not see
/// them.
template <class Q, class KV>
bool tile_may_mask(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
                   std::int64_t i, std::int64_t j) {
  return info.kind(h, i, j) == BlockKind::kPartial || a.has_segment_ids() ||
         window_cuts(a, i * info.block_q, info.q_rows(i), j * info.block_kv, info.kv_cols(j));
}

/// Whether the sliding window leaves some element of tile (i, j) visible (always without one).
template <class Q, class KV>
bool tile_in_window(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t i,
                    std::int64_t j) {
  return window_cols(a, i * info.block_q, info.q_rows(i), j * info.block_kv, info.kv_cols(j))
             .size() > 0;
}

/// Adds the ALiBi bias of query head h to logits `s` whose row r is q row `r0 + r` and column c
/// key `t0 + c` (after the soft cap, or before it with kAlibiThenCap; before the mask).
template <class Acc, class Q, class KV>
void add_alibi_tile(const SplashAttentionArgs<Q, KV>& a, std::int64_t h, std::int64_t r0,
                    std::int64_t t0, SplashMatrix<Acc>& s) {
  if (a.alibi_slopes.empty_view()) return;
  const Acc slope = static_cast<Acc>(a.alibi_slopes(h));
  for (Eigen::Index r = 0; r < s.rows(); ++r)
    add_alibi(s.row(r), slope, t0, r0 + r, a.alibi_convention);
}

/// Sets the masked logits of `s` [rows, cols] of tile (i, j) of query head h to -inf.
template <class Acc, class Q, class KV>
void mask_tile(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
               std::int64_t i, std::int64_t j, std::int64_t r0, std::int64_t t0,
               std::int64_t tile_col0, SplashMatrix<Acc>& s) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  for_each_masked(a, info, h, i, j, r0, t0, tile_col0, s.rows(), s.cols(),
                  [&](Eigen::Index r, Eigen::Index c) { s(r, c) = neg_inf; });
}

/// The visibility of a [rows, cols] block of tile (i, j) of query head h (1: the key is seen).
template <class Q, class KV>
void tile_visibility(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
                     std::int64_t i, std::int64_t j, std::int64_t r0, std::int64_t t0,
                     std::int64_t tile_col0, Eigen::Index rows, Eigen::Index cols,
                     Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic>& vis) {
  vis.setConstant(rows, cols, true);
  for_each_masked(a, info, h, i, j, r0, t0, tile_col0, rows, cols,
                  [&](Eigen::Index r, Eigen::Index c) { vis(r, c) = false; });
}

/// Whether row r (of q block i) of query head h sees any key. Only asked for rows whose logits
/// were all -inf (rare), to tell a row with no visible key (0) from one with -inf logits (NaN).
template <class Q, class KV>
bool row_sees_a_key(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
                    std::int64_t i, std::int64_t r) {
  const std::int64_t r0 = i * info.block_q;
  for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
    if (info.kind(h, i, j) == BlockKind::kEmpty) continue;
    const std::int64_t cols = info.kv_cols(j);
    const KeyRange w = window_cols_of_row(a, r, j * info.block_kv, cols);
    if (w.size() == 0) continue;
    if (!tile_may_mask(a, info, h, i, j)) return true;
    // One row of the tile: the pattern row r - r0, q row r.
    const bool partial = info.kind(h, i, j) == BlockKind::kPartial;
    const std::uint8_t* pr =
        partial ? info.partial_block(h, i, j) + (r - r0) * info.pattern_cols : nullptr;
    for (std::int64_t c = w.lo; c < w.hi; ++c) {
      if (partial && !pr[c]) continue;
      if (a.has_segment_ids() && a.kv_segment_ids(j * info.block_kv + c) != a.q_segment_ids(r))
        continue;
      return true;
    }
  }
  return false;
}

/// Per-thread scratch of the forward: one softmax state and scaled q block per query head of a
/// group, one K/V sub-block and one score tile.
template <class Acc>
struct SplashForwardScratch {
  std::vector<OnlineSoftmax<Acc>> state;
  std::vector<SplashMatrix<Acc>> q;
  SplashMatrix<Acc> kc, vc, s;
  Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic> vis;  // only for V rows with NaN/Inf
};

/// Whether `v` is all finite, computed once per block (`state`: -1 unknown, 0 no, 1 yes).
template <class Matrix>
bool v_finite(const Matrix& v, int& state) {
  if (state < 0) state = v.allFinite() ? 1 : 0;
  return state == 1;
}

/// Whether tile (i, j) is non-empty for any query head of KV head `kv`.
inline bool any_tile(const MaskInfo& info, const HeadGroups& heads, std::int64_t kv, std::int64_t i,
                     std::int64_t j) {
  for (std::int64_t g = 0; g < heads.group(); ++g)
    if (info.kind(heads.q_head(kv, g), i, j) != BlockKind::kEmpty) return true;
  return false;
}

/// One forward work item: q block i of the G query heads that read KV head `kv`. Writes only
/// those rows of `out` and `lse`, so items run in any order with the same bits.
template <class Acc, class Q, class KV>
void splash_forward_item(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info,
                         const TensorView<Q, 3>& out, const TensorView<float, 2>& lse,
                         std::int64_t kv, std::int64_t i, SplashForwardScratch<Acc>& sc) {
  const HeadGroups heads = splash_heads(a);
  const std::int64_t group = heads.group(), dv = a.head_dim_v(), bkv = info.block_kv;
  const std::int64_t bc = std::max<std::int64_t>(1, std::min(a.block_sizes.kv_compute(), bkv));
  const LogitTransform<Acc> logits(a.sm_scale, a.soft_cap, a.soft_cap_order);
  const std::int64_t r0 = i * info.block_q, rows = info.q_rows(i);
  sc.state.resize(static_cast<size_t>(group));
  sc.q.resize(static_cast<size_t>(group));
  for (std::int64_t g = 0; g < group; ++g) {
    const std::int64_t h = heads.q_head(kv, g);
    load_rows<Acc>(a.q, h, r0, rows, logits.scale, sc.q[static_cast<size_t>(g)]);
    OnlineSoftmax<Acc>& st = sc.state[static_cast<size_t>(g)];
    if (a.has_sinks()) {
      st.reset(rows, dv, static_cast<Acc>(a.sinks(h)));
    } else {
      st.reset(rows, dv);
    }
  }
  for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
    // Skipped tiles (empty for the mask or outside the window): K/V are never read; nor the
    // columns of a tile that no row of the block sees through the window.
    if (!any_tile(info, heads, kv, i, j)) continue;
    const KeyRange wc = window_cols(a, r0, rows, j * bkv, info.kv_cols(j));
    // Steps of bc columns up to wc.hi; c0 + bc may pass INT64_MAX (a block of that many keys
    // is valid), so each step ends at advance_within's bound.
    for (std::int64_t c0 = wc.lo, c1 = 0; c0 < wc.hi && !stop_requested(); c0 = c1) {
      c1 = advance_within(c0, bc, wc.hi);
      const std::int64_t t0 = j * bkv + c0;
      const std::int64_t n = c1 - c0;
      const SplashRows<Acc> kc = rows_view<Acc>(a.k, kv, t0, n, sc.kc);
      const SplashRows<Acc> vc = rows_view<Acc>(a.v, kv, t0, n, sc.vc);
      int v_state = -1;  // whether vc is all finite: -1 not yet known (asked only when needed)
      for (std::int64_t g = 0; g < group; ++g) {
        const std::int64_t h = heads.q_head(kv, g);
        if (info.kind(h, i, j) == BlockKind::kEmpty) continue;
        OnlineSoftmax<Acc>& st = sc.state[static_cast<size_t>(g)];
        sc.s.noalias() = sc.q[static_cast<size_t>(g)] * kc.transpose();
        logits.cap_and_bias(sc.s, [&](SplashMatrix<Acc>& x) {  // the scale is in q
          add_alibi_tile(a, h, r0, t0, x);
        });
        mask_tile<Acc>(a, info, h, i, j, r0, t0, c0, sc.s);
        st.template fold<true>(sc.s);
        if (tile_may_mask(a, info, h, i, j) && !v_finite(vc, v_state)) {
          // A V row holds NaN/Inf: add it only to the rows that see it (0 * NaN elsewhere).
          tile_visibility(a, info, h, i, j, r0, t0, c0, sc.s.rows(), sc.s.cols(), sc.vis);
          for (Eigen::Index r = 0; r < sc.s.rows(); ++r)
            for (Eigen::Index c = 0; c < sc.s.cols(); ++c)
              if (sc.vis(r, c)) st.o.row(r) += sc.s(r, c) * vc.row(c);
        } else {
          st.o.noalias() += sc.s * vc;
        }
      }
    }
  }
  for (std::int64_t g = 0; g < group; ++g) {
    const OnlineSoftmax<Acc>& st = sc.state[static_cast<size_t>(g)];
    const std::int64_t h = heads.q_head(kv, g);
    for (std::int64_t r = 0; r < rows; ++r) {
      // Logits all -inf (or none): a sink, or any visible key, makes it a NaN row.
      const bool has_logits = st.m[r] != -std::numeric_limits<Acc>::infinity() || a.has_sinks() ||
                              row_sees_a_key(a, info, h, i, r0 + r);
      const Acc inv = st.inverse_sum_of(r, has_logits);
      Q* dst = out.data + out.offset(h, r0 + r, 0);
      for (std::int64_t d = 0; d < dv; ++d) dst[d * out.strides[2]] = store_as<Q>(st.o(r, d) * inv);
      if (!lse.empty_view()) lse(h, r0 + r) = st.logsumexp(r, has_logits);
    }
  }
}

/// The forward pass: (KV head, q block) items on the executor.
template <class Q, class KV, class Executor>
void splash_forward_run(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info,
                        const TensorView<Q, 3>& out, const TensorView<float, 2>& lse,
                        Executor&& executor) {
  using Acc = AccumulatorOf<Q, KV>;
  if (a.q_seq_len() == 0) return;  // out and lse hold no element: O(1), whatever the head count
  const std::int64_t num_kv = splash_heads(a).num_kv_heads;
  executor.parallel_for(num_kv * info.num_q_blocks, [&](std::int64_t item) {
    thread_local SplashForwardScratch<Acc> scratch;
    splash_forward_item(a, info, out, lse, item / info.num_q_blocks, item % info.num_q_blocks,
                        scratch);
  });
}

/// Per-thread scratch of the backward: one KV block, one q block and its tiles, and the dq
/// accumulator of the G query heads of one KV head [G * Sq, Dqk].
template <class Acc>
struct SplashBackwardScratch {
  SplashMatrix<Acc> kj, vj, dk_acc, dv_acc, qi, doi, s, t, p, dp, dq_acc;
  Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic> vis;  // only for NaN/Inf operands
};

/// The backward's read-only inputs of one call.
template <class Q, class KV>
struct SplashBackwardInputs {
  const SplashAttentionArgs<Q, KV>& a;
  const MaskInfo& info;
  const TensorView<const Q, 3>& out;
  const TensorView<const float, 2>& lse;
  const TensorView<const Q, 3>& dout;
};

/// Tile (i, j) of splash_backward_tile pair by pair, over the visible (row, key) pairs only:
/// for a partly masked tile with a NaN/Inf operand (q, dout, K, V rows, or a NaN row's lse and
/// di), where the tile's products would add 0 * NaN for masked pairs. `sc.s` holds the capped,
/// masked logits and `sc.p` the probabilities; only taken for bad data.
template <class Acc, class Q, class KV>
void splash_backward_visible_pairs(const SplashBackwardInputs<Q, KV>& in,
                                   const std::vector<Acc>& di, std::int64_t h, std::int64_t g,
                                   std::int64_t i, std::int64_t j, SplashBackwardScratch<Acc>& sc) {
  const SplashAttentionArgs<Q, KV>& a = in.a;
  const std::int64_t sq = a.q_seq_len(), t0 = j * in.info.block_kv;
  const std::int64_t r0 = i * in.info.block_q;
  const LogitTransform<Acc> logits(a.sm_scale, a.soft_cap);
  tile_visibility(a, in.info, h, i, j, r0, t0, 0, sc.s.rows(), sc.s.cols(), sc.vis);
  for (Eigen::Index r = 0; r < sc.s.rows(); ++r) {
    const Acc di_r = di[static_cast<size_t>(h * sq + r0 + r)];
    for (Eigen::Index c = 0; c < sc.s.cols(); ++c) {
      if (!sc.vis(r, c)) continue;
      const Acc p = sc.p(r, c);
      sc.dv_acc.row(c) += p * sc.doi.row(r);
      Acc ds = p * (sc.doi.row(r).dot(sc.vj.row(c)) - di_r);
      if (logits.capped) ds *= Acc(1) - sc.t(r, c) * sc.t(r, c);
      sc.dk_acc.row(c) += ds * sc.qi.row(r);
      sc.dq_acc.row(g * sq + r0 + r) += (ds * logits.scale) * sc.kj.row(c);
    }
  }
}

/// Adds tile (i, j) of query head h (row g of the group) to dk_acc, dv_acc and dq_acc.
template <class Acc, class Q, class KV>
void splash_backward_tile(const SplashBackwardInputs<Q, KV>& in, const std::vector<Acc>& di,
                          std::int64_t h, std::int64_t g, std::int64_t i, std::int64_t j,
                          SplashBackwardScratch<Acc>& sc) {
  const SplashAttentionArgs<Q, KV>& a = in.a;
  const std::int64_t sq = a.q_seq_len(), t0 = j * in.info.block_kv;
  const std::int64_t r0 = i * in.info.block_q, rows = in.info.q_rows(i);
  const LogitTransform<Acc> logits(a.sm_scale, a.soft_cap, a.soft_cap_order);
  load_rows<Acc>(a.q, h, r0, rows, logits.scale, sc.qi);
  load_rows<Acc>(in.dout, h, r0, rows, Acc(1), sc.doi);
  sc.s.noalias() = sc.qi * sc.kj.transpose();
  // d(cap)/du = 1 - tanh(u / c)^2 at the logit u the cap sees: biased only with ALiBi first.
  if (logits.bias_first) add_alibi_tile(a, h, r0, t0, sc.s);
  if (logits.capped) sc.t = (sc.s.array() / logits.cap).tanh().matrix();
  logits.cap_only(sc.s);
  if (!logits.bias_first) add_alibi_tile(a, h, r0, t0, sc.s);
  mask_tile<Acc>(a, in.info, h, i, j, r0, t0, 0, sc.s);
  sc.p.resize(rows, sc.s.cols());
  // lse (finite, or -inf: no visible key) and di of the rows; a NaN row has both NaN.
  bool finite = true, nan_row = false;
  for (Eigen::Index r = 0; r < rows; ++r) {
    const Acc lse = static_cast<Acc>(in.lse(h, r0 + r));
    probabilities_from_lse(sc.s.row(r), lse, sc.p.row(r));
    nan_row = nan_row || std::isnan(lse);
    finite = finite && lse < std::numeric_limits<Acc>::infinity() &&
             std::isfinite(di[static_cast<size_t>(h * sq + r0 + r)]);
  }
  const bool may_mask = tile_may_mask(a, in.info, h, i, j);
  if (nan_row) {
    // A NaN row's probabilities are NaN at every key it sees, one with a -inf logit too: in s
    // the mask's -inf and the data's look alike, so the mask decides.
    if (may_mask) tile_visibility(a, in.info, h, i, j, r0, t0, 0, rows, sc.s.cols(), sc.vis);
    for (Eigen::Index r = 0; r < rows; ++r) {
      if (!std::isnan(in.lse(h, r0 + r))) continue;
      for (Eigen::Index c = 0; c < sc.s.cols(); ++c)
        if (!may_mask || sc.vis(r, c)) sc.p(r, c) = std::numeric_limits<Acc>::quiet_NaN();
    }
  }
  if (may_mask && !(finite && sc.qi.allFinite() && sc.doi.allFinite() && sc.kj.allFinite() &&
                    sc.vj.allFinite())) {
    splash_backward_visible_pairs(in, di, h, g, i, j, sc);
    return;
  }
  sc.dv_acc.noalias() += sc.p.transpose() * sc.doi;
  sc.dp.noalias() = sc.doi * sc.vj.transpose();
  for (Eigen::Index r = 0; r < rows; ++r)
    sc.dp.row(r).array() -= di[static_cast<size_t>(h * sq + r0 + r)];
  sc.dp.array() *= sc.p.array();  // ds
  if (logits.capped) sc.dp.array() *= (Acc(1) - sc.t.array().square());
  sc.dk_acc.noalias() += sc.dp.transpose() * sc.qi;
  sc.dq_acc.middleRows(g * sq + r0, rows).noalias() += (sc.dp * sc.kj) * logits.scale;
}

/// One backward work item: KV head `kv`. Writes dk and dv of that head and dq of its G query
/// heads, each accumulated in a fixed order, so items run in any order with the same bits.
template <class Acc, class Q, class KV>
void splash_backward_kv_head(const SplashBackwardInputs<Q, KV>& in, const std::vector<Acc>& di,
                             const SplashGradients<Q, KV>& grads, std::int64_t kv,
                             SplashBackwardScratch<Acc>& sc) {
  const SplashAttentionArgs<Q, KV>& a = in.a;
  const MaskInfo& info = in.info;
  const HeadGroups heads = splash_heads(a);
  const std::int64_t group = heads.group(), sq = a.q_seq_len();
  const std::int64_t dqk = a.head_dim_qk(), dvd = a.head_dim_v();
  sc.dq_acc.setZero(group * sq, dqk);
  for (std::int64_t j = 0; j < info.num_kv_blocks && !stop_requested(); ++j) {
    const std::int64_t t0 = j * info.block_kv, cols = info.kv_cols(j);
    bool any = false;
    for (std::int64_t i = 0; i < info.num_q_blocks && !any; ++i)
      any = any_tile(info, heads, kv, i, j) && tile_in_window(a, info, i, j);
    sc.dk_acc.setZero(cols, dqk);
    sc.dv_acc.setZero(cols, dvd);
    if (any) {
      load_rows<Acc>(a.k, kv, t0, cols, Acc(1), sc.kj);
      load_rows<Acc>(a.v, kv, t0, cols, Acc(1), sc.vj);
      for (std::int64_t g = 0; g < group; ++g) {
        const std::int64_t h = heads.q_head(kv, g);
        for (std::int64_t i = 0; i < info.num_q_blocks; ++i)
          if (info.kind(h, i, j) != BlockKind::kEmpty && tile_in_window(a, info, i, j))
            splash_backward_tile(in, di, h, g, i, j, sc);
      }
    }
    for (std::int64_t r = 0; r < cols; ++r) {
      for (std::int64_t d = 0; d < dqk; ++d)
        grads.dk(kv, t0 + r, d) = store_as<KV>(sc.dk_acc(r, d));
      for (std::int64_t d = 0; d < dvd; ++d)
        grads.dv(kv, t0 + r, d) = store_as<KV>(sc.dv_acc(r, d));
    }
  }
  for (std::int64_t g = 0; g < group; ++g)
    for (std::int64_t r = 0; r < sq; ++r)
      for (std::int64_t d = 0; d < dqk; ++d)
        grads.dq(heads.q_head(kv, g), r, d) = store_as<Q>(sc.dq_acc(g * sq + r, d));
}

/// Writes 0 to every element of `view`; nothing (O(1)) when it holds no elements.
template <class T>
void fill_zero(const TensorView<T, 3>& view) {
  if (view.holds_no_elements()) return;
  for (std::int64_t h = 0; h < view.extents[0]; ++h)
    for (std::int64_t r = 0; r < view.extents[1]; ++r)
      for (std::int64_t d = 0; d < view.extents[2]; ++d) view(h, r, d) = store_as<T>(0.0f);
}

/// The fused backward pass: di = rowsum(o * dO) per query head, then KV-head items on the
/// executor, then dsinks.
template <class Q, class KV, class Executor>
void splash_backward_run(const SplashBackwardInputs<Q, KV>& in, const SplashGradients<Q, KV>& grads,
                         Executor&& executor) {
  using Acc = AccumulatorOf<Q, KV>;
  const SplashAttentionArgs<Q, KV>& a = in.a;
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dvd = a.head_dim_v();
  if (sq == 0) {
    // No query row: every gradient is 0. Written per element of the gradients themselves, so the
    // work never follows a head count with no rows behind it (2^40 query heads of 0 rows).
    fill_zero(grads.dk);
    fill_zero(grads.dv);
    if (!grads.dsinks.empty_view())
      for (std::int64_t h = 0; h < hq; ++h) grads.dsinks(h) = 0.0f;
    return;
  }
  std::vector<Acc> di(static_cast<size_t>(hq * sq));
  executor.parallel_for(hq, [&](std::int64_t h) {
    for (std::int64_t r = 0; r < sq; ++r) {
      Acc sum = 0;
      for (std::int64_t d = 0; d < dvd; ++d)
        sum += load_as<Acc>(in.out(h, r, d)) * load_as<Acc>(in.dout(h, r, d));
      di[static_cast<size_t>(h * sq + r)] = sum;
    }
  });
  executor.parallel_for(splash_heads(a).num_kv_heads, [&](std::int64_t kv) {
    thread_local SplashBackwardScratch<Acc> scratch;
    splash_backward_kv_head(in, di, grads, kv, scratch);
  });
  if (grads.dsinks.empty_view()) return;
  for (std::int64_t h = 0; h < hq; ++h) {
    const Acc sink = static_cast<Acc>(a.sinks(h));
    Acc sum = 0;
    for (std::int64_t r = 0; r < sq; ++r)
      sum -= std::exp(sink - static_cast<Acc>(in.lse(h, r))) * di[static_cast<size_t>(h * sq + r)];
    grads.dsinks(h) = static_cast<float>(sum);
  }
}

/// The args with the backward's tiles as forward blocks, to check them against a MaskInfo.
template <class Q, class KV>
SplashAttentionArgs<Q, KV> with_dkv_blocks(const SplashAttentionArgs<Q, KV>& args,
                                           const MaskInfo& info) {
  SplashAttentionArgs<Q, KV> fwd = args;
  fwd.block_sizes.block_q = info.block_q;
  fwd.block_sizes.block_kv = info.block_kv;
  fwd.block_sizes.block_kv_compute = args.block_sizes.kv_dkv_compute();
  return fwd;
}

}  // namespace detail

/// Checks `args` under `Profile::kReference` and classifies `mask` into forward tiles
/// (block_q, block_kv) and, when (block_q_dkv, block_kv_dkv) differ, backward tiles. The backward
/// checks (`check_splash_backward`) go to `plan->backward_status`: a plan for a forward-only
/// caller is not rejected for its backward blocks. `plan` is written only on success.
/// O(unique masks * Sq * Skv) mask evaluations; reuse the plan.
template <class Q, class KV, class M>
Status make_splash_plan(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                        SplashPlan<Q, KV>* plan) {
  ATTNREF_RETURN_IF_ERROR(check_splash(args, mask, Profile::kReference));
  SplashPlan<Q, KV> p;
  p.args = args;
  const SplashBlockSizes& b = args.block_sizes;
  ATTNREF_RETURN_IF_ERROR(
      build_mask_info(mask, b.block_q, b.block_kv, Profile::kReference, &p.info, args.sharding));
  p.backward_status = check_splash_backward(args, mask, Profile::kReference);
  if (p.backward_status.ok() && (b.q_dkv() != b.block_q || b.kv_dkv() != b.block_kv)) {
    MaskInfo dkv;
    p.backward_status =
        build_mask_info(mask, b.q_dkv(), b.kv_dkv(), Profile::kReference, &dkv, args.sharding);
    if (p.backward_status.ok()) p.info_dkv = std::move(dkv);
  }
  *plan = std::move(p);
  return Status();
}

/// A plan over a MaskInfo built earlier (e.g. once for every layer of a step): checks `args`
/// against it (`check_splash(args, info, Profile::kReference)`). The backward can use it when the
/// dkv blocks equal the forward ones; otherwise build the plan from the mask.
template <class Q, class KV>
Status make_splash_plan(const SplashAttentionArgs<Q, KV>& args, const MaskInfo& info,
                        SplashPlan<Q, KV>* plan) {
  ATTNREF_RETURN_IF_ERROR(check_splash(args, info, Profile::kReference));
  SplashPlan<Q, KV> p;
  p.args = args;
  p.info = info;
  const SplashBlockSizes& b = args.block_sizes;
  if (b.q_dkv() != info.block_q || b.kv_dkv() != info.block_kv) {
    p.backward_status = Status(
        ErrorCode::kInvalidBlockSize, "",
        "the plan's MaskInfo has blocks ({0}, {1}) but the backward blocks are ({2}, {3})",
        "build the plan from the mask (make_splash_plan(args, mask, &plan)) to run the backward",
        {info.block_q, info.block_kv, b.q_dkv(), b.kv_dkv()});
  } else {
    p.backward_status =
        check_splash(detail::with_dkv_blocks(args, info), info, Profile::kReference);
  }
  *plan = std::move(p);
  return Status();
}

/// Runs the forward without validating. Precondition: `plan` made by `make_splash_plan` and
/// `check_splash_output(plan.args, out, logsumexp).ok()`. Writes `out` [Hq, Sq, Dv] and, when
/// not empty, `logsumexp` [Hq, Sq]; (KV head, q block) items run on `executor`.
template <class Q, class KV, class Executor = SerialExecutor>
void splash_attention_unchecked(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out,
                                TensorView<float, 2> logsumexp = {},
                                Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  detail::splash_forward_run(plan.args, plan.info, out, logsumexp, executor);
}

/// `splash_attention_unchecked(plan, out, {}, executor)`.
template <class Q, class KV, class Executor, detail::EnableIfExecutor<Executor> = 0>
void splash_attention_unchecked(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out,
                                Executor&& executor) {
  splash_attention_unchecked(plan, out, TensorView<float, 2>{}, std::forward<Executor>(executor));
}

/// Validates (the plan's args against its MaskInfo, O(1), and the outputs), then runs. Returns
/// the first error without touching `out` or `logsumexp`.
template <class Q, class KV, class Executor = SerialExecutor>
Status try_splash_attention(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out,
                            TensorView<float, 2> logsumexp = {}, Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_splash(plan.args, plan.info, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(check_splash_output(plan.args, out, logsumexp));
  detail::splash_forward_run(plan.args, plan.info, out, logsumexp, executor);
  return Status();
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Executor = SerialExecutor>
void splash_attention(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out,
                      TensorView<float, 2> logsumexp = {}, Executor&& executor = Executor{}) {
  throw_if_error(try_splash_attention(plan, out, logsumexp, std::forward<Executor>(executor)));
}

/// `try_splash_attention(plan, out, {}, executor)`.
template <class Q, class KV, class Executor, detail::EnableIfExecutor<Executor> = 0>
Status try_splash_attention(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out,
                            Executor&& executor) {
  return try_splash_attention(plan, out, TensorView<float, 2>{}, std::forward<Executor>(executor));
}

/// `splash_attention(plan, out, {}, executor)`.
template <class Q, class KV, class Executor, detail::EnableIfExecutor<Executor> = 0>
void splash_attention(const SplashPlan<Q, KV>& plan, TensorView<Q, 3> out, Executor&& executor) {
  throw_if_error(
      try_splash_attention(plan, out, TensorView<float, 2>{}, std::forward<Executor>(executor)));
}

/// Forward from the mask: builds the forward plan (checks under `Profile::kReference`, classifies
/// the mask), checks the outputs, runs. Prefer a plan when the mask is reused.
template <class Q, class KV, class M, class Executor = SerialExecutor>
Status try_splash_attention(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                            TensorView<Q, 3> out, TensorView<float, 2> logsumexp = {},
                            Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_splash(args, mask, Profile::kReference));
  MaskInfo info;
  ATTNREF_RETURN_IF_ERROR(build_mask_info(mask, args.block_sizes.block_q, args.block_sizes.block_kv,
                                          Profile::kReference, &info, args.sharding));
  ATTNREF_RETURN_IF_ERROR(check_splash_output(args, out, logsumexp));
  detail::splash_forward_run(args, info, out, logsumexp, executor);
  return Status();
}

/// Throwing form of `try_splash_attention(args, mask, ...)`.
template <class Q, class KV, class M, class Executor = SerialExecutor>
void splash_attention(const SplashAttentionArgs<Q, KV>& args, const M& mask, TensorView<Q, 3> out,
                      TensorView<float, 2> logsumexp = {}, Executor&& executor = Executor{}) {
  throw_if_error(
      try_splash_attention(args, mask, out, logsumexp, std::forward<Executor>(executor)));
}

/// `try_splash_attention(args, mask, out, {}, executor)`.
template <class Q, class KV, class M, class Executor, detail::EnableIfExecutor<Executor> = 0>
Status try_splash_attention(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                            TensorView<Q, 3> out, Executor&& executor) {
  return try_splash_attention(args, mask, out, TensorView<float, 2>{},
                              std::forward<Executor>(executor));
}

/// `splash_attention(args, mask, out, {}, executor)`.
template <class Q, class KV, class M, class Executor, detail::EnableIfExecutor<Executor> = 0>
void splash_attention(const SplashAttentionArgs<Q, KV>& args, const M& mask, TensorView<Q, 3> out,
                      Executor&& executor) {
  throw_if_error(try_splash_attention(args, mask, out, TensorView<float, 2>{},
                                      std::forward<Executor>(executor)));
}

/// Runs the fused backward without validating. Precondition: `plan.backward_status.ok()` and
/// `check_splash_backward_output(plan.args, out, logsumexp, dout, grads).ok()`. `out` and
/// `logsumexp` are the forward's; gradients per spec §2.6 (dk/dv summed over the query heads of
/// each KV head, all heads under MQA). KV heads run on `executor`.
template <class Q, class KV, class Executor = SerialExecutor>
void splash_attention_backward_unchecked(const SplashPlan<Q, KV>& plan, TensorView<const Q, 3> out,
                                         TensorView<const float, 2> logsumexp,
                                         TensorView<const Q, 3> dout,
                                         const SplashGradients<Q, KV>& grads,
                                         Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  const detail::SplashBackwardInputs<Q, KV> in{plan.args, plan.backward_info(), out, logsumexp,
                                               dout};
  detail::splash_backward_run(in, grads, executor);
}

/// Validates (the plan's backward status, its args against the backward MaskInfo, the tensors),
/// then runs. Returns the first error without writing a gradient.
template <class Q, class KV, class Executor = SerialExecutor>
Status try_splash_attention_backward(const SplashPlan<Q, KV>& plan, TensorView<const Q, 3> out,
                                     TensorView<const float, 2> logsumexp,
                                     TensorView<const Q, 3> dout,
                                     const SplashGradients<Q, KV>& grads,
                                     Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(plan.backward_status);
  const MaskInfo& info = plan.backward_info();
  ATTNREF_RETURN_IF_ERROR(
      check_splash(detail::with_dkv_blocks(plan.args, info), info, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(check_splash_backward_output(plan.args, out, logsumexp, dout, grads));
  splash_attention_backward_unchecked(plan, out, logsumexp, dout, grads, executor);
  return Status();
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Executor = SerialExecutor>
void splash_attention_backward(const SplashPlan<Q, KV>& plan, TensorView<const Q, 3> out,
                               TensorView<const float, 2> logsumexp, TensorView<const Q, 3> dout,
                               const SplashGradients<Q, KV>& grads,
                               Executor&& executor = Executor{}) {
  throw_if_error(try_splash_attention_backward(plan, out, logsumexp, dout, grads,
                                               std::forward<Executor>(executor)));
}

/// Backward from the mask: checks (`check_splash_backward` under `Profile::kReference`),
/// classifies the mask with the dkv blocks, checks the tensors, runs.
template <class Q, class KV, class M, class Executor = SerialExecutor>
Status try_splash_attention_backward(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                                     TensorView<const Q, 3> out,
                                     TensorView<const float, 2> logsumexp,
                                     TensorView<const Q, 3> dout,
                                     const SplashGradients<Q, KV>& grads,
                                     Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_splash_backward(args, mask, Profile::kReference));
  MaskInfo info;
  ATTNREF_RETURN_IF_ERROR(build_mask_info(mask, args.block_sizes.q_dkv(), args.block_sizes.kv_dkv(),
                                          Profile::kReference, &info, args.sharding));
  ATTNREF_RETURN_IF_ERROR(check_splash_backward_output(args, out, logsumexp, dout, grads));
  const detail::SplashBackwardInputs<Q, KV> in{args, info, out, logsumexp, dout};
  detail::splash_backward_run(in, grads, executor);
  return Status();
}

/// Throwing form of `try_splash_attention_backward(args, mask, ...)`.
template <class Q, class KV, class M, class Executor = SerialExecutor>
void splash_attention_backward(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                               TensorView<const Q, 3> out, TensorView<const float, 2> logsumexp,
                               TensorView<const Q, 3> dout, const SplashGradients<Q, KV>& grads,
                               Executor&& executor = Executor{}) {
  throw_if_error(try_splash_attention_backward(args, mask, out, logsumexp, dout, grads,
                                               std::forward<Executor>(executor)));
}

}  // namespace attnref
