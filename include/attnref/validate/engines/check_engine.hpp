// SPDX-License-Identifier: Apache-2.0
/// @file check_engine.hpp
/// Would an engine's kernel accept this attention configuration, and compute it right?
/// `check_engine` evaluates every rule of the target's kernel and reports every rule the
/// configuration breaks, worst first; `engine_finding_count` does the same count at compile time.
///
/// Example:
/// @code
///   constexpr attnref::EngineConfig kQwen2_7b{28, 4, 128, 0, 16};  // 7 query heads per KV head
///   constexpr attnref::EngineTarget kDecode{attnref::EngineKernel::kFlashInferDecode, 90};
///   static_assert(attnref::engine_finding_count(kQwen2_7b, kDecode) == 1);  // group size 7
///   attnref::EngineReport r = attnref::check_engine(kQwen2_7b, kDecode);
///   for (const auto& f : r.findings) std::cerr << f.to_string() << "\n";
/// @endcode
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnref/core/status.hpp"
#include "attnref/validate/engines/engine_conventions.hpp"
#include "attnref/validate/engines/engine_rule.hpp"
#include "attnref/validate/engines/engine_target.hpp"
#include "attnref/validate/engines/flash_attention4_rules.hpp"
#include "attnref/validate/engines/flash_attention_rules.hpp"
#include "attnref/validate/engines/flash_mla_rules.hpp"
#include "attnref/validate/engines/flashinfer_rules.hpp"
#include "attnref/validate/engines/sglang_rules.hpp"
#include "attnref/validate/engines/vllm_mla_rules.hpp"
#include "attnref/validate/engines/vllm_rules.hpp"

