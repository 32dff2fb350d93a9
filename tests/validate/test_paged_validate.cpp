// Paged-attention validators: JAX's P1..P10 (each failing and passing), attnref's safety checks,
// the metadata tier and the data tier, under both profiles.
#include <gtest/gtest.h>

#include <attnref/core/kv_layout.hpp>
#include <attnref/validate/paged.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using attnref::ErrorCode;
using attnref::Profile;
using attnref::Status;
using attnref::TensorView;

/// A non-negative int64 size or index as a container index.
constexpr std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

/// Owns buffers for a valid batch: B=2, Hq=8, Hkv=2, D=4, 10 pages of 4 tokens, 3 pages/seq.
template <class KV = float, class Index = std::int32_t>
struct Batch {
  std::int64_t b = 2, hq = 8, hkv = 2, d = 4, pages = 10, s = 4, pps = 3;
  std::vector<float> q = std::vector<float>(sz(b * hq * d), 0.5f);
  std::vector<KV> k = std::vector<KV>(sz(hkv * pages * s * d), KV(1));
  std::vector<KV> v = std::vector<KV>(sz(hkv * pages * s * d), KV(2));
  std::vector<float> k_scales = std::vector<float>(sz(hkv * pages * s), 1.0f);
  std::vector<float> v_scales = std::vector<float>(sz(hkv * pages * s), 1.0f);
  std::vector<Index> lengths{5, 12};
  std::vector<Index> table{0, 1, 9, 2, 3, 4};
  attnref::PagedAttentionArgs<float, KV, Index> args;

  Batch() { rebuild(); }
  void rebuild() {
    args.q = {q.data(), {b, hq, d}};
    args.k_pages = {k.data(), {hkv, pages, s, d}};
    args.v_pages = {v.data(), {hkv, pages, s, d}};
    args.lengths = {lengths.data(), {b}};
    args.page_indices = {table.data(), {b, pps}};
    if constexpr (std::is_same<KV, std::int8_t>::value) {
      args.k_scales = {k_scales.data(), {hkv, pages, s, 1}};
      args.v_scales = {v_scales.data(), {hkv, pages, s, 1}};
    }
  }
};

void expect_error(const Status& s, ErrorCode code, const char* jax, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), jax);
  EXPECT_EQ(s.message(), message);
  EXPECT_FALSE(s.hint().empty());
}

TEST(PagedValidate, ValidBatchPassesBothProfilesAndAllTiers) {
  Batch<> batch;
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kJax).ok());
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
  EXPECT_TRUE(attnref::check_paged_data(batch.args).ok());
#if !defined(ATTNREF_NO_EXCEPTIONS)  // built with -fno-exceptions too (preset noexcept)
  EXPECT_NO_THROW(attnref::validate_paged(batch.args, Profile::kJax));
#endif
}

TEST(PagedValidate, P1KvShapes) {
  Batch<> batch;
  batch.args.v_pages.extents[1] = 9;
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kShapeMismatch,
               "P1",
               "k_pages and v_pages must have the same shape. Got (2, 10, 4, 4) and (2, 9, 4, 4)");
}

TEST(PagedValidate, P2GqaRatio) {
  Batch<> batch;
  batch.hq = 5;
  batch.rebuild();
  expect_error(attnref::check_paged(batch.args, Profile::kJax), ErrorCode::kGqaNotDivisible, "P2",
               "Number of Q heads must be divisible by number of KV heads. Got 5 and 2.");
  batch.hq = 7;
  batch.rebuild();
  Status s = attnref::check_paged(batch.args, Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kGqaNotDivisible);
  EXPECT_EQ(s.hint(), "valid num_kv_heads for 7 query heads: 1, 7");
}

TEST(PagedValidate, P3HeadDim) {
  Batch<> batch;
  batch.args.q.extents[2] = 8;
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kHeadDimMismatch,
               "P3", "head_dim of Q must be the same as that of K/V. Got 8 and 4.");
}

