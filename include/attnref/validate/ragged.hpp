// SPDX-License-Identifier: Apache-2.0
/// @file ragged.hpp
/// Ragged paged attention (continuous batching: prefill and decode rows in one batch): the
/// argument descriptor and its checks in three tiers.
///  - shapes (O(1)): JAX's static checks R13, R1..R11 in JAX's order (R13 is a bare assert in
///    JAX and gets a real message here; R5 and R14 only under `Profile::kJax`, and under `kJax`
///    `option_not_in_jax` for sinks, alibi_slopes and a non-default alibi_convention or
///    soft_cap_order, which JAX's kernel does not have), then
///    attnref's safety checks on views and options. R12 (an even combined head count) belongs to
///    JAX's combined pool and is checked where that pool becomes views: `ragged_kv_views`;
///  - metadata (O(max_num_seqs + pages)): JAX's dynamic checks R15..R18 in JAX's order, plus the
///    ones JAX omits: num_seqs >= 0, kv_lens >= 0, cu_q_lens starting at 0 and non-decreasing,
///    every page a live sequence reads in [0, total_pages);
///  - data (opt-in): no NaN/Inf in the live query rows or the live K/V rows;
///  - outputs (`check_ragged_output`): out and the optional logsumexp.
///
/// Example:
/// @code
///   attnref::RaggedPagedAttentionArgs<float> args;
///   args.q = {q.data(), {max_tokens, 32, 128}};                  // [T, Hq, D]
///   // JAX's combined pool [P, S, 2*Hkv, D] becomes two [Hkv, P, S, D] views (R12 checked):
///   attnref::TensorView<const float, 4> kv_pages(kv.data(), {pages, 16, 2 * 8, 128});
///   if (attnref::Status s = attnref::ragged_kv_views(kv_pages, &args.k_pages, &args.v_pages);
///       !s.ok()) ...
///   // (or any [Hkv, P, S, D] views, e.g. attnref::kv_pages_view over a vLLM cache)
///   args.kv_lens = {kv_lens.data(), {max_seqs}};
///   args.page_indices = {table.data(), {max_seqs, pages_per_seq}};
///   args.cu_q_lens = {cu_q_lens.data(), {max_seqs + 1}};
///   args.num_seqs = {&num_seqs, {1}};
///   args.sliding_window = 128;
///   if (attnref::Status s = attnref::check_ragged(args, attnref::Profile::kJax); !s.ok()) ...
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/validate/head_options.hpp"
#include "attnref/validate/kv_rows.hpp"
#include "attnref/validate/logit_conventions.hpp"
#include "attnref/validate/options.hpp"
#include "attnref/validate/outputs.hpp"

namespace attnref {

/// Everything one ragged-paged-attention call reads. Views only; nothing is owned.
///
/// Sequence `i` (for `i < num_seqs`) owns query rows `[cu_q_lens[i], cu_q_lens[i+1])` and
/// `kv_lens[i]` KV tokens; KV token `t` of sequence `i` is
/// `k_pages[h, page_indices[i, t / S], t % S, :]` (and `v_pages` likewise) for KV head `h`.
/// K and V are strided views like paged's; `ragged_kv_views` makes them from JAX's combined
/// `[P, S, 2*Hkv, D]` pool, `kv_pages_view` from a separate-K/V engine cache.
/// Query rows align to the end of their sequence: row `r` of a sequence with `q_len` rows sits
/// at position `kv_len - q_len + r` and sees keys `c <= pos` (and `c > pos - sliding_window`).
///
/// `Q` is float, double, Eigen::half or Eigen::bfloat16; `KV` is one of those, int8_t or fp8
/// (`float8_e4m3fn`, `float8_e5m2`), then usually with `k_scale`/`v_scale` (per tensor, as in
/// JAX; unset: scale 1.0). `Index` is int32_t (what JAX requires) or int64_t.
template <class Q, class KV = Q, class Index = std::int32_t>
struct RaggedPagedAttentionArgs {
  static_assert(is_float_dtype<Q>, "q must be float, double, Eigen::half or Eigen::bfloat16");
  static_assert(is_kv_dtype<KV>, "K/V pages must be a float type, int8_t or float8_e4m3fn/e5m2");
  static_assert(is_index_dtype<Index>, "kv_lens, page_indices, cu_q_lens must be int32 or int64");
  using q_type = Q;
  using kv_type = KV;
  using index_type = Index;

