// A model's config.json read as an engine configuration (io/json.hpp, io/hf_config.hpp), and
// the compatibility matrix of the shipped example configs against the rule tables.
#include <gtest/gtest.h>

#include <attnref/io/hf_config.hpp>
#include <attnref/io/json.hpp>
#include <attnref/validate/engines/engine_matrix.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

using attnref::DType;
using attnref::EngineKernel;
using attnref::EngineVerdict;
using attnref::ErrorCode;

std::string example_config(const std::string& name) {
  std::ifstream in(std::string(ATTNREF_SOURCE_DIR) + "/examples/configs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

attnref::HfAttentionConfig read(const std::string& text, std::int64_t page_size = 16) {
  attnref::HfAttentionConfig hf;
  const attnref::Status s = attnref::read_hf_config(text, page_size, &hf);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return hf;
}

TEST(HfConfig, TheExampleConfigsGiveTheirModelsAttention) {
  const attnref::EngineConfig llama = read(example_config("llama-3-8b.json")).config;
  EXPECT_EQ(llama.num_q_heads, 32);
  EXPECT_EQ(llama.num_kv_heads, 8);
  EXPECT_EQ(llama.head_dim, 128);  // 4096 / 32
  EXPECT_EQ(llama.q_dtype, DType::kBFloat16);
  EXPECT_EQ(llama.page_size, 16);

  const attnref::HfAttentionConfig qwen = read(example_config("qwen2-7b.json"));
  EXPECT_EQ(qwen.config.num_q_heads, 28);
  EXPECT_EQ(qwen.config.num_kv_heads, 4);
  EXPECT_EQ(qwen.config.sliding_window, 0);
  ASSERT_EQ(qwen.notes.size(), 2u);
  EXPECT_EQ(qwen.notes[1], "sliding_window 131072 is off (use_sliding_window is false)");

  const attnref::EngineConfig gemma = read(example_config("gemma-2-9b.json")).config;
  EXPECT_EQ(gemma.head_dim, 256);
  EXPECT_EQ(gemma.sliding_window, 4096);
  EXPECT_TRUE(gemma.soft_cap);

  const attnref::HfAttentionConfig oss = read(example_config("gpt-oss-20b.json"));
  EXPECT_TRUE(oss.config.sinks);
  EXPECT_EQ(oss.config.sliding_window, 128);
  EXPECT_EQ(oss.config.head_dim, 64);

  const attnref::EngineConfig mla = read(example_config("deepseek-v3.json"), 64).config;
  EXPECT_EQ(mla.num_q_heads, 128);
  EXPECT_EQ(mla.num_kv_heads, 1);
  EXPECT_EQ(mla.head_dim, 576);
  EXPECT_EQ(mla.head_dim_v, 512);
}

TEST(HfConfig, AMissingFieldIsNamedAndNeverGuessed) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"hidden_size": 4096, "torch_dtype": "bfloat16"})",
       "config.json has no num_attention_heads."},
      {R"({"num_attention_heads": 32, "torch_dtype": "bfloat16"})", "config.json has no head_dim."},
      {R"({"num_attention_heads": 32, "head_dim": 128})", "config.json has no torch_dtype."},
      {R"({"num_attention_heads": 32, "hidden_size": 4001, "torch_dtype": "bfloat16"})",
       "config.json has no head_dim, and hidden_size 4001 is not a multiple of "
       "num_attention_heads 32."},
      {R"({"num_attention_heads": 0, "head_dim": 128, "torch_dtype": "bfloat16"})",
       "config.json: num_attention_heads is not a positive whole number."},
      {R"({"num_attention_heads": 32.5, "head_dim": 128, "torch_dtype": "bfloat16"})",
       "config.json: num_attention_heads is not a positive whole number."},
      {R"({"num_attention_heads": 32, "head_dim": 1e300, "torch_dtype": "bfloat16"})",
       "config.json: head_dim is not a positive whole number."},
      {R"({"num_attention_heads": 32, "head_dim": 128, "torch_dtype": "int4"})",
       "config.json: torch_dtype is not bfloat16, float16 or float32."},
      {R"([1, 2])", "config.json is not a JSON object."},
  };
  for (const Case& c : cases) {
    attnref::HfAttentionConfig hf;
    const attnref::Status s = attnref::read_hf_config(c.json, 16, &hf);
    EXPECT_EQ(s.code(), ErrorCode::kBadFile) << c.json;
    EXPECT_EQ(s.message(), c.message) << c.json;
  }
}

