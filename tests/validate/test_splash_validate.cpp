// SPDX-License-Identifier: Apache-2.0
// Splash validators: one negative test per error path (code, JAX id, message), profiles, order.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attnref/masks/mask.hpp"
#include "attnref/masks/mask_info.hpp"
#include "attnref/validate/splash.hpp"

namespace {

using attnref::CausalMask;
using attnref::ErrorCode;
using attnref::Profile;
using attnref::SplashAttentionArgs;
using attnref::Status;

// Shapes only matter; the buffers are big enough for every case below.
struct Fixture {
  std::vector<float> q = std::vector<float>(8 * 256 * 64);
  std::vector<float> k = std::vector<float>(8 * 256 * 64);
  std::vector<float> v = std::vector<float>(8 * 256 * 128);
  std::vector<std::int32_t> seg = std::vector<std::int32_t>(512);
  std::vector<float> sinks = std::vector<float>(16);

  // Hq=8, Sq=256, Dqk=64; Hkv=2, Skv=256, Dv=128.
  SplashAttentionArgs<float> args() const {
    SplashAttentionArgs<float> a;
    a.q = {q.data(), {8, 256, 64}};
    a.k = {k.data(), {2, 256, 64}};
    a.v = {v.data(), {2, 256, 128}};
    a.block_sizes = attnref::SplashBlockSizes::get_default();
    return a;
  }
};

void expect_error(const Status& s, ErrorCode code, const char* jax, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), jax);
  EXPECT_EQ(s.message(), message);
}

const CausalMask kMask{{256, 256}};

TEST(SplashValidate, ValidArgsPassBothProfiles) {
  Fixture f;
  auto a = f.args();
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kJax).ok());
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kJax).ok());
  a.q_segment_ids = {f.seg.data(), {256}};
  a.kv_segment_ids = {f.seg.data(), {256}};
  a.sinks = {f.sinks.data(), {8}};
  a.soft_cap = 30.0f;
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kJax).ok());
  EXPECT_NO_THROW(attnref::validate_splash(a, kMask, Profile::kJax));
}

TEST(SplashValidate, JaxProfileRefusesOptionsJaxsKernelLacks) {
  // JAX's splash kernel takes sinks but has no sliding_window option (a LocalMask does that) and
  // no ALiBi: under the jax profile those two are option_not_in_jax, after S7/S8.
  Fixture f;
  auto a = f.args();
  a.sinks = {f.sinks.data(), {8}};
  a.sliding_window = 64;
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
  Status s = attnref::check_splash(a, kMask, Profile::kJax);
  expect_error(s, ErrorCode::kOptionNotInJax, "",
               "JAX's splash attention has no sliding_window option.");
  EXPECT_EQ(std::string(s.field()), "sliding_window");
  EXPECT_EQ(s.hint(),
            "AND the mask with a LocalMask of window (W - 1, 0), as JAX callers do, or check under "
            "the reference profile");
  EXPECT_EQ(attnref::check_splash_backward(a, kMask, Profile::kJax).code(),
            ErrorCode::kOptionNotInJax);
  a.sliding_window.reset();
  a.alibi_slopes = {f.sinks.data(), {8}};
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
  s = attnref::check_splash(a, kMask, Profile::kJax);
  expect_error(s, ErrorCode::kOptionNotInJax, "",
               "JAX's splash attention has no alibi_slopes option.");
  EXPECT_EQ(s.hint(),
            "drop alibi_slopes to ask what JAX's kernel accepts, or check under the reference "
            "profile, whose kernels apply it");
  a.block_sizes.block_kv_compute = 96;  // S7 comes first
  EXPECT_EQ(attnref::check_splash(a, kMask, Profile::kJax).code(), ErrorCode::kBlockNotDivisible);
}

TEST(SplashValidate, S3MqaKeyWithHeads) {
  Fixture f;
  auto a = f.args();
  a.is_mqa = true;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kRankMismatch, "S3",
               "Expected 2-dim 'key' tensor for MQA. Instead got a 3-dim one with 2 heads.");
  a.k.extents[0] = a.v.extents[0] = 1;
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kJax).ok());
}

