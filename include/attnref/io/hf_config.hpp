// SPDX-License-Identifier: Apache-2.0
/// @file hf_config.hpp
/// A Hugging Face `config.json` as an engine configuration (validate/engines/): heads, head
/// dims (MLA's latent cache included), sliding window, soft cap, dtype, ALiBi and sinks. A field
/// the file lacks is an error that names it; where Hugging Face itself defines a default (no
/// `num_key_value_heads` means one KV head per query head), the default is taken and a note
/// says so. Nothing is guessed silently.
///
/// Example:
/// @code
///   attnref::HfAttentionConfig hf;
///   attnref::Status s = attnref::read_hf_config(text, /*page_size=*/16, &hf);
///   for (const std::string& note : hf.notes) std::cerr << note << "\n";
///   attnref::EngineReport r = attnref::check_engine(hf.config, {kernel, 90});
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"
#include "attnref/io/json.hpp"
#include "attnref/validate/engines/engine_target.hpp"

namespace attnref {

/// What `read_hf_config` read: the configuration and what it took from defaults or conventions.
struct HfAttentionConfig {
  EngineConfig config;
  std::vector<std::string> notes;
};

namespace detail {

inline Status hf_missing(const char* field, const char* hint) {
  return Status(ErrorCode::kBadFile, "", "config.json has no {f}.", hint, {}, {}, field);
}

// A positive whole number of at most 2^31 - 1, or an error naming the field.
inline Status hf_count(const JsonValue& v, const char* field, std::int64_t* out) {
  const bool whole = v.kind == JsonValue::Kind::kNumber && v.number == std::floor(v.number) &&
                     v.number >= 1 && v.number <= 2147483647.0;
  if (!whole) {
    return Status(ErrorCode::kBadFile, "", "config.json: {f} is not a positive whole number.",
                  "a head count or dimension is a positive integer", {}, {}, field);
  }
  *out = static_cast<std::int64_t>(v.number);
  return Status();
}

// The object holding the attention fields: the file itself, or its "text_config" (multimodal).
inline const JsonValue& hf_attention_object(const JsonValue& root) {
  const JsonValue* text = root.find("text_config");
  const bool nested = root.find("num_attention_heads") == nullptr && text != nullptr &&
                      text->kind == JsonValue::Kind::kObject;
  return nested ? *text : root;
}

inline Status hf_heads(const JsonValue& o, HfAttentionConfig* out) {
  EngineConfig& c = out->config;
  const JsonValue* hq = o.find("num_attention_heads");
  if (hq == nullptr) return hf_missing("num_attention_heads", "every attention config names it");
  ATTNREF_RETURN_IF_ERROR(hf_count(*hq, "num_attention_heads", &c.num_q_heads));
  const JsonValue* hkv = o.find("num_key_value_heads");
  if (hkv == nullptr || hkv->kind == JsonValue::Kind::kNull) {
    c.num_kv_heads = c.num_q_heads;
    out->notes.push_back("num_key_value_heads is absent: " + std::to_string(c.num_q_heads) +
                         " KV heads, one per query head (the Hugging Face default)");
    return Status();
  }
  return hf_count(*hkv, "num_key_value_heads", &c.num_kv_heads);
}

inline Status hf_head_dims(const JsonValue& o, HfAttentionConfig* out) {
  EngineConfig& c = out->config;
  const JsonValue* rank = o.find("kv_lora_rank");
  const JsonValue* rope = o.find("qk_rope_head_dim");
  if (rank != nullptr && rope != nullptr && rank->kind != JsonValue::Kind::kNull) {
    std::int64_t r = 0, p = 0;
    ATTNREF_RETURN_IF_ERROR(hf_count(*rank, "kv_lora_rank", &r));
    ATTNREF_RETURN_IF_ERROR(hf_count(*rope, "qk_rope_head_dim", &p));
    c.head_dim = r + p;
    c.head_dim_v = r;
    c.num_kv_heads = 1;
    out->notes.push_back("MLA (kv_lora_rank " + std::to_string(r) + ", qk_rope_head_dim " +
                         std::to_string(p) +
                         "): decode over the latent cache, one KV head, "
                         "head_dim " +
                         std::to_string(r + p) + ", head_dim_v " + std::to_string(r));
    return Status();
  }
  const JsonValue* d = o.find("head_dim");
  if (d != nullptr && d->kind != JsonValue::Kind::kNull)
    return hf_count(*d, "head_dim", &c.head_dim);
  const JsonValue* hidden = o.find("hidden_size");
  if (hidden == nullptr) {
    return hf_missing("head_dim", "give head_dim, or hidden_size to divide by num_attention_heads");
  }
  std::int64_t h = 0;
  ATTNREF_RETURN_IF_ERROR(hf_count(*hidden, "hidden_size", &h));
  if (h % c.num_q_heads != 0) {
    return Status(ErrorCode::kBadFile, "",
                  "config.json has no head_dim, and hidden_size {0} is not a multiple of "
                  "num_attention_heads {1}.",
                  "give head_dim", {h, c.num_q_heads});
  }
  c.head_dim = h / c.num_q_heads;
  out->notes.push_back("head_dim is absent: hidden_size / num_attention_heads = " +
                       std::to_string(c.head_dim));
  return Status();
}

inline Status hf_dtype(const JsonValue& root, const JsonValue& o, HfAttentionConfig* out) {
  const JsonValue* t = o.find("torch_dtype");
  if (t == nullptr) t = o.find("dtype");
  if (t == nullptr && &o != &root) t = root.find("torch_dtype");
  if (t == nullptr) t = root.find("dtype");
  if (t == nullptr || t->kind != JsonValue::Kind::kString) {
    return hf_missing("torch_dtype", "give the model's dtype explicitly (bf16, for example)");
  }
  const std::string& s = t->string;
  DType d = DType::kUnknown;
  if (s == "bfloat16") d = DType::kBFloat16;
  if (s == "float16") d = DType::kFloat16;
  if (s == "float32") d = DType::kFloat32;
  if (d == DType::kUnknown) {
    return Status(ErrorCode::kBadFile, "",
                  "config.json: torch_dtype is not bfloat16, float16 or "
                  "float32.",
                  "give the model's dtype explicitly", {}, {}, "torch_dtype");
  }
  out->config.q_dtype = d;
  out->config.kv_dtype = d;
  return Status();
}

inline Status hf_features(const JsonValue& root, const JsonValue& o, HfAttentionConfig* out) {
  EngineConfig& c = out->config;
  const JsonValue* use = o.find("use_sliding_window");
  const bool off = use != nullptr && use->kind == JsonValue::Kind::kBool && !use->boolean;
  const JsonValue* w = o.find("sliding_window");
  if (w != nullptr && w->kind != JsonValue::Kind::kNull) {
    std::int64_t window = 0;
    ATTNREF_RETURN_IF_ERROR(hf_count(*w, "sliding_window", &window));
    if (off) {
      out->notes.push_back("sliding_window " + std::to_string(window) +
                           " is off (use_sliding_window is false)");
    } else {
      c.sliding_window = window;
      if (o.find("layer_types") != nullptr) {
        out->notes.push_back("sliding_window " + std::to_string(window) +
                             " applies to the layers layer_types names; checked as if on");
      }
    }
  }
  const JsonValue* cap = o.find("attn_logit_softcapping");
  c.soft_cap = cap != nullptr && cap->kind == JsonValue::Kind::kNumber && cap->number != 0;
  const JsonValue* alibi = o.find("alibi");
  const JsonValue* attn = root.find("attn_config");
  if (alibi == nullptr && attn != nullptr) alibi = attn->find("alibi");
  c.alibi = alibi != nullptr && alibi->kind == JsonValue::Kind::kBool && alibi->boolean;
  const JsonValue* type = root.find("model_type");
  const bool sinks_model =
      type != nullptr && type->kind == JsonValue::Kind::kString && type->string == "gpt_oss";
  if (sinks_model) {
    c.sinks = true;
    out->notes.push_back("model_type gpt_oss: attention sinks, one logit per query head");
  }
  return Status();
}

}  // namespace detail

/// Reads the attention configuration of a Hugging Face `config.json` (its text). `page_size`
/// is the KV cache's page size, which a model config does not hold (0: not paged).
inline Status read_hf_config(std::string_view json_text, std::int64_t page_size,
                             HfAttentionConfig* out) {
  JsonValue root;
  ATTNREF_RETURN_IF_ERROR(parse_json(json_text, &root));
  if (root.kind != JsonValue::Kind::kObject) {
    return Status(ErrorCode::kBadFile, "", "config.json is not a JSON object.",
                  "pass the model's config.json");
  }
  *out = HfAttentionConfig();
  out->config.page_size = page_size;
  const JsonValue& o = detail::hf_attention_object(root);
  ATTNREF_RETURN_IF_ERROR(detail::hf_heads(o, out));
  ATTNREF_RETURN_IF_ERROR(detail::hf_head_dims(o, out));
  ATTNREF_RETURN_IF_ERROR(detail::hf_dtype(root, o, out));
  return detail::hf_features(root, o, out);
}

}  // namespace attnref
