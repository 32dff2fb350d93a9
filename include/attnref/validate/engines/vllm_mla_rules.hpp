// SPDX-License-Identifier: Apache-2.0
/// @file vllm_mla_rules.hpp
/// vLLM 0.33.0's MLA attention backends (FLASH_ATTN_MLA, FLASHMLA, CUTLASS_MLA, TRITON_MLA,
/// FLASHINFER_MLA) as rule tables: the selector's validate_configuration reasons, the
/// implementations' checks and CUTLASS_MLA's decode asserts, judged by running them
/// (tests/engines/vllm_judge.py). An MLA layer is stated as its decode over the latent cache:
/// one KV head, head_dim the latent plus its rotary dims (576 for DeepSeek-V3), head_dim_v the
/// latent (512). A configuration whose V head_dim equals K's is not MLA, and these backends refuse
/// it.
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"
#include "attnref/validate/engines/vllm_rules.hpp"

namespace attnref {
namespace detail {

constexpr bool vl_is_mla(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_mla_layer(c);
}
// MLACommonBackend.get_supported_head_sizes: latent plus rotary dims.
constexpr bool vl_mla_head_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim == 320 || c.head_dim == 512 || c.head_dim == 576;
}
// Every MLA backend stores the latent cache in a 16-bit dtype or fp8 e4m3, never e5m2.
constexpr bool vl_mla_kv_dtype(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.kv_dtype == c.q_dtype || is_16_bit_float(c.kv_dtype) ||
         c.kv_dtype == DType::kFloat8E4M3FN;
}
// vLLM takes a page that is a multiple of any kernel block size a backend lists.
template <std::int64_t kBlock>
constexpr bool vl_pages_of(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size > 0 && c.page_size % kBlock == 0;
}
constexpr bool vl_mla_16_bit_kv(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.kv_dtype == c.q_dtype || is_16_bit_float(c.kv_dtype);
}
constexpr bool vl_major_9_or_10(const EngineConfig&, const EngineTarget& t) noexcept {
  return t.arch / 10 == 9 || t.arch / 10 == 10;
}
constexpr bool vl_major_10(const EngineConfig&, const EngineTarget& t) noexcept {
  return t.arch / 10 == 10;
}
constexpr bool vl_hopper(const EngineConfig&, const EngineTarget& t) noexcept {
  return t.arch / 10 == 9;
}
constexpr bool vl_no_alibi_or_soft_cap(const EngineConfig& c, const EngineTarget&) noexcept {
  return !c.alibi && !c.soft_cap;
}
constexpr bool vl_triton_mla_fp8_arch(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.kv_dtype != DType::kFloat8E4M3FN || t.arch >= 89;
}
// CUTLASS_MLA's decode asserts DeepSeek's dims: a latent of 512 and 64 rotary dims.
constexpr bool vl_cutlass_mla_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim == 576 && value_head_dim(c) == 512;
}
constexpr bool vl_cutlass_mla_heads(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.num_q_heads <= 128;
}

}  // namespace detail

#define ATTNREF_VLLM_MLA_SOURCE(what) "vllm-project/vllm@v0.33.0 vllm/" what

// The rows every MLA backend shares but for its name; `prefix` is "vllm.flashmla" and so on.
#define ATTNREF_VLLM_MLA_COMMON_RULES(Name, prefix, file)                                  \
  inline constexpr EngineRule kVllm##Name##Dtype{                                          \
      prefix ".dtype",                                                                     \
      Severity::kRejects,                                                                  \
      detail::q_is_16_bit,                                                                 \
      "dtype not supported",                                                               \
      "vLLM's MLA backends run float16 and bfloat16 models",                               \
      "dtype float16 or bfloat16",                                                         \
      ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/" file " supported_dtypes")};     \
  inline constexpr EngineRule kVllm##Name##Mla{                                            \
      prefix ".mla",                                                                       \
      Severity::kRejects,                                                                  \
      detail::vl_is_mla,                                                                   \
      "non-MLA not supported",                                                             \
      "an MLA backend attends over a latent cache whose V is narrower than K (head_dim_v " \
      "{3} here equals head_dim {2})",                                                     \
      "the FLASH_ATTN, FLASHINFER or TRITON_ATTN backend for a model without MLA",         \
      ATTNREF_VLLM_MLA_SOURCE("v1/attention/backend.py validate_configuration (is_mla)")}; \
  inline constexpr EngineRule kVllm##Name##Sinks{                                          \
      prefix ".sinks",                                                                     \
      Severity::kRejects,                                                                  \
      detail::no_sinks,                                                                    \
      "attention sinks not supported",                                                     \
      "vLLM's MLA backends take no attention sinks",                                       \
      "no sinks; no vLLM MLA backend runs them",                                           \
      ATTNREF_VLLM_MLA_SOURCE("v1/attention/backend.py supports_sink")};                   \
  inline constexpr EngineRule kVllm##Name##SlidingWindow {                                 \
    prefix ".sliding_window", Severity::kRejects, detail::no_sliding_window,               \
        "sliding window not supported", "vLLM's MLA backends attend to the whole context", \
        "no sliding window",                                                               \
        ATTNREF_VLLM_MLA_SOURCE("v1/attention/backend.py supports_sliding_window")         \
  }

