// SPDX-License-Identifier: Apache-2.0
/// @file engine_rule.hpp
/// One rule of an engine kernel, as data: what it requires of a configuration, what happens when
/// a configuration breaks it (the severity), the engine's own message, where the rule lives in
/// the engine's source, and how to fix a configuration that breaks it. `EngineFinding` is a
/// broken rule rendered for one configuration.
#pragma once

#include <cstdint>
#include <string>

#include "attnref/core/status.hpp"
#include "attnref/validate/engines/engine_target.hpp"

namespace attnref {

/// What an engine does with a configuration that breaks a rule, worst first: reports sort by it.
enum class Severity : int {
  kOutOfBounds,    ///< the kernel reads or writes outside its buffers (no check upstream)
  kSilentlyWrong,  ///< the kernel runs and returns wrong numbers, without a word
  kRejects,        ///< the engine raises an error with a stable message
  kFailsToBuild,   ///< the kernel's JIT or nvcc build fails (a static_assert)
  kFallsBack,      ///< the engine quietly picks another (slower) kernel
};

/// "out of bounds", "silently wrong", "rejects", "fails to build" or "falls back".
constexpr const char* severity_name(Severity s) noexcept {
  switch (s) {
    case Severity::kOutOfBounds:
      return "out of bounds";
    case Severity::kSilentlyWrong:
      return "silently wrong";
    case Severity::kRejects:
      return "rejects";
    case Severity::kFailsToBuild:
      return "fails to build";
    case Severity::kFallsBack:
      return "falls back";
  }
  return "unknown";
}

/// A predicate over a configuration in its target's context.
using EngineRulePredicate = bool (*)(const EngineConfig&, const EngineTarget&);

/// The `applies` of a rule that holds for every configuration of its kernel.
constexpr bool every_configuration(const EngineConfig&, const EngineTarget&) noexcept {
  return true;
}

/// One rule. The three texts are `Status` format strings over the configuration's values:
/// `{0}` num_q_heads, `{1}` num_kv_heads, `{2}` head_dim, `{3}` V's head_dim, `{4}` page_size,
/// `{5}` num_q_heads / num_kv_heads as the engine divides (integer quotient), `{d6}` q's dtype,
/// `{7}` query tokens per request; `{k0}` the divisors of num_q_heads.
struct EngineRule {
  const char* id;  ///< "flashinfer.decode.group_size"
  Severity severity;
  EngineRulePredicate holds;  ///< true when the configuration satisfies the rule
  const char* upstream;       ///< the engine's exact message ("" when it says nothing)
  const char* explanation;    ///< what goes wrong, in attnref's words
  const char* fix;            ///< what to change
  const char* source;         ///< "repo@commit path function"
  EngineVersion from{};       ///< first version the rule holds for ({} : every earlier one)
  EngineVersion until{};      ///< first version it no longer holds for ({} : still holds)
  EngineRulePredicate applies = every_configuration;  ///< which configurations it covers
};

/// Whether `rule` is in force for `target`'s version.
constexpr bool rule_in_version(const EngineRule& rule, const EngineTarget& target) noexcept {
  const EngineVersion v = effective_version(target);
  if (v < rule.from) return false;
  return rule.until == EngineVersion{} || v < rule.until;
}

namespace detail {

// Predicates several engines' tables share.
constexpr std::int64_t engine_group_size(const EngineConfig& c) noexcept {
  return c.num_kv_heads > 0 ? c.num_q_heads / c.num_kv_heads : 0;
}
constexpr bool heads_divide(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.num_kv_heads > 0 && c.num_q_heads % c.num_kv_heads == 0;
}
constexpr bool no_sinks(const EngineConfig& c, const EngineTarget&) noexcept { return !c.sinks; }
constexpr bool no_alibi(const EngineConfig& c, const EngineTarget&) noexcept { return !c.alibi; }
constexpr bool no_soft_cap(const EngineConfig& c, const EngineTarget&) noexcept {
  return !c.soft_cap;
}
constexpr bool no_sliding_window(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.sliding_window == 0;
}
constexpr bool kv_dtype_is_q_dtype(const EngineConfig& c, const EngineTarget&) noexcept {
  return c.kv_dtype == c.q_dtype;
}
constexpr bool q_is_16_bit(const EngineConfig& c, const EngineTarget&) noexcept {
  return is_16_bit_float(c.q_dtype);
}

}  // namespace detail

/// The values a rule's texts refer to, in the order EngineRule documents.
constexpr Status::Ints engine_rule_values(const EngineConfig& c) noexcept {
  return {c.num_q_heads,
          c.num_kv_heads,
          c.head_dim,
          value_head_dim(c),
          c.page_size,
          detail::engine_group_size(c),
          static_cast<std::int64_t>(c.q_dtype),
          c.q_len};
}

/// A rule that a configuration breaks, rendered for that configuration.
class EngineFinding {
 public:
  constexpr EngineFinding(const EngineRule& rule, EngineKernel kernel,
                          const EngineConfig& config) noexcept
      : rule_(&rule), kernel_(kernel), values_(engine_rule_values(config)) {}

  constexpr const EngineRule& rule() const noexcept { return *rule_; }
  constexpr const char* id() const noexcept { return rule_->id; }
  constexpr Severity severity() const noexcept { return rule_->severity; }
  constexpr EngineKernel kernel() const noexcept { return kernel_; }

  /// The engine's own message, values filled in; "" when the engine says nothing.
  std::string upstream_message() const { return render(rule_->upstream); }
  /// What goes wrong, in attnref's words.
  std::string explanation() const { return render(rule_->explanation); }
  /// What to change.
  std::string hint() const { return render(rule_->fix); }

  /// The finding as a Status (code kEngineRule, field = the rule id): its message is the
  /// engine's message, or the explanation when the engine says nothing; its hint is the fix.
  constexpr Status status() const noexcept {
    return Status(ErrorCode::kEngineRule, "",
                  rule_->upstream[0] != '\0' ? rule_->upstream : rule_->explanation, rule_->fix,
                  values_, {}, rule_->id);
  }

  /// `<kernel> <id> (<severity>): <message> (hint: <fix>)`.
  std::string to_string() const {
    std::string s = std::string(engine_kernel_name(kernel_)) + " " + rule_->id + " (" +
                    severity_name(rule_->severity) + "): " + status().message();
    const std::string h = hint();
    if (!h.empty()) s += " (hint: " + h + ")";
    return s;
  }

 private:
  std::string render(const char* format) const {
    if (format[0] == '\0') return std::string();
    return Status(ErrorCode::kEngineRule, "", format, "", values_).message();
  }

  const EngineRule* rule_;
  EngineKernel kernel_;
  Status::Ints values_;
};

}  // namespace attnref
