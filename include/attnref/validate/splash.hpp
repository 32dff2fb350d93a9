// SPDX-License-Identifier: Apache-2.0
/// @file splash.hpp
/// Splash attention (prefill/training): the argument descriptor, its block sizes and its checks.
///  - `check_splash_shapes(args, mask, profile)` (O(1)), in JAX's order: the mask's own checks
///    (K2..K12), mask head count (1 or Hq) and shape against (Sq, Skv), the block checks M3..M7
///    (`kJax`), then JAX's forward checks S3..S11 (S7, S8 only under `Profile::kJax`; S3 and S5
///    with corrected wording; under `kJax` also `option_not_in_jax` for sliding_window,
///    alibi_slopes and a non-default alibi_convention or soft_cap_order), then attnref's safety
///    checks on views and options;
///  - `check_splash_metadata(args, mask, profile)`: reads arrays (nothing to check yet);
///  - `check_splash(args, mask, profile)`: shapes, then metadata; `validate_splash` throws;
///  - `check_splash_data(args)` (opt-in): no NaN/Inf in q, k, v or sinks;
///  - `check_splash_backward(args, mask, profile)`: the forward checks, then S15..S21 (`kJax`);
///  - `check_splash_backward_tensors(...)`: shapes of out, logsumexp, dO and the gradients;
///  - `check_key_rank(rank, is_mqa)` (S3), `check_mask_rank(shape)` (S2) and
///    `check_mask_dtype(dtype)` (K9) for callers that hold arrays of run-time rank or dtype
///    (arrays read from files).
///  - `check_splash(args, const MaskTiling&, profile)`: the forward checks against a classified
///    mask (masks/mask_info.hpp's `MaskInfo::tiling()`; `check_splash(args, info, profile)` there
///    converts);
///  - `check_splash_output(args, out, logsumexp)` and `check_splash_backward_output(...)`: the
///    kernels' output views.
/// Masks are templates here: this header needs only validate/mask_checks.hpp (no containers, no
/// RTTI); the mask types themselves are in masks/mask.hpp.
///
/// Example:
/// @code
///   attnref::SplashAttentionArgs<float> args;
///   args.q = {q.data(), {8, 1024, 128}};        // [Hq, Sq, Dqk]
///   args.k = {k.data(), {2, 1024, 128}};        // [Hkv, Skv, Dqk]
///   args.v = {v.data(), {2, 1024, 128}};        // [Hkv, Skv, Dv]
///   attnref::CausalMask mask{{1024, 1024}};    // masks/mask.hpp
///   if (attnref::Status s = attnref::check_splash(args, mask, attnref::Profile::kJax); !s.ok())
///     std::cerr << s.to_string() << "\n";
/// @endcode
#pragma once

#include <cstdint>
#include <optional>

#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/validate/head_options.hpp"
#include "attnref/validate/heads.hpp"
#include "attnref/validate/kv_rows.hpp"
#include "attnref/validate/logit_conventions.hpp"
#include "attnref/validate/mask_blocks.hpp"
#include "attnref/validate/mask_checks.hpp"
#include "attnref/validate/options.hpp"
#include "attnref/validate/outputs.hpp"

namespace attnref {

/// JAX's BlockSizes. Unset optional sizes take JAX's defaults: block_kv_compute = block_kv,
/// block_kv_dkv_compute = block_kv_dkv. Under `Profile::kReference` unset backward sizes fall
/// back to the forward ones; `Profile::kJax` requires them (S15). No numerical effect beyond
/// rounding.
struct SplashBlockSizes {
  std::int64_t block_q = 128;                        ///< forward q block (bq)
  std::int64_t block_kv = 128;                       ///< forward kv block (bkv)
  std::optional<std::int64_t> block_kv_compute;      ///< kv sub-block per softmax update
  std::optional<std::int64_t> block_q_dkv;           ///< dk/dv kernel q block
  std::optional<std::int64_t> block_kv_dkv;          ///< dk/dv kernel kv block
  std::optional<std::int64_t> block_kv_dkv_compute;  ///< dk/dv kernel kv sub-block
  std::optional<std::int64_t> block_q_dq;            ///< dq kernel q block (unfused only)
  std::optional<std::int64_t> block_kv_dq;           ///< dq kernel kv block (unfused only)
  bool use_fused_bwd_kernel = false;                 ///< JAX's fused dq+dkv kernel