ATTNREF_VLLM_MLA_COMMON_RULES(FlashAttnMla, "vllm.flash_attn_mla", "flashattn_mla.py");
ATTNREF_VLLM_MLA_COMMON_RULES(FlashMla, "vllm.flashmla", "flashmla.py");
ATTNREF_VLLM_MLA_COMMON_RULES(CutlassMla, "vllm.cutlass_mla", "cutlass_mla.py");
ATTNREF_VLLM_MLA_COMMON_RULES(TritonMla, "vllm.triton_mla", "triton_mla.py");
ATTNREF_VLLM_MLA_COMMON_RULES(FlashInferMla, "vllm.flashinfer_mla", "flashinfer_mla.py");
#undef ATTNREF_VLLM_MLA_COMMON_RULES

// The latent cache's dtypes of every MLA backend but FLASH_ATTN_MLA, which has no fp8.
#define ATTNREF_VLLM_MLA_KV_DTYPE_RULE(Name, prefix, file)                                      \
  inline constexpr EngineRule kVllm##Name##KvDtype {                                            \
    prefix ".kv_dtype", Severity::kRejects, detail::vl_mla_kv_dtype,                            \
        "kv_cache_dtype not supported",                                                         \
        "vLLM's MLA backends store the latent cache in float16, bfloat16 or fp8 (e4m3)",        \
        "kv_cache_dtype 'auto' or fp8 (e4m3)",                                                  \
        ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/" file " supported_kv_cache_dtypes") \
  }

ATTNREF_VLLM_MLA_KV_DTYPE_RULE(FlashMla, "vllm.flashmla", "flashmla.py");
ATTNREF_VLLM_MLA_KV_DTYPE_RULE(CutlassMla, "vllm.cutlass_mla", "cutlass_mla.py");
ATTNREF_VLLM_MLA_KV_DTYPE_RULE(TritonMla, "vllm.triton_mla", "triton_mla.py");
ATTNREF_VLLM_MLA_KV_DTYPE_RULE(FlashInferMla, "vllm.flashinfer_mla", "flashinfer_mla.py");
#undef ATTNREF_VLLM_MLA_KV_DTYPE_RULE

// The head sizes of MLACommonBackend, which every MLA backend but TRITON_MLA keeps.
#define ATTNREF_VLLM_MLA_HEAD_SIZE_RULE(Name, prefix)                                             \
  inline constexpr EngineRule kVllm##Name##HeadSize {                                             \
    prefix ".head_size", Severity::kRejects, detail::vl_mla_head_size, "head_size not supported", \
        "the backend takes a latent plus rotary head_dim of 320, 512 or 576 ({2} here)",          \
        "head_dim 576 (a latent of 512 and 64 rotary dims), or the TRITON_MLA backend",           \
        ATTNREF_VLLM_MLA_SOURCE(                                                                  \
            "model_executor/layers/attention/mla_attention.py "                                   \
            "MLACommonBackend.get_supported_head_sizes")                                          \
  }

