// SPDX-License-Identifier: Apache-2.0
/// @file paged.hpp
/// Paged attention (decode): the argument descriptor and its checks in three tiers.
///  - shapes (O(1)): JAX's P1..P10 in JAX's order (P4, P7..P10 only under `Profile::kJax`;
///    under `kJax` also `option_not_in_jax` for sliding_window, sinks, alibi_slopes and a
///    non-default alibi_convention or soft_cap_order, which JAX's kernel does not have), then
///    attnref's safety checks on views and options;
///  - metadata (O(batch + pages)): every length within capacity, every live page index in range;
///  - data (opt-in, O(live elements)): no NaN/Inf in q or in the K/V rows that lengths make live;
///  - outputs (`check_paged_output`): out and the optional logsumexp.
/// Under `kReference` V's head_dim may differ from K's (MLA: `head_dim_v()` 512 of a 576-wide
/// latent row, v_pages a view of k_pages' memory); under `kJax` that is JAX's P1.
///
/// Example:
/// @code
///   attnref::PagedAttentionArgs<float> args;
///   args.q = {q.data(), {batch, 32, 128}};
///   args.k_pages = attnref::kv_pages_view(k.data(), attnref::KvLayout::kJax, 8, pages, 16, 128);
///   args.v_pages = attnref::kv_pages_view(v.data(), attnref::KvLayout::kJax, 8, pages, 16, 128);
///   args.lengths = {lengths.data(), {batch}};
///   args.page_indices = {table.data(), {batch, pages_per_seq}};
///   if (attnref::Status s = attnref::check_paged(args, attnref::Profile::kJax); !s.ok()) ...
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/validate/head_options.hpp"
#include "attnref/validate/heads.hpp"
#include "attnref/validate/kv_rows.hpp"
#include "attnref/validate/logit_conventions.hpp"
#include "attnref/validate/options.hpp"
#include "attnref/validate/outputs.hpp"

namespace attnref {

/// Everything one paged-attention (decode) call reads. Views only; nothing is owned.
/// `Q` and `KV` are float, double, Eigen::half or Eigen::bfloat16; `KV` may be int8_t with
/// float scales (`w * s / 127.5`), or fp8 (`float8_e4m3fn`, `float8_e5m2`: `fp8(w) * s`, the
/// scales optional: without them s = 1, vLLM's default k_scale/v_scale). A per-tensor scale is
/// a scales view with all strides 0 over one float. `Index` is int32_t (what JAX requires) or
/// int64_t.
template <class Q, class KV = Q, class Index = std::int32_t>
struct PagedAttentionArgs {
  static_assert(is_float_dtype<Q>, "q must be float, double, Eigen::half or Eigen::bfloat16");
  static_assert(is_kv_dtype<KV>,
                "K/V pages must be a float type, int8_t (with scales) or float8_e4m3fn/e5m2");
  static_assert(is_index_dtype<Index>, "lengths and page_indices must be int32_t or int64_t");
  using q_type = Q;
  using kv_type = KV;
  using index_type = Index;
  static constexpr bool kQuantized = std::is_same<KV, std::int8_t>::value;
  static constexpr bool kFp8 = is_fp8_dtype<KV>;
  /// Whether K/V take k_scales/v_scales (int8: required; fp8: optional).
  static constexpr bool kScaled = kQuantized || kFp8;