  /// JAX's `BlockSizes.get_default()`: every block 128, backward blocks set.
  static SplashBlockSizes get_default() {
    SplashBlockSizes b;
    b.block_kv_compute = 128;
    b.block_q_dkv = b.block_kv_dkv = b.block_kv_dkv_compute = 128;
    b.block_q_dq = b.block_kv_dq = 128;
    return b;
  }
  std::int64_t kv_compute() const noexcept { return block_kv_compute.value_or(block_kv); }
  /// JAX's has_backward_blocks.
  bool has_backward_blocks() const noexcept {
    const bool dkv = block_q_dkv && block_kv_dkv && block_kv_dkv_compute;
    return use_fused_bwd_kernel ? dkv : dkv && block_q_dq && block_kv_dq;
  }
  std::int64_t q_dkv() const noexcept { return block_q_dkv.value_or(block_q); }
  std::int64_t kv_dkv() const noexcept { return block_kv_dkv.value_or(block_kv); }
  std::int64_t kv_dkv_compute() const noexcept { return block_kv_dkv_compute.value_or(kv_dkv()); }
};

/// Everything one splash-attention call reads. Views only; nothing is owned.
/// MQA: JAX's 2-dim k `[Skv, Dqk]` and v `[Skv, Dv]` are passed as `[1, Skv, D]` views with
/// `is_mqa = true` (numerically the same as one KV head shared by all query heads).
template <class Q, class KV = Q>
struct SplashAttentionArgs {
  static_assert(is_float_dtype<Q>, "q must be float, double, Eigen::half or Eigen::bfloat16");
  static_assert(is_float_dtype<KV>,
                "k and v must be float, double, Eigen::half or Eigen::bfloat16");
  using q_type = Q;
  using kv_type = KV;

  TensorView<const Q, 3> q;   ///< [num_q_heads, q_seq_len, head_dim_qk]
  TensorView<const KV, 3> k;  ///< [num_kv_heads, kv_seq_len, head_dim_qk] (MQA: [1, ...])
  TensorView<const KV, 3> v;  ///< [num_kv_heads, kv_seq_len, head_dim_v] (MQA: [1, ...])
  bool is_mqa = false;        ///< JAX's make_splash_mqa: k/v are [Skv, D]
  TensorView<const std::int32_t, 1> q_segment_ids;   ///< optional [q_seq_len]
  TensorView<const std::int32_t, 1> kv_segment_ids;  ///< optional [kv_seq_len]
  TensorView<const float, 1> sinks;      ///< optional [num_q_heads] attention-sink logits
  std::optional<float> soft_cap;         ///< c in c * tanh(x / c), applied before masking
  float sm_scale = 1.0f;                 ///< multiplies q.k (JAX has no scale: 1.0)
  float mask_value = kDefaultMaskValue;  ///< JAX's mask value; validated (see README)
  SplashBlockSizes block_sizes;          ///< tiling; results do not depend on it
  MaskSharding sharding;                 ///< JAX's head/q-seq shards; checked under kJax
  /// Query row i sees key j only if i - W < j <= i, on top of the mask (the same as AND-ing the
  /// mask with LocalMask(window (W - 1, 0))); W >= 1. Tiles wholly outside are never read.
  std::optional<std::int64_t> sliding_window;
  TensorView<const float, 1> alibi_slopes;  ///< optional [num_q_heads] ALiBi slopes
  /// ALiBi's distance: signed `slope * (key_pos - query_pos)` or absolute (logit_conventions.hpp)
  AlibiConvention alibi_convention = AlibiConvention::kSigned;
  /// With a soft cap and ALiBi: `c * tanh(s / c) + bias` (default) or `c * tanh((s + bias) / c)`
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;

