// SPDX-License-Identifier: Apache-2.0
/// @file flash_attention_rules.hpp
/// FlashAttention-2 (csrc/flash_attn/flash_api.cpp: mha_varlen_fwd, mha_fwd_kvcache) and
/// FlashAttention-3 (hopper/flash_api.cpp: mha_fwd) as rule tables, read from
/// Dao-AILab/flash-attention at 0251105a2fb1 (after v2.8.3).
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr bool fa_head_dim_at_most_256(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim <= 256;
}
constexpr bool fa2_head_dim_multiple_of_8(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim % 8 == 0;
}
// FLASHATTENTION_DISABLE_UNEVEN_K: head_dim must be a multiple of 32 (of 64 above 128).
constexpr bool fa2_even_k(const EngineConfig& c, const EngineTarget& t) noexcept {
  if ((t.build_flags & kFa2DisableUnevenK) == 0) return true;
  const std::int64_t m = c.head_dim <= 128 ? 32 : 64;
  return c.head_dim % m == 0;
}
constexpr bool fa2_page_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size == 0 || c.page_size % 256 == 0;
}
constexpr bool fa2_equal_head_dims(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) == c.head_dim;
}
constexpr bool fa3_q_dtype(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_16_bit_float(c.q_dtype) || c.q_dtype == DType::kFloat8E4M3FN;
}
constexpr bool fa3_fp8_needs_hopper(const EngineConfig& c, const EngineTarget& t) noexcept {
  return is_16_bit_float(c.q_dtype) || t.arch >= 90;
}
constexpr std::int64_t fa3_alignment(const EngineConfig& c) noexcept {
  return is_fp8(c.q_dtype) ? 16 : 8;
}
constexpr bool fa3_head_dim_aligned(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim % fa3_alignment(c) == 0;
}
constexpr bool fa3_head_dim_v_aligned(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) % fa3_alignment(c) == 0;
}
constexpr bool fa3_q_is_fp8(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_fp8(c.q_dtype);
}
constexpr bool fa3_q_is_16_bit(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_16_bit_float(c.q_dtype);
}
constexpr bool fa3_head_dim_v_pair(const EngineConfig& c, const EngineTarget&) noexcept {
  const std::int64_t d = c.head_dim;
  const std::int64_t dv = value_head_dim(c);
  if (dv == d) return true;
  return (d > 128 && d <= 192 && dv > 96 && dv <= 128) || (d <= 64 && dv <= 512);
}
constexpr bool fa3_head_dim_v_hopper(const EngineConfig& c, const EngineTarget& t) noexcept {
  return value_head_dim(c) == c.head_dim || t.arch == 90;
}

}  // namespace detail

// --- FlashAttention-2 ----------------------------------------------------------------------

