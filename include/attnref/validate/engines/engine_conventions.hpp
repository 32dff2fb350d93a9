// SPDX-License-Identifier: Apache-2.0
/// @file engine_conventions.hpp
/// Where engines give the same feature different meanings: what a sliding-window number counts,
/// how ALiBi measures distance, whether the soft cap comes before or after ALiBi, which corner a
/// causal mask is aligned to when keys outnumber queries. Each kernel's conventions are data;
/// `convention_mismatches` says where a configuration's stated conventions differ from a
/// kernel's, and how to convert (or that the numbers differ).
#pragma once

#include <string>
#include <vector>

#include "attnref/validate/engines/engine_target.hpp"

namespace attnref {

/// The conventions of a kernel's own parameters, at its pinned version. Every kernel aligns a
/// causal mask bottom-right: a decode kernel's one query row is the last token by construction,
/// and the prefill kernels place row i at kv_len - q_len + i.
constexpr AttentionConventions engine_conventions(EngineKernel k) noexcept {
  constexpr CausalAlignment kBottomRight = CausalAlignment::kBottomRight;
  switch (k) {
    case EngineKernel::kFlashInferDecode:
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
    case EngineKernel::kFlashInferPrefillFa3:
      // window_left; logits * sm_scale + slope * (kv_idx - qo_idx), then the cap
      // (include/flashinfer/attention/variants.cuh DefaultAttention); causal masks
      // kv_idx + qo_len > kv_len + q_idx (prefill.cuh; hopper/mainloop_mma.cuh col_limit_right).
      return {WindowConvention::kKeysLeftOfQuery, AlibiConvention::kSigned,
              SoftCapOrder::kAlibiThenCap, kBottomRight};
    case EngineKernel::kFlashAttention2:
    case EngineKernel::kFlashAttention3:
    case EngineKernel::kFlashAttention4:
      // window_size[0] (FA4: window_size_left, the same causal_row_offset in cute/mask.py);
      // apply_softcap before mask.apply_mask adds ALiBi (flash_fwd_kernel.h); non-causal ALiBi
      // subtracts slope * |distance| (mask.h); causal keeps col_idx < row_idx + 1 + seqlen_k -
      // seqlen_q (csrc/flash_attn/src/mask.h, hopper/mask.h).
      return {WindowConvention::kKeysLeftOfQuery, AlibiConvention::kAbsolute,
              SoftCapOrder::kCapThenAlibi, kBottomRight};
    case EngineKernel::kVllmFlashAttn:
      // vLLM takes the model's sliding_window W and passes (W - 1, 0) to its FlashAttention,
      // whose causal mask is upstream's (flash_fwd_kernel.h actual_seqlen_k - actual_seqlen_q).
      return {WindowConvention::kKeys, AlibiConvention::kAbsolute, SoftCapOrder::kCapThenAlibi,
              kBottomRight};
    case EngineKernel::kVllmTritonAttn:
      // vLLM passes (W - 1, 0) and the kernel adds 1 back (SLIDING_WINDOW); it caps, then adds
      // slope * (key_pos - context_len), signed, and keys t < context_len + q_pos + 1 are
      // visible (v1/attention/ops/triton_unified_attention.py at 0.33.0). Its ALiBi distance
      // from the chunk's first query has a rule of its own (vllm.triton_attn.alibi_sinks).
      return {WindowConvention::kKeys, AlibiConvention::kSigned, SoftCapOrder::kCapThenAlibi,
              kBottomRight};
    case EngineKernel::kVllmFlashInfer:
      // vLLM passes window_left = W - 1 to FlashInfer's wrappers, whose logits get the cap
      // after any bias (DefaultAttention); the slopes never reach them (vllm.flashinfer.alibi).
      return {WindowConvention::kKeys, AlibiConvention::kSigned, SoftCapOrder::kAlibiThenCap,
              kBottomRight};
    case EngineKernel::kSglangTritonDecode:
      // The backend hands decode the last sliding_window_size keys, the query's own included
      // (triton_backend.py update_sliding_window_buffer); the cap is c * tanh(s / c).
      return {WindowConvention::kKeys, AlibiConvention::kSigned, SoftCapOrder::kCapThenAlibi,
              kBottomRight};
    case EngineKernel::kSglangTritonExtend:
      // Keys with q_pos <= k_pos + sliding_window_size (extend_attention.py _fwd_kernel); every
      // prefix key is visible and the chunk masks bottom-right.
      return {WindowConvention::kKeysLeftOfQuery, AlibiConvention::kSigned,
              SoftCapOrder::kCapThenAlibi, kBottomRight};
    case EngineKernel::kFlashMlaDecode:
      // Row s_q_idx masks its last s_q - s_q_idx - 1 keys (csrc/sm90/decode/dense/splitkv_mla.cuh
      // get_mask_len).
    default:
      return {};  // no window or soft cap parameter; signed ALiBi (vLLM paged); bottom-right
  }
}

/// The conventions of a target's kernel at the target's version: FlashAttention-2 aligned a
/// causal mask top-left before v2.1 (its README, "2.1: Change behavior of causal flag").
constexpr AttentionConventions engine_conventions(const EngineTarget& t) noexcept {
  AttentionConventions c = engine_conventions(t.kernel);
  if (t.kernel == EngineKernel::kFlashAttention2 && effective_version(t) < EngineVersion{2, 1, 0})
    c.causal_alignment = CausalAlignment::kTopLeft;
  return c;
}

/// Whether a kernel takes a sliding window, ALiBi slopes and a soft cap at all (a kernel without
/// one has a rule of its own saying so; conventions are compared only where both sides have it).
/// vLLM's MLA backends take none of the three.
constexpr bool is_vllm_mla_kernel(EngineKernel k) noexcept {
  return k == EngineKernel::kVllmFlashAttnMla || k == EngineKernel::kVllmFlashMla ||
         k == EngineKernel::kVllmCutlassMla || k == EngineKernel::kVllmTritonMla ||
         k == EngineKernel::kVllmFlashInferMla;
}
constexpr bool kernel_takes_window(EngineKernel k) noexcept {
  return k != EngineKernel::kVllmPagedAttentionV1 && k != EngineKernel::kVllmPagedAttentionV2 &&
         k != EngineKernel::kFlashMlaDecode && !is_vllm_mla_kernel(k);
}
constexpr bool kernel_takes_alibi(EngineKernel k) noexcept {
  return k != EngineKernel::kFlashInferPrefillFa3 && k != EngineKernel::kFlashAttention3 &&
         k != EngineKernel::kFlashAttention4 && k != EngineKernel::kFlashMlaDecode &&
         k != EngineKernel::kVllmFlashInfer && k != EngineKernel::kSglangTritonDecode &&
         k != EngineKernel::kSglangTritonExtend && !is_vllm_mla_kernel(k);
}
constexpr bool kernel_takes_soft_cap(EngineKernel k) noexcept {
  return k != EngineKernel::kVllmPagedAttentionV1 && k != EngineKernel::kVllmPagedAttentionV2 &&
         k != EngineKernel::kFlashMlaDecode && !is_vllm_mla_kernel(k);
}

/// A difference between a configuration's conventions and a kernel's.
struct ConventionMismatch {
  const char* convention;  ///< "window", "alibi", "soft_cap_order" or "causal_alignment"
  std::string what;        ///< what differs
  std::string conversion;  ///< what to pass, or how to compute the kernel's numbers
};

namespace detail {

inline void window_mismatch(const EngineConfig& c, WindowConvention engine,
                            std::vector<ConventionMismatch>& out) {
  if (c.sliding_window == 0 || c.conventions.window == engine) return;
  const bool engine_left = engine == WindowConvention::kKeysLeftOfQuery;
  const std::int64_t pass = engine_left ? c.sliding_window - 1 : c.sliding_window + 1;
  out.push_back({"window",
                 engine_left
                     ? "the kernel's window counts the keys left of the query (W + 1 keys in all); "
                       "this configuration's sliding_window " +
                           std::to_string(c.sliding_window) + " counts the query's own key too"
                     : "the kernel's window counts the query's own key too; this configuration's "
                       "sliding_window " +
                           std::to_string(c.sliding_window) + " counts the keys left of the query",
                 "pass " + std::string(engine_left ? "window_left " : "sliding_window ") +
                     std::to_string(pass) + " for the same keys"});
}

/// The two alignments differ only under a causal mask with more keys than queries (a known
/// kv_len above q_len).
inline void causal_alignment_mismatch(const EngineConfig& c, CausalAlignment engine,
                                      std::vector<ConventionMismatch>& out) {
  if (!c.causal || c.kv_len <= c.q_len || c.conventions.causal_alignment == engine) return;
  const std::string prefix = std::to_string(c.kv_len - c.q_len);
  const std::string bottom_right = "t <= i + " + prefix + " (kv_len - q_len)";
  if (engine == CausalAlignment::kBottomRight) {
    out.push_back({"causal_alignment",
                   "the kernel aligns the causal mask bottom-right: query row i sees keys " +
                       bottom_right + "; this configuration's rows see t <= i (top-left)",
                   "for the kernel's numbers, compute the reference with a causal mask of offset " +
                       prefix + "; for top-left rows, pass the kernel only the first " +
                       std::to_string(c.q_len) + " keys"});
  } else {
    out.push_back({"causal_alignment",
                   "the kernel aligns the causal mask top-left: query row i sees keys t <= i; "
                   "this configuration's rows, aligned bottom-right, see " +
                       bottom_right,
                   "for the kernel's numbers, compute the reference with a causal mask of offset "
                   "0; for bottom-right rows, put " +
                       prefix +
                       " padding query rows first (their outputs discarded), or use "
                       "FlashAttention 2.1 or later"});
  }
}

}  // namespace detail

/// Every convention of `config` that `target`'s kernel, at the target's version, reads
/// differently. Differences that change no number (ALiBi's sign under a causal mask, the causal
/// alignment without more keys than queries) are not reported.
inline std::vector<ConventionMismatch> convention_mismatches(const EngineConfig& config,
                                                             const EngineTarget& target) {
  const EngineKernel kernel = target.kernel;
  const AttentionConventions engine = engine_conventions(target);
  std::vector<ConventionMismatch> out;
  detail::causal_alignment_mismatch(config, engine.causal_alignment, out);
  if (kernel_takes_window(kernel)) detail::window_mismatch(config, engine.window, out);
  if (!kernel_takes_alibi(kernel)) return out;
  if (config.alibi && !config.causal && config.conventions.alibi != engine.alibi) {
    out.push_back({"alibi",
                   engine.alibi == AlibiConvention::kAbsolute
                       ? "the kernel biases by -slope * |key_pos - query_pos|: keys right of the "
                         "query get the opposite bias of the signed convention"
                       : "the kernel biases by slope * (key_pos - query_pos), signed",
                   "compute the reference with the kernel's ALiBi convention"});
  }
  if (config.alibi && config.soft_cap && kernel_takes_soft_cap(kernel) &&
      config.conventions.soft_cap_order != engine.soft_cap_order) {
    out.push_back({"soft_cap_order",
                   engine.soft_cap_order == SoftCapOrder::kAlibiThenCap
                       ? "the kernel adds ALiBi, then caps: c * tanh((s + bias) / c)"
                       : "the kernel caps, then adds ALiBi: c * tanh(s / c) + bias",
                   "compute the reference with the kernel's soft-cap order"});
  }
  return out;
}

/// `convention_mismatches` for `kernel` at its pinned version.
inline std::vector<ConventionMismatch> convention_mismatches(const EngineConfig& config,
                                                             EngineKernel kernel) {
  return convention_mismatches(config, EngineTarget{kernel});
}

}  // namespace attnref
