// SPDX-License-Identifier: Apache-2.0
// Ragged paged attention checks: one negative test per error code (code, JAX id, message), the
// JAX validation tests, profile differences, and the page/padding rules of the metadata tier.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attnref/validate/ragged.hpp"

namespace attnref {
namespace {

// A small valid batch: 3 sequences (q_len, kv_len) = (1, 5), (4, 9), (0, 3) in a table of 4 rows,
// heads (4, 2), head_dim 8, page_size 4, 16 pages. Index is a template parameter so R5 can be
// exercised with int64.
template <class Index = std::int32_t>
struct Fixture {
  static constexpr std::int64_t kTokens = 8, kHq = 4, kHkv = 2, kDim = 8, kPages = 16,
                                kPageSize = 4, kMaxSeqs = 4, kPagesPerSeq = 3;
  std::vector<float> q = std::vector<float>(kTokens * kHq * kDim, 0.5f);
  std::vector<float> kv = std::vector<float>(kPages * kPageSize * 2 * kHkv * kDim, 0.25f);
  std::vector<Index> kv_lens{5, 9, 3, 0};
  std::vector<Index> page_indices{0,  1,  99,  // seq 0: 2 live pages, the third unused
                                  2,  3,  4,   // seq 1: 3 live pages
                                  5,  -7, 99,  // seq 2: 1 live page
                                  -1, -1, -1};
  std::vector<Index> cu_q_lens{0, 1, 5, 5, 5};
  Index num_seqs = 3;
  TensorView<const float, 4> kv_pages;  // JAX's combined pool [P, S, 2*Hkv, D]
  RaggedPagedAttentionArgs<float, float, Index> args;

  Fixture() { rebind(); }
  /// The K and V views of `kv_pages` into args (JAX's R12 is checked here).
  Status split() { return ragged_kv_views(kv_pages, &args.k_pages, &args.v_pages); }
  void rebind() {
    args.q = {q.data(), {kTokens, kHq, kDim}};
    kv_pages = {kv.data(), {kPages, kPageSize, 2 * kHkv, kDim}};
    EXPECT_TRUE(split().ok());
    args.kv_lens = {kv_lens.data(), {kMaxSeqs}};
    args.page_indices = {page_indices.data(), {kMaxSeqs, kPagesPerSeq}};
    args.cu_q_lens = {cu_q_lens.data(), {kMaxSeqs + 1}};
    args.num_seqs = {&num_seqs, {1}};
  }
};

struct Expect {
  ErrorCode code;
  const char* jax;
  std::string message;
};

void expect_status(const Status& s, const Expect& e) {
  ASSERT_FALSE(s.ok()) << "expected " << error_code_name(e.code);
  EXPECT_EQ(s.code(), e.code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), e.jax);
  EXPECT_EQ(s.message(), e.message);
  EXPECT_FALSE(s.hint().empty());
}

TEST(RaggedValidate, ValidBatchPassesBothProfiles) {
  Fixture<> f;
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok())
      << check_ragged(f.args, Profile::kJax).to_string();
  EXPECT_TRUE(check_ragged(f.args, Profile::kReference).ok());
  EXPECT_NO_THROW(validate_ragged(f.args, Profile::kReference));
}

TEST(RaggedValidate, NumSeqsAsHostScalar) {
  Fixture<> f;
  f.args.num_seqs = {};
  f.args.num_seqs_value = 3;
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
  EXPECT_EQ(f.args.num_seqs_count(), 3);
  f.args.num_seqs = {&f.num_seqs, {1}};
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "",
                 "num_seqs is given twice: as num_seqs_value=3 and as a view"});
}

// ---- Static checks, in JAX's order.

TEST(RaggedValidate, R12CombinedHeadsOdd) {
  Fixture<> f;
  f.kv_pages.extents[2] = 3;
  expect_status(f.split(),
                {ErrorCode::kShapeMismatch, "R12",
                 "num_combined_kv_heads=3 must be even: kv_pages interleaves K and V of each KV "
                 "head on axis 2."});
}