ATTNREF_VLLM_MLA_HEAD_SIZE_RULE(FlashAttnMla, "vllm.flash_attn_mla");
ATTNREF_VLLM_MLA_HEAD_SIZE_RULE(FlashMla, "vllm.flashmla");
ATTNREF_VLLM_MLA_HEAD_SIZE_RULE(CutlassMla, "vllm.cutlass_mla");
ATTNREF_VLLM_MLA_HEAD_SIZE_RULE(FlashInferMla, "vllm.flashinfer_mla");
#undef ATTNREF_VLLM_MLA_HEAD_SIZE_RULE

// Each implementation refuses ALiBi and a soft cap when vLLM builds it for a layer.
#define ATTNREF_VLLM_MLA_FEATURES_RULE(Name, prefix, impl, file)                        \
  inline constexpr EngineRule kVllm##Name##AlibiSoftCap {                               \
    prefix ".alibi_soft_cap", Severity::kRejects, detail::vl_no_alibi_or_soft_cap,      \
        impl                                                                            \
        " does not support one of the following: alibi_slopes, sliding_window, "        \
        "logits_soft_cap",                                                              \
        "vLLM's MLA implementations apply neither ALiBi nor a soft cap",                \
        "no ALiBi and no soft cap",                                                     \
        ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/" file " " impl ".__init__") \
  }

ATTNREF_VLLM_MLA_FEATURES_RULE(FlashAttnMla, "vllm.flash_attn_mla", "FlashAttnMLAImpl",
                               "flashattn_mla.py");
ATTNREF_VLLM_MLA_FEATURES_RULE(FlashMla, "vllm.flashmla", "FlashMLAImpl", "flashmla.py");
ATTNREF_VLLM_MLA_FEATURES_RULE(CutlassMla, "vllm.cutlass_mla", "CutlassMLAImpl", "cutlass_mla.py");
ATTNREF_VLLM_MLA_FEATURES_RULE(TritonMla, "vllm.triton_mla", "TritonMLAImpl", "triton_mla.py");
ATTNREF_VLLM_MLA_FEATURES_RULE(FlashInferMla, "vllm.flashinfer_mla", "FlashInferMLAImpl",
                               "flashinfer_mla.py");
#undef ATTNREF_VLLM_MLA_FEATURES_RULE

// --- FLASH_ATTN_MLA (FlashAttention 3 with MLA's head dims) -------------------------------

inline constexpr EngineRule kVllmFlashAttnMlaKvDtype{
    "vllm.flash_attn_mla.kv_dtype",
    Severity::kRejects,
    detail::vl_mla_16_bit_kv,
    "kv_cache_dtype not supported",
    "the FLASH_ATTN_MLA backend stores the latent cache in float16 or bfloat16 (no fp8)",
    "kv_cache_dtype 'auto', or FLASHMLA / TRITON_MLA for an fp8 latent cache",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashattn_mla.py "
                            "supported_kv_cache_dtypes")};

inline constexpr EngineRule kVllmFlashAttnMlaBlockSize{
    "vllm.flash_attn_mla.block_size",
    Severity::kRejects,
    detail::vl_pages_of<16>,
    "block_size not supported",
    "the FLASH_ATTN_MLA backend's pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashattn_mla.py "
                            "get_supported_kernel_block_sizes")};

inline constexpr EngineRule kVllmFlashAttnMlaArch{
    "vllm.flash_attn_mla.compute_capability",
    Severity::kRejects,
    detail::vl_hopper,
    "compute capability not supported",
    "the FLASH_ATTN_MLA backend runs on compute capability 9.x (sm90) only",
    "an sm90 GPU, or TRITON_MLA",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashattn_mla.py "
                            "supports_compute_capability")};

inline constexpr EngineRule kVllmFlashAttnMlaFa3{
    "vllm.flash_attn_mla.fa3",
    Severity::kRejects,
    detail::vl_hopper,
    "FlashAttention MLA not supported on this device",
    "MLA runs on FlashAttention 3, which vLLM has on sm90 only (FA4 lacks MLA's head dims)",
    "an sm90 GPU, or TRITON_MLA",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/fa_utils.py flash_attn_supports_mla")};

// --- FLASHMLA -----------------------------------------------------------------------------

inline constexpr EngineRule kVllmFlashMlaBlockSize{
    "vllm.flashmla.block_size",
    Severity::kRejects,
    detail::vl_pages_of<64>,
    "block_size not supported",
    "the FLASHMLA backend's kernel pages hold 64 tokens: a page must be a multiple of 64",
    "a page_size that is a multiple of 64",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashmla.py "
                            "get_supported_kernel_block_sizes")};

