// SPDX-License-Identifier: Apache-2.0
/// @file sglang_rules.hpp
/// SGLang's Triton attention kernels, `decode_attention_fwd` and `extend_attention_fwd`, as its
/// `triton` attention backend runs them, read from sgl-project/sglang at v0.5.23
/// (python/sglang/kernels/ops/attention/, python/sglang/srt/layers/attention/triton_backend.py)
/// and run under Triton's interpreter by tests/engines/sglang_judge.py, which reproduces each
/// hazard below. The kernels check almost nothing: they take any page size, dtype (fp8 with
/// per-tensor scales), padded head dims, V narrower than K, a soft cap and sinks.
#pragma once

#include "attnref/validate/engines/engine_rule.hpp"

namespace attnref {
namespace detail {

constexpr bool sg_one_query_token(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.q_len == 1;
}

}  // namespace detail

#define ATTNREF_SGLANG_SOURCE(what) "sgl-project/sglang@v0.5.23 python/sglang/" what

// The two kernels share their reading of a KV head and their lack of ALiBi.
#define ATTNREF_SGLANG_COMMON_RULES(Name, prefix, file, kernel)                                 \
  inline constexpr EngineRule kSglang##Name##Heads{                                             \
      prefix ".heads",                                                                          \
      Severity::kOutOfBounds,                                                                   \
      detail::heads_divide,                                                                     \
      "",                                                                                       \
      "the kernel reads KV head h // {5} for query head h and never checks that num_kv_heads "  \
      "({1}) divides num_q_heads ({0}): the heads past num_kv_heads x {5} read a KV head past " \
      "the last, the next token slot's row, and past the cache at its last slot",               \
      "valid num_kv_heads for {0} query heads: {k0}",                                           \
      ATTNREF_SGLANG_SOURCE("kernels/ops/attention/" file " " kernel                            \
                            " (cur_kv_head; run by tests/engines/sglang_judge.py)")};           \
  inline constexpr EngineRule kSglang##Name##Alibi {                                            \
    prefix ".alibi", Severity::kSilentlyWrong, detail::no_alibi, "",                            \
        "SGLang's Triton kernels take no ALiBi slopes (Baichuan passes them on NPU only): the " \
        "logits get no bias",                                                                   \
        "SGLang's FlashInfer backend, or vLLM's TRITON_ATTN backend (both apply ALiBi)",        \
        ATTNREF_SGLANG_SOURCE(                                                                  \
            "srt/models/baichuan.py BaiChuanAttention.__init__ (slopes on NPU "                 \
            "only); kernels/ops/attention/" file " (no slopes argument)")                       \
  }

ATTNREF_SGLANG_COMMON_RULES(TritonDecode, "sglang.triton_decode", "decode_attention.py",
                            "_fwd_grouped_kernel_stage1");
ATTNREF_SGLANG_COMMON_RULES(TritonExtend, "sglang.triton_extend", "extend_attention.py",
                            "_fwd_kernel");
#undef ATTNREF_SGLANG_COMMON_RULES

inline constexpr EngineRule kSglangTritonDecodeQueryLen{
    "sglang.triton_decode.q_len",
    Severity::kRejects,
    detail::sg_one_query_token,
    "",
    "decode_attention_fwd takes one query token per request ({7} here): its assert "
    "q.shape[0] <= kv_indptr.shape[0] - 1 fails, without a message",
    "the extend kernel for more than one query token per request",
    ATTNREF_SGLANG_SOURCE("kernels/ops/attention/decode_attention.py decode_attention_fwd")};

inline constexpr EngineRule kSglangTritonDecodeWindow{
    "sglang.triton_decode.sliding_window",
    Severity::kSilentlyWrong,
    detail::no_sliding_window,
    "",
    "SGLang's models pass sliding_window - 1 as sliding_window_size, which extend counts as the "
    "keys left of the query; for decode the backend keeps only the last sliding_window_size "
    "keys, the query's own included: one key fewer than the model's window",
    "a sliding_window_size of W in decode (SGLang's FlashInfer backend keeps "
    "sliding_window_size + 1 keys), or another backend",
    ATTNREF_SGLANG_SOURCE("srt/layers/attention/triton_backend.py update_sliding_window_buffer "
                          "(sgl-project/sglang#34354; run by tests/engines/sglang_judge.py)")};

#undef ATTNREF_SGLANG_SOURCE

/// The rules of each SGLang kernel.
inline constexpr const EngineRule* kSglangTritonDecodeRules[] = {
    &kSglangTritonDecodeHeads,
    &kSglangTritonDecodeQueryLen,
    &kSglangTritonDecodeWindow,
    &kSglangTritonDecodeAlibi,
};
inline constexpr const EngineRule* kSglangTritonExtendRules[] = {
    &kSglangTritonExtendHeads,
    &kSglangTritonExtendAlibi,
};

}  // namespace attnref