TEST(RaggedValidate, CombinedPoolViews) {
  // K of KV head h is combined head 2h, V is 2h+1; page, slot and dim strides are the pool's.
  Fixture<> f;
  const auto& k = f.args.k_pages;
  const auto& v = f.args.v_pages;
  EXPECT_EQ(k.extents, (std::array<std::int64_t, 4>{2, 16, 4, 8}));
  EXPECT_EQ(v.extents, k.extents);
  EXPECT_EQ(k.strides, (std::array<std::int64_t, 4>{16, 128, 32, 1}));
  EXPECT_EQ(v.strides, k.strides);
  EXPECT_EQ(&k(1, 3, 2, 5), &f.kv_pages(3, 2, 2, 5));
  EXPECT_EQ(&v(1, 3, 2, 5), &f.kv_pages(3, 2, 3, 5));
  EXPECT_EQ(&v(0, 0, 0, 0), &f.kv_pages(0, 0, 1, 0));
  // An empty pool gives empty views; a failed split leaves the outputs alone.
  TensorView<const float, 4> ek, ev;
  EXPECT_TRUE(ragged_kv_views(TensorView<const float, 4>(), &ek, &ev).ok());
  EXPECT_EQ(ev.data, nullptr);
  f.kv_pages.extents[2] = 5;
  EXPECT_FALSE(f.split().ok());
  EXPECT_EQ(f.args.k_pages.extents[0], 2);
  // A stride whose double overflows int64 is refused.
  TensorView<const float, 4> huge(f.kv.data(), {1, 1, 2, 1},
                                  {1, 1, std::numeric_limits<std::int64_t>::max() / 2 + 1, 1});
  EXPECT_EQ(ragged_kv_views(huge, &ek, &ev).code(), ErrorCode::kSizeOverflow);
}

TEST(RaggedValidate, KAndVShapesAgree) {
  Fixture<> f;
  f.args.v_pages.extents[1] = 15;
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "",
                 "k_pages and v_pages must have the same shape. Got (2, 16, 4, 8) and "
                 "(2, 15, 4, 8)"});
}

TEST(RaggedValidate, R13ScaleNotFinite) {
  Fixture<> f;
  f.args.k_scale = std::numeric_limits<float>::quiet_NaN();
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kInvalidScale, "R13", "k_scale=nan must be a finite float or None."});
  f.args.k_scale = 0.5f;
  f.args.v_scale = std::numeric_limits<float>::infinity();
  expect_status(check_ragged_shapes(f.args, Profile::kJax),
                {ErrorCode::kInvalidScale, "R13", "v_scale=inf must be a finite float or None."});
  f.args.v_scale = 0.5f;
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
}

TEST(RaggedValidate, R1NumSeqsShape) {
  Fixture<> f;
  f.args.num_seqs.extents[0] = 2;
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "R1", "num_seqs.shape=(2,) must be (1,)"});
  f.args.num_seqs = {};  // neither a view nor a scalar
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "R1", "num_seqs.shape=(0,) must be (1,)"});
}

TEST(RaggedValidate, R2HeadDim) {
  Fixture<> f;
  f.kv_pages.extents[3] = 4;
  ASSERT_TRUE(f.split().ok());
  expect_status(
      check_ragged_shapes(f.args, Profile::kReference),
      {ErrorCode::kHeadDimMismatch, "R2", "Q head_dim 8 must be the same as that of K/V 4."});
}

TEST(RaggedValidate, R3KvLensShape) {
  Fixture<> f;
  f.args.kv_lens.extents[0] = 3;
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "R3",
                 "Expected kv_lens.shape=(3,) to be (4,) where `max_num_seqs` is "
                 "`page_indices.shape[0]`."});
}

