// SPDX-License-Identifier: Apache-2.0
// engine_config_of: each family's args as the engine configuration they describe (paged ->
// decode, ragged -> prefill/varlen, splash -> single prefill), their ALiBi convention, soft-cap
// order and causal alignment carried over, so check_engine reports a kernel that computes them
// differently.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <attnref/validate/engines.hpp>

namespace {

using attnref::AlibiConvention;
using attnref::ConventionMismatch;
using attnref::EngineConfig;
using attnref::EngineKernel;
using attnref::SoftCapOrder;

/// The names of a report's convention mismatches, in order.
std::vector<std::string> mismatches(const EngineConfig& c, EngineKernel kernel) {
  std::vector<std::string> names;
  for (const ConventionMismatch& m : attnref::check_engine(c, {kernel, 90}).conventions)
    names.emplace_back(m.convention);
  return names;
}

const std::vector<std::string> kNone;
const std::vector<std::string> kOrder = {"soft_cap_order"};
const std::vector<std::string> kAlibi = {"alibi"};
const std::vector<std::string> kCausal = {"causal_alignment"};

struct Paged {
  std::vector<float> q = std::vector<float>(2 * 8 * 64), pool = std::vector<float>(2 * 4 * 16 * 64);
  std::vector<float> slopes = std::vector<float>(8, 0.5f);
  std::vector<std::int32_t> lengths{3, 5}, pages{0, 1, 2, 3};
  attnref::PagedAttentionArgs<float> args;
  Paged() {
    args.q = {q.data(), {2, 8, 64}};
    args.k_pages = {pool.data(), {2, 4, 16, 64}};
    args.v_pages = {pool.data(), {2, 4, 16, 64}};
    args.lengths = {lengths.data(), {2}};
    args.page_indices = {pages.data(), {2, 2}};
    args.alibi_slopes = {slopes.data(), {8}};
    args.soft_cap = 30.0f;
  }
};

TEST(EngineConfigOf, PagedArgsCarryTheirConventions) {
  Paged p;
  ASSERT_TRUE(attnref::check_paged(p.args, attnref::Profile::kReference).ok());
  EngineConfig c = attnref::engine_config_of(p.args);
  EXPECT_EQ(c.q_len, 1);
  EXPECT_EQ(c.kv_len, 5);  // the longest sequence
  EXPECT_EQ(c.conventions.causal_alignment, attnref::CausalAlignment::kBottomRight);
  EXPECT_TRUE(c.causal);
  EXPECT_TRUE(c.alibi && c.soft_cap);
  EXPECT_EQ(c.conventions.alibi, AlibiConvention::kSigned);
  EXPECT_EQ(c.conventions.soft_cap_order, SoftCapOrder::kCapThenAlibi);
  // FlashInfer adds ALiBi before its cap: the default order is a mismatch there, not in vLLM's
  // paged kernel (which has no cap and no order).
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferDecode), kOrder);
  EXPECT_EQ(mismatches(c, EngineKernel::kVllmPagedAttentionV1), kNone);
  p.args.soft_cap_order = SoftCapOrder::kAlibiThenCap;
  p.args.alibi_convention = AlibiConvention::kAbsolute;
  c = attnref::engine_config_of(p.args);
  EXPECT_EQ(c.conventions.alibi, AlibiConvention::kAbsolute);
  EXPECT_EQ(c.conventions.soft_cap_order, SoftCapOrder::kAlibiThenCap);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferDecode), kNone);
}

