// SPDX-License-Identifier: Apache-2.0
// The engine compatibility matrix as attnref-run prints it and as the Python module returns it:
// a configuration from a model's config.json or from explicit fields, the matrix on one
// architecture with the backend vLLM would select, and its text and JSON renderings. Private to the
// front ends (not installed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"
#include "attnref/io/hf_config.hpp"
#include "attnref/validate/engines.hpp"

namespace attnref {
namespace frontend {

/// What a front end asks: a config.json's text, or explicit fields (`config`), on `arch`.
struct EngineQuery {
  bool from_hf_config = false;
  std::string hf_config_text;
  std::int64_t page_size = 16;  ///< with a config.json, which has no page size
  EngineConfig config;          ///< explicit fields (ignored with a config.json)
  std::string arch = "sm90";
  bool fa2_uneven_k_disabled = false;
  DType q_dtype = DType::kUnknown;   ///< overrides the configuration's when given
  DType kv_dtype = DType::kUnknown;  ///< overrides it when given; else the q dtype
  std::string engine_versions;       ///< "vllm=0.32.0,..." ("": the pinned releases)
};

/// A query resolved: the configuration, the notes on what came from defaults, the arch.
struct EngineAnswer {
  EngineConfig config;
  std::vector<std::string> notes;
  int arch = 0;
  std::vector<EngineMatrixRow> rows;
  VllmSelection vllm;  ///< vLLM's choice of backend (modelled for its pinned release)
};

inline Status answer_engine_query(const EngineQuery& q, EngineAnswer* out) {
  ATTNREF_RETURN_IF_ERROR(parse_engine_arch(q.arch, &out->arch));
  EngineVersions versions;
  ATTNREF_RETURN_IF_ERROR(parse_engine_versions(q.engine_versions, &versions));
  if (q.from_hf_config) {
    HfAttentionConfig hf;
    ATTNREF_RETURN_IF_ERROR(read_hf_config(q.hf_config_text, q.page_size, &hf));
    out->config = hf.config;
    out->notes = hf.notes;
  } else {
    out->config = q.config;
  }
  // A served dtype may differ from config.json's torch_dtype (an fp8 cache, say).
  if (q.q_dtype != DType::kUnknown) out->config.q_dtype = q.q_dtype;
  if (q.q_dtype != DType::kUnknown || q.kv_dtype != DType::kUnknown) {
    out->config.kv_dtype = q.kv_dtype != DType::kUnknown ? q.kv_dtype : out->config.q_dtype;
  }
  ATTNREF_RETURN_IF_ERROR(check_engine_config(out->config));
  out->rows = engine_matrix(out->config, out->arch,
                            q.fa2_uneven_k_disabled ? kFa2DisableUnevenK : 0u, versions);
  out->vllm = vllm_selection(out->config, out->arch, versions.vllm);
  return Status();
}

/// "num_kv_heads 4 -> 7", "kv_dtype float8_e4m3fn -> bfloat16", "sinks off".
inline std::string describe_change(const EngineConfigChange& c) {
  const std::string field = c.field;
  if (field == "sinks" || field == "alibi" || field == "soft_cap") return field + " off";
  if (field == "sliding_window" && c.to == 0) return "no sliding_window";
  if (field == "head_dim_v" && c.to == 0) return "head_dim_v = head_dim";
  if (field == "q_dtype" || field == "kv_dtype") {
    return field + " " + dtype_name(static_cast<DType>(c.from)) + " -> " +
           dtype_name(static_cast<DType>(c.to));
  }
  return field + " " + std::to_string(c.from) + " -> " + std::to_string(c.to);
}

inline std::string describe_config(const EngineConfig& c, int arch) {
  std::ostringstream s;
  s << "sm" << arch << ": " << c.num_q_heads
    << (c.num_q_heads == 1 ? " query head, " : " query heads, ") << c.num_kv_heads
    << (c.num_kv_heads == 1 ? " KV head" : " KV heads") << ", head_dim " << c.head_dim;
  if (value_head_dim(c) != c.head_dim) s << " (V " << value_head_dim(c) << ")";
  if (c.page_size > 0) s << ", pages of " << c.page_size;
  s << ", " << dtype_name(c.q_dtype);
  if (c.kv_dtype != c.q_dtype) s << " q, " << dtype_name(c.kv_dtype) << " K/V";
  if (c.sliding_window > 0) s << ", window " << c.sliding_window;
  if (c.soft_cap) s << ", soft cap";
  if (c.alibi) s << ", ALiBi";
  if (c.sinks) s << ", sinks";
  if (c.q_len > 1) s << ", " << c.q_len << " query tokens per request";
  return s.str();
}

inline const char* verdict_mark(EngineVerdict v) {
  return v == EngineVerdict::kAccepts  ? "\u2714"
         : v == EngineVerdict::kHazard ? "\u26a0"
                                       : "\u2718";
}

// A rule id without its kernel's prefix: "flashinfer.decode.group_size" -> "group_size".
inline std::string short_rule_id(const char* id) {
  const std::string s = id;
  const std::size_t dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(dot + 1);
}

// The release a matrix line describes, without the package where its kernel name implies it:
// "0.33.0" for vllm.flash_attn, "vllm 0.33.0" for flash_attn4 (the copy vLLM ships); FlashMLA,
// which has no releases, by its commit.
inline std::string version_column(const EngineTarget& t) {
  const std::string name = engine_version_name(t);
  const std::size_t space = name.find(' ');
  const std::string package = name.substr(0, name.find_first_of(" -"));
  const bool implied = std::string(engine_kernel_name(t.kernel)).rfind(package, 0) == 0;
  if (space != std::string::npos) return implied ? name.substr(space + 1) : name;
  const std::size_t at = name.find('@');
  return at == std::string::npos ? name : name.substr(at);
}

// "FLASH_ATTN: head_size not supported, block_size not supported; FLASHINFER: ...".
inline std::string describe_passed_over(const std::vector<VllmPassedOver>& passed) {
  std::string out;
  for (std::size_t i = 0; i < passed.size(); ++i) {
    out += (i ? "; " : "") + passed[i].backend + ":";
    for (std::size_t j = 0; j < passed[i].reasons.size(); ++j) {
      out += (j ? ", " : " ") + passed[i].reasons[j];
    }
  }
  return out;
}

/// "vllm 0.33.0 selects TRITON_ATTN (passed over FLASH_ATTN: ...)", and what the selected
/// backend then refuses; "" where vLLM's choice is not modelled.
inline std::string describe_vllm_selection(const VllmSelection& v) {
  if (!v.modelled) return "";
  const std::string version = engine_version_name({EngineKernel::kVllmFlashAttn});
  if (v.selected.empty()) {
    return version + " finds no attention backend (" + describe_passed_over(v.passed_over) + ")";
  }
  std::string out = version + " selects " + v.selected;
  if (!v.passed_over.empty()) out += " (passed over " + describe_passed_over(v.passed_over) + ")";
  for (std::size_t i = 0; i < v.refused_after_selection.size(); ++i) {
    out += (i ? "; " : ", which then refuses the layer: ") + v.refused_after_selection[i];
  }
  return out;
}

/// One line per kernel, with the engine release it describes, then vLLM's choice of backend;
/// with `details`, every finding with its message, hint and source, and every convention to
/// convert.
inline std::string engine_matrix_text(const EngineAnswer& a, bool details) {
  std::ostringstream s;
  s << describe_config(a.config, a.arch) << "\n";
  for (const std::string& note : a.notes) s << "note: " << note << "\n";
  for (const EngineMatrixRow& row : a.rows) {
    char head[128];
    std::snprintf(head, sizeof head, "%-31s %-13s %-8s ", engine_kernel_name(row.target.kernel),
                  version_column(row.target).c_str(), verdict_name(row.verdict));
    std::string line = std::string(verdict_mark(row.verdict)) + " " + head;
    for (std::size_t i = 0; i < row.findings.size(); ++i) {
      line += (i == 0 ? "" : ", ") + short_rule_id(row.findings[i].id());
    }
    for (std::size_t i = 0; i < row.changes.size(); ++i) {
      line += (i == 0 ? " (nearest: " : ", ") + describe_change(row.changes[i]);
      if (i + 1 == row.changes.size()) line += ")";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    s << line << "\n";
    if (!details) continue;
    for (const EngineFinding& f : row.findings) {
      s << "    " << severity_name(f.severity()) << " " << f.id() << ": " << f.status().message()
        << "\n      hint: " << f.hint() << "\n      source: " << f.rule().source << "\n";
    }
    for (const ConventionMismatch& m : row.conventions) {
      s << "    convention " << m.convention << ": " << m.what << "; " << m.conversion << "\n";
    }
  }
  const std::string selection = describe_vllm_selection(a.vllm);
  if (!selection.empty()) s << selection << "\n";
  return s.str();
}

/// A JSON string literal.
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

inline std::string json_config(const EngineConfig& c) {
  std::ostringstream s;
  s << "{\"num_q_heads\": " << c.num_q_heads << ", \"num_kv_heads\": " << c.num_kv_heads
    << ", \"head_dim\": " << c.head_dim << ", \"head_dim_v\": " << value_head_dim(c)
    << ", \"page_size\": " << c.page_size << ", \"q_dtype\": " << json_string(dtype_name(c.q_dtype))
    << ", \"kv_dtype\": " << json_string(dtype_name(c.kv_dtype))
    << ", \"sliding_window\": " << c.sliding_window
    << ", \"soft_cap\": " << (c.soft_cap ? "true" : "false")
    << ", \"alibi\": " << (c.alibi ? "true" : "false")
    << ", \"sinks\": " << (c.sinks ? "true" : "false") << ", \"q_len\": " << c.q_len << "}";
  return s.str();
}

inline std::string json_row(const EngineMatrixRow& row) {
  std::ostringstream s;
  s << "{\"kernel\": " << json_string(engine_kernel_name(row.target.kernel))
    << ", \"version\": " << json_string(engine_version_name(row.target))
    << ", \"verdict\": " << json_string(verdict_name(row.verdict)) << ", \"findings\": [";
  for (std::size_t i = 0; i < row.findings.size(); ++i) {
    const EngineFinding& f = row.findings[i];
    s << (i ? ", " : "") << "{\"id\": " << json_string(f.id())
      << ", \"severity\": " << json_string(severity_name(f.severity()))
      << ", \"message\": " << json_string(f.status().message())
      << ", \"upstream\": " << json_string(f.upstream_message())
      << ", \"explanation\": " << json_string(f.explanation())
      << ", \"hint\": " << json_string(f.hint()) << ", \"source\": " << json_string(f.rule().source)
      << "}";
  }
  s << "], \"conventions\": [";
  for (std::size_t i = 0; i < row.conventions.size(); ++i) {
    const ConventionMismatch& m = row.conventions[i];
    s << (i ? ", " : "") << "{\"convention\": " << json_string(m.convention)
      << ", \"what\": " << json_string(m.what) << ", \"conversion\": " << json_string(m.conversion)
      << "}";
  }
  s << "], \"nearest\": ";
  if (!row.has_nearest) return s.str() + "null}";
  s << "{\"config\": " << json_config(row.nearest) << ", \"changes\": [";
  for (std::size_t i = 0; i < row.changes.size(); ++i) {
    s << (i ? ", " : "") << "{\"field\": " << json_string(row.changes[i].field)
      << ", \"from\": " << row.changes[i].from << ", \"to\": " << row.changes[i].to
      << ", \"text\": " << json_string(describe_change(row.changes[i])) << "}";
  }
  return s.str() + "]}}";
}

inline std::string json_strings(const std::vector<std::string>& texts) {
  std::string out = "[";
  for (std::size_t i = 0; i < texts.size(); ++i) out += (i ? ", " : "") + json_string(texts[i]);
  return out + "]";
}

// {"version", "selected", "kernel", "passed_over": [{"backend", "reasons"}],
// "refused_after_selection"}, or null where vLLM's choice is not modelled.
inline std::string json_vllm_selection(const VllmSelection& v) {
  if (!v.modelled) return "null";
  std::ostringstream s;
  s << "{\"version\": " << json_string(engine_version_name({EngineKernel::kVllmFlashAttn}))
    << ", \"selected\": " << (v.selected.empty() ? "null" : json_string(v.selected))
    << ", \"kernel\": " << (v.has_kernel ? json_string(engine_kernel_name(v.kernel)) : "null")
    << ", \"passed_over\": [";
  for (std::size_t i = 0; i < v.passed_over.size(); ++i) {
    s << (i ? ", " : "") << "{\"backend\": " << json_string(v.passed_over[i].backend)
      << ", \"reasons\": " << json_strings(v.passed_over[i].reasons) << "}";
  }
  s << "], \"refused_after_selection\": " << json_strings(v.refused_after_selection) << "}";
  return s.str();
}

/// The whole answer as one JSON object: arch, config, notes, one entry per kernel, and vLLM's
/// choice of backend ("vllm_selection").
inline std::string engine_matrix_json(const EngineAnswer& a) {
  std::ostringstream s;
  s << "{\"arch\": " << json_string("sm" + std::to_string(a.arch))
    << ", \"config\": " << json_config(a.config) << ", \"notes\": [";
  for (std::size_t i = 0; i < a.notes.size(); ++i) s << (i ? ", " : "") << json_string(a.notes[i]);
  s << "], \"kernels\": [";
  for (std::size_t i = 0; i < a.rows.size(); ++i)
    s << (i ? ",\n  " : "\n  ") << json_row(a.rows[i]);
  s << "\n], \"vllm_selection\": " << json_vllm_selection(a.vllm) << "}\n";
  return s.str();
}

}  // namespace frontend
}  // namespace attnref