TEST(PagedValidate, P4BlockDivisibilityOnlyUnderJaxWithCorrectedWording) {
  Batch<> batch;
  batch.args.pages_per_compute_block = 2;  // 3 pages per sequence
  expect_error(attnref::check_paged(batch.args, Profile::kJax), ErrorCode::kBlockNotDivisible, "P4",
               "pages_per_sequence must be divisible by pages_per_compute_block. Got 3 pages per "
               "sequence and pages_per_compute_block 2.");
  EXPECT_EQ(attnref::check_paged(batch.args, Profile::kJax).hint(),
            "pick pages_per_compute_block among the divisors of 3: 1, 3");
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
  batch.args.pages_per_compute_block = 3;
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kJax).ok());
  batch.args.pages_per_compute_block = 0;  // JAX: ZeroDivisionError; here a clear error
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kInvalidBlockSize,
               "", "pages_per_compute_block must be positive. Got 0.");
}

TEST(PagedValidate, RankTwoLengthsGetJaxP5Text) {
  static_assert(attnref::paged_lengths_rank_error(3, 1).jax_check()[1] == '5');
  const Status s = attnref::paged_lengths_rank_error(3, 1);
  expect_error(s, ErrorCode::kBatchMismatch, "P5",
               "`lengths` and `q` must have the same batch size");
  EXPECT_EQ(s.hint(), "lengths has shape (3, 1); it holds one entry per sequence: shape (3,)");
}

TEST(PagedValidate, RuntimeIndexDtypes) {
  using attnref::check_paged_index_dtypes;
  using attnref::DType;
  static_assert(check_paged_index_dtypes(DType::kInt32, DType::kInt32, Profile::kJax).ok());
  EXPECT_TRUE(check_paged_index_dtypes(DType::kInt64, DType::kInt64, Profile::kReference).ok());
  // Under jax a lengths dtype other than int32 is P7, with the real dtype.
  expect_error(check_paged_index_dtypes(DType::kInt64, DType::kInt64, Profile::kJax),
               ErrorCode::kDtypeNotSupported, "P7",
               "The dtype of `lengths` must be int32. Got int64");
  const Status p7 = check_paged_index_dtypes(DType::kFloat32, DType::kInt32, Profile::kJax);
  expect_error(p7, ErrorCode::kDtypeNotSupported, "P7",
               "The dtype of `lengths` must be int32. Got float32");
  EXPECT_EQ(p7.hint(),
            "JAX's kernel takes int32 lengths; the reference profile also accepts int64");
  // Same text as the typed check.
  Batch<float, std::int64_t> batch;
  EXPECT_EQ(attnref::check_paged(batch.args, Profile::kJax).message(),
            check_paged_index_dtypes(DType::kInt64, DType::kInt64, Profile::kJax).message());
  // Non-index dtypes, then mixed ones.
  const Status lengths =
      check_paged_index_dtypes(DType::kFloat32, DType::kInt32, Profile::kReference);
  expect_error(lengths, ErrorCode::kDtypeNotSupported, "",
               "lengths has dtype float32, which is not supported here");
  EXPECT_EQ(std::string(lengths.field()), "lengths");
  EXPECT_EQ(lengths.hint(), "lengths must be int32 or int64 (int32 under the jax profile)");
  const Status table = check_paged_index_dtypes(DType::kInt32, DType::kBool, Profile::kJax);
  expect_error(table, ErrorCode::kDtypeNotSupported, "",
               "page_indices has dtype bool, which is not supported here");
  EXPECT_EQ(std::string(table.field()), "page_indices");
  const Status mixed = check_paged_index_dtypes(DType::kInt32, DType::kInt64, Profile::kJax);
  expect_error(mixed, ErrorCode::kDtypeNotSupported, "",
               "lengths (int32) and page_indices (int64) must have the same dtype");
  EXPECT_EQ(std::string(mixed.field()), "page_indices");
  EXPECT_EQ(mixed.hint(), "save both as int32 (what JAX takes) or both as int64");
}

TEST(PagedValidate, P5LengthsBatch) {
  Batch<> batch;
  batch.args.lengths.extents[0] = 1;
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kBatchMismatch,
               "P5", "`lengths` and `q` must have the same batch size. Got 1 and 2.");
}

TEST(PagedValidate, P6PageIndicesBatch) {
  Batch<> batch;
  batch.args.page_indices.extents[0] = 3;
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kBatchMismatch,
               "P6", "`page_indices` and `q` must have the same batch size. Got 3 and 2.");
}