inline constexpr EngineRule kVllmFlashMlaArch{
    "vllm.flashmla.compute_capability",
    Severity::kRejects,
    detail::vl_major_9_or_10,
    "compute capability not supported",
    "the FLASHMLA backend is listed for compute capability 9.x and 10.x",
    "an sm90 GPU (dense FlashMLA), or the TRITON_MLA backend",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashmla.py "
                            "supports_compute_capability")};

inline constexpr EngineRule kVllmFlashMlaDenseHopper{
    "vllm.flashmla.dense_hopper",
    Severity::kRejects,
    detail::vl_hopper,
    "FlashMLA Dense is only supported on Hopper devices.",
    "dense (not sparse) FlashMLA runs on Hopper (sm90) only",
    "an sm90 GPU, or CUTLASS_MLA / FLASHINFER_MLA on sm100, or TRITON_MLA",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/ops/flashmla.py is_flashmla_dense_supported")};

// --- CUTLASS_MLA --------------------------------------------------------------------------

inline constexpr EngineRule kVllmCutlassMlaBlockSize{
    "vllm.cutlass_mla.block_size",
    Severity::kRejects,
    detail::vl_pages_of<128>,
    "block_size not supported",
    "the CUTLASS_MLA backend's kernel pages hold 128 tokens: a page must be a multiple of 128",
    "a page_size that is a multiple of 128",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/cutlass_mla.py "
                            "get_supported_kernel_block_sizes")};

inline constexpr EngineRule kVllmCutlassMlaArch{
    "vllm.cutlass_mla.compute_capability",
    Severity::kRejects,
    detail::vl_major_10,
    "compute capability not supported",
    "the CUTLASS_MLA backend runs on compute capability 10.x (sm100) only",
    "an sm100 GPU, or FLASHMLA on sm90, or TRITON_MLA",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/cutlass_mla.py "
                            "supports_compute_capability")};

inline constexpr EngineRule kVllmCutlassMlaDims{
    "vllm.cutlass_mla.head_dims",
    Severity::kRejects,
    detail::vl_cutlass_mla_dims,
    "",
    "the SM100 CUTLASS MLA decode asserts a latent of 512 and 64 rotary dims (head_dim 576, "
    "head_dim_v 512; {2} and {3} here); the assert has no message",
    "head_dim 576 with head_dim_v 512, or the TRITON_MLA backend",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/cutlass_mla.py "
                            "CutlassMLAImpl._sm100_cutlass_mla_decode")};

inline constexpr EngineRule kVllmCutlassMlaHeads{
    "vllm.cutlass_mla.q_heads",
    Severity::kRejects,
    detail::vl_cutlass_mla_heads,
    "H must be <= 128, but got {0}",
    "the SM100 CUTLASS MLA decode takes at most 128 query heads per GPU ({0} here)",
    "tensor parallelism that leaves at most 128 query heads per GPU",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/cutlass_mla.py "
                            "CutlassMLAImpl._sm100_cutlass_mla_decode"),
    {},
    {},
    detail::vl_cutlass_mla_dims};  // asserted after the head dims, if at all

// --- TRITON_MLA ---------------------------------------------------------------------------

inline constexpr EngineRule kVllmTritonMlaBlockSize{
    "vllm.triton_mla.block_size",
    Severity::kRejects,
    detail::vl_pages_of<16>,
    "block_size not supported",
    "the TRITON_MLA backend's pages hold a multiple of 16 tokens",
    "a page_size that is a multiple of 16",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/triton_mla.py supports_block_size")};

inline constexpr EngineRule kVllmTritonMlaFp8Arch{
    "vllm.triton_mla.fp8_kv_arch",
    Severity::kRejects,
    detail::vl_triton_mla_fp8_arch,
    "FP8 KV cache is not supported by the Triton MLA backend",
    "the Triton MLA kernel reads fp8 natively (fp8e4nv), which needs sm89 or newer; vLLM's "
    "message goes on to name the GPU",
    "kv_cache_dtype bfloat16, or an sm89+ GPU",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/triton_mla.py TritonMLAImpl.__init__"),
    {},
    {},
    detail::vl_no_alibi_or_soft_cap};  // raised after the ALiBi / soft-cap refusal, if at all

// --- FLASHINFER_MLA -----------------------------------------------------------------------

inline constexpr EngineRule kVllmFlashInferMlaBlockSize{
    "vllm.flashinfer_mla.block_size",
    Severity::kRejects,
    detail::vl_pages_of<32>,
    "block_size not supported",
    "the FLASHINFER_MLA backend's kernel pages hold 32 or 64 tokens: a page must be a multiple "
    "of 32",
    "a page_size that is a multiple of 32",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashinfer_mla.py "
                            "get_supported_kernel_block_sizes")};