TEST(RaggedValidate, R4CuQLensShapeKeepsJaxsTwoSpaces) {
  Fixture<> f;
  f.args.cu_q_lens.extents[0] = 4;
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kShapeMismatch, "R4",
                 "Expected cu_q_lens.shape=(4,) to be (5,)  where `max_num_seqs` is "
                 "`page_indices.shape[0]`."});
}

TEST(RaggedValidate, R5Int64OnlyUnderJax) {
  Fixture<std::int64_t> f;
  expect_status(check_ragged_shapes(f.args, Profile::kJax),
                {ErrorCode::kDtypeNotSupported, "R5",
                 "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. Got "
                 "kv_lens.dtype=dtype('int64'), page_indices.dtype=dtype('int64'), "
                 "cu_q_lens.dtype=dtype('int64')."});
  EXPECT_TRUE(check_ragged(f.args, Profile::kReference).ok());
}

TEST(RaggedValidate, RankTwoMetadataGetsJaxTextsWithTheRealShape) {
  expect_status(attnref::ragged_metadata_rank_error("R1", 1, 1, 8),
                {ErrorCode::kShapeMismatch, "R1", "num_seqs.shape=(1, 1) must be (1,)"});
  expect_status(attnref::ragged_metadata_rank_error("R3", 8, 1, 8),
                {ErrorCode::kShapeMismatch, "R3",
                 "Expected kv_lens.shape=(8, 1) to be (8,) where `max_num_seqs` is "
                 "`page_indices.shape[0]`."});
  expect_status(attnref::ragged_metadata_rank_error("R4", 9, 1, 8),
                {ErrorCode::kShapeMismatch, "R4",
                 "Expected cu_q_lens.shape=(9, 1) to be (9,)  where `max_num_seqs` is "
                 "`page_indices.shape[0]`."});
}

TEST(RaggedValidate, RuntimeIndexDtypes) {
  constexpr DType i32 = DType::kInt32, i64 = DType::kInt64, f32 = DType::kFloat32;
  static_assert(check_ragged_index_dtypes(i32, i32, i32, i64, Profile::kJax).ok());
  EXPECT_TRUE(check_ragged_index_dtypes(i64, i64, i64, i32, Profile::kReference).ok());
  // num_seqs first, under both profiles.
  const Status n = check_ragged_index_dtypes(i64, i32, i32, f32, Profile::kJax);
  expect_status(n, {ErrorCode::kDtypeNotSupported, "",
                    "num_seqs has dtype float32, which is not supported here"});
  EXPECT_EQ(std::string(n.field()), "num_seqs");
  EXPECT_EQ(n.hint(), "num_seqs must be int32 or int64");
  // R5 under jax with the real dtypes; the int64 text and hint match the typed check.
  Fixture<std::int64_t> f;
  const Status typed = check_ragged_shapes(f.args, Profile::kJax);
  const Status r5 = check_ragged_index_dtypes(i64, i64, i64, i32, Profile::kJax);
  EXPECT_EQ(r5.message(), typed.message());
  EXPECT_EQ(r5.hint(), typed.hint());
  const Status mixed_r5 = check_ragged_index_dtypes(i32, i32, i64, i32, Profile::kJax);
  expect_status(mixed_r5,
                {ErrorCode::kDtypeNotSupported, "R5",
                 "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. Got "
                 "kv_lens.dtype=dtype('int32'), page_indices.dtype=dtype('int32'), "
                 "cu_q_lens.dtype=dtype('int64')."});
  EXPECT_EQ(mixed_r5.hint(), "save all three as int32 (what JAX takes)");
  expect_status(check_ragged_index_dtypes(f32, i32, i32, i32, Profile::kJax),
                {ErrorCode::kDtypeNotSupported, "R5",
                 "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. Got "
                 "kv_lens.dtype=dtype('float32'), page_indices.dtype=dtype('int32'), "
                 "cu_q_lens.dtype=dtype('int32')."});
  // Reference profile: each must be an index dtype, then all the same.
  const struct {
    DType kv_lens, page_indices, cu_q_lens;
    const char* field;
    std::string message;
  } cases[] = {
      {f32, i32, i32, "kv_lens", "kv_lens has dtype float32, which is not supported here"},
      {i32, DType::kInt8, i32, "page_indices",
       "page_indices has dtype int8, which is not supported here"},
      {i64, i64, DType::kFloat64, "cu_q_lens",
       "cu_q_lens has dtype float64, which is not supported here"},
      {i32, i64, i32, "kv_lens",
       "kv_lens (int32), page_indices (int64) and cu_q_lens (int32) must have the same dtype"},
  };
  for (const auto& c : cases) {
    const Status s =
        check_ragged_index_dtypes(c.kv_lens, c.page_indices, c.cu_q_lens, i64, Profile::kReference);
    expect_status(s, {ErrorCode::kDtypeNotSupported, "", c.message});
    EXPECT_EQ(std::string(s.field()), c.field);
  }
  EXPECT_EQ(check_ragged_index_dtypes(i32, i64, i32, i32, Profile::kReference).hint(),
            "save all three as int32 (what JAX takes) or all as int64");
}