  TensorView<const Q, 3> q;                 ///< [batch, num_q_heads, head_dim]
  TensorView<const KV, 4> k_pages;          ///< [num_kv_heads, total_pages, page_size, head_dim]
  TensorView<const KV, 4> v_pages;          ///< k_pages' shape but the last: head_dim_v()
  TensorView<const Index, 1> lengths;       ///< [batch]
  TensorView<const Index, 2> page_indices;  ///< [batch, pages_per_sequence]
  /// int8 and fp8 only: [num_kv_heads, total_pages, page_size, 1 or head_dim]
  TensorView<const float, 4> k_scales;
  TensorView<const float, 4> v_scales;       ///< int8 and fp8 only: [..., 1 or head_dim_v]
  float sm_scale = 1.0f;                     ///< multiplies q.k (JAX has no scale: 1.0)
  std::optional<float> soft_cap;             ///< c in c * tanh(x / c), applied before masking
  float mask_value = kDefaultMaskValue;      ///< JAX's additive mask; validated, no effect here
  std::int64_t pages_per_compute_block = 1;  ///< blocking hint; never changes the result
  MegacoreMode megacore_mode = MegacoreMode::kNone;
  bool round_kv_to_bf16 = false;  ///< TPU fidelity: round float K/V to bf16 as JAX's kernel does
  /// Keep the last W keys: key t of a sequence of length L is seen iff t > L - 1 - W (JAX
  /// ragged's window; FlashInfer's window_left is W - 1). W >= 1; keys before it are never read.
  std::optional<std::int64_t> sliding_window;
  TensorView<const float, 1> sinks;         ///< optional [num_q_heads] attention-sink logits
  TensorView<const float, 1> alibi_slopes;  ///< optional [num_q_heads] ALiBi slopes
  /// ALiBi's distance: signed `slope * (key_pos - query_pos)` or absolute (logit_conventions.hpp)
  AlibiConvention alibi_convention = AlibiConvention::kSigned;
  /// With a soft cap and ALiBi: `c * tanh(s / c) + bias` (default) or `c * tanh((s + bias) / c)`
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;