struct Ragged {
  std::vector<float> q = std::vector<float>(32 * 8 * 128),
                     pool = std::vector<float>(2 * 16 * 16 * 128);
  std::vector<float> slopes = std::vector<float>(8, 0.5f);
  std::vector<std::int32_t> kv_lens{7, 40, 30, 0}, pages = std::vector<std::int32_t>(4 * 4),
                                                   cu{0, 1, 20, 25, 25};
  attnref::RaggedPagedAttentionArgs<float> args;
  Ragged() {
    for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<std::int32_t>(i);
    args.q = {q.data(), {32, 8, 128}};
    args.k_pages = {pool.data(), {2, 16, 16, 128}};
    args.v_pages = {pool.data(), {2, 16, 16, 128}};
    args.kv_lens = {kv_lens.data(), {4}};
    args.page_indices = {pages.data(), {4, 4}};
    args.cu_q_lens = {cu.data(), {5}};
    args.num_seqs_value = 3;
    args.sliding_window = 8;
  }
};

TEST(EngineConfigOf, RaggedArgsArePrefillWithTheLongestQueryRun) {
  Ragged r;
  ASSERT_TRUE(attnref::check_ragged(r.args, attnref::Profile::kReference).ok());
  EngineConfig c = attnref::engine_config_of(r.args);
  EXPECT_EQ(c.num_q_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.head_dim_v, 128);
  EXPECT_EQ(c.page_size, 16);
  EXPECT_EQ(c.q_dtype, attnref::DType::kFloat32);
  EXPECT_EQ(c.kv_dtype, attnref::DType::kFloat32);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.q_len, 19);  // sequence 1: rows [1, 20)
  // The longest cached prefix: sequence 2, 30 keys for 5 rows (sequence 3 has no rows).
  EXPECT_EQ(c.kv_len, 19 + 25);
  EXPECT_EQ(c.conventions.causal_alignment, attnref::CausalAlignment::kBottomRight);
  EXPECT_TRUE(c.causal);
  EXPECT_FALSE(c.alibi || c.soft_cap || c.sinks);
  // More than one query per request: FlashInfer's CUDA-core decode kernel refuses it.
  bool q_len_rule = false;
  for (const auto& f : attnref::check_engine(c, {EngineKernel::kFlashInferDecode, 90}).findings)
    q_len_rule = q_len_rule || std::strcmp(f.id(), "flashinfer.decode.q_len") == 0;
  EXPECT_TRUE(q_len_rule);
  // The window counts W keys here, W - 1 left of the query in FlashInfer's prefill.
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), std::vector<std::string>{"window"});
  // No live sequence: one query row, as the configuration's rules need at least one.
  r.args.num_seqs_value = 0;
  EXPECT_EQ(attnref::engine_config_of(r.args).q_len, 1);
  EXPECT_EQ(attnref::engine_config_of(r.args).kv_len, 1);
}

TEST(EngineConfigOf, RaggedRowsAlignBottomRightAsEveryEngineDoes) {
  Ragged r;
  r.args.sliding_window = std::nullopt;
  // Whole prefills (as many keys as rows): no cached prefix.
  r.kv_lens[0] = 1;
  r.kv_lens[1] = 19;
  r.kv_lens[2] = 5;
  EngineConfig c = attnref::engine_config_of(r.args);
  EXPECT_EQ(c.q_len, 19);
  EXPECT_EQ(c.kv_len, 19 + 0);
  // Sequence 0's one row after 6 cached keys: a prefix, though no sequence has more than 19
  // keys.
  r.kv_lens[0] = 7;
  c = attnref::engine_config_of(r.args);
  EXPECT_EQ(c.kv_len, 19 + 6);
  for (EngineKernel k : attnref::kEngineKernels) EXPECT_EQ(mismatches(c, k), kNone);
  // FlashAttention-2 before v2.1 aligned its causal mask top-left.
  std::vector<std::string> names;
  for (const ConventionMismatch& m :
       attnref::check_engine(c, {EngineKernel::kFlashAttention2, 90, {2, 0, 0}}).conventions)
    names.emplace_back(m.convention);
  EXPECT_EQ(names, kCausal);
}