  std::int64_t num_q_heads() const noexcept { return q.extents[0]; }
  std::int64_t q_seq_len() const noexcept { return q.extents[1]; }
  std::int64_t head_dim_qk() const noexcept { return q.extents[2]; }
  std::int64_t num_kv_heads() const noexcept { return k.extents[0]; }
  std::int64_t kv_seq_len() const noexcept { return k.extents[1]; }
  std::int64_t head_dim_v() const noexcept { return v.extents[2]; }
  bool has_segment_ids() const noexcept {
    return !q_segment_ids.empty_view() || !kv_segment_ids.empty_view();
  }
  bool has_sinks() const noexcept { return !sinks.empty_view(); }
};

/// S3 for arrays of run-time rank: k (and v) must be 2-dim for MQA, 3-dim otherwise. JAX's text
/// always says "for MQA"; this one names the mode actually used.
inline Status check_key_rank(std::int64_t rank, bool is_mqa) {
  const std::int64_t expected = is_mqa ? 2 : 3;
  if (rank == expected) return Status();
  if (is_mqa) {
    return Status(ErrorCode::kRankMismatch, "S3",
                  "Expected 2-dim 'key' tensor for MQA. Instead got a {0}-dim one.",
                  "MQA keys are [kv_seq_len, head_dim]; for [num_kv_heads, kv_seq_len, head_dim] "
                  "use MHA/GQA",
                  {rank});
  }
  return Status(ErrorCode::kRankMismatch, "S3",
                "Expected 3-dim 'key' tensor for MHA. Instead got a {0}-dim one.",
                "MHA/GQA keys are [num_kv_heads, kv_seq_len, head_dim]; 2-dim keys need MQA",
                {rank});
}

/// S2 for arrays of run-time rank: an explicit mask is [num_heads, q_seq_len, kv_seq_len].
/// `shape` points to `rank` extents (up to 4 are printed).
inline Status check_mask_rank(std::int64_t rank, const std::int64_t* shape) {
  if (rank == 3) return Status();
  Status::Ints v{};
  for (std::int64_t i = 0; i < rank && i < 4; ++i) v[static_cast<size_t>(i)] = shape[i];
  v[7] = rank;
  const char* hint = "a mask is [1 or num_q_heads, q_seq_len, kv_seq_len]; got {7} dims";
  switch (rank) {
    case 0:
      return Status(ErrorCode::kMaskShape, "S2", "Unexpected mask shape: ()", hint, v);
    case 1:
      return Status(ErrorCode::kMaskShape, "S2", "Unexpected mask shape: ({0},)", hint, v);
    case 2:
      return Status(ErrorCode::kMaskShape, "S2", "Unexpected mask shape: ({0}, {1})", hint, v);
    case 4:
      return Status(ErrorCode::kMaskShape, "S2", "Unexpected mask shape: ({0}, {1}, {2}, {3})",
                    hint, v);
    default:
      return Status(ErrorCode::kMaskShape, "S2", "Unexpected mask shape: ({0}, {1}, {2}, {3}, ...)",
                    hint, v);
  }
}

/// K9 for arrays of run-time dtype: an explicit mask is boolean.
inline Status check_mask_dtype(DType dtype) {
  if (dtype == DType::kBool) return Status();
  return Status(ErrorCode::kDtypeNotSupported, "K9", "Mask must be a boolean array",
                "got {d0}; save the mask with dtype=bool", {static_cast<std::int64_t>(dtype)}, {},
                "mask");
}

namespace detail {

inline Status check_positive_block(std::int64_t value, const char* name) {
  if (value <= 0) {
    return Status(ErrorCode::kInvalidBlockSize, "", "{f}={0} must be positive.",
                  "use e.g. 128, or any positive size under the reference profile", {value}, {},
                  name);
  }
  return Status();
}

/// S5 with the corrected wording (JAX's says the reverse).
inline Status check_splash_heads(std::int64_t num_q_heads, std::int64_t num_kv_heads) {
  if (num_q_heads <= 0 || num_kv_heads <= 0) return check_heads(num_q_heads, num_kv_heads, "S5");
  if (num_q_heads % num_kv_heads != 0) {
    return Status(ErrorCode::kGqaNotDivisible, "S5",
                  "In MHA, expected number of 'query' heads ({0}) to be a multiple of the number "
                  "of 'key' heads ({1})",
                  "valid num_kv_heads for {0} query heads: {k0}", {num_q_heads, num_kv_heads});
  }
  return Status();
}

}  // namespace detail

/// A mask of `mask_heads` heads fits `num_q_heads` query heads: 1 (shared) or one per head.
/// For callers that hold a mask array before they build the args.
inline Status check_mask_head_count(std::int64_t mask_heads, std::int64_t num_q_heads) {
  if (mask_heads != 1 && mask_heads != num_q_heads) {
    return Status(ErrorCode::kMaskHeadCount, "",
                  "the mask has {0} heads; expected 1 (shared by all heads) or num_q_heads={1}",
                  "give one mask per query head, or a single mask for all of them",
                  {mask_heads, num_q_heads});
  }
  return Status();
}

namespace detail {

/// JAX's forward input checks S3..S11 (S7, S8 under `kJax`) and block-size positivity.
template <class Q, class KV>
Status check_splash_inputs(const SplashAttentionArgs<Q, KV>& a, Profile profile) {
  const auto& q = a.q.extents;
  const auto& k = a.k.extents;
  const auto& v = a.v.extents;
  if (a.is_mqa && k[0] != 1) {
    return Status(ErrorCode::kRankMismatch, "S3",
                  "Expected 2-dim 'key' tensor for MQA. Instead got a 3-dim one with {0} heads.",
                  "pass MQA keys [kv_seq_len, head_dim] as a [1, kv_seq_len, head_dim] view, or "
                  "set is_mqa = false for MHA/GQA",
                  {k[0]});
  }
  if (k[2] != q[2]) {
    return Status(ErrorCode::kHeadDimMismatch, "S4",
                  "Expected 'key' head dimension to be: {0}. Instead got: {1}.",
                  "q and k share head_dim_qk (v's head_dim may differ)", {q[2], k[2]});
  }
  if (!a.is_mqa) ATTNREF_RETURN_IF_ERROR(detail::check_splash_heads(q[0], k[0]));
  if (k[0] != v[0] || k[1] != v[1]) {
    if (a.is_mqa) {
      return Status(ErrorCode::kShapeMismatch, "S6",
                    "Expected 'key' ({1}, {2}) and 'value' ({4}, {5}) to have the same leading "
                    "dimensions.",
                    "k is [kv_seq_len, head_dim_qk] and v is [kv_seq_len, head_dim_v]",
                    {k[0], k[1], k[2], v[0], v[1], v[2]});
    }
    return Status(ErrorCode::kShapeMismatch, "S6",
                  "Expected 'key' ({0}, {1}, {2}) and 'value' ({3}, {4}, {5}) to have the same "
                  "leading dimensions.",
                  "k is [num_kv_heads, kv_seq_len, head_dim_qk] and v is [num_kv_heads, "
                  "kv_seq_len, head_dim_v]",
                  {k[0], k[1], k[2], v[0], v[1], v[2]});
  }
  const SplashBlockSizes& b = a.block_sizes;
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.block_q, "block_q"));
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.block_kv, "block_kv"));
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.kv_compute(), "block_kv_compute"));
  if (profile == Profile::kJax) {
    if (b.block_kv % b.kv_compute() != 0) {
      return Status(
          ErrorCode::kBlockNotDivisible, "S7", "bkv={0} must be a multiple of bkv_compute={1}.",
          "pick block_kv_compute among the divisors of {0}: {k0}", {b.block_kv, b.kv_compute()});
    }
    if (b.kv_compute() % 128 != 0) {
      return Status(ErrorCode::kTilingRule, "S8", "bkv_compute={0} must be a multiple of 128.",
                    "the TPU lane width is 128; the reference profile accepts any size",
                    {b.kv_compute()});
    }
    ATTNREF_RETURN_IF_ERROR(check_option_in_jax(
        a.sliding_window.has_value(), "JAX's splash attention has no {f} option.", "sliding_window",
        "AND the mask with a LocalMask of window (W - 1, 0), as JAX callers do, or check under "
        "the reference profile"));
    ATTNREF_RETURN_IF_ERROR(check_alibi_in_jax(a, "JAX's splash attention has no {f} option."));
  }
  const bool has_q_seg = !a.q_segment_ids.empty_view();
  const bool has_kv_seg = !a.kv_segment_ids.empty_view();
  if (has_q_seg != has_kv_seg) {
    return Status(ErrorCode::kSegmentIdsShape, "",
                  "q and kv segment ids must be given together (got q: {0}, kv: {1})",
                  "JAX's SegmentIds holds both; pass identical ids for self-attention",
                  {has_q_seg ? 1 : 0, has_kv_seg ? 1 : 0});
  }
  if (has_q_seg && a.q_segment_ids.extents[0] != q[1]) {
    return Status(ErrorCode::kSegmentIdsShape, "S9",
                  "Invalid shape for q segment_ids: ({0},). Expected: ({1},)",
                  "one segment id per query position", {a.q_segment_ids.extents[0], q[1]});
  }
  if (has_kv_seg && a.kv_segment_ids.extents[0] != k[1]) {
    return Status(ErrorCode::kSegmentIdsShape, "S10",
                  "Invalid shape for kv segment_ids: ({0},). Expected: ({1},)",
                  "one segment id per key position", {a.kv_segment_ids.extents[0], k[1]});
  }
  if (a.has_sinks() && a.sinks.extents[0] != q[0]) {
    return Status(ErrorCode::kSinksShape, "S11",
                  "sinks must have shape ({1},), one logit per query head. Got ({0},).",
                  "JAX asserts sinks.shape == (num_q_heads,) without a message",
                  {a.sinks.extents[0], q[0]});
  }
  return Status();
}