  std::int64_t batch() const noexcept { return q.extents[0]; }
  std::int64_t num_q_heads() const noexcept { return q.extents[1]; }
  std::int64_t head_dim() const noexcept { return q.extents[2]; }  ///< q's and K's
  /// V's head_dim, the output's last dimension: head_dim() under `Profile::kJax`; any positive
  /// value under `kReference` (MLA: 512 of a 576-wide latent row, v_pages a view of k_pages'
  /// memory).
  std::int64_t head_dim_v() const noexcept { return v_pages.extents[3]; }
  std::int64_t num_kv_heads() const noexcept { return k_pages.extents[0]; }
  std::int64_t total_pages() const noexcept { return k_pages.extents[1]; }
  std::int64_t page_size() const noexcept { return k_pages.extents[2]; }
  std::int64_t pages_per_sequence() const noexcept { return page_indices.extents[1]; }
};

namespace detail {

/// Scales of int8 pages: [Hkv, P, S, 1] or [Hkv, P, S, D], given for both K and V. fp8 pages
/// take the same scales or none (scale 1.0); one without the other is an error.
template <class Args>
Status check_paged_scales(const Args& a) {
  const bool has_k = !a.k_scales.empty_view();
  const bool has_v = !a.v_scales.empty_view();
  if (!Args::kScaled) {
    if (has_k || has_v) {
      return Status(ErrorCode::kQuantizationMismatch, "",
                    "k_scales/v_scales were given but the K/V pages are not int8 or fp8",
                    "pass int8 or fp8 pages with their scales, or drop the scales");
    }
    return Status();
  }
  if (Args::kFp8 && !has_k && !has_v) return Status();  // scale 1.0, vLLM's default
  if (Args::kFp8 && (!has_k || !has_v)) {
    return Status(
        ErrorCode::kQuantizationMismatch, "",
        "fp8 K/V pages take both k_scales and v_scales or neither; got k_scales: {0}, "
        "v_scales: {1}",
        "give the scale of the other one too (1.0 if it has none), or drop both for scale 1.0",
        {has_k ? 1 : 0, has_v ? 1 : 0});
  }
  if (!has_k || !has_v) {
    return Status(
        ErrorCode::kQuantizationMismatch, "",
        "int8 K/V pages need both k_scales and v_scales; got k_scales: {0}, v_scales: {1}",
        "quantize K and V together (scales [num_kv_heads, total_pages, page_size, 1])",
        {has_k ? 1 : 0, has_v ? 1 : 0});
  }
  for (const auto* s : {&a.k_scales, &a.v_scales}) {
    const bool is_k = s == &a.k_scales;
    const char* name = is_k ? "k_scales" : "v_scales";
    ATTNREF_RETURN_IF_ERROR(check_view(*s, name));
    const auto& e = s->extents;
    const auto& p = a.k_pages.extents;
    const std::int64_t dim = is_k ? p[3] : a.head_dim_v();  // each over its own pages
    if (e[0] != p[0] || e[1] != p[1] || e[2] != p[2] || (e[3] != 1 && e[3] != dim)) {
      return Status(ErrorCode::kScalesShape, "",
                    "{f} has shape ({0}, {1}, {2}, {3}); expected ({4}, {5}, {6}, 1) or ({4}, "
                    "{5}, {6}, {7})",
                    is_k || a.head_dim_v() == a.head_dim()
                        ? "one scale per token per head ([..., 1]) or one per element ([..., "
                          "head_dim])"
                        : "one scale per token per head ([..., 1]) or one per element of V "
                          "([..., head_dim_v])",
                    {e[0], e[1], e[2], e[3], p[0], p[1], p[2], dim}, {}, name);
    }
  }
  return Status();
}

/// The last page (exclusive) a kernel reads for a sequence of `length` tokens. Under the `jax`
/// profile JAX's kernel DMAs whole compute blocks, so pages up to the block end must be valid.
constexpr std::int64_t live_pages(std::int64_t length, std::int64_t page_size,
                                  std::int64_t pages_per_sequence, std::int64_t pages_per_block,
                                  Profile profile) noexcept {
  const std::int64_t pages = ceil_div(length, page_size);
  if (profile != Profile::kJax || pages_per_block <= 0) return pages;
  const std::int64_t blocks = ceil_div(pages, pages_per_block);
  const std::int64_t end = blocks * pages_per_block;
  return end < pages_per_sequence ? end : pages_per_sequence;
}

/// The first key a decode query at position `length - 1` sees: `length - W` with a window W
/// (never below 0), else 0. No overflow: length >= 0 and W >= 1.
constexpr std::int64_t first_window_key(std::int64_t length,
                                        const std::optional<std::int64_t>& window) noexcept {
  return window && length - *window > 0 ? length - *window : 0;
}

/// JAX's checks P1..P10 in JAX's order (P4, P7..P10 under `kJax`), with the positivity of
/// pages_per_compute_block before P4, then (`kJax`) the options JAX's kernel does not have.
template <class Q, class KV, class Index>
Status check_paged_inputs(const PagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  const auto& k = a.k_pages.extents;
  const auto& v = a.v_pages.extents;
  // Under kReference V's head_dim may differ from K's (MLA); every other dimension may not.
  const bool same_pool = k[0] == v[0] && k[1] == v[1] && k[2] == v[2];
  if (!same_pool || (profile == Profile::kJax && k[3] != v[3])) {
    const char* hint =
        "K and V pages share one pool shape [num_kv_heads, total_pages, page_size, head_dim]";
    if (same_pool) {
      hint =
          "JAX's kernel reads V with K's head_dim ({3}); the reference profile takes a V "
          "head_dim of its own (MLA)";
    } else if (profile != Profile::kJax) {
      hint =
          "K and V pages share [num_kv_heads, total_pages, page_size]; only V's head_dim may "
          "differ (MLA)";
    }
    return Status(ErrorCode::kShapeMismatch, "P1",
                  "k_pages and v_pages must have the same shape. Got ({0}, {1}, {2}, {3}) and "
                  "({4}, {5}, {6}, {7})",
                  hint, {k[0], k[1], k[2], k[3], v[0], v[1], v[2], v[3]});
  }
  ATTNREF_RETURN_IF_ERROR(check_heads(a.num_q_heads(), a.num_kv_heads(), "P2"));
  ATTNREF_RETURN_IF_ERROR(check_head_dim(a.head_dim(), k[3], "P3"));
  if (v[3] <= 0) {  // == k[3] under kJax, positive by P3's check
    return Status(ErrorCode::kInvalidHeadDim, "", "head_dim_v must be positive. Got {0}.",
                  "head_dim_v is v_pages' last dimension: K's head_dim, or for MLA the latent "
                  "width (512 of a 576-wide K row)",
                  {v[3]}, {}, "v_pages");
  }
  const std::int64_t pps = a.pages_per_sequence();
  const std::int64_t ppcb = a.pages_per_compute_block;
  if (ppcb <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "",
                  "pages_per_compute_block must be positive. Got {0}.",
                  "use a divisor of pages_per_sequence ({1}), e.g. 1", {ppcb, pps}, {},
                  "pages_per_compute_block");
  }
  if (profile == Profile::kJax && pps % ppcb != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "P4",
                  "pages_per_sequence must be divisible by pages_per_compute_block. Got {1} pages "
                  "per sequence and pages_per_compute_block {0}.",
                  "pick pages_per_compute_block among the divisors of {1}: {k1}", {ppcb, pps});
  }
  if (a.lengths.extents[0] != a.batch()) {
    return Status(ErrorCode::kBatchMismatch, "P5",
                  "`lengths` and `q` must have the same batch size. Got {0} and {1}.",
                  "lengths holds one entry per sequence: shape ({1},)",
                  {a.lengths.extents[0], a.batch()});
  }
  if (a.page_indices.extents[0] != a.batch()) {
    return Status(ErrorCode::kBatchMismatch, "P6",
                  "`page_indices` and `q` must have the same batch size. Got {0} and {1}.",
                  "page_indices holds one row per sequence: shape ({1}, pages_per_sequence)",
                  {a.page_indices.extents[0], a.batch()});
  }
  if (profile == Profile::kJax && dtype_of<Index> != DType::kInt32) {
    return Status(ErrorCode::kDtypeNotSupported, "P7",
                  "The dtype of `lengths` must be int32. Got {d0}",
                  "JAX's kernel takes int32 lengths; the reference profile also accepts int64",
                  {static_cast<std::int64_t>(dtype_of<Index>)});
  }
  if (profile == Profile::kJax) {
    const auto mode = static_cast<int>(a.megacore_mode);
    if (mode == static_cast<int>(MegacoreMode::kKvHead) && a.num_kv_heads() % 2 != 0) {
      return Status(ErrorCode::kMegacoreOddKvHeads, "P8",
                    "number of KV heads must be even when megacore_mode is 'kv_head'",
                    "num_kv_heads is {0}; use megacore_mode 'batch' or none", {a.num_kv_heads()});
    }
    if (mode == static_cast<int>(MegacoreMode::kBatch) && a.batch() % 2 != 0) {
      return Status(ErrorCode::kMegacoreOddBatch, "P9",
                    "batch size must be even when megacore_mode is 'batch'",
                    "batch size is {0}; pad the batch or use megacore_mode 'kv_head' or none",
                    {a.batch()});
    }
    if (mode < 0 || mode > 2) {
      return Status(ErrorCode::kInvalidMegacoreMode, "P10",
                    "megacore_mode must be one of ['kv_head', 'batch', None]",
                    "got the value {0}; use MegacoreMode::kNone, kKvHead or kBatch", {mode});
    }
    constexpr const char* kNotInJax = "JAX's paged_attention has no {f} option.";
    ATTNREF_RETURN_IF_ERROR(
        check_option_in_jax(a.sliding_window.has_value(), kNotInJax, "sliding_window"));
    ATTNREF_RETURN_IF_ERROR(check_option_in_jax(!a.sinks.empty_view(), kNotInJax, "sinks"));
    ATTNREF_RETURN_IF_ERROR(check_alibi_in_jax(a, kNotInJax));
  }
  return Status();
}

