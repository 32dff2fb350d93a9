// attnref-run engines: the compatibility matrix from explicit fields and from config.json,
// its JSON form, its errors, and the matrices the README shows (produced here by the tool).
#include <gtest/gtest.h>

#include <attnref/io/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_harness.hpp"

namespace {

using attnref::cli_test::CliTest;
using attnref::cli_test::Result;

std::string source_path(const std::string& relative) {
  return std::string(ATTNREF_SOURCE_DIR) + "/" + relative;
}

class EnginesCli : public CliTest {};

TEST_F(EnginesCli, Qwen2ConfigOnSm90NamesTheGroupSizeAndTheNearestConfig) {
  const Result r = run_subcommand(
      "engines", "--hf-config " + source_path("examples/configs/qwen2-7b.json") + " --arch sm90");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "sm90: 28 query heads, 4 KV heads, head_dim 128, pages of 16, bfloat16\n"
            "note: head_dim is absent: hidden_size / num_attention_heads = 128\n"
            "note: sliding_window 131072 is off (use_sliding_window is false)\n"
            "\u2718 flashinfer.decode               0.7.2         rejects  group_size (nearest: "
            "num_kv_heads 4 -> 7)\n"
            "\u2714 flashinfer.decode.tensor_cores  0.7.2         accepts\n"
            "\u2714 flashinfer.prefill.fa2          0.7.2         accepts\n"
            "\u2714 flashinfer.prefill.fa3          0.7.2         accepts\n"
            "\u2714 vllm.paged_attention_v1         0.33.0        accepts\n"
            "\u2714 vllm.paged_attention_v2         0.33.0        accepts\n"
            "\u2714 vllm.flash_attn                 0.33.0        accepts\n"
            "\u2714 vllm.triton_attn                0.33.0        accepts\n"
            "\u2714 vllm.flashinfer                 0.33.0        accepts\n"
            "\u2718 flash_attn2                     2.8.3         rejects  page_size (nearest: "
            "page_size 16 -> 256)\n"
            "\u2714 flash_attn3                     2.8.3         accepts\n"
            "\u2714 flash_attn4                     vllm 0.33.0   accepts\n"
            "\u2718 flashmla.decode                 @9241ae3ef9ba rejects  head_dim, head_dim_v, "
            "page_size (nearest: "
            "page_size 16 -> 64, head_dim 128 -> 512)\n"
            "\u2714 sglang.triton_decode            0.5.23        accepts\n"
            "\u2714 sglang.triton_extend            0.5.23        accepts\n"
            "vllm 0.33.0 selects FLASH_ATTN\n");
}

