// SPDX-License-Identifier: Apache-2.0
/// @file vllm_rules.hpp
/// vLLM's paged_attention_v1/v2 CUDA kernels and its FLASH_ATTN, TRITON_ATTN and FLASHINFER
/// backends as rule tables (its MLA backends: vllm_mla_rules.hpp). The backends' rules from 0.33.0
/// on are vLLM 0.33.0's own Python checks (its selector's validate_configuration and the backends'
/// implementations), judged by running them (tests/engines/vllm_judge.py); the rows that end at
/// 0.33.0 were read from earlier vllm-project/vllm files (each names its commit); the CUDA-side
/// rows come from vllm-project/flash-attention at 617264c1c795 (the fork's sink limits) and csrc/.
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr bool vl_pa_head_size(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t d = c.head_dim;
  return d == 32 || d == 64 || d == 80 || d == 96 || d == 112 || d == 120 || d == 128 || d == 192 ||
         d == 256;
}
constexpr bool vl_pa_block_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size == 8 || c.page_size == 16 || c.page_size == 32;
}
constexpr bool vl_pa_q_dtype(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.q_dtype == DType::kFloat32 || is_16_bit_float(c.q_dtype);
}
constexpr bool vl_kv_same_or_fp8(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.kv_dtype == c.q_dtype || is_fp8(c.kv_dtype);
}
constexpr bool vl_equal_head_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) == c.head_dim;
}
constexpr bool vl_fa_head_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim % 8 == 0 && c.head_dim <= 256;
}
constexpr bool vl_fa_block_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size > 0 && c.page_size % 16 == 0;
}
constexpr bool vl_fa_fp8_kv_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.kv_dtype != DType::kFloat8E4M3FN || t.arch == 90;
}
constexpr bool vl_fa_not_e5m2(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.kv_dtype != DType::kFloat8E5M2;
}
constexpr bool vl_fa_sinks_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch == 90;
}
// The fork's FlashAttention 3 limits sinks; vLLM runs FA3 on sm90 only.
constexpr bool vl_fa_sinks_heads(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch != 90 || c.num_q_heads <= 64;
}
constexpr bool vl_fa_sinks_bf16(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch != 90 || c.q_dtype == DType::kBFloat16;
}