TEST(PagedValidate, P7Int32LengthsUnderJaxOnly) {
  Batch<float, std::int64_t> batch;
  expect_error(attnref::check_paged(batch.args, Profile::kJax), ErrorCode::kDtypeNotSupported, "P7",
               "The dtype of `lengths` must be int32. Got int64");
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
}

TEST(PagedValidate, P8P9P10MegacoreUnderJaxOnly) {
  Batch<> batch;
  batch.hkv = 1;
  batch.rebuild();
  batch.args.megacore_mode = attnref::MegacoreMode::kKvHead;
  expect_error(attnref::check_paged(batch.args, Profile::kJax), ErrorCode::kMegacoreOddKvHeads,
               "P8", "number of KV heads must be even when megacore_mode is 'kv_head'");
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());

  Batch<> odd_batch;
  odd_batch.b = 1;
  odd_batch.rebuild();
  odd_batch.args.megacore_mode = attnref::MegacoreMode::kBatch;
  expect_error(attnref::check_paged(odd_batch.args, Profile::kJax), ErrorCode::kMegacoreOddBatch,
               "P9", "batch size must be even when megacore_mode is 'batch'");
  EXPECT_TRUE(attnref::check_paged(odd_batch.args, Profile::kReference).ok());

  Batch<> even;
  even.args.megacore_mode = attnref::MegacoreMode::kBatch;
  EXPECT_TRUE(attnref::check_paged(even.args, Profile::kJax).ok());
  even.args.megacore_mode = attnref::MegacoreMode::kKvHead;
  EXPECT_TRUE(attnref::check_paged(even.args, Profile::kJax).ok());
  even.args.megacore_mode = static_cast<attnref::MegacoreMode>(7);
  expect_error(attnref::check_paged(even.args, Profile::kJax), ErrorCode::kInvalidMegacoreMode,
               "P10", "megacore_mode must be one of ['kv_head', 'batch', None]");
}

TEST(PagedValidate, JaxOrderIsKept) {
  // P1 and P2 both broken: P1 is reported, as JAX checks it first.
  Batch<> batch;
  batch.hq = 7;
  batch.rebuild();
  batch.args.v_pages.extents[0] = 1;
  EXPECT_EQ(std::string(attnref::check_paged(batch.args, Profile::kJax).jax_check()), "P1");
}

TEST(PagedValidate, SafetyChecksOnViewsAndOptions) {
  {
    Batch<> batch;
    batch.args.q.data = nullptr;
    expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kNullData, "",
                 "q has 64 elements but a null data pointer");
  }
  {
    Batch<> batch;
    batch.args.k_pages.buffer_size = 100;
    expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kOutOfBuffer, "",
                 "k_pages: extents and strides reach element offset 319, past the buffer of 100 "
                 "elements");
  }
  {
    Batch<> batch;
    batch.args.k_pages.extents[2] = 0;
    batch.args.v_pages.extents[2] = 0;
    expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kInvalidPageSize,
                 "", "page_size must be positive. Got 0.");
  }
  {
    Batch<> batch;
    batch.args.soft_cap = 0.0f;
    expect_error(attnref::check_paged(batch.args, Profile::kJax), ErrorCode::kInvalidSoftCap, "",
                 "soft_cap=0.0 must not be 0.0 and must be finite.");
    batch.args.soft_cap = std::numeric_limits<float>::infinity();
    EXPECT_EQ(attnref::check_paged(batch.args, Profile::kJax).message(),
              "soft_cap=inf must not be 0.0 and must be finite.");
    batch.args.soft_cap = 30.0f;
    EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kJax).ok());
  }
  {
    Batch<> batch;
    batch.args.mask_value = std::numeric_limits<float>::quiet_NaN();
    expect_error(attnref::check_paged(batch.args, Profile::kReference),
                 ErrorCode::kInvalidMaskValue, "",
                 "mask_value=nan must be a finite negative number.");
    batch.args.mask_value = 1.0f;
    EXPECT_EQ(attnref::check_paged(batch.args, Profile::kReference).message(),
              "mask_value=1.0 must be a finite negative number.");
    batch.args.mask_value = -1e30f;
    EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
  }
  {
    Batch<> batch;
    batch.args.sm_scale = std::numeric_limits<float>::infinity();
    expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kInvalidScale,
                 "", "sm_scale=inf must be finite.");
  }
  {
    Batch<> batch;  // capacity product overflows int64
    std::int64_t huge = std::int64_t{1} << 40;
    batch.args.page_indices.extents[1] = huge;
    batch.args.page_indices.strides = {0, 0};
    batch.args.k_pages.extents[2] = huge;
    batch.args.v_pages.extents[2] = huge;
    batch.args.k_pages.strides[2] = 0;
    batch.args.v_pages.strides[2] = 0;
    expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kSizeOverflow,
                 "",
                 "pages_per_sequence (1099511627776) x page_size (1099511627776) overflows int64");
  }
}

