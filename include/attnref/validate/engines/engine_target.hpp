// SPDX-License-Identifier: Apache-2.0
/// @file engine_target.hpp
/// What an engine check is asked about: an engine kernel with its context (GPU architecture,
/// engine version, build flags) and a model's attention configuration. Everything is a literal
/// type, so a constant configuration is checked by `static_assert` (see check_engine.hpp).
///
/// Example:
/// @code
///   constexpr attnref::EngineConfig kQwen2_7b{28, 4, 128};        // bf16 q and K/V
///   constexpr attnref::EngineTarget kDecode{attnref::EngineKernel::kFlashInferDecode, 90};
/// @endcode
#pragma once

#include <cstdint>
#include <string>

#include "attnref/core/dtype.hpp"
#include "attnref/validate/engines/causal_alignment.hpp"
#include "attnref/validate/logit_conventions.hpp"

namespace attnref {

/// An engine's attention kernel, as a caller reaches it.
enum class EngineKernel : int {
  kFlashInferDecode,             ///< FlashInfer batch decode, CUDA cores (use_tensor_cores=False)
  kFlashInferDecodeTensorCores,  ///< FlashInfer batch decode on the fa2 prefill kernels
  kFlashInferPrefillFa2,         ///< FlashInfer batch prefill, paged or ragged, backend fa2
  kFlashInferPrefillFa3,         ///< FlashInfer batch prefill, paged or ragged, backend fa3
  kVllmPagedAttentionV1,         ///< vLLM's paged_attention_v1 CUDA kernel
  kVllmPagedAttentionV2,         ///< vLLM's paged_attention_v2 CUDA kernel
  kVllmFlashAttn,                ///< vLLM's FLASH_ATTN backend (its FlashAttention fork)
  kVllmTritonAttn,               ///< vLLM's TRITON_ATTN backend (its unified Triton kernel)
  kVllmFlashInfer,               ///< vLLM's FLASHINFER backend (FlashInfer's wrappers)
  kVllmFlashAttnMla,             ///< vLLM's FLASH_ATTN_MLA backend (MLA on FlashAttention 3)
  kVllmFlashMla,                 ///< vLLM's FLASHMLA backend (MLA decode, sm90)
  kVllmCutlassMla,               ///< vLLM's CUTLASS_MLA backend (MLA decode, sm100)
  kVllmTritonMla,                ///< vLLM's TRITON_MLA backend (MLA decode, any GPU)
  kVllmFlashInferMla,            ///< vLLM's FLASHINFER_MLA backend (MLA decode, sm100)
  kFlashAttention2,              ///< FlashAttention-2 upstream: varlen, paged KV, kvcache
  kFlashAttention3,              ///< FlashAttention-3 upstream (hopper/)
  kFlashAttention4,              ///< FlashAttention-4 (flash_attn/cute), as vLLM ships it
  kFlashMlaDecode,               ///< FlashMLA dense decode
  kSglangTritonDecode,           ///< SGLang's Triton decode kernel (decode_attention_fwd)
  kSglangTritonExtend,           ///< SGLang's Triton extend (prefill) kernel
};

/// Every engine kernel, in the order tables and reports list them.
inline constexpr EngineKernel kEngineKernels[] = {
    EngineKernel::kFlashInferDecode,     EngineKernel::kFlashInferDecodeTensorCores,
    EngineKernel::kFlashInferPrefillFa2, EngineKernel::kFlashInferPrefillFa3,
    EngineKernel::kVllmPagedAttentionV1, EngineKernel::kVllmPagedAttentionV2,
    EngineKernel::kVllmFlashAttn,        EngineKernel::kVllmTritonAttn,
    EngineKernel::kVllmFlashInfer,       EngineKernel::kVllmFlashAttnMla,
    EngineKernel::kVllmFlashMla,         EngineKernel::kVllmCutlassMla,
    EngineKernel::kVllmTritonMla,        EngineKernel::kVllmFlashInferMla,
    EngineKernel::kFlashAttention2,      EngineKernel::kFlashAttention3,
    EngineKernel::kFlashAttention4,      EngineKernel::kFlashMlaDecode,
    EngineKernel::kSglangTritonDecode,   EngineKernel::kSglangTritonExtend,
};

/// Stable name of a kernel: "flashinfer.decode", "vllm.paged_attention_v1", ...
constexpr const char* engine_kernel_name(EngineKernel k) noexcept {
  switch (k) {
    case EngineKernel::kFlashInferDecode:
      return "flashinfer.decode";
    case EngineKernel::kFlashInferDecodeTensorCores:
      return "flashinfer.decode.tensor_cores";
    case EngineKernel::kFlashInferPrefillFa2:
      return "flashinfer.prefill.fa2";
    case EngineKernel::kFlashInferPrefillFa3:
      return "flashinfer.prefill.fa3";
    case EngineKernel::kVllmPagedAttentionV1:
      return "vllm.paged_attention_v1";
    case EngineKernel::kVllmPagedAttentionV2:
      return "vllm.paged_attention_v2";
    case EngineKernel::kVllmFlashAttn:
      return "vllm.flash_attn";
    case EngineKernel::kVllmTritonAttn:
      return "vllm.triton_attn";
    case EngineKernel::kVllmFlashInfer:
      return "vllm.flashinfer";
    case EngineKernel::kVllmFlashAttnMla:
      return "vllm.flash_attn_mla";
    case EngineKernel::kVllmFlashMla:
      return "vllm.flashmla";
    case EngineKernel::kVllmCutlassMla:
      return "vllm.cutlass_mla";
    case EngineKernel::kVllmTritonMla:
      return "vllm.triton_mla";
    case EngineKernel::kVllmFlashInferMla:
      return "vllm.flashinfer_mla";
    case EngineKernel::kFlashAttention2:
      return "flash_attn2";
    case EngineKernel::kFlashAttention3:
      return "flash_attn3";
    case EngineKernel::kFlashAttention4:
      return "flash_attn4";
    case EngineKernel::kFlashMlaDecode:
      return "flashmla.decode";
    case EngineKernel::kSglangTritonDecode:
      return "sglang.triton_decode";
    case EngineKernel::kSglangTritonExtend:
      return "sglang.triton_extend";
  }
  return "unknown";
}

/// An engine release, compared component by component. {0, 0, 0} stands for "the pinned one".
struct EngineVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
};

