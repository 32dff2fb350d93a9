// SPDX-License-Identifier: Apache-2.0
// attnref.engines: the engine compatibility matrix of one configuration (a model's config.json,
// as a dict or a path, or explicit fields) on one GPU architecture, as attnref-run engines
// --json gives it (tools/frontend/engine_report.hpp renders both).
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "../tools/frontend/engine_report.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

DType engine_dtype(const std::optional<std::string>& name, const char* option) {
  if (!name) return DType::kUnknown;
  for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32, DType::kFloat8E4M3FN,
                  DType::kFloat8E5M2, DType::kInt8}) {
    if (*name == dtype_name(t)) return t;
  }
  throw py::value_error(std::string(option) +
                        " must be one of bfloat16, float16, float32, "
                        "float8_e4m3fn, float8_e5m2, int8; got '" +
                        *name + "'");
}

// The text of a config.json given as a dict (or any JSON-serializable mapping) or as a path.
std::string config_text(const py::object& config) {
  if (py::isinstance<py::dict>(config)) {
    return py::module_::import("json").attr("dumps")(config).cast<std::string>();
  }
  const std::string path = py::str(py::module_::import("os").attr("fspath")(config));
  std::ifstream file(path, std::ios::binary);
  if (!file) throw py::value_error("attnref.engines: cannot read " + path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

py::object engines_py(py::object config, const std::string& arch, py::kwargs kwargs) {
  Kwargs kw(std::move(kwargs), "engines");
  frontend::EngineQuery q;
  q.arch = arch;
  q.page_size = kw.take_int("page_size").value_or(16);
  q.q_dtype = engine_dtype(kw.take_string("dtype"), "dtype");
  q.kv_dtype = engine_dtype(kw.take_string("kv_dtype"), "kv_dtype");
  q.fa2_uneven_k_disabled = kw.take_bool("fa2_uneven_k_disabled").value_or(false);
  q.engine_versions = kw.take_string("engine_version").value_or("");
  EngineConfig& c = q.config;
  c.num_q_heads = kw.take_int("num_q_heads").value_or(0);
  c.num_kv_heads = kw.take_int("num_kv_heads").value_or(0);
  c.head_dim = kw.take_int("head_dim").value_or(0);
  c.head_dim_v = kw.take_int("head_dim_v").value_or(0);
  c.sliding_window = kw.take_int("sliding_window").value_or(0);
  c.soft_cap = kw.take_bool("soft_cap").value_or(false);
  c.alibi = kw.take_bool("alibi").value_or(false);
  c.sinks = kw.take_bool("sinks").value_or(false);
  c.page_size = q.page_size;
  kw.finish();
  if (!config.is_none()) {
    if (c.num_q_heads || c.num_kv_heads || c.head_dim || c.head_dim_v || c.sliding_window ||
        c.soft_cap || c.alibi || c.sinks) {
      throw py::value_error("attnref.engines: give a config.json or the fields, not both");
    }
    q.from_hf_config = true;
    q.hf_config_text = config_text(config);
  }
  frontend::EngineAnswer answer;
  raise_if_error(frontend::answer_engine_query(q, &answer));
  return py::module_::import("json").attr("loads")(frontend::engine_matrix_json(answer));
}

}  // namespace

void bind_engines(py::module_& m) {
  m.def("engines", &engines_py, py::arg("config") = py::none(), py::arg("arch") = "sm90",
        R"(engines(config=None, arch="sm90", *, page_size=16, num_q_heads=None, num_kv_heads=None,
        head_dim=None, head_dim_v=None, dtype=None, kv_dtype=None, sliding_window=None,
        soft_cap=False, alibi=False, sinks=False, fa2_uneven_k_disabled=False,
        engine_version=None) -> dict

Which engine kernels (FlashInfer, vLLM, FlashAttention-2/3/4, FlashMLA, SGLang) take this attention
configuration on GPU architecture `arch` ("sm80", "sm86", "sm89", "sm90", "sm100", "sm120").
`config` is a model's Hugging Face config.json, as a dict or a path; otherwise give the fields.
dtype and kv_dtype (numpy names: "bfloat16", "float8_e4m3fn", ...) override the config's.
engine_version ("vllm=0.32.0,flashinfer-python=0.6.17") checks against those releases instead
of the pinned ones; each kernel's "version" says which release it describes.
Returns attnref-run engines --json as a dict: "arch", "config", "notes", and "kernels", one
entry per kernel with "version" ("vllm 0.33.0"), "verdict" ("accepts", "hazard" or "rejects"), "findings" (id, severity,
message, upstream, explanation, hint, source), "conventions" and "nearest" (or None); and
"vllm_selection": the backend vLLM 0.33.0 would select ("selected", "kernel"), the ones it
passes over with their "reasons", and what the selected one refuses once built (None where
vLLM's choice is not modelled: other releases, non-causal layers).
Raises ShapeError for an unknown arch, a malformed config.json or a missing field.)");
}

}  // namespace python
}  // namespace attnref
