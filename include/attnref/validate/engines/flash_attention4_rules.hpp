// SPDX-License-Identifier: Apache-2.0
/// @file flash_attention4_rules.hpp
/// FlashAttention-4 (the CuTe DSL forward, flash_attn/cute) as a rule table: the copy vLLM 0.33.0
/// ships (vllm/vllm_flash_attn/cute), called as vLLM's `flash_attn_varlen_func(fa_version=4)`
/// calls it for FLASH_ATTN on sm100, with one split. The rules are the Python asserts of that
/// wrapper, of cute/interface.py `_flash_attn_fwd` and of the kernel classes' constructors, all
/// of which run before anything is compiled; tests/engines/fa4_judge.py runs them. Its version
/// is vLLM's. On sm90 the wrapper sends fp8 e4m3 K/V with a 16-bit query down FA4's
/// fp8_kv_dequant path. The kernel takes a window, a soft cap and learnable sinks; the wrapper
/// refuses ALiBi slopes.
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr int fa4_arch_family(const EngineTarget& t) noexcept { return t.arch / 10; }
// 16 / v.element_size(): heads load in 16-byte vectors.
constexpr std::int64_t fa4_alignment(const EngineConfig& c) noexcept {
  return is_fp8(c.kv_dtype) ? 16 : 8;
}
// vLLM's wrapper sets fp8_kv_dequant for e4m3 K on a compute capability 9.x GPU.
constexpr bool fa4_fp8_kv_dequant(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.kv_dtype == DType::kFloat8E4M3FN && fa4_arch_family(t) == 9;
}
constexpr bool fa4_not_fp8_kv_dequant(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !fa4_fp8_kv_dequant(c, t);
}
constexpr bool fa4_kv_dtype_supported(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_16_bit_float(c.kv_dtype) || is_fp8(c.kv_dtype);
}
constexpr bool fa4_dims_aligned(const EngineConfig& c) noexcept {
  return c.head_dim % fa4_alignment(c) == 0 && value_head_dim(c) % fa4_alignment(c) == 0;
}
// _validate_head_dims on sm90: 8..512 for both.
constexpr bool fa4_head_dims_sm90(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t d = c.head_dim, dv = value_head_dim(c);
  return d >= 8 && d <= 512 && dv >= 8 && dv <= 512 && fa4_dims_aligned(c);
}
// _validate_head_dims on sm100/sm110: up to 128, or DeepSeek's (192, 128), (64 or 512, 512)
// for absorbed MLA, or the dedicated (256, 256) kernel.
constexpr bool fa4_head_dims_sm100(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t d = c.head_dim, dv = value_head_dim(c);
  const bool standard = d >= 8 && d <= 128 && dv >= 8 && dv <= 128;
  const bool deepseek = d == 192 && dv == 128;
  const bool mla_absorbed = (d == 64 || d == dv) && dv == 512;
  const bool hd256 = d == 256 && dv == 256;
  return (standard || deepseek || mla_absorbed || hd256) && fa4_dims_aligned(c);
}
constexpr bool fa4_on_sm90_16_bit(const EngineConfig& c, const EngineTarget& t) noexcept {
  return fa4_arch_family(t) == 9 && !is_fp8(c.kv_dtype);
}
constexpr bool fa4_on_sm90_fp8(const EngineConfig& c, const EngineTarget& t) noexcept {
  return fa4_arch_family(t) == 9 && is_fp8(c.kv_dtype);
}
constexpr bool fa4_on_sm100_16_bit(const EngineConfig& c, const EngineTarget& t) noexcept {
  return (fa4_arch_family(t) == 10 || fa4_arch_family(t) == 11) && !is_fp8(c.kv_dtype);
}
constexpr bool fa4_on_sm100_fp8(const EngineConfig& c, const EngineTarget& t) noexcept {
  return (fa4_arch_family(t) == 10 || fa4_arch_family(t) == 11) && is_fp8(c.kv_dtype);
}
constexpr bool fa4_fp8_needs_sm100(const EngineConfig& c, const EngineTarget& t) noexcept {
  return !is_fp8(c.kv_dtype) || fa4_arch_family(t) == 10;
}
constexpr bool fa4_paged(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size != 0;
}
constexpr bool fa4_equal_head_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) == c.head_dim;
}
constexpr bool fa4_paged_not_on(const EngineConfig& c, const EngineTarget& t, int family) noexcept {
  return c.page_size == 0 || fa4_arch_family(t) != family;
}
constexpr bool fa4_paged_not_on_sm80(const EngineConfig& c, const EngineTarget& t) noexcept {
  return fa4_paged_not_on(c, t, 8);
}
constexpr bool fa4_paged_not_on_sm120(const EngineConfig& c, const EngineTarget& t) noexcept {
  return fa4_paged_not_on(c, t, 12);
}
// The key tile the kernel picks (_get_fwd_config: 128 x 128 on sm100, tile_size_fwd_sm90's
// choice by head_dim on sm90); a page of another size is read with cp.async instead of TMA.
constexpr std::int64_t fa4_tile_n(const EngineConfig& c, const EngineTarget& t) noexcept {
  if (fa4_arch_family(t) != 9) return 128;
  const bool local = c.sliding_window > 0;
  const std::int64_t d = c.head_dim;
  if (d <= 64 || (d > 96 && d <= 128)) return 128;
  if (d <= 96) return c.causal || local ? 128 : 144;
  if (d <= 192) return local ? 96 : (value_head_dim(c) <= 128 ? 128 : 112);
  if (d <= 256) return local ? 64 : 80;
  return 64;
}
constexpr bool fa4_dequant_page_is_tile(const EngineConfig& c, const EngineTarget& t) noexcept {
  return c.page_size == 0 || c.page_size == fa4_tile_n(c, t);
}
constexpr bool fa4_on_sm90_or_sm100(const EngineConfig&, const EngineTarget& t) noexcept {
  return fa4_arch_family(t) == 9 || fa4_arch_family(t) == 10 || fa4_arch_family(t) == 11;
}
// Without TMA, K/V heads must fill whole 16-element tiles.
constexpr bool fa4_paged_head_dims_regular(const EngineConfig& c, const EngineTarget& t) noexcept {
  if (c.page_size == 0 || c.page_size == fa4_tile_n(c, t)) return true;
  return c.head_dim % 16 == 0 && value_head_dim(c) % 16 == 0;
}
constexpr bool fa4_hd256_sm100(const EngineConfig& c, const EngineTarget& t) noexcept {
  return (fa4_arch_family(t) == 10 || fa4_arch_family(t) == 11) && c.head_dim == 256 &&
         value_head_dim(c) == 256;
}
constexpr bool fa4_hd256_page_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size == 0 || c.page_size == 128;
}

}  // namespace detail