inline constexpr EngineRule kVllmFlashInferMlaArch{
    "vllm.flashinfer_mla.compute_capability",
    Severity::kRejects,
    detail::vl_major_10,
    "compute capability not supported",
    "the FLASHINFER_MLA backend runs on compute capability 10.x (sm100) only",
    "an sm100 GPU, or FLASHMLA on sm90, or TRITON_MLA",
    ATTNREF_VLLM_MLA_SOURCE("v1/attention/backends/mla/flashinfer_mla.py "
                            "supports_compute_capability")};

#undef ATTNREF_VLLM_MLA_SOURCE

/// The rules of each MLA backend, in the order vLLM's selector checks them.
inline constexpr const EngineRule* kVllmFlashAttnMlaRules[] = {
    &kVllmFlashAttnMlaHeadSize,     &kVllmFlashAttnMlaDtype,         &kVllmFlashAttnMlaKvDtype,
    &kVllmFlashAttnMlaBlockSize,    &kVllmFlashAttnMlaMla,           &kVllmFlashAttnMlaSinks,
    &kVllmFlashAttnMlaArch,         &kVllmFlashAttnMlaSlidingWindow, &kVllmFlashAttnMlaFa3,
    &kVllmFlashAttnMlaAlibiSoftCap,
};
inline constexpr const EngineRule* kVllmFlashMlaRules[] = {
    &kVllmFlashMlaHeadSize,     &kVllmFlashMlaDtype,         &kVllmFlashMlaKvDtype,
    &kVllmFlashMlaBlockSize,    &kVllmFlashMlaMla,           &kVllmFlashMlaSinks,
    &kVllmFlashMlaArch,         &kVllmFlashMlaSlidingWindow, &kVllmFlashMlaDenseHopper,
    &kVllmFlashMlaAlibiSoftCap,
};
inline constexpr const EngineRule* kVllmCutlassMlaRules[] = {
    &kVllmCutlassMlaHeadSize,  &kVllmCutlassMlaDtype,         &kVllmCutlassMlaKvDtype,
    &kVllmCutlassMlaBlockSize, &kVllmCutlassMlaMla,           &kVllmCutlassMlaSinks,
    &kVllmCutlassMlaArch,      &kVllmCutlassMlaSlidingWindow, &kVllmCutlassMlaAlibiSoftCap,
    &kVllmCutlassMlaDims,      &kVllmCutlassMlaHeads,
};
inline constexpr const EngineRule* kVllmTritonMlaRules[] = {
    &kVllmTritonMlaDtype,        &kVllmTritonMlaKvDtype, &kVllmTritonMlaBlockSize,
    &kVllmTritonMlaMla,          &kVllmTritonMlaSinks,   &kVllmTritonMlaSlidingWindow,
    &kVllmTritonMlaAlibiSoftCap, &kVllmTritonMlaFp8Arch,
};
inline constexpr const EngineRule* kVllmFlashInferMlaRules[] = {
    &kVllmFlashInferMlaHeadSize,  &kVllmFlashInferMlaDtype,         &kVllmFlashInferMlaKvDtype,
    &kVllmFlashInferMlaBlockSize, &kVllmFlashInferMlaMla,           &kVllmFlashInferMlaSinks,
    &kVllmFlashInferMlaArch,      &kVllmFlashInferMlaSlidingWindow, &kVllmFlashInferMlaAlibiSoftCap,
};

}  // namespace attnref
