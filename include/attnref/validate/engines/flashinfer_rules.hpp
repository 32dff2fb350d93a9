// SPDX-License-Identifier: Apache-2.0
/// @file flashinfer_rules.hpp
/// FlashInfer's batch decode and batch prefill kernels as rule tables, read from the source
/// flashinfer-python 0.7.2.post1 installs (its Python, and the C++ under flashinfer/data), with
/// the rows that changed before it keyed by the release that changed them (the repository's
/// history to fb28d7242b35, v0.6.18).
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr bool fi_group_since_0_7_2(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t g = engine_group_size(c);
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}
constexpr bool fi_group_since_0_6_18(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t g = engine_group_size(c);
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8;
}
constexpr bool fi_group_since_0_2(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t g = engine_group_size(c);
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 8;
}
constexpr bool fi_group_before_0_2(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t g = engine_group_size(c);
  return g == 1 || g == 2 || g == 4 || g == 8;
}
constexpr bool fi_equal_head_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) == c.head_dim;
}
constexpr bool fi_one_query_per_request(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.q_len <= 1;
}
constexpr bool fi_fa2_head_dim_vo_at_least_64(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) >= 64;
}
constexpr bool fi_head_dims_multiple_of_16(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim % 16 == 0 && value_head_dim(c) % 16 == 0;
}
constexpr bool fi_head_dims_multiple_of_64(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim % 64 == 0 && value_head_dim(c) % 64 == 0;
}
// Before v0.6.14, KernelTraits::IsInvalid's register budget, NUM_MMA_Q * (8 * NUM_MMA_D_VO +
// ...) >= 256: V's head_dim of 512 is 32 MMA tiles, 256 registers before the KV term. From
// v0.6.14 V above 256 is split into tiles of 256 across the warps (USE_VO_SPLIT).
constexpr bool fi_fa2_head_dim_vo_below_512(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) < 512;
}
constexpr bool fi_fa2_head_dim_vo_whole_tiles(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) <= 256 || value_head_dim(c) % 256 == 0;
}
// The fa2 kernels run (and so can go silently wrong) only for the configurations they take.
constexpr bool fi_fa2_runs(const EngineConfig& c, const EngineTarget& t) noexcept {
  const bool vo_taken = effective_version(t) < EngineVersion{0, 6, 14}
                            ? fi_fa2_head_dim_vo_below_512(c, t)
                            : fi_fa2_head_dim_vo_whole_tiles(c, t);
  return value_head_dim(c) >= 64 && vo_taken && !is_fp8(c.q_dtype);
}
constexpr bool fi_fa2_runs_on_tiles_of_16(const EngineConfig& c, const EngineTarget& t) noexcept {
  return fi_fa2_runs(c, t) && fi_head_dims_multiple_of_16(c, t);
}
constexpr bool fi_fa2_q_not_fp8(const EngineConfig& c, const EngineTarget&) noexcept {
  return !is_fp8(c.q_dtype);
}
constexpr bool fi_large_head(const EngineConfig& c) noexcept {
  return c.head_dim > 256 || value_head_dim(c) > 256;
}
constexpr bool fi_large_head_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !fi_large_head(c) || t.arch >= 100;
}
constexpr bool fi_large_head_fp8_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !is_fp8(c.kv_dtype) || fi_large_head_arch(c, t);
}
constexpr bool fi_fa3_arch(const EngineConfig&, const EngineTarget& t) noexcept {
  return t.arch == 90;
}
constexpr bool fi_fa3_head_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t d = c.head_dim;
  const std::int64_t dv = value_head_dim(c);
  if (d == dv) return d == 64 || d == 128 || d == 256;
  return d == 192 && dv == 128;
}
constexpr bool fi_fa3_fp8_kv_needs_fp8_q(const EngineConfig& c, const EngineTarget&) noexcept {
  return !is_fp8(c.kv_dtype) || is_fp8(c.q_dtype);
}
constexpr bool fi_fa3_fp8_q_soft_cap(const EngineConfig& c, const EngineTarget&) noexcept {
  return !(is_fp8(c.q_dtype) && c.soft_cap);
}

constexpr bool fi_not_alibi_and_soft_cap(const EngineConfig& c, const EngineTarget&) noexcept {
  return !(c.alibi && c.soft_cap);
}

}  // namespace detail