TEST(PagedValidate, QuantizedPagesNeedBothScalesOfTheRightShape) {
  Batch<std::int8_t> batch;
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kJax).ok());
  batch.args.v_scales = {};
  expect_error(attnref::check_paged(batch.args, Profile::kReference),
               ErrorCode::kQuantizationMismatch, "",
               "int8 K/V pages need both k_scales and v_scales; got k_scales: 1, v_scales: 0");
  batch.rebuild();
  batch.args.k_scales.extents[3] = 3;
  expect_error(attnref::check_paged(batch.args, Profile::kReference), ErrorCode::kScalesShape, "",
               "k_scales has shape (2, 10, 4, 3); expected (2, 10, 4, 1) or (2, 10, 4, 4)");
  Batch<> floats;
  floats.args.k_scales = {floats.k_scales.data(), {2, 10, 4, 1}};
  expect_error(attnref::check_paged(floats.args, Profile::kReference),
               ErrorCode::kQuantizationMismatch, "",
               "k_scales/v_scales were given but the K/V pages are not int8 or fp8");
}

TEST(PagedValidate, MetadataLengthsAndPageIndices) {
  struct Case {
    std::vector<std::int32_t> lengths, table;
    ErrorCode code;
    std::string message;
  };
  const Case cases[] = {
      {{-1, 12},
       {0, 1, 9, 2, 3, 4},
       ErrorCode::kLengthOutOfRange,
       "lengths[0]=-1 is outside [0, 12] (pages_per_sequence 3 x page_size 4)"},
      {{5, 13},
       {0, 1, 9, 2, 3, 4},
       ErrorCode::kLengthOutOfRange,
       "lengths[1]=13 is outside [0, 12] (pages_per_sequence 3 x page_size 4)"},
      {{5, 12},
       {0, -1, 9, 2, 3, 4},
       ErrorCode::kPageIndexOutOfRange,
       "page_indices[0, 1]=-1 is outside [0, 10) (total_pages)"},
      {{5, 12},
       {0, 1, 9, 2, 3, 10},
       ErrorCode::kPageIndexOutOfRange,
       "page_indices[1, 2]=10 is outside [0, 10) (total_pages)"},
      {{5, 12},
       {0, 1, 9, 2, 2147483647, 4},
       ErrorCode::kPageIndexOutOfRange,
       "page_indices[1, 1]=2147483647 is outside [0, 10) (total_pages)"},
  };
  for (const Case& c : cases) {
    Batch<> batch;
    batch.lengths = c.lengths;
    batch.table = c.table;
    batch.rebuild();
    expect_error(attnref::check_paged(batch.args, Profile::kReference), c.code, "", c.message);
  }
}

TEST(PagedValidate, PagesPastTheLengthAreNotChecked) {
  Batch<> batch;
  batch.lengths = {4, 0};  // sequence 0 reads page 0 only, sequence 1 nothing
  batch.table = {0, -1, 123456, -7, -7, -7};
  batch.rebuild();
  EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
  // Under the jax profile the whole compute block is DMA'd, so its pages must be valid too.
  batch.args.pages_per_compute_block = 3;
  const Status s = attnref::check_paged(batch.args, Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kPageIndexOutOfRange);
  EXPECT_EQ(s.message(), "page_indices[0, 1]=-1 is outside [0, 10) (total_pages)");
}

