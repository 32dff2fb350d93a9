// SPDX-License-Identifier: Apache-2.0
/// @file parse_engine_target.hpp
/// Engine kernels, GPU architectures and versions from their names ("flashinfer.decode",
/// "sm90", "0.6.17"), for front ends and configuration files. An unknown name is an error that
/// lists the known ones.
#pragma once

#include <cstdint>
#include <string_view>

#include "attnref/core/status.hpp"
#include "attnref/validate/engines/engine_target.hpp"

namespace attnref {

/// The kernel named `name` (engine_kernel_name's spelling).
constexpr Status parse_engine_kernel(std::string_view name, EngineKernel* kernel) noexcept {
  for (EngineKernel k : kEngineKernels) {
    if (name == engine_kernel_name(k)) {
      *kernel = k;
      return Status();
    }
  }
  return Status(ErrorCode::kUnknownEngineTarget, "", "attnref has no engine kernel of that name.",
                "known kernels: flashinfer.decode, flashinfer.decode.tensor_cores, "
                "flashinfer.prefill.fa2, flashinfer.prefill.fa3, vllm.paged_attention_v1, "
                "vllm.paged_attention_v2, vllm.flash_attn, vllm.triton_attn, vllm.flashinfer, "
                "vllm.flash_attn_mla, vllm.flashmla, vllm.cutlass_mla, vllm.triton_mla, "
                "vllm.flashinfer_mla, flash_attn2, flash_attn3, flash_attn4, flashmla.decode, "
                "sglang.triton_decode, sglang.triton_extend");
}

/// The architecture named "sm<NN>" (sm80, sm86, sm89, sm90, sm100, sm120), as NN.
constexpr Status parse_engine_arch(std::string_view name, int* arch) noexcept {
  int value = 0;
  bool digits = name.size() > 2 && name.size() <= 5 && name.substr(0, 2) == "sm";
  for (std::size_t i = 2; digits && i < name.size(); ++i) {
    digits = name[i] >= '0' && name[i] <= '9';
    value = value * 10 + (name[i] - '0');
  }
  if (digits) {
    for (int known : kEngineArchs) {
      if (value == known) {
        *arch = value;
        return Status();
      }
    }
  }
  return Status(ErrorCode::kUnknownEngineTarget, "",
                "attnref has no rules for that GPU architecture.",
                "known architectures: sm80, sm86, sm89, sm90, sm100, sm120");
}

/// A version "MAJOR.MINOR[.PATCH]" (each part 0 to 9999).
constexpr Status parse_engine_version(std::string_view text, EngineVersion* version) noexcept {
  int parts[3] = {0, 0, 0};
  int count = 0;
  int digits = 0;
  bool ok = !text.empty();
  for (std::size_t i = 0; ok && i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '.') {
      ok = digits > 0 && ++count < 3;
      digits = 0;
    } else if (ch >= '0' && ch <= '9' && digits < 4) {
      parts[count] = parts[count] * 10 + (ch - '0');
      ++digits;
    } else {
      ok = false;
    }
  }
  if (!ok || digits == 0 || count == 0) {
    return Status(ErrorCode::kUnknownEngineTarget, "",
                  "an engine version is MAJOR.MINOR or MAJOR.MINOR.PATCH.",
                  "e.g. 0.6.17 for FlashInfer, 2.8.3 for FlashAttention");
  }
  *version = {parts[0], parts[1], parts[2]};
  return Status();
}

/// Engine releases "PACKAGE=VERSION[,PACKAGE=VERSION...]" with PACKAGE flashinfer-python, vllm,
/// flash-attn or sglang ("vllm=0.32.0,flashinfer-python=0.6.17"); the packages not named keep
/// theirs.
constexpr Status parse_engine_versions(std::string_view text, EngineVersions* versions) noexcept {
  const Status unknown(ErrorCode::kUnknownEngineTarget, "",
                       "an engine version is PACKAGE=VERSION, PACKAGE one of flashinfer-python, "
                       "vllm, flash-attn, sglang.",
                       "e.g. vllm=0.32.0,flashinfer-python=0.6.17");
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return unknown;
    const std::string_view package = item.substr(0, eq);
    EngineVersion* slot = package == "flashinfer-python" ? &versions->flashinfer
                          : package == "vllm"            ? &versions->vllm
                          : package == "flash-attn"      ? &versions->flash_attn
                          : package == "sglang"          ? &versions->sglang
                                                         : nullptr;
    if (slot == nullptr) return unknown;
    ATTNREF_RETURN_IF_ERROR(parse_engine_version(item.substr(eq + 1), slot));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
    if (text.empty()) return unknown;
  }
  return Status();
}

}  // namespace attnref