TEST(RaggedValidate, R6GqaRatio) {
  Fixture<> f;
  f.args.q.extents[1] = 3;  // 3 query heads, 2 KV heads
  const Status s = check_ragged_shapes(f.args, Profile::kReference);
  expect_status(
      s, {ErrorCode::kGqaNotDivisible, "R6", "num_q_heads=3 must be divisible by num_kv_heads=2"});
  EXPECT_EQ(s.hint(), "valid num_kv_heads for 3 query heads: 1, 3");
}

TEST(RaggedValidate, HeadCountsPositive) {
  Fixture<> f;
  f.kv_pages.extents[2] = 0;
  ASSERT_TRUE(f.split().ok());
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kInvalidHeadCount, "", "num_kv_heads must be positive. Got 0."});
  Fixture<> g;
  g.args.q.extents[1] = 0;
  expect_status(check_ragged_shapes(g.args, Profile::kReference),
                {ErrorCode::kInvalidHeadCount, "", "num_q_heads must be positive. Got 0."});
}

// JAX's test_ragged_paged_attention_sliding_window_should_be_positive.
TEST(RaggedValidate, R7SlidingWindowMustBePositive) {
  for (std::int64_t w : {0, -1}) {
    Fixture<> f;
    f.args.sliding_window = w;
    const Status s = check_ragged(f.args, Profile::kJax);
    expect_status(s, {ErrorCode::kInvalidSlidingWindow, "R7",
                      "sliding_window=" + std::to_string(w) + " must be positive."});
    EXPECT_NE(s.message().find("must be positive"), std::string::npos);
    try {
      validate_ragged(f.args, Profile::kReference);
      ADD_FAILURE() << "no throw";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("must be positive"), std::string::npos);
      EXPECT_EQ(e.status().code(), ErrorCode::kInvalidSlidingWindow);
    }
  }
}

// JAX's test_ragged_paged_attention_soft_cap_cannot_be_zero.
TEST(RaggedValidate, R8SoftCapMustNotBeZero) {
  Fixture<> f;
  f.args.soft_cap = 0.0f;
  const Status s = check_ragged(f.args, Profile::kJax);
  expect_status(s, {ErrorCode::kInvalidSoftCap, "R8", "soft_cap=0.0 must not be 0.0."});
  EXPECT_NE(s.message().find("must not be 0.0"), std::string::npos);
  f.args.soft_cap = -0.0f;
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kInvalidSoftCap, "R8", "soft_cap=-0.0 must not be 0.0."});
  f.args.soft_cap = std::numeric_limits<float>::infinity();
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kInvalidSoftCap, "", "soft_cap=inf must be finite."});
  f.args.soft_cap = 50.0f;
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
}

