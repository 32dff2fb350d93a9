// SPDX-License-Identifier: Apache-2.0
// attnref-run engines: the compatibility matrix of one attention configuration (explicit fields
// or a model's config.json) against every engine kernel attnref knows, on one GPU architecture.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "../frontend/engine_report.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

DType engine_dtype(const ParsedArgs& args, const char* option, DType fallback) {
  const std::string t = args.choice(option, {"bf16", "f16", "f32", "e4m3", "e5m2", "int8"}, "");
  if (t == "bf16") return DType::kBFloat16;
  if (t == "f16") return DType::kFloat16;
  if (t == "f32") return DType::kFloat32;
  if (t == "e4m3") return DType::kFloat8E4M3FN;
  if (t == "e5m2") return DType::kFloat8E5M2;
  if (t == "int8") return DType::kInt8;
  return fallback;
}

// The fields a config.json does not hold may still be given beside it; the rest may not.
void refuse_fields_beside_hf_config(const ParsedArgs& args) {
  for (const char* option : {"--q-heads", "--kv-heads", "--head-dim", "--head-dim-v",
                             "--sliding-window", "--soft-cap", "--alibi", "--sinks"}) {
    if (args.has(option)) {
      args.usage_error(std::string(option) +
                       " and --hf-config together: the config file gives "
                       "it (edit a copy of the file to change it)");
    }
  }
}

EngineConfig explicit_config(const ParsedArgs& args) {
  EngineConfig c;
  c.num_q_heads = args.required_int64("--q-heads");
  c.num_kv_heads = args.required_int64("--kv-heads");
  c.head_dim = args.required_int64("--head-dim");
  c.head_dim_v = args.int64("--head-dim-v").value_or(0);
  c.sliding_window = args.int64("--sliding-window").value_or(0);
  c.soft_cap = args.has("--soft-cap");
  c.alibi = args.has("--alibi");
  c.sinks = args.has("--sinks");
  return c;
}

}  // namespace

int run_engines(int argc, char** argv) {
  static const CommandSpec kSpec{
      "engines",
      "(--hf-config FILE | --q-heads N --kv-heads N --head-dim N [...]) [--arch smNN]",
      "Prints which engine kernels (FlashInfer, vLLM, FlashAttention-2/3/4, FlashMLA, SGLang)\n"
      "accept the configuration on one GPU architecture: one line per kernel, accepts, hazard\n"
      "(runs but computes wrong or reaches out of bounds) or rejects, the broken rules, and the\n"
      "nearest configuration a refusing kernel takes. docs/engines.md lists the rules and their\n"
      "sources.",
      {{"--hf-config", "FILE", "a model's Hugging Face config.json"},
       {"--q-heads", "N", "number of query heads"},
       {"--kv-heads", "N", "number of KV heads"},
       {"--head-dim", "N", "head_dim of q and K"},
       {"--head-dim-v", "N", "head_dim of V, when it differs (MLA: 512)"},
       {"--page-size", "N", "tokens per KV page (default 16; 0: not paged)"},
       {"--dtype", "T", "q dtype: bf16, f16, f32, e4m3 (default: bf16, or config.json's)"},
       {"--kv-dtype", "T", "K/V dtype: bf16, f16, f32, e4m3, e5m2, int8 (default: q's)"},
       {"--sliding-window", "W", "the model's sliding window (W keys, the query's own included)"},
       {"--soft-cap", nullptr, "the model caps its logits"},
       {"--alibi", nullptr, "the model uses ALiBi"},
       {"--sinks", nullptr, "the model has attention sinks"},
       {"--arch", "smNN", "sm80, sm86, sm89, sm90 (default), sm100, sm120"},
       {"--engine-version", "P=V,...",
        "engine releases to check against (vllm, flashinfer-python, flash-attn), e.g.\n"
        "vllm=0.32.0 (default: the pinned ones each line names)"},
       {"--fa2-no-uneven-k", nullptr,
        "FlashAttention-2 built with FLASHATTENTION_DISABLE_UNEVEN_K"},
       {"--details", nullptr, "every finding with its message, hint and source"},
       {"--json", nullptr, "the matrix as JSON"}}};
  const ParsedArgs args(kSpec, argc, argv);
  if (args.help_requested()) return print_help(kSpec);

  frontend::EngineQuery query;
  query.arch = args.value("--arch").value_or("sm90");
  query.page_size = args.int64("--page-size").value_or(16);
  query.fa2_uneven_k_disabled = args.has("--fa2-no-uneven-k");
  query.engine_versions = args.value("--engine-version").value_or("");
  query.q_dtype = engine_dtype(args, "--dtype", DType::kUnknown);
  query.kv_dtype = engine_dtype(args, "--kv-dtype", DType::kUnknown);
  if (std::optional<std::string> path = args.value("--hf-config")) {
    refuse_fields_beside_hf_config(args);
    std::ifstream file(*path, std::ios::binary);
    if (!file) throw Exit(kExitUsage, "attnref-run engines: cannot read " + *path);
    std::ostringstream text;
    text << file.rdbuf();
    query.from_hf_config = true;
    query.hf_config_text = text.str();
  } else {
    query.config = explicit_config(args);
    query.config.page_size = query.page_size;
  }
  frontend::EngineAnswer answer;
  const Status s = frontend::answer_engine_query(query, &answer);
  if (!s.ok() && s.code() == ErrorCode::kBadFile && query.from_hf_config) {
    throw Exit(kExitUsage, "attnref-run engines: " + *args.value("--hf-config") + ": " +
                               s.message() + "\n" + s.hint());
  }
  fail_if_error(s);
  std::cout << (args.has("--json") ? frontend::engine_matrix_json(answer)
                                   : frontend::engine_matrix_text(answer, args.has("--details")));
  return kExitOk;
}

}  // namespace cli
}  // namespace attnref