TEST(SplashValidate, S3KeyRankCorrectedWording) {
  EXPECT_TRUE(attnref::check_key_rank(3, false).ok());
  EXPECT_TRUE(attnref::check_key_rank(2, true).ok());
  expect_error(attnref::check_key_rank(2, false), ErrorCode::kRankMismatch, "S3",
               "Expected 3-dim 'key' tensor for MHA. Instead got a 2-dim one.");
  expect_error(attnref::check_key_rank(3, true), ErrorCode::kRankMismatch, "S3",
               "Expected 2-dim 'key' tensor for MQA. Instead got a 3-dim one.");
}

TEST(SplashValidate, S2MaskRank) {
  const std::int64_t shape[4] = {64, 64, 1, 2};
  EXPECT_TRUE(attnref::check_mask_rank(3, shape).ok());
  expect_error(attnref::check_mask_rank(2, shape), ErrorCode::kMaskShape, "S2",
               "Unexpected mask shape: (64, 64)");
  expect_error(attnref::check_mask_rank(4, shape), ErrorCode::kMaskShape, "S2",
               "Unexpected mask shape: (64, 64, 1, 2)");
  expect_error(attnref::check_mask_rank(1, shape), ErrorCode::kMaskShape, "S2",
               "Unexpected mask shape: (64,)");
}

TEST(SplashValidate, K9MaskDtype) {
  EXPECT_TRUE(attnref::check_mask_dtype(attnref::DType::kBool).ok());
  const Status s = attnref::check_mask_dtype(attnref::DType::kInt8);
  expect_error(s, ErrorCode::kDtypeNotSupported, "K9", "Mask must be a boolean array");
  EXPECT_EQ(s.hint(), "got int8; save the mask with dtype=bool");
}

TEST(SplashValidate, S4KeyHeadDim) {
  Fixture f;
  auto a = f.args();
  a.k.extents[2] = 32;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kHeadDimMismatch,
               "S4", "Expected 'key' head dimension to be: 64. Instead got: 32.");
}

TEST(SplashValidate, S5GqaCorrectedWording) {
  Fixture f;
  auto a = f.args();
  a.q.extents[0] = 6;
  a.k.extents[0] = a.v.extents[0] = 4;
  const Status s = attnref::check_splash(a, kMask, Profile::kReference);
  expect_error(s, ErrorCode::kGqaNotDivisible, "S5",
               "In MHA, expected number of 'query' heads (6) to be a multiple of the number of "
               "'key' heads (4)");
  EXPECT_EQ(s.hint(), "valid num_kv_heads for 6 query heads: 1, 2, 3, 6");
}

TEST(SplashValidate, HeadCountsPositive) {
  Fixture f;
  auto a = f.args();
  a.k.extents[0] = a.v.extents[0] = 0;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kInvalidHeadCount,
               "", "num_kv_heads must be positive. Got 0.");
}

TEST(SplashValidate, S6KeyValueLeadingDims) {
  Fixture f;
  auto a = f.args();
  a.v.extents[1] = 128;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kShapeMismatch,
               "S6",
               "Expected 'key' (2, 256, 64) and 'value' (2, 128, 128) to have the same leading "
               "dimensions.");
  a = f.args();
  a.is_mqa = true;
  a.k.extents[0] = 1;
  a.v.extents[0] = 1;
  a.v.extents[1] = 128;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kShapeMismatch,
               "S6",
               "Expected 'key' (256, 64) and 'value' (128, 128) to have the same leading "
               "dimensions.");
}

TEST(SplashValidate, S7ComputeBlockDividesKvBlockUnderJax) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_kv = 256;
  a.block_sizes.block_kv_compute = 384;
  a.block_sizes.block_kv = 512;
  const CausalMask mask{{256, 512}};
  a.k.extents[1] = a.v.extents[1] = 512;
  expect_error(attnref::check_splash(a, mask, Profile::kJax), ErrorCode::kBlockNotDivisible, "S7",
               "bkv=512 must be a multiple of bkv_compute=384.");
  EXPECT_TRUE(attnref::check_splash(a, mask, Profile::kReference).ok());
}