TEST(PagedValidate, JaxProfileRefusesOptionsJaxsKernelLacks) {
  // JAX's paged_attention has no sliding window, sinks or ALiBi: under the jax profile each is
  // option_not_in_jax (after JAX's own checks), while the reference profile accepts them.
  Batch<> batch;
  const std::vector<float> per_head(sz(batch.hq), 0.25f);
  const char* hint =
      "drop {f} to ask what JAX's kernel accepts, or check under the reference profile, whose "
      "kernels apply it";
  for (const char* option : {"sliding_window", "sinks", "alibi_slopes"}) {
    SCOPED_TRACE(option);
    attnref::PagedAttentionArgs<float> a = batch.args;
    const std::string name = option;
    if (name == "sliding_window") a.sliding_window = 6;
    if (name == "sinks") a.sinks = {per_head.data(), {batch.hq}};
    if (name == "alibi_slopes") a.alibi_slopes = {per_head.data(), {batch.hq}};
    EXPECT_TRUE(attnref::check_paged(a, Profile::kReference).ok());
    const Status s = attnref::check_paged(a, Profile::kJax);
    expect_error(s, ErrorCode::kOptionNotInJax, "",
                 "JAX's paged_attention has no " + name + " option.");
    EXPECT_EQ(std::string(s.field()), name);
    std::string expected_hint = hint;
    expected_hint.replace(expected_hint.find("{f}"), 3, name);
    EXPECT_EQ(s.hint(), expected_hint);
    a.megacore_mode = attnref::MegacoreMode::kKvHead;  // JAX's own checks come first
    a.k_pages.extents[0] = a.v_pages.extents[0] = 1;
    EXPECT_EQ(attnref::check_paged(a, Profile::kJax).code(), ErrorCode::kMegacoreOddKvHeads);
  }
}