/// A mask of `mask_heads` heads and shape `shape` fits the call: 1 or Hq heads, shape (Sq, Skv)
/// (JAX checks neither).
template <class Q, class KV>
Status check_splash_mask_fit(const SplashAttentionArgs<Q, KV>& a, std::int64_t mask_heads,
                             const MaskShape& shape) {
  ATTNREF_RETURN_IF_ERROR(check_mask_head_count(mask_heads, a.num_q_heads()));
  if (shape[0] != a.q_seq_len() || shape[1] != a.kv_seq_len()) {
    return Status(ErrorCode::kMaskShape, "",
                  "mask shape ({0}, {1}) does not match (q_seq_len, kv_seq_len) = ({2}, {3})",
                  "build the mask with shape (q_seq_len, kv_seq_len) = ({2}, {3})",
                  {shape[0], shape[1], a.q_seq_len(), a.kv_seq_len()});
  }
  return Status();
}

/// attnref's safety checks on views and options (no JAX id).
template <class Q, class KV>
Status check_splash_safety(const SplashAttentionArgs<Q, KV>& a) {
  const auto& q = a.q.extents;
  const auto& k = a.k.extents;
  const auto& v = a.v.extents;
  ATTNREF_RETURN_IF_ERROR(check_view(a.q, "q"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.k, "k"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.v, "v"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.q_segment_ids, "q_segment_ids"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.kv_segment_ids, "kv_segment_ids"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.sinks, "sinks"));
  ATTNREF_RETURN_IF_ERROR(check_heads(q[0], a.is_mqa ? 1 : k[0], "S5"));
  if (q[2] <= 0 || v[2] <= 0) {
    return Status(ErrorCode::kInvalidHeadDim, "",
                  "head_dim must be positive. Got {0} (qk) and {1} (v).",
                  "head_dim is the size of one head's vectors, e.g. 64 or 128", {q[2], v[2]});
  }
  ATTNREF_RETURN_IF_ERROR(check_soft_cap(a.soft_cap));
  return check_shared_options(a, q[0]);
}

}  // namespace detail