TEST(SplashValidate, S8ComputeBlockLanesUnderJax) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_kv_compute = 64;
  expect_error(attnref::check_splash(a, kMask, Profile::kJax), ErrorCode::kTilingRule, "S8",
               "bkv_compute=64 must be a multiple of 128.");
  EXPECT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
}

TEST(SplashValidate, BlockSizesPositive) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_kv_compute = 0;
  const Status s = attnref::check_splash(a, kMask, Profile::kReference);
  expect_error(s, ErrorCode::kInvalidBlockSize, "", "block_kv_compute=0 must be positive.");
  EXPECT_EQ(std::string(s.field()), "block_kv_compute");
}

TEST(SplashValidate, S9S10SegmentIds) {
  Fixture f;
  auto a = f.args();
  a.q_segment_ids = {f.seg.data(), {255}};
  a.kv_segment_ids = {f.seg.data(), {256}};
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kSegmentIdsShape,
               "S9", "Invalid shape for q segment_ids: (255,). Expected: (256,)");
  a.q_segment_ids = {f.seg.data(), {256}};
  a.kv_segment_ids = {f.seg.data(), {512}};
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kSegmentIdsShape,
               "S10", "Invalid shape for kv segment_ids: (512,). Expected: (256,)");
}

TEST(SplashValidate, SegmentIdsTogether) {
  Fixture f;
  auto a = f.args();
  a.q_segment_ids = {f.seg.data(), {256}};
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kSegmentIdsShape,
               "", "q and kv segment ids must be given together (got q: 1, kv: 0)");
}

TEST(SplashValidate, S11SinksShape) {
  Fixture f;
  auto a = f.args();
  a.sinks = {f.sinks.data(), {2}};
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kSinksShape, "S11",
               "sinks must have shape (8,), one logit per query head. Got (2,).");
}

TEST(SplashValidate, MaskHeadCount) {
  Fixture f;
  auto a = f.args();
  attnref::MultiHeadMask two{kMask, kMask};
  expect_error(attnref::check_splash(a, two, Profile::kReference), ErrorCode::kMaskHeadCount, "",
               "the mask has 2 heads; expected 1 (shared by all heads) or num_q_heads=8");
  attnref::MultiHeadMask eight{kMask, kMask, kMask, kMask, kMask, kMask, kMask, kMask};
  EXPECT_TRUE(attnref::check_splash(a, eight, Profile::kJax).ok());
}

TEST(SplashValidate, MaskShapeAgainstQk) {
  Fixture f;
  auto a = f.args();
  const Status s = attnref::check_splash(a, CausalMask{{256, 128}}, Profile::kReference);
  expect_error(s, ErrorCode::kMaskShape, "",
               "mask shape (256, 128) does not match (q_seq_len, kv_seq_len) = (256, 256)");
  EXPECT_EQ(s.hint(), "build the mask with shape (q_seq_len, kv_seq_len) = (256, 256)");
}

TEST(SplashValidate, MaskOwnChecks) {
  Fixture f;
  auto a = f.args();
  expect_error(attnref::check_splash(a, attnref::ChunkedCausalMask{{256, 256}, 0}, Profile::kJax),
               ErrorCode::kInvalidMaskParameter, "K12", "chunk_size must be positive");
}

TEST(SplashValidate, M3M4ForwardBlocksUnderJaxOnly) {
  Fixture f;
  auto a = f.args();
  a.q.extents[1] = 200;
  const CausalMask mask{{200, 256}};
  expect_error(attnref::check_splash(a, mask, Profile::kJax), ErrorCode::kBlockNotDivisible, "M3",
               "q_block_size=128 should divide q_seq_len=200.");
  EXPECT_TRUE(attnref::check_splash(a, mask, Profile::kReference).ok());
  a = f.args();
  a.sharding.head_shards = 3;
  expect_error(attnref::check_splash(a, kMask, Profile::kJax), ErrorCode::kBlockNotDivisible, "M7",
               "head_shards=3 should divide head_count=1.");
}