/// attnref's safety checks on views and options (no JAX id).
template <class Q, class KV, class Index>
Status check_paged_safety(const PagedAttentionArgs<Q, KV, Index>& a) {
  ATTNREF_RETURN_IF_ERROR(check_view(a.q, "q"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.k_pages, "k_pages"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.v_pages, "v_pages"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.lengths, "lengths"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.page_indices, "page_indices"));
  ATTNREF_RETURN_IF_ERROR(
      check_page_capacity(a.pages_per_sequence(), a.page_size(),
                          "pages_per_sequence ({0}) x page_size ({1}) overflows int64", ""));
  ATTNREF_RETURN_IF_ERROR(detail::check_paged_scales(a));
  ATTNREF_RETURN_IF_ERROR(check_soft_cap(a.soft_cap));
  return check_shared_options(a, a.num_q_heads());
}

}  // namespace detail

/// Shape tier: O(1), reads no tensor data. JAX's checks in JAX's order
/// (`detail::check_paged_inputs`), then the safety checks (`detail::check_paged_safety`).
template <class Q, class KV, class Index>
Status check_paged_shapes(const PagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(detail::check_paged_inputs(a, profile));
  return detail::check_paged_safety(a);
}

/// Metadata tier: O(batch + pages + num_q_heads). Reads lengths and page_indices (only after the
/// shape tier has proven their views valid): `0 <= lengths[b] <= pages_per_sequence *
/// page_size`, and every page the kernel reads is in `[0, total_pages)`. Pages past a sequence's
/// length are not read (under `kJax`, pages up to the end of the last compute block are, as JAX
/// DMAs them), nor pages wholly before a sliding window (an engine may have freed them). Then
/// the ALiBi slopes are finite.
/// Precondition: `check_paged_shapes(a, profile).ok()`.
template <class Q, class KV, class Index>
Status check_paged_metadata(const PagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  const std::int64_t page_size = a.page_size();
  const std::int64_t pps = a.pages_per_sequence();
  const std::int64_t capacity = pps * page_size;  // no overflow: proven by the shape tier
  const std::int64_t total_pages = a.total_pages();
  for (std::int64_t b = 0; b < a.batch(); ++b) {
    const std::int64_t length = a.lengths(b);
    if (length < 0 || length > capacity) {
      return Status(ErrorCode::kLengthOutOfRange, "",
                    "lengths[{0}]={1} is outside [0, {2}] (pages_per_sequence {3} x page_size {4})",
                    "a sequence holds at most pages_per_sequence * page_size tokens; widen "
                    "page_indices or fix the length",
                    {b, length, capacity, pps, page_size}, {}, "lengths");
    }
    ATTNREF_RETURN_IF_ERROR(detail::check_live_pages(
        a.page_indices, b, detail::first_window_key(length, a.sliding_window) / page_size,
        detail::live_pages(length, page_size, pps, a.pages_per_compute_block, profile), total_pages,
        length,
        "page {1} of sequence {0} is read because lengths[{0}]={4}; point it at an allocated "
        "page"));
  }
  return check_alibi_slope_values(a.alibi_slopes);
}