  TensorView<const Q, 3> q;                 ///< [max_num_batched_tokens, num_q_heads, head_dim]
  TensorView<const KV, 4> k_pages;          ///< [num_kv_heads, total_pages, page_size, head_dim]
  TensorView<const KV, 4> v_pages;          ///< [num_kv_heads, total_pages, page_size, head_dim]
  TensorView<const Index, 1> kv_lens;       ///< [max_num_seqs]
  TensorView<const Index, 2> page_indices;  ///< [max_num_seqs, pages_per_seq]
  TensorView<const Index, 1> cu_q_lens;     ///< [max_num_seqs + 1]
  TensorView<const Index, 1> num_seqs;      ///< [1] (JAX's R1); leave empty to use num_seqs_value
  /// The number of live sequences as a host scalar. When set, the `num_seqs` view must be left
  /// empty (default-constructed).
  std::optional<std::int64_t> num_seqs_value;
  float sm_scale = 1.0f;                       ///< multiplies q.k (JAX's default 1.0)
  std::optional<std::int64_t> sliding_window;  ///< keep the last w positions (R7: w > 0)
  std::optional<float> soft_cap;         ///< c in c * tanh(x / c), after sm_scale (R8: c != 0)
  float mask_value = kDefaultMaskValue;  ///< JAX's additive mask; validated, no effect here
  std::optional<float> k_scale;          ///< K dequantization: k = q_dtype(float(k) * k_scale)
  std::optional<float> v_scale;          ///< V dequantization: v = q_dtype(float(v) * v_scale)
  // TPU performance knobs: validated (R9..R11), never change the result.
  std::optional<std::int64_t> num_kv_pages_per_block;  ///< R9: in (0, pages_per_seq]
  std::optional<std::int64_t> num_queries_per_block;   ///< R10: > 0
  std::optional<std::int64_t> vmem_limit_bytes;        ///< R11: > 0
  TensorView<const float, 1> sinks;         ///< optional [num_q_heads] attention-sink logits
  TensorView<const float, 1> alibi_slopes;  ///< optional [num_q_heads] ALiBi slopes
  /// ALiBi's distance: signed `slope * (key_pos - query_pos)` or absolute (logit_conventions.hpp)
  AlibiConvention alibi_convention = AlibiConvention::kSigned;
  /// With a soft cap and ALiBi: `c * tanh(s / c) + bias` (default) or `c * tanh((s + bias) / c)`
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;

