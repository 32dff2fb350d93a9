// SPDX-License-Identifier: Apache-2.0
/// @file flash_mla_rules.hpp
/// FlashMLA's dense decode (csrc/api/dense_decode.h) as a rule table, read from
/// deepseek-ai/FlashMLA at 9241ae3ef9ba.
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr bool mla_arch(const EngineConfig&, const EngineTarget& t) noexcept {
  return t.arch == 90;
}
constexpr bool mla_head_dim(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.head_dim == 576 || c.head_dim == 512;
}
constexpr bool mla_head_dim_v(const EngineConfig& c, const EngineTarget&) noexcept {
  return value_head_dim(c) == 512;
}
constexpr bool mla_page_size(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.page_size == 64;
}

}  // namespace detail

inline constexpr EngineRule kFlashMlaArch{
    "flashmla.decode.arch",
    Severity::kRejects,
    detail::mla_arch,
    "Dense decode MLA is only supported on SM90a architecture",
    "FlashMLA's dense decode kernel is built for sm90a",
    "an sm90 GPU",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaDtype{
    "flashmla.decode.dtype",
    Severity::kRejects,
    detail::q_is_16_bit,
    "Expected q_dtype == torch::kBFloat16 || q_dtype == torch::kHalf to be true, but got false.",
    "FlashMLA's dense decode takes a bfloat16 or float16 query (the check has no message of its "
    "own: torch prints the condition)",
    "a bfloat16 or float16 query",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaKvDtype{
    "flashmla.decode.kv_dtype",
    Severity::kRejects,
    detail::kv_dtype_is_q_dtype,
    "query and key must have the same dtype",
    "the dense decode kernel reads the latent cache in the query's dtype",
    "a latent cache in the query's dtype (the sparse kernels take fp8)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaHeadDim{
    "flashmla.decode.head_dim",
    Severity::kRejects,
    detail::mla_head_dim,
    "Only head_size_k == 576 or 512 is supported",
    "the kernel is built for a latent of 512 plus 64 rotary dims (576), or 512",
    "head_dim 576 (kv_lora_rank 512 + qk_rope_head_dim 64)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaHeadDimV{
    "flashmla.decode.head_dim_v",
    Severity::kRejects,
    detail::mla_head_dim_v,
    "Only head_size_v == 576 is supported",
    "V's head_dim must be 512 (the check tests 512; its message says 576); got {3}",
    "head_dim_v 512 (kv_lora_rank)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaPageSize{
    "flashmla.decode.page_size",
    Severity::kRejects,
    detail::mla_page_size,
    "Currently page_block_size must be 64",
    "the kernel reads the latent cache in pages of 64 tokens",
    "a page_size of 64",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaHeads{
    "flashmla.decode.heads",
    Severity::kRejects,
    detail::heads_divide,
    "Number of heads in key/value must divide number of heads in query",
    "the kernel needs whole groups of query heads per latent head",
    "valid num_kv_heads for {0} query heads: {k0}",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h dense_attn_decode_interface"};

inline constexpr EngineRule kFlashMlaNoSlidingWindow{
    "flashmla.decode.sliding_window",
    Severity::kSilentlyWrong,
    detail::no_sliding_window,
    "",
    "the dense decode kernel has no sliding-window parameter: it attends to the whole context",
    "a kernel with a window (FlashInfer's prefill kernels)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h (no such argument)"};

inline constexpr EngineRule kFlashMlaNoSoftCap{
    "flashmla.decode.soft_cap",
    Severity::kSilentlyWrong,
    detail::no_soft_cap,
    "",
    "the dense decode kernel has no soft-cap parameter: the logits are not capped",
    "a kernel with a soft cap (FlashInfer's prefill kernels)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h (no such argument)"};

inline constexpr EngineRule kFlashMlaNoAlibi{
    "flashmla.decode.alibi",
    Severity::kSilentlyWrong,
    detail::no_alibi,
    "",
    "the dense decode kernel has no ALiBi parameter: the bias is not added",
    "a kernel with ALiBi (FlashInfer fa2, FlashAttention-2)",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h (no such argument)"};

inline constexpr EngineRule kFlashMlaNoSinks{
    "flashmla.decode.sinks",
    Severity::kSilentlyWrong,
    detail::no_sinks,
    "",
    "the dense decode kernel has no sinks parameter: the softmax runs without the sink logits",
    "add the sink term to the merged softmax yourself",
    "deepseek-ai/FlashMLA@9241ae3ef9ba csrc/api/dense_decode.h (no such argument)"};

/// The rules of FlashMLA's dense decode.
inline constexpr const EngineRule* kFlashMlaDecodeRules[] = {
    &kFlashMlaArch,      &kFlashMlaDtype,    &kFlashMlaKvDtype, &kFlashMlaHeadDim,
    &kFlashMlaHeadDimV,  &kFlashMlaPageSize, &kFlashMlaHeads,   &kFlashMlaNoSlidingWindow,
    &kFlashMlaNoSoftCap, &kFlashMlaNoAlibi,  &kFlashMlaNoSinks,
};

}  // namespace attnref
