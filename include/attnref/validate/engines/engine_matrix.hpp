// SPDX-License-Identifier: Apache-2.0
/// @file engine_matrix.hpp
/// The compatibility matrix of one attention configuration: every engine kernel on one GPU
/// architecture, each with its verdict, every broken rule, and for a kernel that refuses the
/// configuration (or would compute it wrong) the nearest configuration it takes.
///
/// Example:
/// @code
///   for (const attnref::EngineMatrixRow& row : attnref::engine_matrix({28, 4, 128, 0, 16}, 90))
///     std::cout << attnref::engine_kernel_name(row.target.kernel) << " "
///               << attnref::verdict_name(row.verdict) << "\n";
/// @endcode
#pragma once

#include <cstdint>
#include <vector>

#include "attnref/validate/engines/check_engine.hpp"

namespace attnref {

/// A kernel's answer for a configuration.
enum class EngineVerdict : int {
  kAccepts,  ///< no rule broken, or only a fall-back to another kernel
  kHazard,   ///< the kernel runs but computes wrong numbers or reaches out of bounds
  kRejects,  ///< the engine raises an error or its kernel fails to build
};

/// "accepts", "hazard" or "rejects".
constexpr const char* verdict_name(EngineVerdict v) noexcept {
  return v == EngineVerdict::kAccepts  ? "accepts"
         : v == EngineVerdict::kHazard ? "hazard"
                                       : "rejects";
}

/// The verdict a list of findings adds up to.
inline EngineVerdict verdict_of(const std::vector<EngineFinding>& findings) noexcept {
  EngineVerdict v = EngineVerdict::kAccepts;
  for (const EngineFinding& f : findings) {
    if (f.severity() == Severity::kRejects || f.severity() == Severity::kFailsToBuild) {
      return EngineVerdict::kRejects;
    }
    if (f.severity() != Severity::kFallsBack) v = EngineVerdict::kHazard;
  }
  return v;
}

/// One field of a configuration changed: booleans as 0 and 1, dtypes as their `DType` value.
struct EngineConfigChange {
  const char* field;  ///< "num_kv_heads", "head_dim", "page_size", "kv_dtype", "sinks", ...
  std::int64_t from;
  std::int64_t to;
};

/// One row of the matrix. `nearest` is set when the verdict is not kAccepts and a configuration
/// at most two changes away is accepted; `changes` says what changed.
struct EngineMatrixRow {
  EngineTarget target;
  EngineVerdict verdict = EngineVerdict::kAccepts;
  std::vector<EngineFinding> findings;
  std::vector<ConventionMismatch> conventions;  ///< values to convert when calling the kernel
  bool has_nearest = false;
  EngineConfig nearest;
  std::vector<EngineConfigChange> changes;
};

namespace detail {

struct CandidateChange {
  EngineConfigChange change;
  int cost;  // smaller is nearer: a page size before a head count before dropping a feature
};

inline void apply_change(EngineConfig& c, const EngineConfigChange& ch) noexcept {
  const std::string_view f = ch.field;
  if (f == "num_kv_heads") c.num_kv_heads = ch.to;
  if (f == "head_dim") c.head_dim = ch.to;
  if (f == "head_dim_v") c.head_dim_v = ch.to;
  if (f == "page_size") c.page_size = ch.to;
  if (f == "q_dtype") c.q_dtype = static_cast<DType>(ch.to);
  if (f == "kv_dtype") c.kv_dtype = static_cast<DType>(ch.to);
  if (f == "sliding_window") c.sliding_window = ch.to;
  if (f == "soft_cap") c.soft_cap = ch.to != 0;
  if (f == "alibi") c.alibi = ch.to != 0;
  if (f == "sinks") c.sinks = ch.to != 0;
}

// How far apart two sizes are, as a cost: at most 1 << 20, so costs add without overflow.
inline int distance_cost(std::int64_t a, std::int64_t b, std::int64_t per) noexcept {
  const std::uint64_t d = a > b ? static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b)
                                : static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a);
  const std::uint64_t cost = d / static_cast<std::uint64_t>(per);
  return cost > (1u << 20) ? (1 << 20) : static_cast<int>(cost);
}