  std::int64_t max_num_batched_tokens() const noexcept { return q.extents[0]; }
  std::int64_t num_q_heads() const noexcept { return q.extents[1]; }
  std::int64_t head_dim() const noexcept { return q.extents[2]; }
  std::int64_t total_pages() const noexcept { return k_pages.extents[1]; }
  std::int64_t page_size() const noexcept { return k_pages.extents[2]; }
  std::int64_t num_kv_heads() const noexcept { return k_pages.extents[0]; }
  /// JAX's `num_combined_kv_heads`: 2 * num_kv_heads (saturated at INT64_MAX for a hostile
  /// extent), the axis-2 extent of the combined pool JAX would take.
  std::int64_t num_combined_kv_heads() const noexcept {
    std::int64_t combined = std::numeric_limits<std::int64_t>::max();
    return checked_mul(k_pages.extents[0], 2, &combined) ? combined
                                                         : std::numeric_limits<std::int64_t>::max();
  }
  std::int64_t max_num_seqs() const noexcept { return page_indices.extents[0]; }
  std::int64_t pages_per_seq() const noexcept { return page_indices.extents[1]; }
  /// The live sequence count: `num_seqs_value` if set, else `num_seqs(0)`. Only meaningful after
  /// the shape tier passed.
  std::int64_t num_seqs_count() const noexcept {
    return num_seqs_value ? *num_seqs_value : static_cast<std::int64_t>(num_seqs(0));
  }
};

namespace detail {

/// JAX's `get_dtype_packing`: 32-bit words per element (f32 1, 16-bit 2, 8-bit 4); 0 for types
/// the TPU kernel does not take (double).
template <class T>
constexpr std::int64_t ragged_kv_packing() noexcept {
  return sizeof(T) == 4 ? 1 : sizeof(T) == 2 ? 2 : sizeof(T) == 1 ? 4 : 0;
}

/// JAX's `get_min_heads_per_blk` acceptance: 2*Hkv divisible by the packing, and the packed
/// count in {1, 2, 4, 8} or a multiple of 8.
constexpr bool xla_fully_tiled(std::int64_t combined_heads, std::int64_t packing) noexcept {
  if (packing <= 0 || combined_heads % packing != 0) return false;
  const std::int64_t packed = combined_heads / packing;
  return packed == 1 || packed == 2 || packed == 4 || packed == 8 ||
         (packed > 0 && packed % 8 == 0);
}

/// A dequantization scale (R13): finite. JAX asserts `isinstance(scale, float)`; in C++ the type
/// is already float, so what is left to reject is a value that is not a real number.
inline Status check_ragged_scale(const std::optional<float>& scale, const char* name) {
  if (scale && !std::isfinite(*scale)) {
    return Status(ErrorCode::kInvalidScale, "R13", "{f}={r0} must be a finite float or None.",
                  "leave {f} unset for unquantized K/V; otherwise pass the quantizer's scale", {},
                  {static_cast<double>(*scale)}, name);
  }
  return Status();
}

/// JAX's static checks of the heads and options, in JAX's order: R6, R7, R8, R9..R11, then
/// (`kJax`) the TPU dtype rule, R14 and the options JAX's kernel does not have. The second half
/// of `check_ragged_inputs`.
template <class Q, class KV, class Index>
Status check_ragged_options(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  // R6 (head counts must be positive first: JAX would divide by zero).
  const std::int64_t hq = a.num_q_heads();
  const std::int64_t hkv = a.num_kv_heads();
  if (hq <= 0) {
    return Status(ErrorCode::kInvalidHeadCount, "", "num_q_heads must be positive. Got {0}.",
                  "q is [max_num_batched_tokens, num_q_heads, head_dim]", {hq}, {}, "num_q_heads");
  }
  if (hkv <= 0) {
    return Status(ErrorCode::kInvalidHeadCount, "", "num_kv_heads must be positive. Got {0}.",
                  "k_pages and v_pages are [num_kv_heads, total_pages, page_size, head_dim]", {hkv},
                  {}, "num_kv_heads");
  }
  if (hq % hkv != 0) {
    return Status(ErrorCode::kGqaNotDivisible, "R6",
                  "num_q_heads={0} must be divisible by num_kv_heads={1}",
                  "valid num_kv_heads for {0} query heads: {k0}", {hq, hkv});
  }
  // R7.
  ATTNREF_RETURN_IF_ERROR(check_sliding_window(a.sliding_window, "R7"));
  // R8 (and attnref: finite).
  if (a.soft_cap && *a.soft_cap == 0.0f) {
    return Status(ErrorCode::kInvalidSoftCap, "R8", "soft_cap={r0} must not be 0.0.",
                  "leave soft_cap unset to turn the soft cap off (the cap divides by it)", {},
                  {static_cast<double>(*a.soft_cap)}, "soft_cap");
  }
  const std::int64_t pps = a.pages_per_seq();
  // R9..R11: TPU blocking knobs.
  if (a.num_kv_pages_per_block &&
      !(0 < *a.num_kv_pages_per_block && *a.num_kv_pages_per_block <= pps)) {
    return Status(ErrorCode::kInvalidBlockSize, "R9",
                  "num_kv_pages_per_block={0} must be in range (0, {1}].",
                  "use at most pages_per_seq ({1}) pages per block, or leave it unset",
                  {*a.num_kv_pages_per_block, pps}, {}, "num_kv_pages_per_block");
  }
  if (a.num_queries_per_block && *a.num_queries_per_block <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "R10",
                  "num_queries_per_block={0} must be positive.",
                  "JAX's tests use 32 or 64; leave it unset for the tuned default",
                  {*a.num_queries_per_block}, {}, "num_queries_per_block");
  }
  if (a.vmem_limit_bytes && *a.vmem_limit_bytes <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "R11", "vmem_limit_bytes={0} must be positive.",
                  "JAX's tests use 32 MiB (33554432); leave it unset for the default",
                  {*a.vmem_limit_bytes}, {}, "vmem_limit_bytes");
  }
  // R14 and the TPU dtype rule: only under the jax profile.
  if (profile == Profile::kJax) {
    if (std::is_same<Q, double>::value || std::is_same<KV, double>::value) {
      return Status(ErrorCode::kDtypeNotSupported, "",
                    "float64 q or K/V pages are not supported by JAX's TPU kernel",
                    "use float32 or bfloat16; the reference profile accepts float64");
    }
    const std::int64_t combined = a.num_combined_kv_heads();
    if (!detail::xla_fully_tiled(combined, detail::ragged_kv_packing<KV>())) {
      return Status(ErrorCode::kTilingRule, "R14",
                    "Not implemented: num_combined_kv_heads={0} can not be XLA fully tiled.",
                    "with {1} element(s) per 32-bit word, 2 * num_kv_heads / {1} must be 1, 2, 4, "
                    "8 or a multiple of 8",
                    {combined, detail::ragged_kv_packing<KV>()}, {}, "k_pages");
    }
    constexpr const char* kNotInJax = "JAX's ragged_paged_attention has no {f} option.";
    ATTNREF_RETURN_IF_ERROR(check_option_in_jax(!a.sinks.empty_view(), kNotInJax, "sinks"));
    ATTNREF_RETURN_IF_ERROR(check_alibi_in_jax(a, kNotInJax));
  }
  return Status();
}

