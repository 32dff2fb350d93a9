// SPDX-License-Identifier: Apache-2.0
/// @file vllm_selection.hpp
/// Which attention backend vLLM 0.33.0 selects for a decoder layer on a CUDA GPU, and why:
/// vLLM walks its priority list for the layer (MLA or not) and the GPU's compute capability and
/// takes the first backend whose selector check (`validate_configuration`) gives no reason. It
/// does not fall back when the chosen backend's implementation then refuses the layer: the
/// engine fails to start. `vllm_selection` says which backend is chosen, which were passed over
/// with their reasons, and what the chosen one refuses after selection (its implementation's and
/// kernel's checks). Judged against vLLM's own selector by tests/engines/vllm_judge.py.
///
/// Example:
/// @code
///   attnref::VllmSelection s = attnref::vllm_selection({32, 8, 128, 0, 16}, 100);
///   // s.selected == "FLASHINFER", s.kernel == EngineKernel::kVllmFlashInfer
/// @endcode
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "attnref/validate/engines/check_engine.hpp"

namespace attnref {

/// A backend vLLM tried before the one it selected, with its selector's reasons.
struct VllmPassedOver {
  std::string backend;               ///< vLLM's name: "FLASHINFER", "FLASH_ATTN_MLA", ...
  std::vector<std::string> reasons;  ///< the selector's texts ("head_size not supported")
};

/// vLLM's choice for a layer on an architecture.
struct VllmSelection {
  /// False where attnref does not model vLLM's choice: another vLLM release than 0.33.0, or a
  /// non-causal layer (vLLM orders its backends differently for those).
  bool modelled = false;
  std::string selected;  ///< vLLM's name of the backend it takes; "" when none is valid
  EngineKernel kernel = EngineKernel::kVllmFlashAttn;  ///< its target, where attnref has one
  bool has_kernel = false;                  ///< false for FLEX_ATTENTION (selector checks only)
  std::vector<VllmPassedOver> passed_over;  ///< the higher-priority backends, in vLLM's order
  /// What the selected backend refuses once built (its implementation's and kernel's messages).
  std::vector<std::string> refused_after_selection;
};

namespace detail {

// vLLM's validate_configuration reasons, as attnref's rules quote them: the selector's stage.
inline bool is_vllm_selector_reason(std::string_view text) {
  static constexpr std::string_view kReasons[] = {
      "head_size not supported",
      "dtype not supported",
      "kv_cache_dtype not supported",
      "block_size not supported",
      "MLA not supported",
      "non-MLA not supported",
      "attention sinks not supported",
      "compute capability not supported",
      "sliding window not supported",
      "sink not supported on compute capability < 9.0",
      "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100",
      "FlashMLA Dense is only supported on Hopper devices.",
      "FlashAttention MLA not supported on this device",
  };
  for (std::string_view r : kReasons) {
    if (text == r) return true;
  }
  return false;
}

struct VllmBackendEntry {
  const char* name;
  EngineKernel kernel;
  bool has_kernel;
};

// cuda.py _get_backend_priorities for a dense (not sparse) causal decoder layer without a
// multimodal prefix. TURBOQUANT (its own cache dtypes only) and TOKENSPEED_MLA (an fp8 cache
// with DeepSeek-R1's dims, a subset of what FLASHINFER_MLA, ahead of it, takes) are never
// chosen for such a layer and are left out.
inline std::vector<VllmBackendEntry> vllm_priorities(bool mla, int arch) {
  using K = EngineKernel;
  const int major = arch / 10;
  if (!mla && major == 10) {
    return {{"FLASHINFER", K::kVllmFlashInfer, true},
            {"FLASH_ATTN", K::kVllmFlashAttn, true},
            {"TRITON_ATTN", K::kVllmTritonAttn, true},
            {"FLEX_ATTENTION", K::kVllmFlashAttn, false}};
  }
  if (!mla) {
    return {{"FLASH_ATTN", K::kVllmFlashAttn, true},
            {"FLASHINFER", K::kVllmFlashInfer, true},
            {"TRITON_ATTN", K::kVllmTritonAttn, true},
            {"FLEX_ATTENTION", K::kVllmFlashAttn, false}};
  }
  if (major == 10) {
    return {{"FLASHINFER_MLA", K::kVllmFlashInferMla, true},
            {"CUTLASS_MLA", K::kVllmCutlassMla, true},
            {"FLASH_ATTN_MLA", K::kVllmFlashAttnMla, true},
            {"FLASHMLA", K::kVllmFlashMla, true},
            {"TRITON_MLA", K::kVllmTritonMla, true}};
  }
  if (major == 12) return {{"TRITON_MLA", K::kVllmTritonMla, true}};
  return {{"FLASH_ATTN_MLA", K::kVllmFlashAttnMla, true},
          {"FLASHMLA", K::kVllmFlashMla, true},
          {"FLASHINFER_MLA", K::kVllmFlashInferMla, true},
          {"TRITON_MLA", K::kVllmTritonMla, true}};
}

// FLEX_ATTENTION's selector (v1/attention/backends/flex_attention.py): float16, bfloat16 or
// float32, a 16-bit cache (no fp8), pages of a multiple of 16, no MLA, no sinks.
inline std::vector<std::string> flex_attention_reasons(const EngineConfig& c) {
  std::vector<std::string> r;
  if (!is_16_bit_float(c.q_dtype) && c.q_dtype != DType::kFloat32)
    r.push_back("dtype not supported");
  if (c.kv_dtype != c.q_dtype && !is_16_bit_float(c.kv_dtype)) {
    r.push_back("kv_cache_dtype not supported");
  }
  if (c.page_size <= 0 || c.page_size % 16 != 0) r.push_back("block_size not supported");
  if (is_mla_layer(c)) r.push_back("MLA not supported");
  if (c.sinks) r.push_back("attention sinks not supported");
  return r;
}

}  // namespace detail

/// vLLM 0.33.0's backend for `config` on `arch` (`vllm` the release asked about, {} for the
/// pinned one). The configuration must be valid (check_engine_config).
inline VllmSelection vllm_selection(const EngineConfig& config, int arch, EngineVersion vllm = {}) {
  VllmSelection out;
  const EngineVersion pinned = pinned_engine_version(EngineKernel::kVllmFlashAttn);
  if (!config.causal || !(vllm == EngineVersion{} || vllm == pinned)) return out;
  out.modelled = true;
  for (const detail::VllmBackendEntry& b : detail::vllm_priorities(is_mla_layer(config), arch)) {
    std::vector<std::string> reasons, after;
    if (!b.has_kernel) {
      reasons = detail::flex_attention_reasons(config);
    } else {
      for (const EngineFinding& f : check_engine(config, {b.kernel, arch}).findings) {
        if (f.severity() != Severity::kRejects) continue;
        const std::string text = f.upstream_message();
        (detail::is_vllm_selector_reason(text) ? reasons : after)
            .push_back(text.empty() ? f.explanation() : text);
      }
    }
    if (!reasons.empty()) {
      out.passed_over.push_back({b.name, std::move(reasons)});
      continue;
    }
    out.selected = b.name;
    out.kernel = b.kernel;
    out.has_kernel = b.has_kernel;
    out.refused_after_selection = std::move(after);
    break;
  }
  return out;
}

}  // namespace attnref