/// Shape tier, O(1): reads no tensor data. Order, as JAX's: the mask (its own checks, head count,
/// shape vs (Sq, Skv), M3..M7 under `kJax`), then S3, S4, S5, S6, S7, S8 and the options JAX's
/// kernel does not have (`kJax`: sliding_window, alibi_slopes), S9, S10, S11, then attnref's
/// safety checks (views, block sizes, soft cap, mask value, sm_scale,
/// sliding window, shape of the ALiBi slopes).
template <class Q, class KV, class M>
Status check_splash_shapes(const SplashAttentionArgs<Q, KV>& a, const M& mask, Profile profile) {
  const SplashBlockSizes& b = a.block_sizes;
  // The mask first: JAX checks it and builds its MaskInfo (M3..M7) when the kernel is made,
  // before a call checks its inputs (S3..S11).
  ATTNREF_RETURN_IF_ERROR(check_mask(mask));
  const std::int64_t mask_heads = mask_num_heads(mask);
  ATTNREF_RETURN_IF_ERROR(detail::check_splash_mask_fit(a, mask_heads, mask_shape(mask)));
  ATTNREF_RETURN_IF_ERROR(check_mask_blocks(a.q_seq_len(), a.kv_seq_len(), mask_heads, b.block_q,
                                            b.block_kv, profile, a.sharding));
  ATTNREF_RETURN_IF_ERROR(detail::check_splash_inputs(a, profile));
  return detail::check_splash_safety(a);
}

/// Metadata tier, O(num_q_heads): the ALiBi slopes are finite. Splash has no index arrays:
/// segment ids may hold any int32 value (JAX puts no rule on them) and a mask's cells any bool.
/// Precondition: `check_splash_shapes(a, mask, profile).ok()`.
template <class Q, class KV, class M>
Status check_splash_metadata(const SplashAttentionArgs<Q, KV>& a, const M& /*mask*/,
                             Profile /*profile*/) {
  return check_alibi_slope_values(a.alibi_slopes);
}

/// Shape tier, then metadata tier: every forward check, in the order of `check_splash_shapes`.
/// The kernels call this with `Profile::kReference`.
template <class Q, class KV, class M>
Status check_splash(const SplashAttentionArgs<Q, KV>& a, const M& mask, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(check_splash_shapes(a, mask, profile));
  return check_splash_metadata(a, mask, profile);
}

