// vllm_selection: the backend vLLM 0.33.0 takes for a layer on an architecture, the backends it
// passes over with their selector reasons, what the chosen one refuses once built, and where
// the choice is not modelled. Hand-worked from vLLM's priority lists (docs/engines.md).
#include <gtest/gtest.h>

#include <attnref/validate/engines/vllm_selection.hpp>

#include <string>
#include <vector>

namespace {

using attnref::DType;
using attnref::EngineConfig;
using attnref::EngineKernel;
using attnref::VllmSelection;

constexpr EngineConfig kLlama3_8b{32, 8, 128, 0, 16};
constexpr EngineConfig kDeepSeekV3{128, 1, 576, 512, 64};

std::vector<std::string> passed_over(const VllmSelection& s) {
  std::vector<std::string> names;
  for (const attnref::VllmPassedOver& p : s.passed_over) names.push_back(p.backend);
  return names;
}

TEST(VllmSelection, FirstChoicesFollowTheArchitecture) {
  const VllmSelection sm90 = attnref::vllm_selection(kLlama3_8b, 90);
  EXPECT_TRUE(sm90.modelled);
  EXPECT_EQ(sm90.selected, "FLASH_ATTN");
  EXPECT_EQ(sm90.kernel, EngineKernel::kVllmFlashAttn);
  EXPECT_TRUE(sm90.passed_over.empty());
  const VllmSelection sm100 = attnref::vllm_selection(kLlama3_8b, 100);
  EXPECT_EQ(sm100.selected, "FLASHINFER");
  EXPECT_EQ(sm100.kernel, EngineKernel::kVllmFlashInfer);
  EXPECT_EQ(attnref::vllm_selection(kDeepSeekV3, 90).selected, "FLASH_ATTN_MLA");
  EXPECT_EQ(attnref::vllm_selection(kDeepSeekV3, 100).selected, "FLASHINFER_MLA");
  EXPECT_EQ(attnref::vllm_selection(kDeepSeekV3, 120).selected, "TRITON_MLA");
}

TEST(VllmSelection, PassedOverBackendsCarryTheSelectorsReasons) {
  EngineConfig oss = kLlama3_8b;  // gpt-oss: head_dim 64, sinks
  oss.head_dim = 64;
  oss.sinks = true;
  const VllmSelection s = attnref::vllm_selection(oss, 80);
  EXPECT_EQ(s.selected, "TRITON_ATTN");
  ASSERT_EQ(passed_over(s), (std::vector<std::string>{"FLASH_ATTN", "FLASHINFER"}));
  EXPECT_EQ(s.passed_over[0].reasons,
            (std::vector<std::string>{"attention sinks not supported",
                                      "sink not supported on compute capability < 9.0"}));
  EXPECT_EQ(s.passed_over[1].reasons, (std::vector<std::string>{"attention sinks not supported"}));
  // DeepSeek-V3 on pages of 16 on sm100: every backend ahead of TRITON_MLA refuses them.
  EngineConfig pages16 = kDeepSeekV3;
  pages16.page_size = 16;
  const VllmSelection mla = attnref::vllm_selection(pages16, 100);
  EXPECT_EQ(mla.selected, "TRITON_MLA");
  EXPECT_EQ(passed_over(mla), (std::vector<std::string>{"FLASHINFER_MLA", "CUTLASS_MLA",
                                                        "FLASH_ATTN_MLA", "FLASHMLA"}));
}

TEST(VllmSelection, FlexAttentionIsTheLastResortAndNoneMayBeValid) {
  EngineConfig tiny = kLlama3_8b;  // head_dim 16: TRITON_ATTN and FLASHINFER refuse it
  tiny.head_dim = 16;
  tiny.q_dtype = tiny.kv_dtype = DType::kFloat32;
  const VllmSelection flex = attnref::vllm_selection(tiny, 100);
  EXPECT_EQ(flex.selected, "FLEX_ATTENTION");
  EXPECT_FALSE(flex.has_kernel);
  tiny.page_size = 8;  // and no backend takes pages of 8
  const VllmSelection none = attnref::vllm_selection(tiny, 100);
  EXPECT_TRUE(none.modelled);
  EXPECT_TRUE(none.selected.empty());
  EXPECT_EQ(passed_over(none), (std::vector<std::string>{"FLASHINFER", "FLASH_ATTN", "TRITON_ATTN",
                                                         "FLEX_ATTENTION"}));
}

TEST(VllmSelection, WhatTheChosenBackendRefusesOnceBuilt) {
  EngineConfig fp8_alibi = kLlama3_8b;  // the selector takes fp8 K/V on sm90, FA2 cannot
  fp8_alibi.kv_dtype = DType::kFloat8E4M3FN;
  fp8_alibi.alibi = true;
  const VllmSelection s = attnref::vllm_selection(fp8_alibi, 90);
  EXPECT_EQ(s.selected, "FLASH_ATTN");
  EXPECT_EQ(s.refused_after_selection,
            (std::vector<std::string>{"FlashAttention does not support fp8 kv-cache on this "
                                      "device."}));
}

TEST(VllmSelection, NotModelledForOtherReleasesOrNonCausalLayers) {
  EXPECT_FALSE(attnref::vllm_selection(kLlama3_8b, 90, {0, 32, 0}).modelled);
  EXPECT_TRUE(attnref::vllm_selection(kLlama3_8b, 90, {0, 33, 0}).modelled);
  EngineConfig encoder = kLlama3_8b;
  encoder.causal = false;
  const VllmSelection s = attnref::vllm_selection(encoder, 90);
  EXPECT_FALSE(s.modelled);
  EXPECT_TRUE(s.selected.empty());
}

}  // namespace