/// JAX's static checks in JAX's order: the arrays (K and V alike, as R12 belongs to the combined
/// pool; R13, R1..R4, R5 under `kJax`), then the heads and options (`check_ragged_options`).
template <class Q, class KV, class Index>
Status check_ragged_inputs(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  // R12 (the combined pool's even head count) is checked by `ragged_kv_views`. Separate K and V
  // views must agree instead (paged's P1 check, without JAX's id: JAX's ragged kernel takes one
  // pool).
  const auto& k = a.k_pages.extents;
  const auto& v = a.v_pages.extents;
  if (!detail::same_extents(k, v)) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "k_pages and v_pages must have the same shape. Got ({0}, {1}, {2}, {3}) and "
                  "({4}, {5}, {6}, {7})",
                  "K and V pages share one pool shape [num_kv_heads, total_pages, page_size, "
                  "head_dim]",
                  {k[0], k[1], k[2], k[3], v[0], v[1], v[2], v[3]});
  }
  // R13: JAX's bare `assert isinstance(k_scale, float) or k_scale is None` (and v_scale).
  ATTNREF_RETURN_IF_ERROR(detail::check_ragged_scale(a.k_scale, "k_scale"));
  ATTNREF_RETURN_IF_ERROR(detail::check_ragged_scale(a.v_scale, "v_scale"));
  // R1: num_seqs is a [1] array (or, attnref's extension, a host scalar).
  if (a.num_seqs_value) {
    if (!a.num_seqs.empty_view()) {
      return Status(ErrorCode::kShapeMismatch, "",
                    "num_seqs is given twice: as num_seqs_value={0} and as a view",
                    "set either the [1] view or num_seqs_value, not both", {*a.num_seqs_value}, {},
                    "num_seqs");
    }
  } else if (a.num_seqs.extents[0] != 1) {
    return Status(ErrorCode::kShapeMismatch, "R1", "num_seqs.shape=({0},) must be (1,)",
                  "num_seqs is a one-element array holding the live sequence count",
                  {a.num_seqs.extents[0]}, {}, "num_seqs");
  }
  // R2.
  if (a.head_dim() != k[3]) {
    return Status(ErrorCode::kHeadDimMismatch, "R2",
                  "Q head_dim {0} must be the same as that of K/V {1}.",
                  "q [..., {0}] and k_pages/v_pages [..., {1}] come from different models or "
                  "layers",
                  {a.head_dim(), k[3]}, {}, "k_pages");
  }
  const std::int64_t max_seqs = a.max_num_seqs();
  // R3.
  if (a.kv_lens.extents[0] != max_seqs) {
    return Status(ErrorCode::kShapeMismatch, "R3",
                  "Expected kv_lens.shape=({0},) to be ({1},) where `max_num_seqs` is "
                  "`page_indices.shape[0]`.",
                  "kv_lens holds one entry per page-table row (padding rows included)",
                  {a.kv_lens.extents[0], max_seqs}, {}, "kv_lens");
  }
  // R4 (JAX's text has two spaces before "where"). max_num_seqs + 1 is checked: a hostile
  // page_indices extent of INT64_MAX must not overflow.
  std::int64_t cu_len = std::numeric_limits<std::int64_t>::max();
  const bool cu_len_fits = checked_add(max_seqs, 1, &cu_len);
  if (!cu_len_fits || a.cu_q_lens.extents[0] != cu_len) {
    return Status(ErrorCode::kShapeMismatch, "R4",
                  "Expected cu_q_lens.shape=({0},) to be ({1},)  where `max_num_seqs` is "
                  "`page_indices.shape[0]`.",
                  "cu_q_lens holds max_num_seqs + 1 offsets, starting with 0",
                  {a.cu_q_lens.extents[0], cu_len_fits ? cu_len : max_seqs}, {}, "cu_q_lens");
  }
  // R5: JAX takes int32 only; the reference profile also accepts int64.
  if (profile == Profile::kJax && dtype_of<Index> != DType::kInt32) {
    return Status(ErrorCode::kDtypeNotSupported, "R5",
                  "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. Got "
                  "kv_lens.dtype=dtype('{d0}'), page_indices.dtype=dtype('{d0}'), "
                  "cu_q_lens.dtype=dtype('{d0}').",
                  "JAX's kernel takes int32 metadata; the reference profile also accepts int64",
                  {static_cast<std::int64_t>(dtype_of<Index>)});
  }
  return check_ragged_options(a, profile);
}