/// Forward checks against a classified mask (the mask itself was checked when it was
/// classified), in the order of `check_splash_shapes`: the tiling's fit to this call (heads 1 or
/// Hq, (Sq, Skv), the forward block sizes, M3..M7 under `kJax`), then JAX's input checks, then
/// the safety checks, then the metadata tier. The splash kernels call it with a plan's MaskInfo
/// (masks/mask_info.hpp).
template <class Q, class KV>
Status check_splash(const SplashAttentionArgs<Q, KV>& a, const MaskTiling& tiling,
                    Profile profile) {
  ATTNREF_RETURN_IF_ERROR(
      detail::check_splash_mask_fit(a, tiling.num_heads, {tiling.q_seq_len, tiling.kv_seq_len}));
  const SplashBlockSizes& b = a.block_sizes;
  if (tiling.block_q != b.block_q || tiling.block_kv != b.block_kv) {
    return Status(ErrorCode::kInvalidBlockSize, "",
                  "the MaskInfo was built for blocks ({0}, {1}) but block_sizes say ({2}, {3})",
                  "build the MaskInfo with (block_q, block_kv) of this call",
                  {tiling.block_q, tiling.block_kv, b.block_q, b.block_kv});
  }
  ATTNREF_RETURN_IF_ERROR(check_mask_blocks(a.q_seq_len(), a.kv_seq_len(), tiling.num_heads,
                                            tiling.block_q, tiling.block_kv, profile, a.sharding));
  ATTNREF_RETURN_IF_ERROR(detail::check_splash_inputs(a, profile));
  ATTNREF_RETURN_IF_ERROR(detail::check_splash_safety(a));
  return check_splash_metadata(a, tiling, profile);
}

/// Data tier (opt-in): NaN/Inf in q, k, v or sinks. Every query row and every key/value row is
/// read by some tile unless the mask empties its whole column, so all of them are scanned; a
/// kernel never reads segment ids as numbers. First finding in the order q, k, v, sinks.
/// Precondition: `check_splash(a, mask, profile).ok()`.
template <class Q, class KV>
Status check_splash_data(const SplashAttentionArgs<Q, KV>& a) {
  const auto scan = [](const auto& view, const char* name) {
    // O(elements): 2^40 heads of 0 rows are no loop at all.
    if (view.holds_no_elements()) return Status();
    return detail::check_finite_rows(
        view, view.extents[0], name,
        "a row the kernel reads holds NaN/Inf; look at the layer that produced it");
  };
  ATTNREF_RETURN_IF_ERROR(scan(a.q, "q"));
  ATTNREF_RETURN_IF_ERROR(scan(a.k, "k"));
  ATTNREF_RETURN_IF_ERROR(scan(a.v, "v"));
  return check_sink_values(a.sinks);
}

