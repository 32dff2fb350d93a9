// SPDX-License-Identifier: Apache-2.0
/// @file engine_conventions.hpp
/// Where engines give the same feature different meanings: what a sliding-window number counts,
/// how ALiBi measures distance, whether the soft cap comes before or after ALiBi. Each kernel's
/// conventions are data; `convention_mismatches` says where a configuration's stated
/// conventions differ from a kernel's, and how to convert (or that the numbers differ).
#pragma once

#include <string>
#include <vector>

#include "attnref/validate/engines/engine_target.hpp"

namespace attnref {

/// The conventions of a kernel's own parameters.
constexpr AttentionConventions engine_conventions(EngineKernel k) noexcept {
  switch (k) {
    case EngineKernel::kFlashInferDecode:
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
    case EngineKernel::kFlashInferPrefillFa3:
      // window_left; logits * sm_scale + slope * (kv_idx - qo_idx), then the cap
      // (include/flashinfer/attention/variants.cuh DefaultAttention).
      return {WindowConvention::kKeysLeftOfQuery, AlibiConvention::kSigned,
              SoftCapOrder::kAlibiThenCap};
    case EngineKernel::kFlashAttention2:
    case EngineKernel::kFlashAttention3:
      // window_size[0]; apply_softcap before mask.apply_mask adds ALiBi (flash_fwd_kernel.h);
      // non-causal ALiBi subtracts slope * |distance| (mask.h).
      return {WindowConvention::kKeysLeftOfQuery, AlibiConvention::kAbsolute,
              SoftCapOrder::kCapThenAlibi};
    case EngineKernel::kVllmFlashAttn:
      // vLLM takes the model's sliding_window W and passes (W - 1, 0) to its FlashAttention.
      return {WindowConvention::kKeys, AlibiConvention::kAbsolute, SoftCapOrder::kCapThenAlibi};
    default:
      return {};  // no window or soft cap parameter; signed ALiBi (vLLM paged)
  }
}

/// Whether a kernel takes a sliding window, ALiBi slopes and a soft cap at all (a kernel without
/// one has a rule of its own saying so; conventions are compared only where both sides have it).
constexpr bool kernel_takes_window(EngineKernel k) noexcept {
  return k != EngineKernel::kVllmPagedAttentionV1 && k != EngineKernel::kVllmPagedAttentionV2 &&
         k != EngineKernel::kFlashMlaDecode;
}
constexpr bool kernel_takes_alibi(EngineKernel k) noexcept {
  return k != EngineKernel::kFlashInferPrefillFa3 && k != EngineKernel::kFlashAttention3 &&
         k != EngineKernel::kFlashMlaDecode;
}
constexpr bool kernel_takes_soft_cap(EngineKernel k) noexcept {
  return k != EngineKernel::kVllmPagedAttentionV1 && k != EngineKernel::kVllmPagedAttentionV2 &&
         k != EngineKernel::kFlashMlaDecode;
}

/// A difference between a configuration's conventions and a kernel's.
struct ConventionMismatch {
  const char* convention;  ///< "window", "alibi" or "soft_cap_order"
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

}  // namespace detail

/// Every convention of `config` that `kernel` reads differently. Differences that change no
/// number (ALiBi's sign under a causal mask) are not reported.
inline std::vector<ConventionMismatch> convention_mismatches(const EngineConfig& config,
                                                             EngineKernel kernel) {
  const AttentionConventions engine = engine_conventions(kernel);
  std::vector<ConventionMismatch> out;
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

}  // namespace attnref