/// attnref's safety checks on views and options (no JAX id).
template <class Q, class KV, class Index>
Status check_ragged_safety(const RaggedPagedAttentionArgs<Q, KV, Index>& a) {
  ATTNREF_RETURN_IF_ERROR(check_view(a.q, "q"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.k_pages, "k_pages"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.v_pages, "v_pages"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.kv_lens, "kv_lens"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.page_indices, "page_indices"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.cu_q_lens, "cu_q_lens"));
  if (!a.num_seqs_value) ATTNREF_RETURN_IF_ERROR(check_view(a.num_seqs, "num_seqs"));
  if (a.head_dim() <= 0) {
    return Status(ErrorCode::kInvalidHeadDim, "", "head_dim must be positive. Got {0}.",
                  "head_dim is the size of one head's vectors, e.g. 64 or 128", {a.head_dim()});
  }
  ATTNREF_RETURN_IF_ERROR(check_page_capacity(a.pages_per_seq(), a.page_size(),
                                              "pages_per_seq ({0}) x page_size ({1}) overflows "
                                              "int64",
                                              "k_pages"));
  if (a.soft_cap && !std::isfinite(*a.soft_cap)) {
    return Status(ErrorCode::kInvalidSoftCap, "", "soft_cap={r0} must be finite.",
                  "leave soft_cap unset to turn the soft cap off", {},
                  {static_cast<double>(*a.soft_cap)}, "soft_cap");
  }
  return check_shared_options(a, a.num_q_heads());
}

}  // namespace detail

/// Shape tier: O(1), reads no tensor data (except the rank-1 `num_seqs` view's extent). JAX's
/// static checks in JAX's order (`detail::check_ragged_inputs`), then attnref's safety checks
/// (`detail::check_ragged_safety`).
template <class Q, class KV, class Index>
Status check_ragged_shapes(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(detail::check_ragged_inputs(a, profile));
  return detail::check_ragged_safety(a);
}