/// Shape tier, then metadata tier. The kernels call this with `Profile::kReference`.
template <class Q, class KV, class Index>
Status check_paged(const PagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(check_paged_shapes(a, profile));
  return check_paged_metadata(a, profile);
}

/// Data tier (opt-in): NaN/Inf in q, in the K/V rows (and scales) that lengths and the sliding
/// window make live (for fp8 pages: a NaN or infinity code), or in the sinks. Padding past each
/// length, and rows before the window, may hold anything. Precondition:
/// `check_paged(a, profile).ok()`.
template <class Q, class KV, class Index>
Status check_paged_data(const PagedAttentionArgs<Q, KV, Index>& a) {
  ATTNREF_RETURN_IF_ERROR(detail::check_finite_rows(
      a.q, a.batch(), "q", "the query itself is bad; look at the layer that produced it"));
  const std::int64_t page_size = a.page_size();
  for (std::int64_t b = 0; b < a.batch(); ++b) {
    const std::int64_t length = a.lengths(b);
    for (std::int64_t t = detail::first_window_key(length, a.sliding_window); t < length; ++t) {
      const std::int64_t page = a.page_indices(b, t / page_size);
      const std::int64_t slot = t % page_size;
      for (std::int64_t h = 0; h < a.num_kv_heads(); ++h) {
        ATTNREF_RETURN_IF_ERROR(
            detail::check_kv_row(a.k_pages, a.v_pages, b, t, page, slot, h, a.head_dim()));
        if constexpr (PagedAttentionArgs<Q, KV, Index>::kScaled) {
          // K and V scales are checked each over its own last extent: one may be per token
          // ([..., 1]) while the other is per element ([..., head_dim]).
          for (const auto* scales : {&a.k_scales, &a.v_scales}) {
            for (std::int64_t d = 0; d < scales->extents[3]; ++d) {
              if (!std::isfinite((*scales)(h, page, slot, d))) {
                return Status(ErrorCode::kNonFiniteData, "",
                              "{f} is not finite at sequence {0}, token {1} (page {2}, slot "
                              "{3}), kv head {4}, index {5}",
                              "a live scale is NaN/Inf", {b, t, page, slot, h, d}, {},
                              scales == &a.k_scales ? "k_scales" : "v_scales");
              }
            }
          }
        }
      }
    }
  }
  return check_sink_values(a.sinks);
}