/// Backward checks, O(1): the forward checks, then S15 (backward blocks given) and S1 (no dq
/// blocks with the fused kernel), M3/M4 of the dq and dkv grids (JAX builds their MaskInfo at
/// construction), then S16..S19 (dkv), S16/S17/S20 (dq, unfused) and S21 — all under
/// `Profile::kJax`. Under `kReference` unset backward blocks default to the forward ones and only
/// positivity is checked.
template <class Q, class KV, class M>
Status check_splash_backward(const SplashAttentionArgs<Q, KV>& a, const M& mask, Profile profile) {
  ATTNREF_RETURN_IF_ERROR(check_splash(a, mask, profile));
  const SplashBlockSizes& b = a.block_sizes;
  const std::int64_t sq = a.q_seq_len();
  const std::int64_t skv = a.kv_seq_len();
  const std::int64_t heads = mask_num_heads(mask);
  if (profile == Profile::kJax) {
    if (b.use_fused_bwd_kernel && (b.block_q_dq || b.block_kv_dq)) {
      return Status(ErrorCode::kInvalidBlockSize, "S1",
                    "Block sizes for dq kernel are not needed with a fused kernel.",
                    "leave block_q_dq and block_kv_dq unset when use_fused_bwd_kernel is true");
    }
    if (!b.has_backward_blocks()) {
      return Status(ErrorCode::kMissingBackwardBlocks, "S15", "Need to specify backward blocks.",
                    "set block_q_dkv, block_kv_dkv, block_kv_dkv_compute and (unfused) "
                    "block_q_dq, block_kv_dq, or use SplashBlockSizes::get_default()");
    }
  }
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.q_dkv(), "block_q_dkv"));
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.kv_dkv(), "block_kv_dkv"));
  ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(b.kv_dkv_compute(), "block_kv_dkv_compute"));
  if (b.block_q_dq)
    ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(*b.block_q_dq, "block_q_dq"));
  if (b.block_kv_dq)
    ATTNREF_RETURN_IF_ERROR(detail::check_positive_block(*b.block_kv_dq, "block_kv_dq"));
  if (profile != Profile::kJax) return Status();
  const bool fused = b.use_fused_bwd_kernel;
  if (!fused) {
    ATTNREF_RETURN_IF_ERROR(
        check_mask_blocks(sq, skv, heads, *b.block_q_dq, *b.block_kv_dq, profile, a.sharding));
  }
  ATTNREF_RETURN_IF_ERROR(
      check_mask_blocks(sq, skv, heads, b.q_dkv(), b.kv_dkv(), profile, a.sharding));
  // dkv kernel first, as in JAX.
  auto too_large = [](std::int64_t bq, std::int64_t bkv, std::int64_t sq_, std::int64_t skv_) {
    if (bq > sq_) {
      return Status(ErrorCode::kBlockTooLarge, "S16",
                    "bq={0} should not be greater than q_seq_len={1}",
                    "use a q block no larger than the sequence", {bq, sq_});
    }
    if (bkv > skv_) {
      return Status(ErrorCode::kBlockTooLarge, "S17",
                    "bkv={0} should not be greater than kv_seq_len={1}",
                    "use a kv block no larger than the sequence", {bkv, skv_});
    }
    return Status();
  };
  ATTNREF_RETURN_IF_ERROR(too_large(b.q_dkv(), b.kv_dkv(), sq, skv));
  if (b.kv_dkv_compute() > b.kv_dkv()) {
    return Status(
        ErrorCode::kBlockTooLarge, "S18", "bkv_compute={0} should not be greater than bkv={1}",
        "block_kv_dkv_compute is a sub-block of block_kv_dkv", {b.kv_dkv_compute(), b.kv_dkv()});
  }
  if (b.kv_dkv() % b.kv_dkv_compute() != 0) {
    return Status(ErrorCode::kBlockNotDivisible, "S19",
                  "bkv={0} should be a multiple of bkv_compute={1}",
                  "pick block_kv_dkv_compute among the divisors of {0}: {k0}",
                  {b.kv_dkv(), b.kv_dkv_compute()});
  }
  if (!fused) {
    ATTNREF_RETURN_IF_ERROR(too_large(*b.block_q_dq, *b.block_kv_dq, sq, skv));
    if (*b.block_kv_dq % 128 != 0) {
      return Status(ErrorCode::kTilingRule, "S20", "bkv={0} must be a multiple of 128.",
                    "block_kv_dq must be a multiple of the TPU lane width 128", {*b.block_kv_dq});
    }
  }
  if (a.has_segment_ids() && b.q_dkv() % 128 != 0) {
    return Status(ErrorCode::kTilingRule, "S21", "block_q must be a multiple of 128",
                  "with segment ids JAX's dkv kernel needs block_q_dkv % 128 == 0; got {0}",
                  {b.q_dkv()});
  }
  return Status();
}