TEST(RaggedValidate, R9KvPagesPerBlock) {
  Fixture<> f;
  for (std::int64_t n : {0, 4}) {
    f.args.num_kv_pages_per_block = n;
    expect_status(check_ragged_shapes(f.args, Profile::kReference),
                  {ErrorCode::kInvalidBlockSize, "R9",
                   "num_kv_pages_per_block=" + std::to_string(n) + " must be in range (0, 3]."});
  }
  f.args.num_kv_pages_per_block = 3;
  EXPECT_TRUE(check_ragged_shapes(f.args, Profile::kJax).ok());
}

TEST(RaggedValidate, R10QueriesPerBlock) {
  Fixture<> f;
  f.args.num_queries_per_block = -32;
  expect_status(
      check_ragged_shapes(f.args, Profile::kReference),
      {ErrorCode::kInvalidBlockSize, "R10", "num_queries_per_block=-32 must be positive."});
}

TEST(RaggedValidate, R11VmemLimit) {
  Fixture<> f;
  f.args.vmem_limit_bytes = 0;
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kInvalidBlockSize, "R11", "vmem_limit_bytes=0 must be positive."});
}

TEST(RaggedValidate, R14TilingOnlyUnderJax) {
  // f32: 2 * Hkv = 6 is not 1, 2, 4, 8 or a multiple of 8 (the spec's example).
  std::vector<float> kv(2 * 4 * 6 * 8, 0.0f);
  Fixture<> f;
  f.kv_lens = {4, 0, 0, 0};
  f.page_indices = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  f.cu_q_lens = {0, 1, 1, 1, 1};
  f.num_seqs = 1;
  f.rebind();
  f.args.q.extents[1] = 3;
  f.kv_pages = {kv.data(), {2, 4, 6, 8}};
  ASSERT_TRUE(f.split().ok());
  expect_status(check_ragged(f.args, Profile::kJax),
                {ErrorCode::kTilingRule, "R14",
                 "Not implemented: num_combined_kv_heads=6 can not be XLA fully tiled."});
  EXPECT_TRUE(check_ragged(f.args, Profile::kReference).ok());
  // 16 combined f32 heads (a multiple of 8) and 2 (in the list) are fine.
  EXPECT_TRUE(detail::xla_fully_tiled(16, 1));
  EXPECT_TRUE(detail::xla_fully_tiled(2, 1));
  EXPECT_FALSE(detail::xla_fully_tiled(12, 1));
  // bf16 packs 2 per word: 6 -> 3, rejected; 4 -> 2, accepted. int8 packs 4: 2 is not divisible.
  EXPECT_FALSE(detail::xla_fully_tiled(6, 2));
  EXPECT_TRUE(detail::xla_fully_tiled(4, 2));
  EXPECT_FALSE(detail::xla_fully_tiled(2, 4));
}

TEST(RaggedValidate, JaxProfileRefusesOptionsJaxsKernelLacks) {
  // JAX's ragged kernel has a sliding window but no sinks or ALiBi: under the jax profile those
  // two are option_not_in_jax, after R14; the reference profile accepts them.
  const std::vector<float> per_head(Fixture<>::kHq, 0.25f);
  for (const char* option : {"sinks", "alibi_slopes"}) {
    SCOPED_TRACE(option);
    Fixture<> f;
    const std::string name = option;
    (name == "sinks" ? f.args.sinks : f.args.alibi_slopes) = {per_head.data(), {Fixture<>::kHq}};
    f.args.sliding_window = 3;
    EXPECT_TRUE(check_ragged(f.args, Profile::kReference).ok());
    const Status s = check_ragged(f.args, Profile::kJax);
    expect_status(s, {ErrorCode::kOptionNotInJax, "",
                      "JAX's ragged_paged_attention has no " + name + " option."});
    EXPECT_EQ(std::string(s.field()), name);
    EXPECT_NE(s.hint().find("drop " + name + " to ask what JAX's kernel accepts"),
              std::string::npos)
        << s.hint();
    f.args.sm_scale = std::numeric_limits<float>::infinity();  // a safety check: comes after
    EXPECT_EQ(check_ragged(f.args, Profile::kJax).code(), ErrorCode::kOptionNotInJax);
    f.args.soft_cap = 0.0f;  // JAX's R8 comes first
    EXPECT_EQ(check_ragged(f.args, Profile::kJax).code(), ErrorCode::kInvalidSoftCap);
  }
}