/// Metadata tier: O(max_num_seqs + live pages). Reads num_seqs, kv_lens, cu_q_lens and the live
/// page-table entries. JAX's dynamic checks R15..R18 in JAX's order, each preceded by the safety
/// check it relies on. Under `kJax`, R16 takes the max over all `max_num_seqs` kv_lens, padding
/// included, as JAX does; the reference profile looks at live sequences only.
/// Precondition: `check_ragged_shapes(a, profile).ok()`.
template <class Q, class KV, class Index>
Status check_ragged_metadata(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  const std::int64_t max_seqs = a.max_num_seqs();
  const std::int64_t n = a.num_seqs_count();
  if (n < 0) {
    return Status(ErrorCode::kNumSeqsOutOfRange, "", "num_seqs[0]={0} must not be negative",
                  "num_seqs counts the live sequences: 0 to max_num_seqs ({1})", {n, max_seqs}, {},
                  "num_seqs");
  }
  // R15.
  if (n > max_seqs) {
    return Status(ErrorCode::kNumSeqsOutOfRange, "R15",
                  "num_seqs[0]={0} must be less or equal to max_num_seqs={1}",
                  "max_num_seqs is page_indices.shape[0]; give the page table one row per "
                  "sequence",
                  {n, max_seqs}, {}, "num_seqs");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t kv_len = a.kv_lens(i);
    if (kv_len < 0) {
      return Status(ErrorCode::kLengthOutOfRange, "", "kv_lens[{0}]={1} must not be negative",
                    "kv_lens[i] counts sequence i's cached tokens, the new ones included",
                    {i, kv_len}, {}, "kv_lens");
    }
  }
  // R16.
  const std::int64_t page_size = a.page_size();
  const std::int64_t pps = a.pages_per_seq();
  const std::int64_t counted = profile == Profile::kJax ? max_seqs : n;
  std::int64_t max_kv_len = 0;
  for (std::int64_t i = 0; i < counted; ++i) {
    const std::int64_t kv_len = a.kv_lens(i);
    if (kv_len > max_kv_len) max_kv_len = kv_len;
  }
  const std::int64_t min_pages = ceil_div(max_kv_len, page_size);
  if (pps < min_pages) {
    return Status(ErrorCode::kPageTableTooNarrow, "R16",
                  "pages_per_seq={0} must be greater or equal to min_pages_per_seq={1} given "
                  "max_kv_len={2} and page_size={3}.",
                  "widen page_indices to at least {1} columns, or shorten the longest sequence",
                  {pps, min_pages, max_kv_len, page_size}, {}, "page_indices");
  }
  // cu_q_lens: starts at 0 and never decreases over the live entries (JAX does not check).
  const std::int64_t tokens = a.max_num_batched_tokens();
  if (a.cu_q_lens(0) != 0) {
    return Status(ErrorCode::kInvalidCuQLens, "", "cu_q_lens[0]={0} must be 0",
                  "cu_q_lens are cumulative query lengths: 0, q_len[0], q_len[0] + q_len[1], ...",
                  {static_cast<std::int64_t>(a.cu_q_lens(0))}, {}, "cu_q_lens");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t lo = a.cu_q_lens(i);
    const std::int64_t hi = a.cu_q_lens(i + 1);
    if (hi < lo) {
      std::int64_t q_len = 0;  // hi - lo, saturated (-lo is safe: lo > hi >= INT64_MIN)
      if (!checked_add(hi, -lo, &q_len)) q_len = std::numeric_limits<std::int64_t>::min();
      return Status(ErrorCode::kInvalidCuQLens, "",
                    "cu_q_lens must not decrease: cu_q_lens[{0}]={1} > cu_q_lens[{2}]={3}",
                    "sequence {0} would have a negative query length ({4})",
                    {i, lo, i + 1, hi, q_len}, {}, "cu_q_lens");
    }
  }
  // R17.
  const std::int64_t total = a.cu_q_lens(n);
  if (total > tokens) {
    return Status(ErrorCode::kTokenBudgetExceeded, "R17",
                  "Total q tokens {0} must be less or equal to max_num_batched_tokens={1}.",
                  "q holds {1} token rows; schedule fewer tokens or enlarge the buffer",
                  {total, tokens}, {}, "cu_q_lens");
  }
  // R18.
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t q_len = a.cu_q_lens(i + 1) - a.cu_q_lens(i);
    const std::int64_t kv_len = a.kv_lens(i);
    if (q_len > kv_len) {
      return Status(ErrorCode::kQueryLongerThanKv, "R18",
                    "q_len={0} must be less or equal to kv_len={1} at sequence {2}.",
                    "kv_len counts the cached tokens plus the {0} new ones; write the new K/V "
                    "into the cache first",
                    {q_len, kv_len, i}, {}, "kv_lens");
    }
  }
  // Every page a live sequence reads.
  const std::int64_t total_pages = a.total_pages();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t kv_len = a.kv_lens(i);
    ATTNREF_RETURN_IF_ERROR(detail::check_live_pages(
        a.page_indices, i, 0, ceil_div(kv_len, page_size), total_pages, kv_len,
        "page {1} of sequence {0} is read because kv_lens[{0}]={4}; point it at an allocated "
        "page"));
  }
  return check_alibi_slope_values(a.alibi_slopes);
}