// --- both paths: DefaultAttention ------------------------------------------------------------

inline constexpr EngineRule kFlashInferAlibiSoftCapScale{
    "flashinfer.alibi_soft_cap_scale",
    Severity::kSilentlyWrong,
    detail::fi_not_alibi_and_soft_cap,
    "",
    "with both ALiBi and a soft cap, DefaultAttention scales the logits by sm_scale twice: "
    "c * tanh((s * sm_scale + bias) * sm_scale / c)",
    "sm_scale 1 with the scale folded into q, or a custom attention variant",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/variants.cuh "
    "DefaultAttention (LogitsTransform)"};

// --- batch decode, CUDA cores ---------------------------------------------------------------

inline constexpr EngineRule kFlashInferDecodeGroupSize{
    "flashinfer.decode.group_size",
    Severity::kRejects,
    detail::fi_group_since_0_7_2,
    "Unsupported group_size: {5}",
    "the CUDA-core decode kernel is compiled for 1, 2, 3, 4, 6, 8 or 16 query heads per KV head",
    "use_tensor_cores=True (the prefill kernels take any group size), or a KV head count that "
    "gives 1, 2, 3, 4, 6, 8 or 16 query heads per KV head",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE",
    {0, 7, 2}};

inline constexpr EngineRule kFlashInferDecodeGroupSizeV0_6_18{
    "flashinfer.decode.group_size",
    Severity::kRejects,
    detail::fi_group_since_0_6_18,
    "Unsupported group_size: {5}",
    "from v0.6.18 the CUDA-core decode kernel is compiled for 1, 2, 3, 4, 6 or 8 query heads per "
    "KV head (16 is in v0.7.2; the releases between were not read and are checked as v0.6.18)",
    "use_tensor_cores=True, FlashInfer v0.7.2 or later for a group of 16, or a KV head count "
    "that gives 1, 2, 3, 4, 6 or 8 query heads per KV head",
    "flashinfer-ai/flashinfer@fb28d7242b35 include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE",
    {0, 6, 18},
    {0, 7, 2}};

inline constexpr EngineRule kFlashInferDecodeGroupSizeV0_2{
    "flashinfer.decode.group_size",
    Severity::kRejects,
    detail::fi_group_since_0_2,
    "Unsupported group_size: {5}",
    "before v0.6.18 the CUDA-core decode kernel is compiled for 1, 2, 3, 4 or 8 query heads per "
    "KV head",
    "use_tensor_cores=True, FlashInfer v0.6.18 or later for a group of 6, or a KV head count "
    "that gives 1, 2, 3, 4 or 8 query heads per KV head",
    "flashinfer-ai/flashinfer@fb28d7242b35 include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE "
    "(v0.2.0 to v0.6.17)",
    {0, 2, 0},
    {0, 6, 18}};

inline constexpr EngineRule kFlashInferDecodeGroupSizeV0_1{
    "flashinfer.decode.group_size",
    Severity::kRejects,
    detail::fi_group_before_0_2,
    "Unsupported group_size: {5}",
    "before v0.2.0 the CUDA-core decode kernel is compiled for 1, 2, 4 or 8 query heads per KV "
    "head",
    "use_tensor_cores=True, a newer FlashInfer, or a KV head count that gives 1, 2, 4 or 8 query "
    "heads per KV head",
    "flashinfer-ai/flashinfer@fb28d7242b35 include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE "
    "(v0.1.6)",
    {},
    {0, 2, 0}};

inline constexpr EngineRule kFlashInferDecodeHeadsDivisible{
    "flashinfer.decode.heads_divisible",
    Severity::kSilentlyWrong,
    detail::heads_divide,
    "",
    "batch decode never checks that num_qo_heads ({0}) is a multiple of num_kv_heads ({1}): it "
    "runs with {5} query heads per KV head, so some query heads read the wrong KV head or are "
    "never written",
    "valid num_kv_heads for {0} query heads: {k0}",
    "flashinfer-ai/flashinfer@v0.7.2.post1 csrc/batch_decode.cu BatchDecodeWithPagedKVCachePlan "
    "(no check; only csrc/single_decode.cu has one)"};