// vLLM 0.33.0's FlashAttention version for a layer (fa_utils.get_flash_attn_version with no
// vLLM config): FA3 on sm90, FA4 on sm100, FA2 elsewhere and with ALiBi; on sm90 FA4 for head
// sizes past 256; on sm100 FA4 keeps only head sizes up to 128, 192/128, and 256 on 128-token
// pages without sinks or soft cap. Each caller tells what it knows of the layer.
struct VllmLayerKnown {
  bool alibi;
  bool soft_cap;
  bool page_size;
};
constexpr int vl_fa_version(const EngineConfig& c, int arch, VllmLayerKnown known) noexcept {
  int v = arch == 90 ? 3 : arch == 100 ? 4 : 2;
  if (known.alibi && c.alibi) return 2;
  if (v == 3 && c.head_dim > 256) v = 4;
  if (v == 4 && arch == 100 && c.head_dim == 256 && value_head_dim(c) == 256) {
    const bool odd_pages = known.page_size && c.page_size % 128 != 0;
    return c.sinks || (known.soft_cap && c.soft_cap) || odd_pages ? 2 : 4;
  }
  if (v == 4 && arch == 100 && c.head_dim > 128 &&
      !(c.head_dim == 192 && value_head_dim(c) == 128)) {
    return 2;
  }
  return v;
}
// fa_utils.flash_attn_supports_kv_cache_dtype: fp8 (e4m3) K/V on FA3 or FA4-for-512 on sm90,
// or on FA4 on sm100.
constexpr bool vl_fa_fp8_supported(const EngineConfig& c, int arch, VllmLayerKnown k) noexcept {
  if (c.kv_dtype != DType::kFloat8E4M3FN) return false;
  const int v = vl_fa_version(c, arch, k);
  return (arch == 90 && (v == 3 || (v == 4 && c.head_dim == 512))) || (arch == 100 && v == 4);
}
constexpr bool vl_fa4_available(const EngineTarget& t) noexcept {
  return t.arch == 90 || t.arch == 100;
}
constexpr bool vl_fa_head_size_033(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.head_dim % 8 == 0 && (c.head_dim <= 256 || (vl_fa4_available(t) && c.head_dim <= 512));
}
constexpr bool vl_fa_kv_dtype_033(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.kv_dtype == c.q_dtype ||
         (c.kv_dtype == DType::kFloat8E4M3FN && (t.arch == 90 || t.arch == 100));
}
// The selector's combination check knows the page size, not ALiBi or the soft cap. It gives
// one reason, and sinks below sm90 come first.
constexpr bool vl_fa_fp8_combination(const EngineConfig& c, const EngineTarget& t) noexcept {
  if (c.sinks && t.arch < 90) return true;
  return !is_fp8(c.kv_dtype) || vl_fa_fp8_supported(c, t.arch, {false, false, true});
}
// The implementation's check knows ALiBi and the soft cap, not the page size; it runs only
// where the selector took fp8 K/V.
constexpr bool vl_fa_fp8_implementation(const EngineConfig& c, const EngineTarget& t) noexcept {
  if (!is_fp8(c.kv_dtype) || !vl_fa_kv_dtype_033(c, t)) return true;
  if (!vl_fa_fp8_supported(c, t.arch, {false, false, true})) return true;
  return vl_fa_fp8_supported(c, t.arch, {true, true, false});
}
constexpr bool vl_fa_sinks_033(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch == 90 || t.arch == 100;
}
constexpr bool vl_fa_sinks_capability(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch >= 90;
}
constexpr bool vl_fa_alibi_on_fa4(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.alibi || t.arch != 100;
}
constexpr bool vl_fi_head_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256 || c.head_dim == 512;
}
// Sinks run on TensorRT-LLM's kernels through FlashInfer: XQA decode on sm90 and sm12x,
// trtllm-gen on sm100 (their cubins are downloaded from NVIDIA's artifactory at first use).
constexpr bool vl_fi_sinks(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.sinks || t.arch == 90 || t.arch == 100 || t.arch == 120;
}
constexpr bool vl_tr_fp8_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !is_fp8(c.kv_dtype) || c.kv_dtype == c.q_dtype || t.arch >= 89;
}
constexpr bool vl_fa_alibi_on_fa3(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !c.alibi || t.arch != 90;
}
constexpr bool vl_tr_head_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim >= 32;
}
constexpr bool vl_tr_dtype(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.q_dtype == DType::kFloat32 || is_16_bit_float(c.q_dtype);
}
constexpr bool vl_causal(const EngineConfig& c, const EngineTarget&) noexcept { return c.causal; }
constexpr bool vl_tr_alibi_sinks_decode(const EngineConfig& c, const EngineTarget&) noexcept {
  return !(c.alibi && c.sinks) || c.q_len == 1;
}

}  // namespace detail

/// The vLLM release whose backend checks the rows from it on were judged against.
inline constexpr EngineVersion kVllm033{0, 33, 0};

// --- paged_attention_v1 / v2 --------------------------------------------------------------

inline constexpr EngineRule kVllmPagedHeadSize{
    "vllm.paged_attention.head_size",
    Severity::kRejects,
    detail::vl_pa_head_size,
    "Unsupported head size: {2}",
    "paged_attention is compiled for head sizes 32, 64, 80, 96, 112, 120, 128, 192 and 256",
    "a head_dim in 32, 64, 80, 96, 112, 120, 128, 192, 256, or the FLASH_ATTN backend",
    "vllm-project/vllm csrc/attention/paged_attention_v1.cu@03f861174cf6 and "
    "paged_attention_v2.cu@0e60ae8f paged_attention_v{1,2}_launcher"};