/// Shapes of the backward tensors (no JAX id; JAX derives them): out and dO `[Hq, Sq, Dv]`,
/// logsumexp `[Hq, Sq]`, dq `[Hq, Sq, Dqk]`, dk `[Hkv, Skv, Dqk]`, dv `[Hkv, Skv, Dv]`, and
/// dsinks `[Hq]` when sinks are given (an empty dsinks view skips that gradient).
template <class Q, class KV, class OutT, class GradQ, class GradKV>
Status check_splash_backward_tensors(
    const SplashAttentionArgs<Q, KV>& a, const TensorView<OutT, 3>& out,
    const TensorView<const float, 2>& logsumexp, const TensorView<OutT, 3>& dout,
    const TensorView<GradQ, 3>& dq, const TensorView<GradKV, 3>& dk,
    const TensorView<GradKV, 3>& dv, const TensorView<float, 1>& dsinks) {
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dqk = a.head_dim_qk();
  const std::int64_t hkv = a.num_kv_heads(), skv = a.kv_seq_len(), dvd = a.head_dim_v();
  auto expect3 = [](const std::array<std::int64_t, 3>& e, std::int64_t e0, std::int64_t e1,
                    std::int64_t e2, const char* name) {
    if (e[0] != e0 || e[1] != e1 || e[2] != e2) {
      return Status(ErrorCode::kShapeMismatch, "",
                    "{f} has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
                    "out/dout are [Hq, Sq, Dv], dq [Hq, Sq, Dqk], dk [Hkv, Skv, Dqk], dv [Hkv, "
                    "Skv, Dv]",
                    {e[0], e[1], e[2], e0, e1, e2}, {}, name);
    }
    return Status();
  };
  ATTNREF_RETURN_IF_ERROR(expect3(out.extents, hq, sq, dvd, "out"));
  ATTNREF_RETURN_IF_ERROR(expect3(dout.extents, hq, sq, dvd, "dout"));
  if (logsumexp.extents[0] != hq || logsumexp.extents[1] != sq) {
    return Status(ErrorCode::kShapeMismatch, "", "{f} has shape ({0}, {1}); expected ({2}, {3})",
                  "logsumexp is the forward residual [num_q_heads, q_seq_len]",
                  {logsumexp.extents[0], logsumexp.extents[1], hq, sq}, {}, "logsumexp");
  }
  ATTNREF_RETURN_IF_ERROR(expect3(dq.extents, hq, sq, dqk, "dq"));
  ATTNREF_RETURN_IF_ERROR(expect3(dk.extents, hkv, skv, dqk, "dk"));
  ATTNREF_RETURN_IF_ERROR(expect3(dv.extents, hkv, skv, dvd, "dv"));
  if (!dsinks.empty_view() && (!a.has_sinks() || dsinks.extents[0] != hq)) {
    return Status(ErrorCode::kSinksShape, "",
                  "dsinks has shape ({0},); expected ({1},) and sinks given (sinks: {2})",
                  "dsinks is [num_q_heads]; leave it empty when there are no sinks",
                  {dsinks.extents[0], hq, a.has_sinks() ? 1 : 0});
  }
  ATTNREF_RETURN_IF_ERROR(check_view(out, "out"));
  ATTNREF_RETURN_IF_ERROR(check_view(dout, "dout"));
  ATTNREF_RETURN_IF_ERROR(check_view(logsumexp, "logsumexp"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(dq, "dq"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(dk, "dk"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(dv, "dv"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(dsinks, "dsinks"));
  return Status();
}

/// The gradients a splash backward pass writes. `dsinks` is optional (empty view: not written).
template <class Q, class KV = Q>
struct SplashGradients {
  TensorView<Q, 3> dq;          ///< [num_q_heads, q_seq_len, head_dim_qk], q's dtype
  TensorView<KV, 3> dk;         ///< [num_kv_heads, kv_seq_len, head_dim_qk], k's dtype
  TensorView<KV, 3> dv;         ///< [num_kv_heads, kv_seq_len, head_dim_v], v's dtype
  TensorView<float, 1> dsinks;  ///< [num_q_heads], only with sinks
};

/// Checks that `out` is a `[num_q_heads, q_seq_len, head_dim_v]` view of distinct elements and
/// `logsumexp` (when not empty) a valid `[num_q_heads, q_seq_len]` one apart from `out`.
template <class Q, class KV>
Status check_splash_output(const SplashAttentionArgs<Q, KV>& a, const TensorView<Q, 3>& out,
                           const TensorView<float, 2>& logsumexp = {}) {
  ATTNREF_RETURN_IF_ERROR(
      detail::check_out_tensor(out, {a.num_q_heads(), a.q_seq_len(), a.head_dim_v()},
                               "{f} has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
                               "out is [num_q_heads, q_seq_len, head_dim_v]"));
  return detail::check_logsumexp_tensor(out, logsumexp, a.num_q_heads(), a.q_seq_len(),
                                        "logsumexp is [num_q_heads, q_seq_len]");
}

/// Checks the backward's tensors: out and dout `[Hq, Sq, Dv]`, logsumexp `[Hq, Sq]` (the
/// forward's residuals) and the gradients (see `check_splash_backward_tensors`).
template <class Q, class KV>
Status check_splash_backward_output(const SplashAttentionArgs<Q, KV>& a,
                                    const TensorView<const Q, 3>& out,
                                    const TensorView<const float, 2>& logsumexp,
                                    const TensorView<const Q, 3>& dout,
                                    const SplashGradients<Q, KV>& grads) {
  return check_splash_backward_tensors(a, out, logsumexp, dout, grads.dq, grads.dk, grads.dv,
                                       grads.dsinks);
}

/// Throwing wrapper of `check_splash`.
template <class Q, class KV, class M>
void validate_splash(const SplashAttentionArgs<Q, KV>& a, const M& mask, Profile profile) {
  throw_if_error(check_splash(a, mask, profile));
}

/// Throwing wrapper of `check_splash_backward`.
template <class Q, class KV, class M>
void validate_splash_backward(const SplashAttentionArgs<Q, KV>& a, const M& mask, Profile profile) {
  throw_if_error(check_splash_backward(a, mask, profile));
}

}  // namespace attnref