// JAX checks the mask's blocks when the kernel is made, before a call's inputs: an input that
// breaks M4 and S8 gets M4 (as JAX 0.10.2 says; tests/conformance holds this against JAX).
TEST(SplashValidate, MaskBlocksBeforeInputChecksUnderJax) {
  Fixture f;
  auto a = f.args();
  a.k.extents[1] = a.v.extents[1] = 128;
  a.block_sizes.block_kv = 256;
  a.block_sizes.block_kv_compute = 64;
  const CausalMask mask{{256, 128}};
  expect_error(attnref::check_splash(a, mask, Profile::kJax), ErrorCode::kBlockNotDivisible, "M4",
               "kv_block_size=256 should divide kv_seq_len=128.");
  a.k.extents[2] = 32;  // and S4
  expect_error(attnref::check_splash(a, mask, Profile::kJax), ErrorCode::kBlockNotDivisible, "M4",
               "kv_block_size=256 should divide kv_seq_len=128.");
}

TEST(SplashValidate, SafetyChecks) {
  Fixture f;
  auto a = f.args();
  a.soft_cap = 0.0f;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kInvalidSoftCap, "",
               "soft_cap=0.0 must not be 0.0 and must be finite.");
  a = f.args();
  a.mask_value = 1.0f;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kInvalidMaskValue,
               "", "mask_value=1.0 must be a finite negative number.");
  a = f.args();
  a.sm_scale = std::numeric_limits<float>::infinity();
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kInvalidScale, "",
               "sm_scale=inf must be finite.");
  a = f.args();
  a.q.data = nullptr;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kNullData, "",
               "q has 131072 elements but a null data pointer");
  a = f.args();
  a.v.buffer_size = 100;
  EXPECT_EQ(attnref::check_splash(a, kMask, Profile::kReference).code(), ErrorCode::kOutOfBuffer);
  a = f.args();
  a.v.extents[2] = 0;
  expect_error(attnref::check_splash(a, kMask, Profile::kReference), ErrorCode::kInvalidHeadDim, "",
               "head_dim must be positive. Got 64 (qk) and 0 (v).");
  a = f.args();
  EXPECT_THROW(
      {
        a.soft_cap = std::numeric_limits<float>::quiet_NaN();
        attnref::validate_splash(a, kMask, Profile::kReference);
      },
      attnref::ShapeError);
}

TEST(SplashValidate, S1FusedWithDqBlocks) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.use_fused_bwd_kernel = true;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax),
               ErrorCode::kInvalidBlockSize, "S1",
               "Block sizes for dq kernel are not needed with a fused kernel.");
  a.block_sizes.block_q_dq.reset();
  a.block_sizes.block_kv_dq.reset();
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kJax).ok());
}

TEST(SplashValidate, S15BackwardBlocksUnderJaxOnly) {
  Fixture f;
  auto a = f.args();
  a.block_sizes = attnref::SplashBlockSizes{};
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax),
               ErrorCode::kMissingBackwardBlocks, "S15", "Need to specify backward blocks.");
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kReference).ok());
  EXPECT_THROW(attnref::validate_splash_backward(a, kMask, Profile::kJax), attnref::ShapeError);
}

TEST(SplashValidate, BackwardBlocksPositive) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_q_dkv = -4;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kReference),
               ErrorCode::kInvalidBlockSize, "", "block_q_dkv=-4 must be positive.");
}

TEST(SplashValidate, S16S17BlocksLargerThanSequences) {
  // JAX builds the dq/dkv MaskInfo first (M3/M4), so a block larger than a non-empty sequence
  // reports M3/M4; S16/S17 are reached only for an empty sequence (0 % b == 0), as in JAX.
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_q_dkv = 512;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax),
               ErrorCode::kBlockNotDivisible, "M3",
               "q_block_size=512 should divide q_seq_len=256.");
  a = f.args();
  a.q.extents[1] = 0;
  expect_error(attnref::check_splash_backward(a, CausalMask{{0, 256}}, Profile::kJax),
               ErrorCode::kBlockTooLarge, "S16", "bq=128 should not be greater than q_seq_len=0");
  a = f.args();
  a.k.extents[1] = a.v.extents[1] = 0;
  expect_error(attnref::check_splash_backward(a, CausalMask{{256, 0}}, Profile::kJax),
               ErrorCode::kBlockTooLarge, "S17", "bkv=128 should not be greater than kv_seq_len=0");
}