inline constexpr EngineRule kFlashInferDecodeEqualHeadDims{
    "flashinfer.decode.head_dim_vo",
    Severity::kRejects,
    detail::fi_equal_head_dims,
    "CUDA cores template only supports equal head dim for QK and VO, please use tensor cores "
    "template for different head dim",
    "the CUDA-core decode kernel needs V's head_dim ({3}) equal to K's ({2})",
    "use_tensor_cores=True",
    "flashinfer-ai/flashinfer@v0.7.2.post1 csrc/batch_decode.cu BatchDecodeWithPagedKVCachePlan"};

inline constexpr EngineRule kFlashInferDecodeQueryLength{
    "flashinfer.decode.q_len",
    Severity::kRejects,
    detail::fi_one_query_per_request,
    "q implies q_len_per_req={7}, but the non-tensor-core decode kernel only supports "
    "q_len_per_req=1.",
    "the CUDA-core decode kernel takes one query token per request",
    "use_tensor_cores=True, or the prefill wrapper for more than one query token",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/decode.py "
    "BatchDecodeWithPagedKVCacheWrapper.run"};

inline constexpr EngineRule kFlashInferDecodeSinksDropped{
    "flashinfer.decode.sinks_ignored",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "sinks= is dropped on the CUDA-core decode path: the softmax runs without the sink logits",
    "backend='trtllm-gen' (sm100 family) applies sinks; or add the sink term yourself",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/decode.py "
    "BatchDecodeWithPagedKVCacheWrapper.run (its CUDA-core run arguments have no sinks)"};

// --- fa2 prefill kernels (also tensor-core decode) ----------------------------------------

inline constexpr EngineRule kFlashInferPrefillHeadsDivisible{
    "flashinfer.prefill.heads_divisible",
    Severity::kRejects,
    detail::heads_divide,
    "num_qo_heads {0} should be divisible by num_kv_heads {1}",
    "the prefill planner needs whole groups of query heads per KV head",
    "valid num_kv_heads for {0} query heads: {k0}",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/scheduler.cuh "
    "PrefillPlanImpl"};

inline constexpr EngineRule kFlashInferFa2HeadDimVoMin{
    "flashinfer.prefill.fa2_head_dim_min",
    Severity::kRejects,
    detail::fi_fa2_head_dim_vo_at_least_64,
    "FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…",
    "the fa2 kernel traits are invalid below 4 MMA tiles of V's head_dim (head_dim_vo {3} < 64)",
    "a head_dim of at least 64 (64, 128 and 256 are built ahead of time)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/prefill.cuh "
    "KernelTraits::IsInvalid"};

inline constexpr EngineRule kFlashInferFa2HeadDimVo512{
    "flashinfer.prefill.fa2_head_dim_512",
    Severity::kRejects,
    detail::fi_fa2_head_dim_vo_below_512,
    "FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…",
    "before v0.6.14 the fa2 kernel traits are invalid for V's head_dim {3}: its 32 or more MMA "
    "tiles fill the 256-register budget of KernelTraits::IsInvalid before the KV tiles are "
    "counted (the kernel refuses it when it runs; flashinfer#1997)",
    "FlashInfer v0.6.14 or later (it splits V's head across the warps), or a head_dim_vo of at "
    "most 256",
    "flashinfer-ai/flashinfer@fb28d7242b35 include/flashinfer/attention/prefill.cuh "
    "KernelTraits::IsInvalid before 5b3007412 (v0.6.14): NUM_MMA_Q * (8 * NUM_MMA_D_VO + 2 * "
    "sizeof(DTypeQKAccum) * NUM_MMA_KV) >= 256",
    {},
    {0, 6, 14}};

inline constexpr EngineRule kFlashInferFa2HeadDimVoTiles{
    "flashinfer.prefill.fa2_head_dim_vo_tiles",
    Severity::kFailsToBuild,
    detail::fi_fa2_head_dim_vo_whole_tiles,
    "static_assert(NUM_MMA_D_VO % NUM_MMA_D_VO_TILE == 0, \"NUM_MMA_D_VO must be divisible by "
    "NUM_MMA_D_VO_TILE\")",
    "the fa2 kernels split a V head_dim above 256 into tiles of 256: head_dim_vo {3} is not a "
    "whole number of them",
    "a head_dim_vo of at most 256, or 512",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/prefill.cuh KernelTraits "
    "(from 5b3007412, v0.6.14)",
    {0, 6, 14}};