/// Shape tier, then metadata tier. The kernels call this with `Profile::kReference`.
template <class Q, class KV, class Index>
Status check_ragged(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(check_ragged_shapes(a, profile));
  return check_ragged_metadata(a, profile);
}

/// Data tier (opt-in): NaN/Inf in the live query rows `[0, cu_q_lens[num_seqs])`, in the K/V
/// rows of each live sequence's first kv_len tokens (for fp8 pages: a NaN or infinity code), or
/// in the sinks. Padding may hold anything.
/// Precondition: `check_ragged(a, profile).ok()`.
template <class Q, class KV, class Index>
Status check_ragged_data(const RaggedPagedAttentionArgs<Q, KV, Index>& a) {
  const std::int64_t n = a.num_seqs_count();
  const std::int64_t rows = a.cu_q_lens(n);
  ATTNREF_RETURN_IF_ERROR(detail::check_finite_rows(
      a.q, rows, "q", "a live query row holds NaN/Inf; look at the layer that produced it"));
  const std::int64_t page_size = a.page_size();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t kv_len = a.kv_lens(i);
    for (std::int64_t t = 0; t < kv_len; ++t) {
      const std::int64_t page = a.page_indices(i, t / page_size);
      const std::int64_t slot = t % page_size;
      for (std::int64_t h = 0; h < a.num_kv_heads(); ++h)
        ATTNREF_RETURN_IF_ERROR(
            detail::check_kv_row(a.k_pages, a.v_pages, i, t, page, slot, h, a.head_dim()));
    }
  }
  return check_sink_values(a.sinks);
}

/// JAX's R1, R3 or R4 text (`check`) for a metadata array of run-time rank 2, `[rows, cols]`,
/// with the real shape: num_seqs, kv_lens or cu_q_lens saved with a trailing axis. For callers
/// that hold arrays of run-time rank (arrays read from files), after the shape tier reached
/// that check. `max_num_seqs` is `page_indices.shape[0]`.
inline Status ragged_metadata_rank_error(const char* check, std::int64_t rows, std::int64_t cols,
                                         std::int64_t max_num_seqs) {
  const std::string_view id(check);
  if (id == "R1") {
    return Status(ErrorCode::kShapeMismatch, "R1", "num_seqs.shape=({0}, {1}) must be (1,)",
                  "num_seqs is a one-element array holding the live sequence count", {rows, cols},
                  {}, "num_seqs");
  }
  if (id == "R3") {
    return Status(ErrorCode::kShapeMismatch, "R3",
                  "Expected kv_lens.shape=({0}, {1}) to be ({2},) where `max_num_seqs` is "
                  "`page_indices.shape[0]`.",
                  "kv_lens holds one entry per page-table row (padding rows included)",
                  {rows, cols, max_num_seqs}, {}, "kv_lens");
  }
  // R4; JAX's text has two spaces before "where".
  return Status(ErrorCode::kShapeMismatch, "R4",
                "Expected cu_q_lens.shape=({0}, {1}) to be ({2},)  where `max_num_seqs` is "
                "`page_indices.shape[0]`.",
                "cu_q_lens holds max_num_seqs + 1 offsets, starting with 0", {rows, cols, rows}, {},
                "cu_q_lens");
}