TEST(SplashValidate, S18S19DkvComputeBlock) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_kv_dkv_compute = 256;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax), ErrorCode::kBlockTooLarge,
               "S18", "bkv_compute=256 should not be greater than bkv=128");
  a.block_sizes.block_kv_dkv = 256;
  a.block_sizes.block_kv_dkv_compute = 96;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax),
               ErrorCode::kBlockNotDivisible, "S19",
               "bkv=256 should be a multiple of bkv_compute=96");
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kReference).ok());
}

TEST(SplashValidate, S20DqKvBlockLanes) {
  Fixture f;
  auto a = f.args();
  a.block_sizes.block_kv_dq = 64;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax), ErrorCode::kTilingRule,
               "S20", "bkv=64 must be a multiple of 128.");
}

TEST(SplashValidate, S21SegmentIdsNeedDkvQBlockOf128) {
  Fixture f;
  auto a = f.args();
  a.q_segment_ids = {f.seg.data(), {256}};
  a.kv_segment_ids = {f.seg.data(), {256}};
  a.block_sizes.block_q_dkv = 64;
  expect_error(attnref::check_splash_backward(a, kMask, Profile::kJax), ErrorCode::kTilingRule,
               "S21", "block_q must be a multiple of 128");
  a.q_segment_ids = {};
  a.kv_segment_ids = {};
  EXPECT_TRUE(attnref::check_splash_backward(a, kMask, Profile::kJax).ok());
}

TEST(SplashValidate, BackwardTensorShapes) {
  Fixture f;
  auto a = f.args();
  std::vector<float> out(8 * 256 * 128), lse(8 * 256), dq(8 * 256 * 64), dk(2 * 256 * 64),
      dv(2 * 256 * 128), ds(8);
  attnref::TensorView<const float, 3> o{out.data(), {8, 256, 128}};
  attnref::TensorView<const float, 2> l{lse.data(), {8, 256}};
  attnref::TensorView<float, 3> gq{dq.data(), {8, 256, 64}};
  attnref::TensorView<float, 3> gk{dk.data(), {2, 256, 64}};
  attnref::TensorView<float, 3> gv{dv.data(), {2, 256, 128}};
  attnref::TensorView<float, 1> gs;
  EXPECT_TRUE(attnref::check_splash_backward_tensors(a, o, l, o, gq, gk, gv, gs).ok());
  attnref::TensorView<float, 3> bad_dk{dk.data(), {2, 256, 32}};
  expect_error(attnref::check_splash_backward_tensors(a, o, l, o, gq, bad_dk, gv, gs),
               ErrorCode::kShapeMismatch, "", "dk has shape (2, 256, 32); expected (2, 256, 64)");
  attnref::TensorView<const float, 2> bad_l{lse.data(), {8, 128}};
  expect_error(attnref::check_splash_backward_tensors(a, o, bad_l, o, gq, gk, gv, gs),
               ErrorCode::kShapeMismatch, "", "logsumexp has shape (8, 128); expected (8, 256)");
  attnref::TensorView<float, 1> dsinks{ds.data(), {8}};
  expect_error(attnref::check_splash_backward_tensors(a, o, l, o, gq, gk, gv, dsinks),
               ErrorCode::kSinksShape, "",
               "dsinks has shape (8,); expected (8,) and sinks given (sinks: 0)");
}

}  // namespace

namespace {

TEST(SplashValidate, AgainstMaskInfo) {
  Fixture f;
  auto a = f.args();
  const attnref::MaskInfo good = attnref::make_mask_info(kMask, 128, 128);
  EXPECT_TRUE(attnref::check_splash(a, good, Profile::kJax).ok());
  attnref::MaskInfo wrong_heads = good;
  wrong_heads.num_heads = 3;
  expect_error(attnref::check_splash(a, wrong_heads, Profile::kReference),
               ErrorCode::kMaskHeadCount, "",
               "the mask has 3 heads; expected 1 (shared by all heads) or num_q_heads=8");
  const attnref::MaskInfo wrong_shape = attnref::make_mask_info(CausalMask{{256, 128}}, 128, 128);
  expect_error(attnref::check_splash(a, wrong_shape, Profile::kReference), ErrorCode::kMaskShape,
               "", "mask shape (256, 128) does not match (q_seq_len, kv_seq_len) = (256, 256)");
  const attnref::MaskInfo wrong_blocks = attnref::make_mask_info(kMask, 64, 128);
  expect_error(attnref::check_splash(a, wrong_blocks, Profile::kReference),
               ErrorCode::kInvalidBlockSize, "",
               "the MaskInfo was built for blocks (64, 128) but block_sizes say (128, 128)");
  a.k.extents[2] = 32;  // the tiling fits: JAX's input checks find S4
  EXPECT_EQ(std::string(attnref::check_splash(a, good, Profile::kReference).jax_check()), "S4");
}

}  // namespace