TEST(RaggedValidate, Float64OnlyUnderReference) {
  std::vector<double> q(8 * 4 * 8, 0.0);
  Fixture<> f;
  RaggedPagedAttentionArgs<double, float> a;
  a.q = {q.data(), {8, 4, 8}};
  a.k_pages = f.args.k_pages;
  a.v_pages = f.args.v_pages;
  a.kv_lens = f.args.kv_lens;
  a.page_indices = f.args.page_indices;
  a.cu_q_lens = f.args.cu_q_lens;
  a.num_seqs = f.args.num_seqs;
  EXPECT_TRUE(check_ragged(a, Profile::kReference).ok());
  expect_status(check_ragged(a, Profile::kJax),
                {ErrorCode::kDtypeNotSupported, "",
                 "float64 q or K/V pages are not supported by JAX's TPU kernel"});
}

// ---- attnref's static safety checks.

TEST(RaggedValidate, ViewsAreChecked) {
  Fixture<> f;
  f.kv_pages.buffer_size = 10;
  expect_status(f.split(),
                {ErrorCode::kOutOfBuffer, "",
                 "kv_pages: extents and strides reach element offset 2047, past the buffer of 10 "
                 "elements"});
  // The views made from a bounded pool are bounded too: V starts 8 elements (one combined head)
  // in, so its buffer is 8 elements shorter, and both reach exactly its end.
  Fixture<> g;
  g.kv_pages.buffer_size = 2048;
  ASSERT_TRUE(g.split().ok());
  EXPECT_EQ(g.args.k_pages.buffer_size, 2048);
  EXPECT_EQ(g.args.v_pages.buffer_size, 2040);
  EXPECT_TRUE(check_ragged_shapes(g.args, Profile::kReference).ok());
  g.args.k_pages.buffer_size = 10;
  expect_status(check_ragged_shapes(g.args, Profile::kReference),
                {ErrorCode::kOutOfBuffer, "",
                 "k_pages: extents and strides reach element offset 2039, past the buffer of 10 "
                 "elements"});
}

TEST(RaggedValidate, PageSizeAndOptions) {
  Fixture<> f;
  f.kv_pages.extents[1] = 0;
  ASSERT_TRUE(f.split().ok());
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kInvalidPageSize, "", "page_size must be positive. Got 0."});
  Fixture<> g;
  g.args.mask_value = 1.0f;
  expect_status(
      check_ragged_shapes(g.args, Profile::kReference),
      {ErrorCode::kInvalidMaskValue, "", "mask_value=1.0 must be a finite negative number."});
  Fixture<> h;
  h.args.sm_scale = std::numeric_limits<float>::infinity();
  expect_status(check_ragged_shapes(h.args, Profile::kReference),
                {ErrorCode::kInvalidScale, "", "sm_scale=inf must be finite."});
}

TEST(RaggedValidate, HeadDimPositive) {
  Fixture<> f;
  f.args.q.extents[2] = 0;
  f.kv_pages.extents[3] = 0;
  ASSERT_TRUE(f.split().ok());
  expect_status(check_ragged_shapes(f.args, Profile::kReference),
                {ErrorCode::kInvalidHeadDim, "", "head_dim must be positive. Got 0."});
}