inline constexpr EngineRule kFlashInferFa2HeadDimMultipleOf16{
    "flashinfer.prefill.head_dim_16",
    Severity::kSilentlyWrong,
    detail::fi_head_dims_multiple_of_16,
    "",
    "the prefill kernels tile head_dim by 16 and never check it: head dims {2} and {3} are cut "
    "to a multiple of 16 and the rest of each head is ignored",
    "a head_dim of 64, 128 or 256 (or 192 with head_dim_v 128)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/prefill.cuh "
    "NUM_MMA_D_QK = HEAD_DIM_QK / 16 (flashinfer#4299)",
    {},
    {},
    detail::fi_fa2_runs};

inline constexpr EngineRule kFlashInferFa2HeadDimMultipleOf64{
    "flashinfer.prefill.head_dim_64",
    Severity::kOutOfBounds,
    detail::fi_head_dims_multiple_of_64,
    "",
    "the prefill kernels never check head_dim: head dims {2} and {3}, multiples of 16 but not "
    "of 64, make an illegal memory access",
    "a head_dim of 64, 128 or 256 (or 192 with head_dim_v 128)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/prefill.cuh "
    "(flashinfer#4299)",
    {},
    {},
    detail::fi_fa2_runs_on_tiles_of_16};

inline constexpr EngineRule kFlashInferFa2Fp8Query{
    "flashinfer.prefill.fa2_fp8_q",
    Severity::kRejects,
    detail::fi_fa2_q_not_fp8,
    "fp8 tensor core is not supported in fa2 backend",
    "the fa2 kernels take fp8 K/V but not an fp8 query",
    "a float16 or bfloat16 query (fp8 K/V stays), or backend fa3 on sm90",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/jit/attention/modules.py "
    "gen_batch_prefill_module"};

inline constexpr EngineRule kFlashInferLargeHeadArch{
    "flashinfer.prefill.large_head_arch",
    Severity::kFailsToBuild,
    detail::fi_large_head_arch,
    "No supported CUDA architectures found for major versions [10, 11, 12].",
    "from v0.6.14, before v0.6.15, the fa2 kernels for a head_dim above 256 are built for sm100 "
    "and later only",
    "FlashInfer v0.6.15 or later (16-bit K/V from sm80), or an sm100-family GPU",
    "flashinfer-ai/flashinfer@5b3007412 flashinfer/jit/attention/modules.py "
    "_fa2_head_dim_nvcc_flags (v0.6.14; 5a73a36a7, v0.6.15, opened sm80 for 16-bit K/V)",
    {0, 6, 14},
    {0, 6, 15}};

inline constexpr EngineRule kFlashInferLargeHeadFp8Arch{
    "flashinfer.prefill.large_head_arch",
    Severity::kFailsToBuild,
    detail::fi_large_head_fp8_arch,
    "No supported CUDA architectures found for major versions [10, 11, 12].",
    "before v0.7.2, fp8 K/V with a head_dim above 256 is built for sm100 and later only",
    "16-bit K/V, FlashInfer v0.7.2 or later (fp8 from sm80), or an sm100-family GPU",
    "flashinfer-ai/flashinfer@fb28d7242b35 flashinfer/jit/attention/modules.py "
    "_fa2_head_dim_nvcc_flags (v0.6.15 to v0.6.18; v0.7.2 builds fp8 for sm80 and later)",
    {0, 6, 15},
    {0, 7, 2}};