inline constexpr EngineRule kVllmPagedBlockSize{
    "vllm.paged_attention.block_size",
    Severity::kRejects,
    detail::vl_pa_block_size,
    "Unsupported block size: {4}",
    "paged_attention is compiled for pages of 8, 16 or 32 tokens",
    "a page_size of 8, 16 or 32",
    "vllm-project/vllm csrc/attention/paged_attention_v1.cu@03f861174cf6 "
    "CALL_V1_LAUNCHER_BLOCK_SIZE (v2: CALL_V2_LAUNCHER_BLOCK_SIZE)"};

inline constexpr EngineRule kVllmPagedQueryDtype{
    "vllm.paged_attention.q_dtype",
    Severity::kRejects,
    detail::vl_pa_q_dtype,
    "Unsupported input type of kv cache: {d6}",
    "paged_attention takes a float32, float16 or bfloat16 query (torch names the dtype its own "
    "way, e.g. Double for float64)",
    "a float32, float16 or bfloat16 query",
    "vllm-project/vllm@03476e5c1184 csrc/quantization/fp8/nvidia/quant_utils.cuh "
    "DISPATCH_BY_KV_CACHE_DTYPE"};

inline constexpr EngineRule kVllmPagedKvDtype{
    "vllm.paged_attention.kv_dtype",
    Severity::kRejects,
    detail::vl_kv_same_or_fp8,
    "",
    "K/V pages are read in the query's dtype (kv_cache_dtype 'auto') or as fp8 ('fp8', "
    "'fp8_e5m2'); no kv_cache_dtype names int8 pages",
    "K/V in the query's dtype or in fp8",
    "vllm-project/vllm@03476e5c1184 csrc/quantization/fp8/nvidia/quant_utils.cuh "
    "DISPATCH_BY_KV_CACHE_DTYPE"};

inline constexpr EngineRule kVllmPagedHeadDimV{
    "vllm.paged_attention.head_dim_v",
    Severity::kSilentlyWrong,
    detail::vl_equal_head_dims,
    "",
    "paged_attention reads V with the query's head_size ({2}); a V head_dim of {3} is read "
    "with the wrong extent",
    "a kernel that takes a separate V head_dim (FlashMLA, FlashInfer tensor-core decode)",
    "vllm-project/vllm csrc/attention/attention_kernels.cuh@04d1abd3 paged_attention_kernel"};

inline constexpr EngineRule kVllmPagedNoSlidingWindow{
    "vllm.paged_attention.sliding_window",
    Severity::kSilentlyWrong,
    detail::no_sliding_window,
    "",
    "paged_attention has no sliding-window parameter: it attends to the whole context",
    "the FLASH_ATTN or TRITON_ATTN backend (they take window_size)",
    "vllm-project/vllm vllm/attention/ops/paged_attn.py@5da3a322 forward_decode"};

inline constexpr EngineRule kVllmPagedNoSoftCap{
    "vllm.paged_attention.soft_cap",
    Severity::kSilentlyWrong,
    detail::no_soft_cap,
    "",
    "paged_attention has no soft-cap parameter: the logits are not capped",
    "the FLASH_ATTN, FLASHINFER or TRITON_ATTN backend (they take logits_soft_cap)",
    "vllm-project/vllm vllm/attention/ops/paged_attn.py@5da3a322 forward_decode"};

inline constexpr EngineRule kVllmPagedNoSinks{
    "vllm.paged_attention.sinks",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "paged_attention has no sinks parameter: the softmax runs without the sink logits",
    "the TRITON_ATTN backend, or FLASH_ATTN on sm90",
    "vllm-project/vllm vllm/attention/ops/paged_attn.py@5da3a322 forward_decode"};

// --- FLASH_ATTN backend -------------------------------------------------------------------