// ---- Dynamic checks, in JAX's order, with the safety checks JAX omits.

TEST(RaggedValidate, NumSeqsNegative) {
  Fixture<> f;
  f.num_seqs = -1;
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kNumSeqsOutOfRange, "", "num_seqs[0]=-1 must not be negative"});
}

TEST(RaggedValidate, R15NumSeqsAboveMax) {
  Fixture<> f;
  f.num_seqs = 5;
  expect_status(check_ragged(f.args, Profile::kJax),
                {ErrorCode::kNumSeqsOutOfRange, "R15",
                 "num_seqs[0]=5 must be less or equal to max_num_seqs=4"});
  f.num_seqs = 4;  // every row live: seq 3 has q_len 0 and kv_len 0
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
  f.num_seqs = 0;
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
}

TEST(RaggedValidate, KvLenNegative) {
  Fixture<> f;
  f.kv_lens[1] = -2;
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kLengthOutOfRange, "", "kv_lens[1]=-2 must not be negative"});
  // A negative kv_len in a padding row is never read.
  Fixture<> g;
  g.kv_lens[3] = -2;
  EXPECT_TRUE(check_ragged(g.args, Profile::kReference).ok());
}

TEST(RaggedValidate, R16PageTableTooNarrow) {
  Fixture<> f;
  f.kv_lens[1] = 13;  // needs 4 pages, the table has 3
  f.cu_q_lens = {0, 1, 5, 5, 5};
  f.rebind();
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kPageTableTooNarrow, "R16",
                 "pages_per_seq=3 must be greater or equal to min_pages_per_seq=4 given "
                 "max_kv_len=13 and page_size=4."});
}

TEST(RaggedValidate, R16CountsPaddingRowsOnlyUnderJax) {
  Fixture<> f;
  f.kv_lens[3] = 100;  // padding row (num_seqs = 3)
  expect_status(check_ragged(f.args, Profile::kJax),
                {ErrorCode::kPageTableTooNarrow, "R16",
                 "pages_per_seq=3 must be greater or equal to min_pages_per_seq=25 given "
                 "max_kv_len=100 and page_size=4."});
  EXPECT_TRUE(check_ragged(f.args, Profile::kReference).ok());
}

TEST(RaggedValidate, CuQLensMustStartAtZero) {
  Fixture<> f;
  f.cu_q_lens = {1, 1, 5, 5, 5};
  f.rebind();
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kInvalidCuQLens, "", "cu_q_lens[0]=1 must be 0"});
}

TEST(RaggedValidate, CuQLensMustNotDecrease) {
  Fixture<> f;
  f.cu_q_lens = {0, 3, 2, 5, 5};
  f.rebind();
  expect_status(check_ragged(f.args, Profile::kReference),
                {ErrorCode::kInvalidCuQLens, "",
                 "cu_q_lens must not decrease: cu_q_lens[1]=3 > cu_q_lens[2]=2"});
  // Entries past num_seqs are padding and never read.
  Fixture<> g;
  g.cu_q_lens = {0, 1, 5, 5, -100};
  g.rebind();
  EXPECT_TRUE(check_ragged(g.args, Profile::kReference).ok());
}

TEST(RaggedValidate, R17TokenBudget) {
  Fixture<> f;
  f.kv_lens = {5, 9, 12, 0};
  f.rebind();
  f.cu_q_lens = {0, 1, 5, 9, 9};  // 9 tokens, q holds 8
  f.rebind();
  expect_status(check_ragged(f.args, Profile::kJax),
                {ErrorCode::kTokenBudgetExceeded, "R17",
                 "Total q tokens 9 must be less or equal to max_num_batched_tokens=8."});
}