// The single-field changes worth trying, each with its cost.
inline std::vector<CandidateChange> candidate_changes(const EngineConfig& c) {
  std::vector<CandidateChange> out;
  const auto add = [&](const char* field, std::int64_t from, std::int64_t to, int cost) {
    if (from != to) out.push_back({{field, from, to}, cost});
  };
  for (std::int64_t p : {8, 16, 32, 64, 128, 256}) {
    add("page_size", c.page_size, p, 10 + distance_cost(c.page_size, p, 8));
  }
  for (std::int64_t kv = 1; kv <= c.num_q_heads && kv <= 1024; ++kv) {
    if (c.num_q_heads % kv == 0) {
      add("num_kv_heads", c.num_kv_heads, kv, 20 + distance_cost(c.num_kv_heads, kv, 1));
    }
  }
  for (std::int64_t d : {32, 64, 80, 96, 112, 128, 192, 256, 512, 576}) {
    if (d >= c.head_dim) add("head_dim", c.head_dim, d, 30 + distance_cost(d, c.head_dim, 8));
  }
  if (c.head_dim_v != 0) add("head_dim_v", c.head_dim_v, 0, 35);
  for (std::int64_t dv : {128, 512}) add("head_dim_v", c.head_dim_v, dv, 36);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    add("q_dtype", static_cast<std::int64_t>(c.q_dtype), static_cast<std::int64_t>(t), 40);
  }
  add("kv_dtype", static_cast<std::int64_t>(c.kv_dtype), static_cast<std::int64_t>(c.q_dtype), 41);
  add("kv_dtype", static_cast<std::int64_t>(c.kv_dtype),
      static_cast<std::int64_t>(DType::kBFloat16), 42);
  add("sinks", c.sinks, 0, 60);
  add("alibi", c.alibi, 0, 61);
  add("soft_cap", c.soft_cap, 0, 62);
  add("sliding_window", c.sliding_window, 0, 63);
  return out;
}

inline bool accepted(const EngineConfig& c, const EngineTarget& t) {
  const EngineReport r = check_engine(c, t);
  return r.status.ok() && verdict_of(r.findings) == EngineVerdict::kAccepts;
}

// The cheapest accepted configuration one or two candidate changes away, if any.
inline void find_nearest(const EngineConfig& config, EngineMatrixRow& row) {
  const std::vector<CandidateChange> cands = candidate_changes(config);
  int best = -1;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    for (std::size_t j = i; j < cands.size(); ++j) {
      const bool pair = j != i;
      if (pair && std::string_view(cands[i].change.field) == cands[j].change.field) continue;
      const int cost = cands[i].cost + (pair ? cands[j].cost + 100 : 0);
      if (best >= 0 && cost >= best) continue;
      EngineConfig c = config;
      apply_change(c, cands[i].change);
      if (pair) apply_change(c, cands[j].change);
      if (!check_engine_config(c).ok() || !accepted(c, row.target)) continue;
      best = cost;
      row.has_nearest = true;
      row.nearest = c;
      row.changes.assign(1, cands[i].change);
      if (pair) row.changes.push_back(cands[j].change);
    }
  }
}

}  // namespace detail

/// Whether a matrix lists `kernel` for `config`: vLLM's MLA backends for MLA layers only, the
/// only layers vLLM considers them for; every other kernel always.
constexpr bool engine_matrix_lists(EngineKernel kernel, const EngineConfig& config) noexcept {
  return !is_vllm_mla_kernel(kernel) || is_mla_layer(config);
}

/// Every kernel of `kEngineKernels` on architecture `arch` (each engine at the release
/// `versions` names, the pinned one where it names none; `build_flags` for all) against
/// `config`, those `engine_matrix_lists` for it. An invalid configuration or architecture gives no
/// rows; check it first with `check_engine_config` and `check_engine_target`.
inline std::vector<EngineMatrixRow> engine_matrix(const EngineConfig& config, int arch,
                                                  std::uint32_t build_flags = 0,
                                                  const EngineVersions& versions = {}) {
  std::vector<EngineMatrixRow> rows;
  for (EngineKernel kernel : kEngineKernels) {
    if (!engine_matrix_lists(kernel, config)) continue;
    EngineMatrixRow row;
    row.target = {kernel, arch, engine_version_in(versions, kernel), build_flags};
    EngineReport report = check_engine(config, row.target);
    if (!report.status.ok()) return {};
    row.findings = std::move(report.findings);
    row.conventions = std::move(report.conventions);
    row.verdict = verdict_of(row.findings);
    if (row.verdict != EngineVerdict::kAccepts) detail::find_nearest(config, row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace attnref