inline constexpr EngineRule kFlashInferPrefillSinksDropped{
    "flashinfer.prefill.sinks_ignored",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "sinks= reaches paged_run but only backend trtllm-gen uses it: on fa2 and fa3 the softmax "
    "runs without the sink logits",
    "backend='trtllm-gen' (sm100 family), or add the sink term yourself",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/prefill.py paged_run"};

// --- fa3 prefill kernels (backend="fa3") ---------------------------------------------------

inline constexpr EngineRule kFlashInferFa3Arch{
    "flashinfer.prefill.fa3_arch",
    Severity::kFallsBack,
    detail::fi_fa3_arch,
    "",
    "the fa3 kernels exist for sm90a only; backend='auto' runs fa2 on this GPU",
    "backend fa2, or an sm90 GPU",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/utils.py is_sm90a_supported"};

inline constexpr EngineRule kFlashInferFa3HeadDims{
    "flashinfer.prefill.fa3_head_dim",
    Severity::kFailsToBuild,
    detail::fi_fa3_head_dims,
    "static_assert(HEAD_DIM_VO == 64 || HEAD_DIM_VO == 128 || HEAD_DIM_VO == 256)",
    "the fa3 kernels are instantiated for head dims (64, 64), (128, 128), (256, 256) and "
    "(192, 128) only; got ({2}, {3})",
    "backend fa2, or head dims (64, 64), (128, 128), (256, 256) or (192, 128)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 include/flashinfer/attention/hopper/prefill_sm90.cuh"};

inline constexpr EngineRule kFlashInferFa3Fp8KvNeedsFp8Query{
    "flashinfer.prefill.fa3_fp8_kv",
    Severity::kFallsBack,
    detail::fi_fa3_fp8_kv_needs_fp8_q,
    "",
    "fa3 takes fp8 K/V only with an fp8 query; backend='auto' runs fa2 instead",
    "an fp8 query with fp8 K/V, or backend fa2",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/utils.py is_fa3_backend_supported"};

inline constexpr EngineRule kFlashInferFa3AlibiDropped{
    "flashinfer.prefill.fa3_alibi_ignored",
    Severity::kSilentlyWrong,
    detail::no_alibi,
    "",
    "with backend='fa3' forced, paged_run and ragged_run never pass ALiBi slopes to the kernel",
    "backend fa2 (it applies ALiBi)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/prefill.py get_batch_prefill_module"};

inline constexpr EngineRule kFlashInferFa3Fp8SoftCapDropped{
    "flashinfer.prefill.fa3_fp8_soft_cap_ignored",
    Severity::kSilentlyWrong,
    detail::fi_fa3_fp8_q_soft_cap,
    "",
    "the fp8 fa3 variant has no logits_soft_cap parameter: the cap is not applied",
    "a 16-bit query (the fa3 16-bit variant applies the soft cap)",
    "flashinfer-ai/flashinfer@v0.7.2.post1 flashinfer/jit/attention/modules.py (fa3 fp8 "
    "variant)"};

/// The rules of each FlashInfer kernel.
inline constexpr const EngineRule* kFlashInferDecodeRules[] = {
    &kFlashInferDecodeGroupSize,      &kFlashInferDecodeGroupSizeV0_6_18,
    &kFlashInferDecodeGroupSizeV0_2,  &kFlashInferDecodeGroupSizeV0_1,
    &kFlashInferDecodeHeadsDivisible, &kFlashInferDecodeEqualHeadDims,
    &kFlashInferDecodeQueryLength,    &kFlashInferDecodeSinksDropped,
    &kFlashInferAlibiSoftCapScale,
};
inline constexpr const EngineRule* kFlashInferFa2Rules[] = {
    &kFlashInferPrefillHeadsDivisible,
    &kFlashInferFa2HeadDimVoMin,
    &kFlashInferFa2HeadDimVo512,
    &kFlashInferFa2HeadDimVoTiles,
    &kFlashInferFa2HeadDimMultipleOf16,
    &kFlashInferFa2HeadDimMultipleOf64,
    &kFlashInferFa2Fp8Query,
    &kFlashInferLargeHeadArch,
    &kFlashInferLargeHeadFp8Arch,
    &kFlashInferPrefillSinksDropped,
    &kFlashInferAlibiSoftCapScale,
};
inline constexpr const EngineRule* kFlashInferFa3Rules[] = {
    &kFlashInferPrefillHeadsDivisible, &kFlashInferFa3Arch,
    &kFlashInferFa3HeadDims,           &kFlashInferFa3Fp8KvNeedsFp8Query,
    &kFlashInferFa3AlibiDropped,       &kFlashInferFa3Fp8SoftCapDropped,
    &kFlashInferPrefillSinksDropped,
};

}  // namespace attnref