TEST_F(EnginesCli, DeepSeekOnPagesOf16NamesTheMlaBackendVllmSelectsAndWhy) {
  const std::string args = "--hf-config " + source_path("examples/configs/deepseek-v3.json") +
                           " --arch sm100 --page-size 16";
  Result r = run_subcommand("engines", args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\u2714 vllm.triton_mla                 0.33.0        accepts\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\u2718 vllm.cutlass_mla                0.33.0        rejects  block_size "
                       "(nearest: page_size 16 -> 128)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("vllm 0.33.0 selects TRITON_MLA (passed over FLASHINFER_MLA: block_size "
                       "not supported; CUTLASS_MLA: block_size not supported; FLASH_ATTN_MLA: "
                       "compute capability not supported, FlashAttention MLA not supported on "
                       "this device; FLASHMLA: block_size not supported, FlashMLA Dense is only "
                       "supported on Hopper devices.)\n"),
            std::string::npos)
      << r.out;
  r = run_subcommand("engines", args + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  attnref::JsonValue v;
  ASSERT_TRUE(attnref::parse_json(r.out, &v).ok()) << r.out;
  const attnref::JsonValue* selection = v.find("vllm_selection");
  ASSERT_NE(selection, nullptr);
  EXPECT_EQ(selection->find("selected")->string, "TRITON_MLA");
  EXPECT_EQ(selection->find("kernel")->string, "vllm.triton_mla");
  EXPECT_EQ(selection->find("passed_over")->array.size(), 4u);
  EXPECT_EQ(selection->find("passed_over")->array[0].find("reasons")->array[0].string,
            "block_size not supported");
  // vLLM's choice is modelled for its pinned release only.
  r = run_subcommand("engines", args + " --json --engine-version vllm=0.32.0");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(attnref::parse_json(r.out, &v).ok());
  EXPECT_EQ(v.find("vllm_selection")->kind, attnref::JsonValue::Kind::kNull);
}

TEST_F(EnginesCli, ExplicitFieldsWithDetailsGiveMessagesHintsAndSources) {
  const Result r =
      run_subcommand("engines", "--q-heads 40 --kv-heads 8 --head-dim 128 --sinks --details");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("    rejects flashinfer.decode.group_size: Unsupported group_size: 5\n"
                       "      hint: use_tensor_cores=True"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("      source: flashinfer-ai/flashinfer@v0.7.2.post1 "
                       "include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE\n"),
            std::string::npos);
  EXPECT_NE(r.out.find("    silently wrong flashinfer.decode.sinks_ignored: sinks= is dropped"),
            std::string::npos);
}

TEST_F(EnginesCli, JsonHoldsEveryKernelWithItsFindings) {
  const Result r =
      run_subcommand("engines", "--hf-config " + source_path("examples/configs/gpt-oss-20b.json") +
                                    " --arch sm80 --kv-dtype e4m3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  attnref::JsonValue v;
  ASSERT_TRUE(attnref::parse_json(r.out, &v).ok()) << r.out;
  EXPECT_EQ(v.find("arch")->string, "sm80");
  EXPECT_EQ(v.find("config")->find("kv_dtype")->string, "float8_e4m3fn");
  const attnref::JsonValue* kernels = v.find("kernels");
  ASSERT_EQ(kernels->array.size(), 15u);
  const attnref::JsonValue& vllm_fa = kernels->array[6];
  EXPECT_EQ(vllm_fa.find("kernel")->string, "vllm.flash_attn");
  EXPECT_EQ(vllm_fa.find("verdict")->string, "rejects");
  const attnref::JsonValue& first = vllm_fa.find("findings")->array[0];
  EXPECT_EQ(vllm_fa.find("version")->string, "vllm 0.33.0");
  EXPECT_EQ(first.find("id")->string, "vllm.flash_attn.kv_dtype");
  EXPECT_EQ(first.find("upstream")->string, "kv_cache_dtype not supported");
  // FlashAttention-4 on sm80: no fp8, no paged KV.
  const attnref::JsonValue& fa4 = kernels->array[11];
  EXPECT_EQ(fa4.find("kernel")->string, "flash_attn4");
  EXPECT_EQ(fa4.find("version")->string, "vllm 0.33.0");
  EXPECT_EQ(fa4.find("findings")->array[0].find("upstream")->string,
            "q.dtype torch.bfloat16 != k.dtype");
  EXPECT_EQ(kernels->array[12].find("version")->string, "FlashMLA@9241ae3ef9ba");
  EXPECT_EQ(kernels->array[1].find("conventions")->array[0].find("conversion")->string,
            "pass window_left 127 for the same keys");
}

TEST_F(EnginesCli, AnEngineVersionSelectsTheRulesOfThatRelease) {
  const std::string fields = "--q-heads 32 --kv-heads 8 --head-dim 128 --page-size 8 --arch sm80";
  Result r = run_subcommand("engines", fields + " --details");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("vllm.flash_attn                 0.33.0        rejects  block_size"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rejects vllm.flash_attn.block_size: block_size not supported"),
            std::string::npos);
  r = run_subcommand("engines", fields + " --details --engine-version vllm=0.32.0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("vllm.flash_attn                 0.32.0        rejects  block_size"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rejects vllm.flash_attn.block_size: Block size must be a multiple of 16."),
            std::string::npos);
  EXPECT_NE(r.out.find("flashinfer.decode               0.7.2  "), std::string::npos);

  r = run_subcommand("engines", fields + " --engine-version tensorrt-llm=1.0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.first_err_line().find("error[unknown_engine_target]"), std::string::npos) << r.err;
}

TEST_F(EnginesCli, BadInputGetsAClearError) {
  Result r = run_subcommand("engines", "--q-heads 32 --kv-heads 8 --head-dim 128 --arch sm75");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.first_err_line(),
      "attnref: error[unknown_engine_target] attnref has no rules for that GPU architecture.");
  EXPECT_EQ(r.err_line(1), "known architectures: sm80, sm86, sm89, sm90, sm100, sm120");

  r = run_subcommand("engines", "--q-heads 32 --kv-heads 0 --head-dim 128");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.first_err_line().find("error[invalid_head_count]"), std::string::npos) << r.err;

  r = run_subcommand("engines", "--hf-config " + path("missing.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.first_err_line().find("cannot read"), std::string::npos) << r.err;

  std::ofstream(path("partial.json")) << R"({"num_attention_heads": 32, "head_dim": 128})";
  r = run_subcommand("engines", "--hf-config " + path("partial.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.first_err_line(),
            "attnref-run engines: " + path("partial.json") + ": config.json has no torch_dtype.");

  std::ofstream(path("broken.json")) << R"({"num_attention_heads": 32,)";
  r = run_subcommand("engines", "--hf-config " + path("broken.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.first_err_line().find("is not valid JSON"), std::string::npos) << r.err;

  r = run_subcommand(
      "engines", "--hf-config " + source_path("examples/configs/qwen2-7b.json") + " --q-heads 8");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--q-heads and --hf-config together"), std::string::npos) << r.err;
}

// The README shows matrices as `<!-- attnref-run engines ARGS -->` and a ```text block; each
// must be what the tool prints for ARGS today (paths relative to the source tree).
TEST_F(EnginesCli, TheReadmeMatricesAreWhatTheToolPrints) {
  std::ifstream in(source_path("README.md"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string marker = "<!-- attnref-run engines ";
  int blocks = 0;
  for (std::size_t at = readme.find(marker); at != std::string::npos;
       at = readme.find(marker, at + 1)) {
    const std::size_t args_end = readme.find(" -->", at);
    const std::string args = readme.substr(at + marker.size(), args_end - at - marker.size());
    const std::size_t open = readme.find("```text\n", args_end);
    const std::size_t close = readme.find("```\n", open + 8);
    ASSERT_NE(close, std::string::npos);
    const std::string shown = readme.substr(open + 8, close - open - 8);
    std::string words;
    std::istringstream split(args);
    for (std::string w; split >> w;) {
      words += (words.empty() ? "" : " ") + (w.rfind("examples/", 0) == 0 ? source_path(w) : w);
    }
    const Result r = run_subcommand("engines", words);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out, shown) << "README block for: " << args;
    ++blocks;
  }
  EXPECT_EQ(blocks, 2);
}

}  // namespace