#define ATTNREF_FA4_SOURCE(what) "vllm-project/vllm@v0.33.0 vllm/vllm_flash_attn/cute/" what

inline constexpr EngineRule kFa4KvDtype{
    "flash_attn4.kv_dtype",
    Severity::kRejects,
    detail::fa4_kv_dtype_supported,
    "inputs must be float16, bfloat16, fp8 e4m3fn, or fp8 e5m2",
    "FlashAttention-4 reads K/V in float16, bfloat16 or fp8 only",
    "K/V in float16, bfloat16, float8_e4m3fn or float8_e5m2",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd")};

inline constexpr EngineRule kFa4DequantQDtype{
    "flash_attn4.fp8_kv_dequant_q_dtype",
    Severity::kRejects,
    detail::q_is_16_bit,
    "fp8_kv_dequant requires fp16 or bf16 Q",
    "on sm90, fp8 e4m3 K/V is dequantized in the kernel for a float16 or bfloat16 query only",
    "a float16 or bfloat16 query with the fp8 e4m3 K/V",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_fp8_kv_dequant};

inline constexpr EngineRule kFa4DequantPaged{
    "flash_attn4.fp8_kv_dequant_paged",
    Severity::kRejects,
    detail::fa4_paged,
    "fp8_kv_dequant requires paged KV (page_table)",
    "on sm90, fp8 e4m3 K/V is dequantized in the kernel from a paged cache only",
    "a paged KV cache (page_size 128 for most head dims)",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_fp8_kv_dequant};

inline constexpr EngineRule kFa4SameDtypes{
    "flash_attn4.same_dtypes",
    Severity::kRejects,
    detail::kv_dtype_is_q_dtype,
    "q.dtype torch.{d6} != k.dtype",
    "FlashAttention-4 takes q, K and V in one dtype (fp8 K/V needs an fp8 query), but for "
    "sm90's fp8 e4m3 K/V under a 16-bit query",
    "K/V in the query's dtype, or quantize the query to fp8 with the fp8 K/V",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_not_fp8_kv_dequant};

inline constexpr EngineRule kFa4Heads{
    "flash_attn4.heads",
    Severity::kRejects,
    detail::heads_divide,
    "num_head must be divisible by num_head_kv",
    "FlashAttention-4 needs whole groups of query heads per KV head",
    "valid num_kv_heads for {0} query heads: {k0}",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd")};

inline constexpr EngineRule kFa4HeadDimsSm90{
    "flash_attn4.head_dims_sm90",
    Severity::kRejects,
    detail::fa4_head_dims_sm90,
    "(head_dim, head_dim_v)=({2}, {3}) is not supported on SM90. head_dim and head_dim_v must be "
    "between 8 and 256 and "
    "divisible by 8.",
    "FlashAttention-4 on sm90 takes head dims from 8 to 512 (its message says 256) that are "
    "multiples of 8 in 16-bit; got ({2}, {3})",
    "head dims that are multiples of 8 from 8 to 512",
    ATTNREF_FA4_SOURCE("interface.py _validate_head_dims"),
    {},
    {},
    detail::fa4_on_sm90_16_bit};

inline constexpr EngineRule kFa4HeadDimsSm90Fp8{
    "flash_attn4.head_dims_sm90_fp8",
    Severity::kRejects,
    detail::fa4_head_dims_sm90,
    "(head_dim, head_dim_v)=({2}, {3}) is not supported on SM90. head_dim and head_dim_v must be "
    "between 8 and 256 and "
    "divisible by 16.",
    "FlashAttention-4 on sm90 takes fp8 head dims from 8 to 512 (its message says 256) that are "
    "multiples of 16; got ({2}, {3})",
    "head dims that are multiples of 16 from 16 to 512",
    ATTNREF_FA4_SOURCE("interface.py _validate_head_dims"),
    {},
    {},
    detail::fa4_on_sm90_fp8};

inline constexpr EngineRule kFa4HeadDimsSm100{
    "flash_attn4.head_dims_sm100",
    Severity::kRejects,
    detail::fa4_head_dims_sm100,
    "(head_dim, head_dim_v)=({2}, {3}) is not supported on SM100/SM110. head_dim and head_dim_v "
    "must be between 8 and "
    "128 and divisible by 8, or (192, 128) for DeepSeek, or (256, 256) for hd256.",
    "FlashAttention-4 on sm100 is built for head dims up to 128, and for (192, 128), (256, 256) "
    "and (64 or 512, 512); got ({2}, {3})",
    "head dims that are multiples of 8 up to 128, (192, 128) or (256, 256); FlashAttention-3's "
    "build in vLLM for others",
    ATTNREF_FA4_SOURCE("interface.py _validate_head_dims"),
    {},
    {},
    detail::fa4_on_sm100_16_bit};

inline constexpr EngineRule kFa4HeadDimsSm100Fp8{
    "flash_attn4.head_dims_sm100_fp8",
    Severity::kRejects,
    detail::fa4_head_dims_sm100,
    "(head_dim, head_dim_v)=({2}, {3}) is not supported on SM100/SM110. head_dim and head_dim_v "
    "must be between 8 and "
    "128 and divisible by 16, or (192, 128) for DeepSeek, or (256, 256) for hd256.",
    "FlashAttention-4 on sm100 is built for fp8 head dims that are multiples of 16 up to 128, "
    "and for (192, 128), (256, 256) and (64 or 512, 512); got ({2}, {3})",
    "head dims that are multiples of 16 up to 128, (192, 128) or (256, 256)",
    ATTNREF_FA4_SOURCE("interface.py _validate_head_dims"),
    {},
    {},
    detail::fa4_on_sm100_fp8};

inline constexpr EngineRule kFa4Fp8Arch{
    "flash_attn4.fp8_arch",
    Severity::kRejects,
    detail::fa4_fp8_needs_sm100,
    "FP8 is only supported on SM100 (compute capability 10.x) for FA4 CuTe.",
    "FlashAttention-4's fp8 forward runs on sm100 only (sm90 dequantizes fp8 e4m3 K/V instead)",
    "16-bit K/V on this GPU (or fp8 e4m3 on sm90), or an sm100 GPU",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_not_fp8_kv_dequant};

inline constexpr EngineRule kFa4DequantPageSize{
    "flash_attn4.fp8_kv_dequant_page_size",
    Severity::kRejects,
    detail::fa4_dequant_page_is_tile,
    "FA4 SM90 fp8-KV-dequant requires the paged-KV page_size == tile_n",
    "on sm90, fp8 e4m3 K/V is loaded by TMA a whole key tile at a time: the page must be the "
    "tile the kernel picks for head_dim {2} (128 up to head_dim 128 with a causal mask, fewer "
    "above); got pages of {4}",
    "a page_size of 128 (head_dim up to 128, causal), or 16-bit K/V",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_fp8_kv_dequant};

inline constexpr EngineRule kFa4DequantHeadDims{
    "flash_attn4.fp8_kv_dequant_head_dims",
    Severity::kRejects,
    detail::fa4_equal_head_dims,
    "FA4 SM90 fp8-KV-dequant requires head_dim == head_dim_v (one staging buffer serves K and "
    "V); got head_dim={2}, head_dim_v={3}.",
    "on sm90, fp8 e4m3 K and V share one staging buffer: their head dims must be equal",
    "equal head dims, or 16-bit K/V",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_fp8_kv_dequant};

inline constexpr EngineRule kFa4PagedSm80{
    "flash_attn4.paged_sm80",
    Severity::kRejects,
    detail::fa4_paged_not_on_sm80,
    "paged KV not supported on SM 8.0",
    "FlashAttention-4's sm8x forward reads contiguous K/V only",
    "unpaged K/V (page_size 0) on this GPU, or FlashAttention-2",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd")};

inline constexpr EngineRule kFa4PagedSm120{
    "flash_attn4.paged_sm120",
    Severity::kRejects,
    detail::fa4_paged_not_on_sm120,
    "Paged KV not supported on SM 12.0 in this PR",
    "FlashAttention-4's sm120 forward reads contiguous K/V only",
    "unpaged K/V (page_size 0) on this GPU",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd")};

inline constexpr EngineRule kFa4PagedIrregularHeadDim{
    "flash_attn4.paged_head_dim",
    Severity::kRejects,
    detail::fa4_paged_head_dims_regular,
    "Paged KV does not support irregular head dim",
    "a page that is not the kernel's key tile is read with cp.async, which needs head dims that "
    "are multiples of 16; got ({2}, {3}) with pages of {4}",
    "head dims that are multiples of 16, or pages of the key tile (128 on sm100)",
    ATTNREF_FA4_SOURCE("flash_fwd_sm100.py and flash_fwd_sm90.py __init__"),
    {},
    {},
    detail::fa4_on_sm90_or_sm100};

inline constexpr EngineRule kFa4Hd256SoftCap{
    "flash_attn4.hd256_soft_cap",
    Severity::kRejects,
    detail::no_soft_cap,
    "SM100 forward with head_dim=256 does not support softcap",
    "the dedicated (256, 256) kernel on sm100 has no soft cap",
    "no soft cap, or another head_dim",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_hd256_sm100};

inline constexpr EngineRule kFa4Hd256Sinks{
    "flash_attn4.hd256_sinks",
    Severity::kRejects,
    detail::no_sinks,
    "SM100 forward with head_dim=256 does not support learnable_sink",
    "the dedicated (256, 256) kernel on sm100 has no sinks",
    "no sinks, or another head_dim",
    ATTNREF_FA4_SOURCE("interface.py _flash_attn_fwd"),
    {},
    {},
    detail::fa4_hd256_sm100};

inline constexpr EngineRule kFa4Hd256PageSize{
    "flash_attn4.hd256_page_size",
    Severity::kRejects,
    detail::fa4_hd256_page_size,
    "SM100 hd256 2CTA supports TMA paged KV only (page_size must equal tile_n=128)",
    "the dedicated (256, 256) kernel on sm100 reads pages of exactly 128 tokens",
    "a page_size of 128",
    ATTNREF_FA4_SOURCE("sm100_hd256_2cta_fmha_forward.py __init__"),
    {},
    {},
    detail::fa4_hd256_sm100};

inline constexpr EngineRule kFa4NoAlibi{
    "flash_attn4.alibi",
    Severity::kRejects,
    detail::no_alibi,
    "Alibi is not supported in FA4",
    "FlashAttention-4 has no ALiBi parameter, and vLLM's wrapper refuses the slopes",
    "FlashAttention-2 (vLLM's FLASH_ATTN falls back to it for ALiBi)",
    "vllm-project/vllm@v0.33.0 vllm/vllm_flash_attn/flash_attn_interface.py "
    "flash_attn_varlen_func"};

#undef ATTNREF_FA4_SOURCE

/// The rules of FlashAttention-4, in the order vLLM's wrapper and `_flash_attn_fwd` check them.
inline constexpr const EngineRule* kFlashAttention4Rules[] = {
    &kFa4NoAlibi,          &kFa4KvDtype,         &kFa4DequantQDtype,
    &kFa4DequantPaged,     &kFa4SameDtypes,      &kFa4Heads,
    &kFa4HeadDimsSm90,     &kFa4HeadDimsSm90Fp8, &kFa4HeadDimsSm100,
    &kFa4HeadDimsSm100Fp8, &kFa4Fp8Arch,         &kFa4DequantPageSize,
    &kFa4DequantHeadDims,  &kFa4PagedSm80,       &kFa4PagedIrregularHeadDim,
    &kFa4Hd256SoftCap,     &kFa4Hd256Sinks,      &kFa4Hd256PageSize,
    &kFa4PagedSm120,
};

}  // namespace attnref