constexpr bool operator<(const EngineVersion& a, const EngineVersion& b) noexcept {
  if (a.major != b.major) return a.major < b.major;
  if (a.minor != b.minor) return a.minor < b.minor;
  return a.patch < b.patch;
}
constexpr bool operator==(const EngineVersion& a, const EngineVersion& b) noexcept {
  return a.major == b.major && a.minor == b.minor && a.patch == b.patch;
}

/// The release whose source the kernel's rules were read from (docs/engines.md lists the
/// commits); a target with version {0, 0, 0} is checked as this one.
constexpr EngineVersion pinned_engine_version(EngineKernel k) noexcept {
  switch (k) {
    case EngineKernel::kFlashInferDecode:
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
    case EngineKernel::kFlashInferPrefillFa3:
      return {0, 7, 2};  // flashinfer-python 0.7.2.post1
    case EngineKernel::kFlashAttention2:
    case EngineKernel::kFlashAttention3:
      return {2, 8, 3};
    case EngineKernel::kVllmPagedAttentionV1:
    case EngineKernel::kVllmPagedAttentionV2:
    case EngineKernel::kVllmFlashAttn:
    case EngineKernel::kVllmTritonAttn:
    case EngineKernel::kVllmFlashInfer:
    case EngineKernel::kVllmFlashAttnMla:
    case EngineKernel::kVllmFlashMla:
    case EngineKernel::kVllmCutlassMla:
    case EngineKernel::kVllmTritonMla:
    case EngineKernel::kVllmFlashInferMla:
    case EngineKernel::kFlashAttention4:
      return {0, 33, 0};
    case EngineKernel::kSglangTritonDecode:
    case EngineKernel::kSglangTritonExtend:
      return {0, 5, 23};
    default:
      return {0, 0, 0};  // FlashMLA has no releases: its rules are read at one commit
  }
}

/// Build options that change an engine's rules.
enum EngineBuildFlag : std::uint32_t {
  /// FlashAttention-2 built with FLASHATTENTION_DISABLE_UNEVEN_K (vLLM's FA2 wheels of 2025).
  kFa2DisableUnevenK = 1u << 0,
};

/// The GPU architectures a target may name, as compute capability x 10 (sm90 is 90).
inline constexpr int kEngineArchs[] = {80, 86, 89, 90, 100, 120};

/// An engine kernel in its context. The architecture is given, never detected.
struct EngineTarget {
  EngineKernel kernel = EngineKernel::kFlashInferDecode;
  int arch = 90;                  ///< compute capability x 10: 80, 86, 89, 90, 100 or 120
  EngineVersion version{};        ///< {0, 0, 0}: the pinned version
  std::uint32_t build_flags = 0;  ///< EngineBuildFlag bits
};

/// A release of each engine package ({0, 0, 0}: the pinned one), for a whole matrix.
struct EngineVersions {
  EngineVersion flashinfer;  ///< flashinfer-python
  EngineVersion vllm;        ///< vllm
  EngineVersion flash_attn;  ///< flash-attn
  EngineVersion sglang;      ///< sglang
};

/// The release `versions` gives the package of kernel `k` ({0, 0, 0} for FlashMLA).
constexpr EngineVersion engine_version_in(const EngineVersions& versions, EngineKernel k) noexcept {
  switch (k) {
    case EngineKernel::kFlashInferDecode:
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
    case EngineKernel::kFlashInferPrefillFa3:
      return versions.flashinfer;
    case EngineKernel::kVllmPagedAttentionV1:
    case EngineKernel::kVllmPagedAttentionV2:
    case EngineKernel::kVllmFlashAttn:
    case EngineKernel::kVllmTritonAttn:
    case EngineKernel::kVllmFlashInfer:
    case EngineKernel::kVllmFlashAttnMla:
    case EngineKernel::kVllmFlashMla:
    case EngineKernel::kVllmCutlassMla:
    case EngineKernel::kVllmTritonMla:
    case EngineKernel::kVllmFlashInferMla:
    case EngineKernel::kFlashAttention4:
      return versions.vllm;
    case EngineKernel::kFlashAttention2:
    case EngineKernel::kFlashAttention3:
      return versions.flash_attn;
    case EngineKernel::kSglangTritonDecode:
    case EngineKernel::kSglangTritonExtend:
      return versions.sglang;
    case EngineKernel::kFlashMlaDecode:
      return {};
  }
  return {};
}