/// P5 for a `lengths` array of run-time rank 2, `[rows, cols]` (e.g. saved as `[batch, 1]`):
/// JAX compares `lengths.shape` with `(batch,)` and gives P5's text, which names no shape; the
/// hint does. For callers that hold arrays of run-time rank (arrays read from files), after
/// the shape tier reached P5.
constexpr Status paged_lengths_rank_error(std::int64_t rows, std::int64_t cols) noexcept {
  return Status(ErrorCode::kBatchMismatch, "P5", "`lengths` and `q` must have the same batch size",
                "lengths has shape ({0}, {1}); it holds one entry per sequence: shape ({0},)",
                {rows, cols}, {}, "lengths");
}

/// Runtime index-dtype check, for callers whose lengths and page table arrive with a dtype known
/// only at run time (a .npy file, a Python array) and must be rejected before a typed
/// `PagedAttentionArgs` exists. Under `kJax` a `lengths` dtype other than int32 is JAX's P7 (with
/// the real dtype in the text); then both must be int32 or int64, and the same.
/// JAX checks P1..P6 first: run `check_paged_shapes` on stand-in index views before this one to
/// keep JAX's order.
constexpr Status check_paged_index_dtypes(DType lengths, DType page_indices,
                                          Profile profile) noexcept {
  const auto is_index = [](DType t) { return t == DType::kInt32 || t == DType::kInt64; };
  if (profile == Profile::kJax && lengths != DType::kInt32) {
    return Status(ErrorCode::kDtypeNotSupported, "P7",
                  "The dtype of `lengths` must be int32. Got {d0}",
                  "JAX's kernel takes int32 lengths; the reference profile also accepts int64",
                  {static_cast<std::int64_t>(lengths)});
  }
  if (!is_index(lengths)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "lengths must be int32 or int64 (int32 under the jax profile)",
                  {static_cast<std::int64_t>(lengths)}, {}, "lengths");
  }
  if (!is_index(page_indices)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "page_indices must be int32 or int64", {static_cast<std::int64_t>(page_indices)},
                  {}, "page_indices");
  }
  if (lengths != page_indices) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "lengths ({d0}) and page_indices ({d1}) must have the same dtype",
                  "save both as int32 (what JAX takes) or both as int64",
                  {static_cast<std::int64_t>(lengths), static_cast<std::int64_t>(page_indices)}, {},
                  "page_indices");
  }
  return Status();
}

/// Checks that `out` is a `[batch, num_q_heads, head_dim_v]` view (q's shape when head_dim_v ==
/// head_dim) of distinct elements, and `logsumexp` (when not empty) a valid `[batch,
/// num_q_heads]` one apart from `out`. Shapes first, then views, as every family's output check.
template <class Q, class KV, class Index>
Status check_paged_output(const PagedAttentionArgs<Q, KV, Index>& a, const TensorView<Q, 3>& out,
                          const TensorView<float, 2>& logsumexp = {}) {
  if (a.head_dim_v() == a.head_dim()) {
    ATTNREF_RETURN_IF_ERROR(detail::check_out_tensor(
        out, a.q.extents, "out has shape ({0}, {1}, {2}); expected q's shape ({3}, {4}, {5})",
        "the output is [batch, num_q_heads, head_dim] like q"));
  } else {
    ATTNREF_RETURN_IF_ERROR(detail::check_out_tensor(
        out, {a.batch(), a.num_q_heads(), a.head_dim_v()},
        "out has shape ({0}, {1}, {2}); expected ({3}, {4}, {5}): q's with V's head_dim",
        "the output is [batch, num_q_heads, head_dim_v]: V's head_dim, not q's"));
  }
  return detail::check_logsumexp_tensor(out, logsumexp, a.batch(), a.num_q_heads(),
                                        "logsumexp is [batch, num_q_heads]");
}

/// Throwing wrapper of `check_paged`: throws `ShapeError` (or calls the error handler).
template <class Q, class KV, class Index>
void validate_paged(const PagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  throw_if_error(check_paged(a, profile));
}

}  // namespace attnref