TEST(EngineConfigOf, RaggedSoftCapOrderAgainstFlashInferAndFlashAttention) {
  Ragged r;
  r.args.sliding_window = std::nullopt;
  r.args.alibi_slopes = {r.slopes.data(), {8}};
  r.args.soft_cap = 50.0f;
  r.args.soft_cap_order = SoftCapOrder::kAlibiThenCap;
  const EngineConfig c = attnref::engine_config_of(r.args);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kNone);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention2), kOrder);
  // A causal batch: ALiBi's sign changes no number, so the absolute convention is no mismatch.
  EXPECT_EQ(c.conventions.alibi, AlibiConvention::kSigned);
}

struct Splash {
  std::vector<float> q = std::vector<float>(16 * 256 * 64), kv = std::vector<float>(256 * 64);
  std::vector<float> slopes = std::vector<float>(16, 0.5f);
  attnref::SplashAttentionArgs<float> args;
  Splash() {
    args.q = {q.data(), {16, 256, 64}};
    args.k = {kv.data(), {1, 256, 64}};
    args.v = {kv.data(), {1, 256, 64}};
    args.is_mqa = true;
    args.alibi_slopes = {slopes.data(), {16}};
  }
};

TEST(EngineConfigOf, SplashArgsAreOnePrefillAndAbsoluteAlibiMattersWithoutACausalMask) {
  Splash s;
  EngineConfig c = attnref::engine_config_of(s.args, /*causal=*/false);
  EXPECT_EQ(c.num_q_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 1);  // MQA
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.head_dim_v, 64);
  EXPECT_EQ(c.page_size, 0);  // not paged
  EXPECT_EQ(c.q_len, 256);
  EXPECT_FALSE(c.causal);
  // FlashAttention-2 subtracts slope * |distance| without a causal mask.
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention2), kAlibi);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kNone);
  s.args.alibi_convention = AlibiConvention::kAbsolute;
  c = attnref::engine_config_of(s.args, false);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention2), kNone);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kAlibi);
  // Under a causal mask both conventions give the same numbers.
  c = attnref::engine_config_of(s.args, true);
  EXPECT_TRUE(c.causal);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kNone);
  // With a soft cap too: FlashAttention-2 caps first, FlashInfer adds ALiBi first.
  s.args.soft_cap = 20.0f;
  s.args.alibi_convention = AlibiConvention::kSigned;
  c = attnref::engine_config_of(s.args, true);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention2), kNone);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kOrder);
}

TEST(EngineConfigOf, SplashStatesItsCausalAlignmentWhenKeysOutnumberQueries) {
  using attnref::CausalAlignment;
  Splash s;
  s.args.alibi_slopes = {};
  s.args.q = {s.q.data(), {16, 64, 64}};  // 64 query rows over 256 keys
  // CausalMask with offset 0 (the default): row i sees t <= i, top-left.
  EngineConfig c = attnref::engine_config_of(s.args, true);
  EXPECT_EQ(c.q_len, 64);
  EXPECT_EQ(c.kv_len, 256);
  EXPECT_EQ(c.conventions.causal_alignment, CausalAlignment::kTopLeft);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention3), kCausal);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kCausal);
  EXPECT_EQ(
      attnref::check_engine(c, {EngineKernel::kFlashAttention2, 90, {2, 0, 4}}).conventions.size(),
      0u);
  // CausalMask with offset 256 - 64: bottom-right, as the GPU engines compute it.
  c = attnref::engine_config_of(s.args, true, CausalAlignment::kBottomRight);
  EXPECT_EQ(c.conventions.causal_alignment, CausalAlignment::kBottomRight);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashAttention3), kNone);
  EXPECT_EQ(mismatches(c, EngineKernel::kFlashInferPrefillFa2), kNone);
  // Without a causal mask, or with as many keys as queries, the alignment changes nothing.
  EXPECT_EQ(mismatches(attnref::engine_config_of(s.args, false), EngineKernel::kFlashAttention3),
            kNone);
  s.args.q = {s.q.data(), {16, 256, 64}};
  EXPECT_EQ(mismatches(attnref::engine_config_of(s.args, true), EngineKernel::kFlashAttention3),
            kNone);
}

}  // namespace