/// Runtime index-dtype check, for callers whose metadata arrives with a dtype known only at run
/// time (a .npy file, a Python array) and must be rejected before a typed
/// `RaggedPagedAttentionArgs` exists. `num_seqs` must be int32 or int64 (it is read as a value,
/// so it may differ from the others). Under `kJax` kv_lens, page_indices and cu_q_lens must all
/// be int32 (JAX's R5, with the real dtypes in the text); otherwise each must be int32 or int64,
/// and the three the same.
/// JAX checks R12, R13, R1..R4 first: run `check_ragged_shapes` on stand-in index views before
/// this one to keep JAX's order.
constexpr Status check_ragged_index_dtypes(DType kv_lens, DType page_indices, DType cu_q_lens,
                                           DType num_seqs, Profile profile) noexcept {
  const auto is_index = [](DType t) { return t == DType::kInt32 || t == DType::kInt64; };
  const auto i64 = [](DType t) { return static_cast<std::int64_t>(t); };
  if (!is_index(num_seqs)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "num_seqs must be int32 or int64", {i64(num_seqs)}, {}, "num_seqs");
  }
  const bool uniform = is_index(kv_lens) && kv_lens == page_indices && kv_lens == cu_q_lens;
  if (profile == Profile::kJax &&
      (kv_lens != DType::kInt32 || page_indices != DType::kInt32 || cu_q_lens != DType::kInt32)) {
    return Status(ErrorCode::kDtypeNotSupported, "R5",
                  "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. Got "
                  "kv_lens.dtype=dtype('{d0}'), page_indices.dtype=dtype('{d1}'), "
                  "cu_q_lens.dtype=dtype('{d2}').",
                  uniform ? "JAX's kernel takes int32 metadata; the reference profile also "
                            "accepts int64"
                          : "save all three as int32 (what JAX takes)",
                  {i64(kv_lens), i64(page_indices), i64(cu_q_lens)});
  }
  if (!is_index(kv_lens)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "kv_lens must be int32 or int64", {i64(kv_lens)}, {}, "kv_lens");
  }
  if (!is_index(page_indices)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "page_indices must be int32 or int64", {i64(page_indices)}, {}, "page_indices");
  }
  if (!is_index(cu_q_lens)) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "{f} has dtype {d0}, which is not supported here",
                  "cu_q_lens must be int32 or int64", {i64(cu_q_lens)}, {}, "cu_q_lens");
  }
  if (!uniform) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "kv_lens ({d0}), page_indices ({d1}) and cu_q_lens ({d2}) must have the "
                  "same dtype",
                  "save all three as int32 (what JAX takes) or all as int64",
                  {i64(kv_lens), i64(page_indices), i64(cu_q_lens)}, {}, "kv_lens");
  }
  return Status();
}

/// Checks that `out` is a view of q's shape `[max_num_batched_tokens, num_q_heads, head_dim]`
/// (padding rows included) of distinct elements, and `logsumexp` (when not empty) a valid
/// `[max_num_batched_tokens, num_q_heads]` one apart from `out`.
template <class Q, class KV, class Index>
Status check_ragged_output(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                           const TensorView<Q, 3>& out,
                           const TensorView<float, 2>& logsumexp = {}) {
  ATTNREF_RETURN_IF_ERROR(detail::check_out_tensor(
      out, a.q.extents, "out has shape ({0}, {1}, {2}); expected q's shape ({3}, {4}, {5})",
      "the output has one row per q row, padding rows included (they are zeroed)"));
  return detail::check_logsumexp_tensor(out, logsumexp, a.q.extents[0], a.q.extents[1],
                                        "logsumexp is [max_num_batched_tokens, num_q_heads], "
                                        "padding rows included (they get -inf)");
}

/// Throwing wrapper of `check_ragged`: throws `ShapeError` (or calls the error handler).
template <class Q, class KV, class Index>
void validate_ragged(const RaggedPagedAttentionArgs<Q, KV, Index>& a, Profile profile) {
  throw_if_error(check_ragged(a, profile));
}

}  // namespace attnref