inline constexpr EngineRule kVllmFlashAttnHeadSize{
    "vllm.flash_attn.head_size",
    Severity::kRejects,
    detail::vl_fa_head_size,
    "head_size not supported",
    "the FLASH_ATTN backend takes head sizes that are multiples of 8 up to 256",
    "a head_dim that is a multiple of 8 and at most 256, or the TRITON_ATTN backend",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f supports_head_size",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnBlockSize{
    "vllm.flash_attn.block_size",
    Severity::kRejects,
    detail::vl_fa_block_size,
    "Block size must be a multiple of 16.",
    "the FLASH_ATTN backend's KV cache pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f get_kv_cache_shape",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnDtype{
    "vllm.flash_attn.dtype",
    Severity::kRejects,
    detail::q_is_16_bit,
    "dtype not supported",
    "the FLASH_ATTN backend runs float16 and bfloat16 models",
    "dtype float16 or bfloat16",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f supported_dtypes"};

inline constexpr EngineRule kVllmFlashAttnKvDtype{
    "vllm.flash_attn.kv_dtype",
    Severity::kRejects,
    detail::vl_kv_same_or_fp8,
    "kv_cache_dtype not supported",
    "the FLASH_ATTN backend stores K/V in the model's dtype or in fp8",
    "kv_cache_dtype 'auto' (the model's dtype) or fp8 on sm90",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f "
    "supports_kv_cache_dtype",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnFp8KvArch{
    "vllm.flash_attn.fp8_kv_arch",
    Severity::kRejects,
    detail::vl_fa_fp8_kv_arch,
    "FlashAttention does not support fp8 kv-cache on this device.",
    "fp8 K/V runs on FlashAttention 3, which vLLM uses on sm90 only",
    "kv_cache_dtype 'auto' on this GPU, or an sm90 GPU",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f "
    "FlashAttentionImpl.__init__ (flash_attn_supports_fp8)",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnFp8E5m2{
    "vllm.flash_attn.fp8_e5m2",
    Severity::kRejects,
    detail::vl_fa_not_e5m2,
    "Unrecognized FP8 dtype: fp8_e5m2",
    "fp8_e5m2 passes the backend's kv_cache_dtype check, then fails when the kernel's fp8 type "
    "is chosen",
    "kv_cache_dtype fp8 (e4m3)",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f "
    "get_fp8_dtype_for_flashattn",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnSinksArch{
    "vllm.flash_attn.sinks_arch",
    Severity::kRejects,
    detail::vl_fa_sinks_arch,
    "Sinks are only supported in FlashAttention 3",
    "sinks run on FlashAttention 3, which vLLM uses on sm90 only",
    "the TRITON_ATTN backend (it takes sinks on any GPU), or an sm90 GPU",
    "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@5704f34f "
    "FlashAttentionImpl.__init__",
    {},
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnSinksHeads{
    "vllm.flash_attn.sinks_q_heads",
    Severity::kRejects,
    detail::vl_fa_sinks_heads,
    "We only support query heads <= 64 with S aux",
    "the fork's FlashAttention 3 takes sinks for at most 64 query heads per GPU ({0} here)",
    "tensor parallelism that leaves at most 64 query heads per GPU, or the TRITON_ATTN backend",
    "vllm-project/flash-attention@617264c1c795 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kVllmFlashAttnSinksBf16{
    "vllm.flash_attn.sinks_bf16",
    Severity::kRejects,
    detail::vl_fa_sinks_bf16,
    "We only support bf16 dtype for S aux.",
    "the fork's FlashAttention 3 takes sinks with a bfloat16 model only",
    "dtype bfloat16, or the TRITON_ATTN backend",
    "vllm-project/flash-attention@617264c1c795 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kVllmFlashAttnAlibiFa2{
    "vllm.flash_attn.alibi_fa2",
    Severity::kFallsBack,
    detail::vl_fa_alibi_on_fa3,
    "Cannot use FA version 3 with ALiBi, defaulting to FA version 2.",
    "FlashAttention 3 has no ALiBi: vLLM runs FlashAttention 2 on this sm90 GPU",
    "nothing to change for correctness; FA2 is the slower kernel on sm90",
    "vllm-project/vllm vllm/v1/attention/backends/fa_utils.py@7283494f get_flash_attn_version"};

// FLASH_ATTN from vLLM 0.33.0: the selector's reasons and the implementation's checks.
#define ATTNREF_VLLM_033_SOURCE(what) "vllm-project/vllm@v0.33.0 vllm/v1/attention/" what

inline constexpr EngineRule kVllmFlashAttnHeadSize033{
    "vllm.flash_attn.head_size",
    Severity::kRejects,
    detail::vl_fa_head_size_033,
    "head_size not supported",
    "the FLASH_ATTN backend takes head sizes that are multiples of 8 up to 256, and up to 512 "
    "where vLLM has FlashAttention 4 (sm90, sm100)",
    "a head_dim that is a multiple of 8 and at most 256 (512 on sm90 and sm100), or the "
    "TRITON_ATTN backend",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py FlashAttentionBackend.supports_head_size"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnBlockSize033{
    "vllm.flash_attn.block_size",
    Severity::kRejects,
    detail::vl_fa_block_size,
    "block_size not supported",
    "the FLASH_ATTN backend's KV cache pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    ATTNREF_VLLM_033_SOURCE("backend.py supports_block_size (MultipleOf(16))"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnKvDtype033{
    "vllm.flash_attn.kv_dtype",
    Severity::kRejects,
    detail::vl_fa_kv_dtype_033,
    "kv_cache_dtype not supported",
    "the FLASH_ATTN backend stores K/V in the model's dtype, or in fp8 (e4m3) where it runs "
    "FlashAttention 3 or 4 (sm90, sm100); never in fp8_e5m2",
    "kv_cache_dtype 'auto' (the model's dtype), or fp8 on sm90 or sm100",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py supports_kv_cache_dtype"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnFp8Combination{
    "vllm.flash_attn.fp8_kv",
    Severity::kRejects,
    detail::vl_fa_fp8_combination,
    "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100",
    "fp8 K/V needs the FlashAttention version vLLM picks for this head_dim ({2}) and page size "
    "to read fp8: FA3 on sm90 (head_dim up to 256, or 512 on FA4), FA4 on sm100 (head_dim up to "
    "128, or 256 on pages of a multiple of 128 tokens without sinks)",
    "kv_cache_dtype 'auto', or a head_dim and page size FA3/FA4 take",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py supports_combination"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnFp8Layer{
    "vllm.flash_attn.fp8_kv_layer",
    Severity::kRejects,
    detail::vl_fa_fp8_implementation,
    "FlashAttention does not support fp8 kv-cache on this device.",
    "the layer's ALiBi or soft cap makes vLLM pick FlashAttention 2, which cannot read fp8 K/V "
    "(the selector, which does not see them, took the backend)",
    "kv_cache_dtype 'auto', or drop ALiBi / the soft cap, or the TRITON_ATTN backend",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py FlashAttentionImpl.__init__"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnSinks033{
    "vllm.flash_attn.sinks",
    Severity::kRejects,
    detail::vl_fa_sinks_033,
    "attention sinks not supported",
    "sinks run on FlashAttention 3 or 4, which vLLM picks on sm90 and sm100 only",
    "the TRITON_ATTN backend (it takes sinks on any GPU), or an sm90 or sm100 GPU",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py supports_sink (flash_attn_supports_sinks)"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnSinksCapability{
    "vllm.flash_attn.sinks_compute_capability",
    Severity::kRejects,
    detail::vl_fa_sinks_capability,
    "sink not supported on compute capability < 9.0",
    "the FLASH_ATTN backend refuses sinks below compute capability 9.0",
    "the TRITON_ATTN backend, or an sm90 or sm100 GPU",
    ATTNREF_VLLM_033_SOURCE("backends/flash_attn.py supports_combination"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnAlibiFa4{
    "vllm.flash_attn.alibi_fa4",
    Severity::kFallsBack,
    detail::vl_fa_alibi_on_fa4,
    "Cannot use FA version 4 with ALiBi, defaulting to FA version 2.",
    "FlashAttention 4 has no ALiBi: vLLM runs FlashAttention 2 on this sm100 GPU",
    "nothing to change for correctness; FA2 is the slower kernel on sm100",
    ATTNREF_VLLM_033_SOURCE("backends/fa_utils.py get_flash_attn_version"),
    kVllm033};

inline constexpr EngineRule kVllmFlashAttnMla{
    "vllm.flash_attn.mla",
    Severity::kRejects,
    detail::vl_equal_head_dims,
    "MLA not supported",
    "the FLASH_ATTN backend is not an MLA backend: V's head_dim ({3}) must be K's ({2})",
    "an MLA backend (FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA, TRITON_MLA) for a V narrower than K",
    ATTNREF_VLLM_033_SOURCE("backend.py validate_configuration (is_mla)"),
    kVllm033};

// --- TRITON_ATTN backend ------------------------------------------------------------------

inline constexpr EngineRule kVllmTritonAttnHeadSize{
    "vllm.triton_attn.head_size",
    Severity::kRejects,
    detail::vl_tr_head_size,
    "head_size not supported",
    "the TRITON_ATTN backend takes head sizes of 32 and more (the kernel pads them to a power of "
    "two)",
    "a head_dim of at least 32",
    "vllm-project/vllm vllm/v1/attention/backends/triton_attn.py@001ceb3e supports_head_size"};

inline constexpr EngineRule kVllmTritonAttnBlockSize{
    "vllm.triton_attn.block_size",
    Severity::kRejects,
    detail::vl_fa_block_size,
    "Block size must be a multiple of 16.",
    "the TRITON_ATTN backend's KV cache pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    "vllm-project/vllm vllm/v1/attention/backends/triton_attn.py@001ceb3e get_kv_cache_shape",
    {},
    kVllm033};

inline constexpr EngineRule kVllmTritonAttnDtype{
    "vllm.triton_attn.dtype",
    Severity::kRejects,
    detail::vl_tr_dtype,
    "dtype not supported",
    "the TRITON_ATTN backend runs float16, bfloat16 and float32 models",
    "dtype float16, bfloat16 or float32",
    "vllm-project/vllm vllm/v1/attention/backends/triton_attn.py@001ceb3e supported_dtypes"};

inline constexpr EngineRule kVllmTritonAttnKvDtype{
    "vllm.triton_attn.kv_dtype",
    Severity::kRejects,
    detail::vl_kv_same_or_fp8,
    "kv_cache_dtype not supported",
    "the TRITON_ATTN backend stores K/V in the model's dtype or in fp8",
    "kv_cache_dtype 'auto' (the model's dtype) or fp8",
    "vllm-project/vllm vllm/v1/attention/backends/triton_attn.py@001ceb3e "
    "supported_kv_cache_dtypes"};

inline constexpr EngineRule kVllmTritonAttnHeadDimV{
    "vllm.triton_attn.head_dim_v",
    Severity::kRejects,
    detail::vl_equal_head_dims,
    "MLA not supported",
    "the TRITON_ATTN backend is not an MLA backend: V's head_dim ({3}) must be K's ({2})",
    "an MLA backend for a V narrower than K",
    "vllm-project/vllm vllm/v1/attention/backend.py@e379cf37 validate_configuration"};

inline constexpr EngineRule kVllmTritonAttnCausal{
    "vllm.triton_attn.causal",
    Severity::kRejects,
    detail::vl_causal,
    "Encoder self-attention is not implemented for TritonAttentionImpl",
    "the TRITON_ATTN backend runs causal (decoder) attention only; its kernel asserts causal",
    "a causal configuration, or the FLASH_ATTN backend for encoder attention",
    "vllm-project/vllm vllm/v1/attention/backends/triton_attn.py@001ceb3e "
    "TritonAttentionImpl.__init__",
    {},
    kVllm033};

inline constexpr EngineRule kVllmTritonAttnBlockSize033{
    "vllm.triton_attn.block_size",
    Severity::kRejects,
    detail::vl_fa_block_size,
    "block_size not supported",
    "the TRITON_ATTN backend's KV cache pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    ATTNREF_VLLM_033_SOURCE("backends/triton_attn.py supports_block_size"),
    kVllm033};

inline constexpr EngineRule kVllmTritonAttnFp8Arch{
    "vllm.triton_attn.fp8_kv_arch",
    Severity::kRejects,
    detail::vl_tr_fp8_arch,
    "FP8 KV cache is not supported by the Triton attention backend",
    "the Triton kernel reads fp8 K/V natively (fp8e4nv), which needs sm89 or newer; vLLM's "
    "message goes on to name the GPU",
    "kv_cache_dtype bfloat16 (or float16), or an sm89+ GPU",
    ATTNREF_VLLM_033_SOURCE("backends/triton_attn.py TritonAttentionImpl.__init__"),
    kVllm033};

inline constexpr EngineRule kVllmTritonAttnHeads{
    "vllm.triton_attn.heads",
    Severity::kSilentlyWrong,
    detail::heads_divide,
    "",
    "the kernel computes num_q_heads // num_kv_heads = {5} query heads per KV head and never "
    "checks that it divides: the query heads past num_kv_heads x {5} are never written (vLLM's "
    "Attention layer refuses such a model; a direct caller of the kernel or of "
    "TritonAttentionImpl gets no check)",
    "valid num_kv_heads for {0} query heads: {k0}",
    ATTNREF_VLLM_033_SOURCE("ops/triton_unified_attention.py unified_attention "
                            "(num_queries_per_kv; run by tests/engines/triton_judge.py)")};

inline constexpr EngineRule kVllmTritonAttnAlibiSinks{
    "vllm.triton_attn.alibi_sinks",
    Severity::kSilentlyWrong,
    detail::vl_tr_alibi_sinks_decode,
    "",
    "the kernel measures ALiBi distances from a chunk's first query (slope * (key_pos - "
    "context_len)), not from each query: the softmax cancels that per-row offset, but a sink's "
    "logit is not offset, so with {7} query tokens per request rows after the first weigh the "
    "sink wrongly (chunked prefill and speculative decoding alike)",
    "query tokens one at a time (q_len 1), or drop the sinks or ALiBi",
    ATTNREF_VLLM_033_SOURCE("ops/triton_attention_helpers.py apply_alibi_to_score (run by "
                            "tests/engines/triton_judge.py)")};

// --- FLASHINFER backend (vLLM 0.33.0) ---------------------------------------------------

inline constexpr EngineRule kVllmFlashInferHeadSize{
    "vllm.flashinfer.head_size",
    Severity::kRejects,
    detail::vl_fi_head_size,
    "head_size not supported",
    "the FLASHINFER backend takes head sizes 64, 128, 256 and 512",
    "a head_dim of 64, 128, 256 or 512, or the TRITON_ATTN backend",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferBackend.get_supported_head_sizes"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferDtype{
    "vllm.flashinfer.dtype",
    Severity::kRejects,
    detail::q_is_16_bit,
    "dtype not supported",
    "the FLASHINFER backend runs float16 and bfloat16 models",
    "dtype float16 or bfloat16",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferBackend.supported_dtypes"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferKvDtype{
    "vllm.flashinfer.kv_dtype",
    Severity::kRejects,
    detail::vl_kv_same_or_fp8,
    "kv_cache_dtype not supported",
    "the FLASHINFER backend stores K/V in the model's dtype or in fp8 (e4m3 or e5m2)",
    "kv_cache_dtype 'auto', fp8 or fp8_e5m2",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferBackend.supported_kv_cache_dtypes"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferBlockSize{
    "vllm.flashinfer.block_size",
    Severity::kRejects,
    detail::vl_fa_block_size,
    "block_size not supported",
    "the FLASHINFER backend's kernel pages hold 16, 32 or 64 tokens: a page must be a multiple "
    "of 16",
    "a page_size that is a multiple of 16",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py get_supported_kernel_block_sizes"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferSinks{
    "vllm.flashinfer.sinks",
    Severity::kRejects,
    detail::vl_fi_sinks,
    "attention sinks not supported",
    "the FLASHINFER backend takes sinks through TensorRT-LLM's kernels: XQA decode on sm90 and "
    "sm120, trtllm-gen on sm100",
    "the TRITON_ATTN backend (it takes sinks on any GPU), or an sm90, sm100 or sm120 GPU",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferBackend.supports_sink"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferCausal{
    "vllm.flashinfer.causal",
    Severity::kRejects,
    detail::vl_causal,
    "Encoder self-attention and encoder/decoder cross-attention are not implemented for "
    "FlashInferImpl",
    "the FLASHINFER backend runs decoder (causal) attention only",
    "a causal configuration, or the FLASH_ATTN backend for encoder attention",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferImpl.__init__"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferMla{
    "vllm.flashinfer.mla",
    Severity::kRejects,
    detail::vl_equal_head_dims,
    "MLA not supported",
    "the FLASHINFER backend is not an MLA backend: V's head_dim ({3}) must be K's ({2})",
    "the FLASHINFER_MLA backend (sm100) or another MLA backend for a V narrower than K",
    ATTNREF_VLLM_033_SOURCE("backend.py validate_configuration (is_mla)"),
    kVllm033};

inline constexpr EngineRule kVllmFlashInferAlibi{
    "vllm.flashinfer.alibi",
    Severity::kSilentlyWrong,
    detail::no_alibi,
    "",
    "FlashInferImpl keeps the layer's ALiBi slopes but never passes them to FlashInfer's "
    "wrappers: the logits get no ALiBi bias",
    "the TRITON_ATTN or FLASH_ATTN backend (they apply ALiBi)",
    ATTNREF_VLLM_033_SOURCE("backends/flashinfer.py FlashInferImpl (self.alibi_slopes is set "
                            "and never read)"),
    kVllm033};

/// The rules of each vLLM kernel (v1 and v2 share theirs).
inline constexpr const EngineRule* kVllmPagedAttentionRules[] = {
    &kVllmPagedHeadSize, &kVllmPagedBlockSize,       &kVllmPagedQueryDtype, &kVllmPagedKvDtype,
    &kVllmPagedHeadDimV, &kVllmPagedNoSlidingWindow, &kVllmPagedNoSoftCap,  &kVllmPagedNoSinks,
};
inline constexpr const EngineRule* kVllmFlashAttnRules[] = {
    &kVllmFlashAttnHeadSize,   &kVllmFlashAttnHeadSize033,
    &kVllmFlashAttnBlockSize,  &kVllmFlashAttnBlockSize033,
    &kVllmFlashAttnDtype,      &kVllmFlashAttnKvDtype,
    &kVllmFlashAttnKvDtype033, &kVllmFlashAttnFp8KvArch,
    &kVllmFlashAttnFp8E5m2,    &kVllmFlashAttnFp8Combination,
    &kVllmFlashAttnFp8Layer,   &kVllmFlashAttnSinksArch,
    &kVllmFlashAttnSinks033,   &kVllmFlashAttnSinksCapability,
    &kVllmFlashAttnSinksHeads, &kVllmFlashAttnSinksBf16,
    &kVllmFlashAttnAlibiFa2,   &kVllmFlashAttnAlibiFa4,
    &kVllmFlashAttnMla,
};
inline constexpr const EngineRule* kVllmTritonAttnRules[] = {
    &kVllmTritonAttnHeadSize,   &kVllmTritonAttnBlockSize, &kVllmTritonAttnBlockSize033,
    &kVllmTritonAttnDtype,      &kVllmTritonAttnKvDtype,   &kVllmTritonAttnFp8Arch,
    &kVllmTritonAttnHeadDimV,   &kVllmTritonAttnCausal,    &kVllmTritonAttnHeads,
    &kVllmTritonAttnAlibiSinks,
};
inline constexpr const EngineRule* kVllmFlashInferRules[] = {
    &kVllmFlashInferHeadSize,  &kVllmFlashInferDtype, &kVllmFlashInferKvDtype,
    &kVllmFlashInferBlockSize, &kVllmFlashInferSinks, &kVllmFlashInferCausal,
    &kVllmFlashInferMla,       &kVllmFlashInferAlibi,
};

#undef ATTNREF_VLLM_033_SOURCE

}  // namespace attnref