namespace attnref {

/// A kernel's rules: a view of one of the constexpr tables.
struct EngineRuleTable {
  const EngineRule* const* rules = nullptr;
  std::size_t count = 0;
  constexpr const EngineRule* const* begin() const noexcept { return rules; }
  constexpr const EngineRule* const* end() const noexcept { return rules + count; }
};

namespace detail {
template <std::size_t N>
constexpr EngineRuleTable table_of(const EngineRule* const (&rules)[N]) noexcept {
  return {rules, N};
}
}  // namespace detail

/// Every rule of `kernel`, in the order its engine checks them where that order is known.
constexpr EngineRuleTable engine_rules(EngineKernel kernel) noexcept {
  switch (kernel) {
    case EngineKernel::kFlashInferDecode:
      return detail::table_of(kFlashInferDecodeRules);
    case EngineKernel::kFlashInferDecodeTensorCores:
    case EngineKernel::kFlashInferPrefillFa2:
      return detail::table_of(kFlashInferFa2Rules);
    case EngineKernel::kFlashInferPrefillFa3:
      return detail::table_of(kFlashInferFa3Rules);
    case EngineKernel::kVllmPagedAttentionV1:
    case EngineKernel::kVllmPagedAttentionV2:
      return detail::table_of(kVllmPagedAttentionRules);
    case EngineKernel::kVllmFlashAttn:
      return detail::table_of(kVllmFlashAttnRules);
    case EngineKernel::kVllmTritonAttn:
      return detail::table_of(kVllmTritonAttnRules);
    case EngineKernel::kVllmFlashInfer:
      return detail::table_of(kVllmFlashInferRules);
    case EngineKernel::kVllmFlashAttnMla:
      return detail::table_of(kVllmFlashAttnMlaRules);
    case EngineKernel::kVllmFlashMla:
      return detail::table_of(kVllmFlashMlaRules);
    case EngineKernel::kVllmCutlassMla:
      return detail::table_of(kVllmCutlassMlaRules);
    case EngineKernel::kVllmTritonMla:
      return detail::table_of(kVllmTritonMlaRules);
    case EngineKernel::kVllmFlashInferMla:
      return detail::table_of(kVllmFlashInferMlaRules);
    case EngineKernel::kFlashAttention2:
      return detail::table_of(kFlashAttention2Rules);
    case EngineKernel::kFlashAttention3:
      return detail::table_of(kFlashAttention3Rules);
    case EngineKernel::kFlashAttention4:
      return detail::table_of(kFlashAttention4Rules);
    case EngineKernel::kFlashMlaDecode:
      return detail::table_of(kFlashMlaDecodeRules);
    case EngineKernel::kSglangTritonDecode:
      return detail::table_of(kSglangTritonDecodeRules);
    case EngineKernel::kSglangTritonExtend:
      return detail::table_of(kSglangTritonExtendRules);
  }
  return {};
}

/// Whether `rule` is in force for `target` and `config` breaks it.
constexpr bool engine_rule_fails(const EngineRule& rule, const EngineConfig& config,
                                 const EngineTarget& target) noexcept {
  if (!rule_in_version(rule, target)) return false;
  if (!rule.applies(config, target)) return false;
  return !rule.holds(config, target);
}

/// Checks what the rules assume of every configuration: positive head counts and head dims,
/// a page size of 0 (not paged) or more, at least one query token, a window of 0 (none) or more,
/// a kv_len of 0 (unknown) or more.
constexpr Status check_engine_config(const EngineConfig& c) noexcept {
  if (c.num_q_heads <= 0 || c.num_kv_heads <= 0) {
    return Status(ErrorCode::kInvalidHeadCount, "",
                  "num_q_heads and num_kv_heads must be positive. Got {0} and {1}.",
                  "a layer has at least one query head and one KV head",
                  {c.num_q_heads, c.num_kv_heads});
  }
  if (c.head_dim <= 0 || c.head_dim_v < 0) {
    return Status(ErrorCode::kInvalidHeadDim, "",
                  "head_dim must be positive and head_dim_v 0 (same) or positive. Got {0} and {1}.",
                  "head_dim is the size of one head's vectors, e.g. 64 or 128",
                  {c.head_dim, c.head_dim_v});
  }
  if (c.page_size < 0) {
    return Status(ErrorCode::kInvalidPageSize, "",
                  "page_size must be 0 (not paged) or positive. "
                  "Got {0}.",
                  "tokens per KV page, e.g. 16", {c.page_size});
  }
  if (c.q_len <= 0 || c.sliding_window < 0) {
    return Status(
        ErrorCode::kInvalidSlidingWindow, "",
        "q_len must be positive and sliding_window 0 (none) or positive. Got {0} and {1}.",
        "q_len is 1 for decode", {c.q_len, c.sliding_window});
  }
  if (c.kv_len < 0) {
    return Status(ErrorCode::kLengthOutOfRange, "",
                  "kv_len must be 0 (unknown) or positive. Got {0}.",
                  "kv_len counts a request's keys, its cached prefix included", {c.kv_len});
  }
  return Status();
}

/// Checks that a target names an architecture attnref knows.
constexpr Status check_engine_target(const EngineTarget& t) noexcept {
  for (int arch : kEngineArchs) {
    if (t.arch == arch) return Status();
  }
  return Status(ErrorCode::kUnknownEngineTarget, "",
                "attnref has no rules for GPU architecture sm{0}.",
                "known architectures: sm80, sm86, sm89, sm90, sm100, sm120", {t.arch});
}

/// How many of `target`'s rules `config` breaks; 0 means the kernel accepts it and computes it
/// right, as far as attnref's tables know. Usable in `static_assert`. -1 for an invalid
/// configuration or target.
constexpr int engine_finding_count(const EngineConfig& config,
                                   const EngineTarget& target) noexcept {
  if (!check_engine_config(config).ok() || !check_engine_target(target).ok()) return -1;
  int n = 0;
  for (const EngineRule* rule : engine_rules(target.kernel)) {
    if (engine_rule_fails(*rule, config, target)) ++n;
  }
  return n;
}

/// What `check_engine` found: an invalid configuration or target (`status`), or every broken
/// rule, worst severity first (ties in table order), and the conventions to convert.
struct EngineReport {
  Status status;
  std::vector<EngineFinding> findings;
  std::vector<ConventionMismatch> conventions;
  /// True when the configuration is valid and breaks no rule.
  bool ok() const noexcept { return status.ok() && findings.empty(); }
};

/// Every rule of `target`'s kernel that `config` breaks.
inline EngineReport check_engine(const EngineConfig& config, const EngineTarget& target) {
  EngineReport report;
  report.status = check_engine_config(config);
  if (report.status.ok()) report.status = check_engine_target(target);
  if (!report.status.ok()) return report;
  for (const EngineRule* rule : engine_rules(target.kernel)) {
    if (engine_rule_fails(*rule, config, target)) {
      report.findings.emplace_back(*rule, target.kernel, config);
    }
  }
  std::stable_sort(report.findings.begin(), report.findings.end(),
                   [](const EngineFinding& a, const EngineFinding& b) {
                     return static_cast<int>(a.severity()) < static_cast<int>(b.severity());
                   });
  report.conventions = convention_mismatches(config, target);
  return report;
}

}  // namespace attnref