TEST(RaggedValidate, R18QueryLongerThanKv) {
  Fixture<> f;
  f.cu_q_lens = {0, 1, 5, 8, 8};  // seq 2: q_len 3, kv_len 3 is fine
  f.rebind();
  EXPECT_TRUE(check_ragged(f.args, Profile::kJax).ok());
  f.kv_lens[2] = 2;
  expect_status(check_ragged(f.args, Profile::kJax),
                {ErrorCode::kQueryLongerThanKv, "R18",
                 "q_len=3 must be less or equal to kv_len=2 at sequence 2."});
}

TEST(RaggedValidate, LivePageIndexOutOfRange) {
  Fixture<> f;
  f.page_indices[1] = 16;  // seq 0, page 1: read because kv_len 5 > 4
  const Status s = check_ragged(f.args, Profile::kReference);
  expect_status(s, {ErrorCode::kPageIndexOutOfRange, "",
                    "page_indices[0, 1]=16 is outside [0, 16) (total_pages)"});
  EXPECT_EQ(s.hint(),
            "page 1 of sequence 0 is read because kv_lens[0]=5; point it at an allocated page");
  // The fixture's unused entries (99, -7, -1) pass: they are never read.
  Fixture<> g;
  g.page_indices[3] = -3;  // seq 1, page 0
  expect_status(check_ragged(g.args, Profile::kJax),
                {ErrorCode::kPageIndexOutOfRange, "",
                 "page_indices[1, 0]=-3 is outside [0, 16) (total_pages)"});
}

// ---- Data tier.

TEST(RaggedValidate, DataTierScansLiveRowsOnly) {
  Fixture<> f;
  f.q[f.q.size() - 1] = std::numeric_limits<float>::quiet_NaN();  // padding row 7
  EXPECT_TRUE(check_ragged_data(f.args).ok());
  f.q[1 * 4 * 8 + 2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();  // row 1, head 2, dim 3
  expect_status(check_ragged_data(f.args),
                {ErrorCode::kNonFiniteData, "", "q[1, 2, 3] is not finite"});
  Fixture<> g;
  // Page 1 slot 1 is token 5 of seq 0 (kv_len 5): padding. Page 2 slot 0 is seq 1's token 0.
  const auto at = [](std::int64_t page, std::int64_t slot, std::int64_t c, std::int64_t d) {
    return ((page * 4 + slot) * 4 + c) * 8 + d;
  };
  g.kv[at(1, 1, 0, 0)] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(check_ragged_data(g.args).ok());
  g.kv[at(2, 0, 3, 5)] = std::numeric_limits<float>::infinity();
  expect_status(check_ragged_data(g.args),
                {ErrorCode::kNonFiniteData, "",
                 "v_pages is not finite at sequence 1, token 0 (page 2, slot 0), kv head 1, dim "
                 "5"});
  g.kv[at(2, 0, 3, 5)] = 1.0f;
  g.kv[at(3, 1, 2, 0)] = -std::numeric_limits<float>::infinity();  // K of KV head 1
  expect_status(check_ragged_data(g.args),
                {ErrorCode::kNonFiniteData, "",
                 "k_pages is not finite at sequence 1, token 5 (page 3, slot 1), kv head 1, dim "
                 "0"});
}

// Unlike paged's, the scan covers keys before a sliding window: JAX's ragged kernel loads every
// key of [0, kv_len) and adds mask_value to the logits of those outside a row's window, which
// leaves a NaN a NaN. Seq 1 (kv_len 9, q_len 4) with a window of 2 sees keys from 4 on.
TEST(RaggedValidate, DataTierScansKeysBeforeTheSlidingWindow) {
  Fixture<> g;
  g.args.sliding_window = 2;
  g.kv[((2 * 4 + 0) * 4 + 3) * 8 + 5] = std::numeric_limits<float>::infinity();  // token 0, V
  expect_status(check_ragged_data(g.args),
                {ErrorCode::kNonFiniteData, "",
                 "v_pages is not finite at sequence 1, token 0 (page 2, slot 0), kv head 1, dim "
                 "5"});
}

}  // namespace
}  // namespace attnref