namespace {

TEST(SplashValidate, TiersMatchCheckSplash) {
  Fixture f;
  auto a = f.args();
  EXPECT_TRUE(attnref::check_splash_shapes(a, kMask, Profile::kJax).ok());
  EXPECT_TRUE(attnref::check_splash_metadata(a, kMask, Profile::kJax).ok());
  // check_splash is the shape tier then the metadata tier: the same first error.
  a.block_sizes.block_kv_compute = 64;
  const Status shapes = attnref::check_splash_shapes(a, kMask, Profile::kJax);
  const Status both = attnref::check_splash(a, kMask, Profile::kJax);
  EXPECT_EQ(std::string(shapes.jax_check()), "S8");
  EXPECT_EQ(both.code(), shapes.code());
  EXPECT_EQ(both.message(), shapes.message());
}

TEST(SplashValidate, DataTierFindsNonFiniteValues) {
  Fixture f;
  f.sinks.assign(f.sinks.size(), 0.5f);
  auto a = f.args();
  a.sinks = {f.sinks.data(), {8}};
  ASSERT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
  EXPECT_TRUE(attnref::check_splash_data(a).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<float>* buffer;
    std::size_t at;
    float value;
    const char* field;
    std::string message;
  };
  // q [8, 256, 64], k [2, 256, 64], v [2, 256, 128], sinks [8], all contiguous.
  const Case cases[] = {
      {&f.q, (3 * 256 + 17) * 64 + 5, nan, "q", "q[3, 17, 5] is not finite"},
      {&f.k, (1 * 256 + 255) * 64 + 63, inf, "k", "k[1, 255, 63] is not finite"},
      {&f.v, (0 * 256 + 2) * 128 + 100, -inf, "v", "v[0, 2, 100] is not finite"},
      {&f.sinks, 7, nan, "sinks", "sinks[7] is not finite"},
  };
  for (const Case& c : cases) {
    const float saved = (*c.buffer)[c.at];
    (*c.buffer)[c.at] = c.value;
    const Status s = attnref::check_splash_data(a);
    expect_error(s, ErrorCode::kNonFiniteData, "", c.message);
    EXPECT_EQ(std::string(s.field()), c.field);
    EXPECT_FALSE(s.hint().empty());
    (*c.buffer)[c.at] = saved;
  }
  // Past the views (the buffers are larger) nothing is read.
  f.v.back() = nan;
  f.sinks.back() = nan;
  EXPECT_TRUE(attnref::check_splash_data(a).ok());
  // q is reported before k, k before v.
  f.v[0] = nan;
  f.k[0] = nan;
  EXPECT_EQ(std::string(attnref::check_splash_data(a).field()), "k");
}

TEST(SplashValidate, DataTierMqa) {
  Fixture f;
  auto a = f.args();
  a.is_mqa = true;
  a.k.extents[0] = 1;
  a.v.extents[0] = 1;
  ASSERT_TRUE(attnref::check_splash(a, kMask, Profile::kReference).ok());
  f.k[256 * 64] = std::numeric_limits<float>::quiet_NaN();  // head 1: not part of the view
  EXPECT_TRUE(attnref::check_splash_data(a).ok());
  f.k[255 * 64] = std::numeric_limits<float>::quiet_NaN();
  expect_error(attnref::check_splash_data(a), ErrorCode::kNonFiniteData, "",
               "k[0, 255, 0] is not finite");
}

}  // namespace