TEST(PagedValidate, DataTierScansOnlyTheLiveRegion) {
  Batch<> batch;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Page 5 is never referenced; slot 1 of page 9 is past lengths[0]=5 (tokens 0..3 on page 0,
  // token 4 at slot 0 of page 1).
  for (std::int64_t i = 0; i < batch.d; ++i) {
    batch.k[sz(((0 * batch.pages + 5) * batch.s + 0) * batch.d + i)] = nan;
    batch.v[sz(((1 * batch.pages + 1) * batch.s + 1) * batch.d + i)] = nan;
  }
  EXPECT_TRUE(attnref::check_paged_data(batch.args).ok());
  batch.v[sz(((1 * batch.pages + 1) * batch.s + 0) * batch.d + 2)] = nan;  // token 4, kv head 1
  expect_error(attnref::check_paged_data(batch.args), ErrorCode::kNonFiniteData, "",
               "v_pages is not finite at sequence 0, token 4 (page 1, slot 0), kv head 1, dim 2");
  Batch<> bad_q;
  bad_q.q[9] = -std::numeric_limits<float>::infinity();
  expect_error(attnref::check_paged_data(bad_q.args), ErrorCode::kNonFiniteData, "",
               "q[0, 2, 1] is not finite");
}

TEST(PagedValidate, DataTierReadsEachScaleTensorOverItsOwnExtent) {
  // Found by fuzz_paged: per-element k_scales with per-token v_scales made the data tier read
  // v_scales at index 1..head_dim-1, past its last extent. Here the element after each per-token
  // v scale is NaN, so an over-read shows up as a false error even without a sanitizer.
  Batch<std::int8_t> batch;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k_elem(sz(batch.hkv * batch.pages * batch.s * batch.d), 0.5f);
  std::vector<float> v_tok(sz(batch.hkv * batch.pages * batch.s * 2), nan);
  for (size_t i = 0; i < v_tok.size(); i += 2) v_tok[i] = 0.25f;
  batch.args.k_scales = {k_elem.data(), {batch.hkv, batch.pages, batch.s, batch.d}};
  batch.args.v_scales = TensorView<const float, 4>(
      v_tok.data(), {batch.hkv, batch.pages, batch.s, 1},
      {batch.pages * batch.s * 2, batch.s * 2, 2, 1}, static_cast<std::int64_t>(v_tok.size()));
  ASSERT_TRUE(attnref::check_paged(batch.args, Profile::kReference).ok());
  EXPECT_TRUE(attnref::check_paged_data(batch.args).ok());
  v_tok[sz(2 * (1 * batch.pages * batch.s + 2))] =
      nan;  // kv head 1, page 0, slot 2: token 2 of seq 0
  expect_error(
      attnref::check_paged_data(batch.args), ErrorCode::kNonFiniteData, "",
      "v_scales is not finite at sequence 0, token 2 (page 0, slot 2), kv head 1, index 0");
}

TEST(PagedValidate, WorksOnEveryLayout) {
  Batch<> batch;
  for (auto layout : {attnref::KvLayout::kJax, attnref::KvLayout::kNhd, attnref::KvLayout::kHnd}) {
    batch.args.k_pages = attnref::kv_pages_view<const float>(
        batch.k.data(), layout, 2, 10, 4, 4, static_cast<std::int64_t>(batch.k.size()));
    batch.args.v_pages = attnref::kv_pages_view<const float>(
        batch.v.data(), layout, 2, 10, 4, 4, static_cast<std::int64_t>(batch.v.size()));
    EXPECT_TRUE(attnref::check_paged(batch.args, Profile::kJax).ok()) << attnref::to_string(layout);
  }
}

/// MLA's shape at a small size: one KV head whose latent rows are 8 wide, V the view of their
/// first 6 columns (the same memory, K's strides); q [2, 4, 8], 10 pages of 4 tokens.
struct MlaBatch {
  std::int64_t b = 2, hq = 4, d = 8, dv = 6, pages = 10, s = 4, pps = 3;
  std::vector<float> q = std::vector<float>(sz(b * hq * d), 0.5f);
  std::vector<float> cache = std::vector<float>(sz(pages * s * d), 1.0f);
  std::vector<std::int32_t> lengths{5, 12};
  std::vector<std::int32_t> table{0, 1, 9, 2, 3, 4};
  std::vector<float> out = std::vector<float>(sz(b * hq * d));
  attnref::PagedAttentionArgs<float> args;

  MlaBatch() {
    args.q = {q.data(), {b, hq, d}};
    args.k_pages = {cache.data(), {1, pages, s, d}};
    args.v_pages = {cache.data(), {1, pages, s, dv}, args.k_pages.strides};
    args.lengths = {lengths.data(), {b}};
    args.page_indices = {table.data(), {b, pps}};
  }
};

TEST(PagedValidate, MlaVAViewOfTheLatentCachePassesTheReferenceProfile) {
  MlaBatch m;
  EXPECT_EQ(m.args.head_dim(), 8);
  EXPECT_EQ(m.args.head_dim_v(), 6);
  EXPECT_TRUE(attnref::check_paged(m.args, Profile::kReference).ok());
  EXPECT_TRUE(attnref::check_paged_data(m.args).ok());
  EXPECT_TRUE(
      attnref::check_paged_output(m.args, TensorView<float, 3>(m.out.data(), {2, 4, 6})).ok());
  // The data tier reads K's 8 columns and V's 6: a NaN in column 7 (K's only) is K's.
  m.cache[sz(4 * m.d + 7)] = std::nanf("");  // page 1, slot 0: token 4 of sequence 0
  expect_error(attnref::check_paged_data(m.args), ErrorCode::kNonFiniteData, "",
               "k_pages is not finite at sequence 0, token 4 (page 1, slot 0), kv head 0, dim 7");
}

TEST(PagedValidate, MlaJaxProfileRefusesWithP1) {
  MlaBatch m;
  const Status s = attnref::check_paged(m.args, Profile::kJax);
  expect_error(s, ErrorCode::kShapeMismatch, "P1",
               "k_pages and v_pages must have the same shape. Got (1, 10, 4, 8) and "
               "(1, 10, 4, 6)");
  EXPECT_EQ(s.hint(),
            "JAX's kernel reads V with K's head_dim (8); the reference profile takes a V head_dim "
            "of its own (MLA)");
}

TEST(PagedValidate, MlaVMustShareEveryDimensionButTheLast) {
  for (int dim = 0; dim < 3; ++dim) {
    MlaBatch m;
    m.args.v_pages.extents[sz(dim)] -= 1;
    const Status s = attnref::check_paged(m.args, Profile::kReference);
    EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch) << dim;
    EXPECT_EQ(std::string(s.jax_check()), "P1");
    EXPECT_EQ(s.hint(),
              "K and V pages share [num_kv_heads, total_pages, page_size]; only V's head_dim may "
              "differ (MLA)");
  }
  MlaBatch m;
  m.args.v_pages.extents[1] = 9;
  expect_error(attnref::check_paged(m.args, Profile::kReference), ErrorCode::kShapeMismatch, "P1",
               "k_pages and v_pages must have the same shape. Got (1, 10, 4, 8) and (1, 9, 4, 6)");
  m.args.v_pages.extents = {1, 10, 4, 0};
  expect_error(attnref::check_paged(m.args, Profile::kReference), ErrorCode::kInvalidHeadDim, "",
               "head_dim_v must be positive. Got 0.");
}