TEST(Json, MalformedTextSaysWhatAndWhere) {
  struct Case {
    std::string text;
    const char* message;
  };
  const Case cases[] = {
      {"", "the file is not valid JSON: the text ends where a value should be at byte 0."},
      {"{\"a\": }", "the file is not valid JSON: an unexpected character at byte 6."},
      {"{\"a\" 1}", "the file is not valid JSON: a ':' is missing at byte 5."},
      {"{\"a\": 1,}", "the file is not valid JSON: an object key is not a string at byte 8."},
      {"[1 2]", "the file is not valid JSON: a ',' or ']' is missing at byte 3."},
      {"\"abc", "the file is not valid JSON: the text ends inside a string at byte 4."},
      {"\"\\q\"", "the file is not valid JSON: an unknown escape in a string at byte 3."},
      {"\"\\u12g4\"", "the file is not valid JSON: a \\u escape needs four hex digits at byte 5."},
      {"1.", "the file is not valid JSON: a number's fraction has no digits at byte 2."},
      {"tru", "the file is not valid JSON: an unknown word at byte 0."},
      {"{} x", "the file is not valid JSON: text follows the JSON value at byte 3."},
      {std::string(100, '[') + std::string(100, ']'),
       "the file is not valid JSON: nesting deeper than 64 levels at byte 65."},
  };
  for (const Case& c : cases) {
    attnref::JsonValue v;
    const attnref::Status s = attnref::parse_json(c.text, &v);
    EXPECT_EQ(s.code(), ErrorCode::kBadFile) << c.text;
    EXPECT_EQ(s.message(), c.message) << c.text;
  }
  attnref::JsonValue too_big;
  const attnref::Status big = attnref::parse_json(std::string((64 << 20) + 1, ' '), &too_big);
  EXPECT_EQ(big.code(), ErrorCode::kBadFile);
  EXPECT_EQ(big.message(),
            "the file holds 67108865 bytes; a JSON configuration is read up to 64 MiB.");
  attnref::JsonValue v;
  ASSERT_TRUE(
      attnref::parse_json(R"( {"a": [true, null, -1.5e2, "x\u00e9\n"], "a": 2} )", &v).ok());
  ASSERT_NE(v.find("a"), nullptr);
  EXPECT_EQ(v.find("a")->number, 2.0);  // the last of a repeated key
  EXPECT_EQ(v.members[0].array[2].number, -150.0);
  EXPECT_EQ(v.members[0].array[3].string, "x\xc3\xa9\n");
}

// The matrices of two example configs on sm90, checked by hand against docs/engines.md's rows.
std::map<std::string, EngineVerdict> verdicts(const attnref::EngineConfig& c, int arch) {
  std::map<std::string, EngineVerdict> out;
  for (const attnref::EngineMatrixRow& row : attnref::engine_matrix(c, arch)) {
    out[attnref::engine_kernel_name(row.target.kernel)] = row.verdict;
  }
  return out;
}

TEST(EngineMatrix, Qwen2OnSm90) {
  const attnref::EngineConfig qwen = read(example_config("qwen2-7b.json")).config;
  const auto v = verdicts(qwen, 90);
  EXPECT_EQ(v.at("flashinfer.decode"), EngineVerdict::kRejects);  // Unsupported group_size: 7
  EXPECT_EQ(v.at("flashinfer.decode.tensor_cores"), EngineVerdict::kAccepts);
  EXPECT_EQ(v.at("vllm.paged_attention_v1"), EngineVerdict::kAccepts);
  EXPECT_EQ(v.at("vllm.flash_attn"), EngineVerdict::kAccepts);
  EXPECT_EQ(v.at("vllm.triton_attn"), EngineVerdict::kAccepts);
  EXPECT_EQ(v.at("flash_attn2"), EngineVerdict::kRejects);  // pages of 16, not 256
  EXPECT_EQ(v.at("flash_attn3"), EngineVerdict::kAccepts);
  EXPECT_EQ(v.at("flashmla.decode"), EngineVerdict::kRejects);
  const auto rows = attnref::engine_matrix(qwen, 90);
  const attnref::EngineMatrixRow& decode = rows[0];
  ASSERT_TRUE(decode.has_nearest);
  ASSERT_EQ(decode.changes.size(), 1u);
  EXPECT_STREQ(decode.changes[0].field, "num_kv_heads");
  EXPECT_EQ(decode.changes[0].to, 7);  // 28 / 7 = 4 query heads per KV head
}

TEST(EngineMatrix, GptOssOnSm90) {
  const attnref::EngineConfig oss = read(example_config("gpt-oss-20b.json")).config;
  const auto v = verdicts(oss, 90);
  EXPECT_EQ(v.at("flashinfer.decode"), EngineVerdict::kHazard);  // sinks dropped
  EXPECT_EQ(v.at("flashinfer.prefill.fa2"), EngineVerdict::kHazard);
  EXPECT_EQ(v.at("vllm.paged_attention_v2"), EngineVerdict::kHazard);  // no window, no sinks
  EXPECT_EQ(v.at("vllm.flash_attn"), EngineVerdict::kAccepts);         // FA3 with s_aux on sm90
  EXPECT_EQ(v.at("flash_attn3"), EngineVerdict::kHazard);              // upstream FA3 has no sinks
  EXPECT_EQ(verdicts(oss, 80).at("vllm.flash_attn"), EngineVerdict::kRejects);
  EXPECT_EQ(v.at("vllm.triton_attn"), EngineVerdict::kAccepts);  // sinks and the window
  EXPECT_EQ(verdicts(oss, 120).at("vllm.triton_attn"), EngineVerdict::kAccepts);  // any GPU
}

}  // namespace