inline constexpr EngineRule kFa2Dtype{
    "flash_attn2.dtype",
    Severity::kRejects,
    detail::q_is_16_bit,
    "FlashAttention only support fp16 and bf16 data type",
    "FlashAttention-2 computes in float16 or bfloat16 only",
    "a float16 or bfloat16 query",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2KvDtype{
    "flash_attn2.kv_dtype",
    Severity::kRejects,
    detail::kv_dtype_is_q_dtype,
    "query and key must have the same dtype",
    "FlashAttention-2 reads K/V in the query's dtype: no fp8 or int8 pages",
    "K/V in the query's dtype (dequantize first), or FlashAttention-3 for fp8",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2HeadDimMax{
    "flash_attn2.head_dim_max",
    Severity::kRejects,
    detail::fa_head_dim_at_most_256,
    "FlashAttention forward only supports head dimension at most 256",
    "FlashAttention-2 is compiled for head dims up to 256",
    "a head_dim of at most 256",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2HeadDimMultipleOf8{
    "flash_attn2.head_dim_multiple_of_8",
    Severity::kRejects,
    detail::fa2_head_dim_multiple_of_8,
    "query, key, value, and out_ must have a head_size that is a multiple of 8",
    "FlashAttention-2's varlen path loads heads in vectors of 8 elements (mha_fwd_kvcache pads "
    "instead)",
    "pad head_dim to a multiple of 8",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2UnevenK{
    "flash_attn2.uneven_k",
    Severity::kRejects,
    detail::fa2_even_k,
    "This flash attention build does not support headdim not being a multiple of 32.",
    "a build with FLASHATTENTION_DISABLE_UNEVEN_K (vLLM's FA2 wheels of 2025) takes head dims "
    "that are multiples of 32 (of 64 above 128)",
    "a head_dim in 32, 64, 96, 128, 192 or 256, or a build without that flag",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp set_params_fprop"};

inline constexpr EngineRule kFa2Heads{
    "flash_attn2.heads",
    Severity::kRejects,
    detail::heads_divide,
    "Number of heads in key/value must divide number of heads in query",
    "FlashAttention-2 needs whole groups of query heads per KV head",
    "valid num_kv_heads for {0} query heads: {k0}",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2PageSize{
    "flash_attn2.page_size",
    Severity::kRejects,
    detail::fa2_page_size,
    "Paged KV cache block size must be divisible by 256",
    "upstream FlashAttention-2 reads paged K/V in blocks of 256 tokens (vLLM's fork takes "
    "multiples of 16)",
    "a page_size that is a multiple of 256, or vLLM's FlashAttention fork",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd"};

inline constexpr EngineRule kFa2HeadDimV{
    "flash_attn2.head_dim_v",
    Severity::kRejects,
    detail::fa2_equal_head_dims,
    "v must have shape (num_blocks, page_block_size, num_heads_k, head_size)",
    "FlashAttention-2 takes V with K's head_dim ({2}), not {3}",
    "FlashAttention-3 on sm90 for some unequal pairs, or FlashMLA for MLA",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd "
    "CHECK_SHAPE"};

inline constexpr EngineRule kFa2NoSinks{
    "flash_attn2.sinks",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "FlashAttention-2 has no sinks parameter: the softmax runs without the sink logits",
    "FlashAttention-3 from vLLM's fork (s_aux) on sm90",
    "Dao-AILab/flash-attention@0251105a2fb1 csrc/flash_attn/flash_api.cpp mha_varlen_fwd "
    "(no such argument)"};

// --- FlashAttention-3 ----------------------------------------------------------------------

inline constexpr EngineRule kFa3Dtype{
    "flash_attn3.dtype",
    Severity::kRejects,
    detail::fa3_q_dtype,
    "FlashAttention only supports fp16, bf16, and fp8_e4m3 data type",
    "FlashAttention-3 computes in float16, bfloat16 or float8_e4m3fn",
    "a float16, bfloat16 or float8_e4m3fn query",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3Fp8Arch{
    "flash_attn3.fp8_arch",
    Severity::kRejects,
    detail::fa3_fp8_needs_hopper,
    "FlashAttention on Ampere/Ada cards only supports fp16 and bf16 data type",
    "FlashAttention-3's fp8 path needs sm90",
    "a 16-bit query on this GPU, or an sm90 GPU",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3KvDtype{
    "flash_attn3.kv_dtype",
    Severity::kRejects,
    detail::kv_dtype_is_q_dtype,
    "query and key must have the same dtype",
    "FlashAttention-3 reads K/V in the query's dtype (fp8 K/V needs an fp8 query)",
    "K/V in the query's dtype",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3HeadDimMax{
    "flash_attn3.head_dim_max",
    Severity::kRejects,
    detail::fa_head_dim_at_most_256,
    "FlashAttention forward only supports head dimension at most 256",
    "FlashAttention-3 is compiled for Q/K head dims up to 256",
    "a head_dim of at most 256",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3HeadDimAligned16Bit{
    "flash_attn3.head_dim_multiple_of_8",
    Severity::kRejects,
    detail::fa3_head_dim_aligned,
    "head_size should be a multiple of 8",
    "FlashAttention-3 loads 16-bit heads in vectors of 8 elements",
    "pad head_dim to a multiple of 8",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd",
    {},
    {},
    detail::fa3_q_is_16_bit};

inline constexpr EngineRule kFa3HeadDimAlignedFp8{
    "flash_attn3.head_dim_multiple_of_16",
    Severity::kRejects,
    detail::fa3_head_dim_aligned,
    "head_size should be a multiple of 16",
    "FlashAttention-3 loads fp8 heads in vectors of 16 elements",
    "pad head_dim to a multiple of 16",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd",
    {},
    {},
    detail::fa3_q_is_fp8};

inline constexpr EngineRule kFa3HeadDimVAligned16Bit{
    "flash_attn3.head_dim_v_multiple_of_8",
    Severity::kRejects,
    detail::fa3_head_dim_v_aligned,
    "head_size_v should be a multiple of 8",
    "FlashAttention-3 loads 16-bit V heads in vectors of 8 elements",
    "pad head_dim_v to a multiple of 8",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd",
    {},
    {},
    detail::fa3_q_is_16_bit};

inline constexpr EngineRule kFa3HeadDimVAlignedFp8{
    "flash_attn3.head_dim_v_multiple_of_16",
    Severity::kRejects,
    detail::fa3_head_dim_v_aligned,
    "head_size_v should be a multiple of 16",
    "FlashAttention-3 loads fp8 V heads in vectors of 16 elements",
    "pad head_dim_v to a multiple of 16",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd",
    {},
    {},
    detail::fa3_q_is_fp8};

inline constexpr EngineRule kFa3HeadDimVPair{
    "flash_attn3.head_dim_v_pair",
    Severity::kRejects,
    detail::fa3_head_dim_v_pair,
    "If V headdim is different from Q/K dim, we only support Q/K headdim in (128, 192] and V "
    "headdim in (96, 128], or (Q/K <= 64 and V <= 512).",
    "FlashAttention-3 is compiled for a few (Q/K, V) head-dim pairs; got ({2}, {3})",
    "head dims (192, 128), a Q/K head_dim of at most 64 with V up to 512, or FlashMLA for MLA",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3HeadDimVHopper{
    "flash_attn3.head_dim_v_arch",
    Severity::kRejects,
    detail::fa3_head_dim_v_hopper,
    "Only Hopper supports different V headdim",
    "a V head_dim other than K's runs on sm90 only",
    "an sm90 GPU, or equal head dims",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3Heads{
    "flash_attn3.heads",
    Severity::kRejects,
    detail::heads_divide,
    "Number of heads in key/value must divide number of heads in query",
    "FlashAttention-3 needs whole groups of query heads per KV head",
    "valid num_kv_heads for {0} query heads: {k0}",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd"};

inline constexpr EngineRule kFa3NoAlibi{
    "flash_attn3.alibi",
    Severity::kSilentlyWrong,
    detail::no_alibi,
    "",
    "FlashAttention-3 has no ALiBi parameter: the bias is not added",
    "FlashAttention-2 (it takes alibi_slopes)",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd (no such argument)"};

inline constexpr EngineRule kFa3NoSinks{
    "flash_attn3.sinks",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "upstream FlashAttention-3 has no sinks parameter: the softmax runs without the sink logits",
    "vLLM's FlashAttention fork (s_aux) on sm90",
    "Dao-AILab/flash-attention@0251105a2fb1 hopper/flash_api.cpp mha_fwd (no such argument)"};

/// The rules of FlashAttention-2 and -3.
inline constexpr const EngineRule* kFlashAttention2Rules[] = {
    &kFa2Dtype,   &kFa2KvDtype, &kFa2HeadDimMax, &kFa2HeadDimMultipleOf8,
    &kFa2UnevenK, &kFa2Heads,   &kFa2PageSize,   &kFa2HeadDimV,
    &kFa2NoSinks,
};
inline constexpr const EngineRule* kFlashAttention3Rules[] = {
    &kFa3Dtype,
    &kFa3Fp8Arch,
    &kFa3KvDtype,
    &kFa3HeadDimMax,
    &kFa3HeadDimAligned16Bit,
    &kFa3HeadDimAlignedFp8,
    &kFa3HeadDimVAligned16Bit,
    &kFa3HeadDimVAlignedFp8,
    &kFa3HeadDimVPair,
    &kFa3HeadDimVHopper,
    &kFa3Heads,
    &kFa3NoAlibi,
    &kFa3NoSinks,
};

}  // namespace attnref