/// The version a target is checked as.
constexpr EngineVersion effective_version(const EngineTarget& t) noexcept {
  return t.version == EngineVersion{} ? pinned_engine_version(t.kernel) : t.version;
}

/// The engine package whose release a kernel's version counts ("flashinfer-python", "vllm",
/// "flash-attn"); FlashMLA has no releases and is named by the commit its rules were read at.
constexpr const char* engine_package(EngineKernel k) noexcept {
  switch (k) {
    case EngineKernel::kFlashInferDecode:
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
    case EngineKernel::kFlashInferPrefillFa3:
      return "flashinfer-python";
    case EngineKernel::kVllmPagedAttentionV1:
    case EngineKernel::kVllmPagedAttentionV2:
    case EngineKernel::kVllmFlashAttn:
    case EngineKernel::kVllmTritonAttn:
    case EngineKernel::kVllmFlashInfer:
    case EngineKernel::kVllmFlashAttnMla:
    case EngineKernel::kVllmFlashMla:
    case EngineKernel::kVllmCutlassMla:
    case EngineKernel::kVllmTritonMla:
    case EngineKernel::kVllmFlashInferMla:
    case EngineKernel::kFlashAttention4:
      return "vllm";
    case EngineKernel::kFlashAttention2:
    case EngineKernel::kFlashAttention3:
      return "flash-attn";
    case EngineKernel::kSglangTritonDecode:
    case EngineKernel::kSglangTritonExtend:
      return "sglang";
    case EngineKernel::kFlashMlaDecode:
      return "FlashMLA@9241ae3ef9ba";
  }
  return "unknown";
}

/// What a target's answer describes: "vllm 0.33.0", "flash-attn 2.8.3", or FlashMLA's commit.
inline std::string engine_version_name(const EngineTarget& t) {
  const EngineVersion v = effective_version(t);
  std::string name = engine_package(t.kernel);
  if (v == EngineVersion{}) return name;
  return name + " " + std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
         std::to_string(v.patch);
}

/// What a sliding-window number counts.
enum class WindowConvention : int {
  kKeys,             ///< W keys including the query's own: `p - W < t <= p` (attnref, JAX, HF)
  kKeysLeftOfQuery,  ///< W keys left of the query, W + 1 in all (FlashInfer window_left, FA)
};

/// The meaning of a configuration's numbers and features.
struct AttentionConventions {
  WindowConvention window = WindowConvention::kKeys;
  AlibiConvention alibi = AlibiConvention::kSigned;
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;
  CausalAlignment causal_alignment = CausalAlignment::kBottomRight;
};

/// One attention layer as the engines see it. Its numbers mean what `conventions` says
/// (attnref's by default: a window of W keys sees `p - W < t <= p`; the soft cap is
/// `c * tanh(x / c)`, then ALiBi adds `slope * (key_pos - query_pos)`; a causal mask is aligned
/// bottom-right); a sink is one extra logit per query head.
struct EngineConfig {
  std::int64_t num_q_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;    ///< q and K head_dim
  std::int64_t head_dim_v = 0;  ///< V head_dim; 0 means "same as head_dim"
  std::int64_t page_size = 0;   ///< tokens per KV page; 0 means "not paged"
  DType q_dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  std::int64_t sliding_window = 0;  ///< W; 0 means none
  bool soft_cap = false;
  bool alibi = false;
  bool sinks = false;
  std::int64_t q_len = 1;  ///< query tokens per request in one call (1 for decode)
  /// Keys per request, its cached prefix included; 0 means unknown. A batch states its longest
  /// query run (q_len) plus its longest cached prefix.
  std::int64_t kv_len = 0;
  bool causal = true;                  ///< a causal mask, aligned as `conventions` says
  AttentionConventions conventions{};  ///< what sliding_window and the features mean here
};

/// V's head_dim with the default resolved.
constexpr std::int64_t value_head_dim(const EngineConfig& c) noexcept {
  return c.head_dim_v == 0 ? c.head_dim : c.head_dim_v;
}

/// An MLA layer, stated as its decode over the latent cache: V narrower than K (any V head_dim
/// other than K's). vLLM's MLA backends take only such a layer, its other backends refuse it.
constexpr bool is_mla_layer(const EngineConfig& c) noexcept {
  return value_head_dim(c) != c.head_dim;
}

constexpr bool is_fp8(DType t) noexcept {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2;
}

constexpr bool is_16_bit_float(DType t) noexcept {
  return t == DType::kFloat16 || t == DType::kBFloat16;
}

}  // namespace attnref