TEST(PagedValidate, MlaOutputIsVsWidth) {
  MlaBatch m;
  const Status s =
      attnref::check_paged_output(m.args, TensorView<float, 3>(m.out.data(), {2, 4, 8}));
  expect_error(s, ErrorCode::kShapeMismatch, "",
               "out has shape (2, 4, 8); expected (2, 4, 6): q's with V's head_dim");
  EXPECT_EQ(s.hint(), "the output is [batch, num_q_heads, head_dim_v]: V's head_dim, not q's");
}

TEST(PagedValidate, MlaScalesOfVAreOneOrHeadDimV) {
  std::vector<std::int8_t> cache(10 * 4 * 8, 1);
  std::vector<float> q(2 * 4 * 8, 0.5f), k_scales(10 * 4, 1.0f), v_scales(10 * 4 * 8, 1.0f);
  std::vector<std::int32_t> lengths{5, 12}, table{0, 1, 9, 2, 3, 4};
  attnref::PagedAttentionArgs<float, std::int8_t> a;
  a.q = {q.data(), {2, 4, 8}};
  a.k_pages = {cache.data(), {1, 10, 4, 8}};
  a.v_pages = {cache.data(), {1, 10, 4, 6}, a.k_pages.strides};
  a.lengths = {lengths.data(), {2}};
  a.page_indices = {table.data(), {2, 3}};
  a.k_scales = {k_scales.data(), {1, 10, 4, 1}};
  a.v_scales = {v_scales.data(), {1, 10, 4, 1}};
  EXPECT_TRUE(attnref::check_paged(a, Profile::kReference).ok());
  a.v_scales = {v_scales.data(), {1, 10, 4, 6}};
  EXPECT_TRUE(attnref::check_paged(a, Profile::kReference).ok());
  a.v_scales = {v_scales.data(), {1, 10, 4, 8}};  // K's head_dim: not V's
  const Status s = attnref::check_paged(a, Profile::kReference);
  expect_error(s, ErrorCode::kScalesShape, "",
               "v_scales has shape (1, 10, 4, 8); expected (1, 10, 4, 1) or (1, 10, 4, 6)");
  EXPECT_EQ(s.hint(),
            "one scale per token per head ([..., 1]) or one per element of V ([..., head_dim_v])");
  a.k_scales = {v_scales.data(), {1, 10, 4, 6}};  // k_scales still go by K's head_dim
  EXPECT_EQ(attnref::check_paged(a, Profile::kReference).message(),
            "k_scales has shape (1, 10, 4, 6); expected (1, 10, 4, 1) or (1, 10, 4, 8)");
}

#if !defined(ATTNREF_NO_EXCEPTIONS)
TEST(PagedValidate, ThrowingWrapperCarriesTheStatus) {
  Batch<> batch;
  batch.lengths[1] = 99;
  try {
    attnref::validate_paged(batch.args, Profile::kReference);
    FAIL() << "expected ShapeError";
  } catch (const attnref::ShapeError& e) {
    EXPECT_EQ(e.status().code(), ErrorCode::kLengthOutOfRange);
    EXPECT_NE(std::string(e.what()).find("lengths[1]=99"), std::string::npos);
  }
  EXPECT_THROW(attnref::validate_heads(8, 6), attnref::ShapeError);
}
#endif

}  // namespace
