// SPDX-License-Identifier: Apache-2.0
// Mask predicates against hand-written dense formulas (spec §3.1, §5.4), composition, the
// multi-head mask and every mask constructor check (code, JAX id, message).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attnref/masks/mask.hpp"

namespace {

using attnref::AnyMask;
using attnref::CausalMask;
using attnref::ChunkedCausalMask;
using attnref::DenseMask;
using attnref::ErrorCode;
using attnref::FullMask;
using attnref::LocalMask;
using attnref::MaskShape;
using attnref::MultiHeadMask;
using attnref::Status;

// Dense reference formulas written out independently of the library.
std::vector<bool> dense_causal(std::int64_t sq, std::int64_t skv, std::int64_t offset) {
  std::vector<bool> m(static_cast<size_t>(sq * skv));
  for (std::int64_t i = 0; i < sq; ++i)
    for (std::int64_t j = 0; j < skv; ++j) m[static_cast<size_t>(i * skv + j)] = j <= i + offset;
  return m;
}

std::vector<bool> dense_local(std::int64_t sq, std::int64_t skv, int left, int right,
                              std::int64_t offset) {
  // left/right < 0 means "None".
  std::vector<bool> m(static_cast<size_t>(sq * skv));
  for (std::int64_t i = 0; i < sq; ++i)
    for (std::int64_t j = 0; j < skv; ++j) {
      const std::int64_t d = j - (i + offset);  // kv relative to the diagonal
      const bool lo = left < 0 || d >= -left;
      const bool hi = right < 0 || d <= right;
      m[static_cast<size_t>(i * skv + j)] = lo && hi;
    }
  return m;
}

std::vector<bool> dense_chunked(std::int64_t sq, std::int64_t skv, std::int64_t c) {
  std::vector<bool> m(static_cast<size_t>(sq * skv));
  for (std::int64_t i = 0; i < sq; ++i)
    for (std::int64_t j = 0; j < skv; ++j)
      m[static_cast<size_t>(i * skv + j)] = (i / c == j / c) && j <= i;
  return m;
}

template <class M>
void expect_equals_dense(const M& mask, const std::vector<bool>& dense, std::int64_t sq,
                         std::int64_t skv) {
  for (std::int64_t i = 0; i < sq; ++i)
    for (std::int64_t j = 0; j < skv; ++j)
      ASSERT_EQ(mask(i, j), dense[static_cast<size_t>(i * skv + j)]) << "at " << i << "," << j;
}

TEST(Masks, K1ConversionToBoolDoesNotCompile) {
  static_assert(!std::is_constructible<bool, CausalMask>::value, "K1 is compile-time");
  static_assert(!std::is_constructible<bool, AnyMask>::value, "K1 is compile-time");
  static_assert(attnref::is_mask_v<CausalMask>, "");
  static_assert(!attnref::is_mask_v<int>, "");
}

TEST(Masks, FullAllowsEverything) {
  FullMask m{{3, 5}};
  EXPECT_TRUE(m.check().ok());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_TRUE(m(i, j));
}

TEST(Masks, CausalMatchesDenseOnJaxShapes) {
  const std::vector<MaskShape> shapes = {{1, 1}, {4, 4}, {4, 6}, {6, 4}};
  for (const MaskShape& s : shapes)
    for (std::int64_t offset : {-1, 0, 1}) {
      CausalMask m{s, offset};
      ASSERT_TRUE(m.check().ok());
      expect_equals_dense(m, dense_causal(s[0], s[1], offset), s[0], s[1]);
    }
}

TEST(Masks, LocalMatchesDenseOnJaxWindows) {
  const std::vector<MaskShape> shapes = {{8, 8}, {6, 10}, {10, 6}};
  const std::vector<std::pair<int, int>> windows = {{1, -1}, {-1, 2}, {1, 1},
                                                    {1, 0},  {0, 2},  {-1, -1}};
  for (const MaskShape& s : shapes)
    for (auto w : windows)
      for (std::int64_t offset : {-2, 0, 3}) {
        std::optional<std::int64_t> left, right;
        if (w.first >= 0) left = w.first;
        if (w.second >= 0) right = w.second;
        LocalMask m{s, left, right, offset};
        ASSERT_TRUE(m.check().ok());
        expect_equals_dense(m, dense_local(s[0], s[1], w.first, w.second, offset), s[0], s[1]);
      }
}

TEST(Masks, ChunkedMatchesDense) {
  struct Case {
    MaskShape shape;
    std::int64_t chunk;
  };
  for (const Case& c : {Case{{1, 1}, 1}, Case{{4, 4}, 2}, Case{{5, 5}, 3}, Case{{4, 6}, 3},
                        Case{{6, 4}, 3}, Case{{6, 6}, 1}, Case{{6, 6}, 10}}) {
    ChunkedCausalMask m{c.shape, c.chunk};
    ASSERT_TRUE(m.check().ok());
    expect_equals_dense(m, dense_chunked(c.shape[0], c.shape[1], c.chunk), c.shape[0], c.shape[1]);
  }
}

TEST(Masks, DenseMaskReadsTheView) {
  const bool data[6] = {true, false, false, true, true, false};
  DenseMask m{{data, {2, 3}}};
  EXPECT_TRUE(m.check().ok());
  EXPECT_EQ(m.shape(), (MaskShape{2, 3}));
  EXPECT_TRUE(m(0, 0));
  EXPECT_FALSE(m(0, 1));
  EXPECT_TRUE(m(1, 0));
  EXPECT_FALSE(m(1, 2));
}

TEST(Masks, DenseMaskViewErrors) {
  DenseMask m{{nullptr, {2, 3}}};
  const Status s = m.check();
  EXPECT_EQ(s.code(), ErrorCode::kNullData);
  EXPECT_EQ(s.message(), "mask has 6 elements but a null data pointer");
}

TEST(Masks, PredicateMaskAndComposition) {
  auto even = attnref::make_predicate_mask(
      {6, 6}, [](std::int64_t q, std::int64_t kv) { return (q + kv) % 2 == 0; });
  CausalMask causal{{6, 6}};
  auto both = causal & even;
  auto either = causal | even;
  ASSERT_TRUE(attnref::check_mask(both).ok());
  ASSERT_TRUE(attnref::check_mask(either).ok());
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      const bool c = j <= i, e = (i + j) % 2 == 0;
      EXPECT_EQ(both(i, j), c && e);
      EXPECT_EQ(either(i, j), c || e);
    }
  // Nested composition and type erasure.
  AnyMask any = (causal & even) | FullMask{{6, 6}};
  EXPECT_TRUE(any.check().ok());
  EXPECT_TRUE(any(0, 5));
}

TEST(Masks, K2OperatorShapeMismatch) {
  auto m = CausalMask{{4, 4}} & CausalMask{{4, 6}};
  const Status s = attnref::check_mask(m);
  EXPECT_EQ(s.code(), ErrorCode::kMaskShape);
  EXPECT_EQ(std::string(s.jax_check()), "K2");
  EXPECT_EQ(s.message(), "Invalid shape for other: (4, 6), expected: (4, 4)");
  auto o = FullMask{{4, 4}} | FullMask{{5, 4}};
  EXPECT_EQ(std::string(attnref::check_mask(o).jax_check()), "K2");
}

TEST(Masks, K3ConstructorShapeMismatch) {
  attnref::OrMask<CausalMask, FullMask> m{CausalMask{{4, 4}}, FullMask{{4, 5}}};
  const Status s = attnref::check_mask(m);
  EXPECT_EQ(s.code(), ErrorCode::kMaskShape);
  EXPECT_EQ(std::string(s.jax_check()), "K3");
  EXPECT_EQ(s.message(), "Masks must have the same shape");
  EXPECT_EQ(s.hint(), "got (4, 4) and (4, 5)");
}

TEST(Masks, CompositionReportsChildErrorsFirst) {
  auto m = ChunkedCausalMask{{4, 4}, 0} & FullMask{{4, 4}};
  const Status s = attnref::check_mask(m);
  EXPECT_EQ(std::string(s.jax_check()), "K12");
}

TEST(Masks, K4EmptyMultiHead) {
  MultiHeadMask m{std::vector<AnyMask>{}};
  const Status s = m.check();
  EXPECT_EQ(s.code(), ErrorCode::kMaskHeadCount);
  EXPECT_EQ(std::string(s.jax_check()), "K4");
  EXPECT_EQ(s.message(), "Unsupported empty tuple of masks");
}

TEST(Masks, K5MultiHeadShapes) {
  MultiHeadMask m{CausalMask{{8, 8}}, LocalMask{{8, 8}, 2, 0, 0}, FullMask{{8, 4}}};
  const Status s = m.check();
  EXPECT_EQ(s.code(), ErrorCode::kMaskShape);
  EXPECT_EQ(std::string(s.jax_check()), "K5");
  EXPECT_EQ(s.message(), "Unexpected mask shape, got: (8, 4), expected: (8, 8)");
}

TEST(Masks, MultiHeadHoldsMixedTypes) {
  MultiHeadMask m{CausalMask{{8, 8}}, LocalMask{{8, 8}, 2, 0, 0}};
  ASSERT_TRUE(attnref::check_mask(m).ok());
  EXPECT_EQ(attnref::mask_num_heads(m), 2);
  EXPECT_EQ(attnref::mask_num_heads(CausalMask{{8, 8}}), 1);
  EXPECT_TRUE(m.head(0)(7, 0));
  EXPECT_FALSE(m.head(1)(7, 0));
  EXPECT_TRUE(m.head(1)(7, 5));
  EXPECT_EQ(m.shape(), (MaskShape{8, 8}));
}

TEST(Masks, MultiHeadReportsHeadErrors) {
  MultiHeadMask m{CausalMask{{8, 8}}, ChunkedCausalMask{{8, 8}, -1}};
  const Status s = m.check();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidMaskParameter);
  EXPECT_EQ(std::string(s.jax_check()), "K12");
}

TEST(Masks, K12ChunkSize) {
  for (std::int64_t c : {0, -1}) {
    const Status s = ChunkedCausalMask{{4, 4}, c}.check();
    EXPECT_EQ(s.code(), ErrorCode::kInvalidMaskParameter);
    EXPECT_EQ(std::string(s.jax_check()), "K12");
    EXPECT_EQ(s.message(), "chunk_size must be positive");
    EXPECT_EQ(s.hint(),
              "got chunk_size=" + std::to_string(c) + "; use the attention chunk length, e.g. 512");
  }
}

TEST(Masks, K11ShardCount) {
  const Status s = CausalMask{{6, 6}, 0, 2}.check();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidMaskParameter);
  EXPECT_EQ(std::string(s.jax_check()), "K11");
  EXPECT_EQ(s.message(), "Shard count squared (4) must divide Q seq_len (6) evenly.");
  EXPECT_TRUE((CausalMask{{8, 8}, 0, 2}.check().ok()));
  EXPECT_EQ(std::string(LocalMask({6, 6}, 1, 1, 0, 2).check().jax_check()), "K11");
  EXPECT_EQ(std::string(ChunkedCausalMask({6, 6}, 2, 2).check().jax_check()), "K11");
}

TEST(Masks, ShardCountPositive) {
  const Status s = CausalMask{{6, 6}, 0, 0}.check();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidMaskParameter);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "shard_count=0 must be positive.");
}

TEST(Masks, NegativeShape) {
  const Status s = FullMask{{-1, 4}}.check();
  EXPECT_EQ(s.code(), ErrorCode::kMaskShape);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "mask shape (-1, 4) has a negative dimension");
}

TEST(Masks, EmptyAnyMask) {
  const Status s = AnyMask().check();
  EXPECT_EQ(s.code(), ErrorCode::kMaskShape);
  EXPECT_EQ(s.message(), "an empty AnyMask holds no mask");
}

TEST(Masks, ValidateMaskThrows) {
  EXPECT_THROW(attnref::validate_mask(ChunkedCausalMask{{4, 4}, 0}), attnref::ShapeError);
  EXPECT_NO_THROW(attnref::validate_mask(CausalMask{{4, 4}}));
}

TEST(Masks, SameAsDeduplicatesEqualMasks) {
  EXPECT_TRUE(AnyMask(CausalMask{{8, 8}}).same_as(AnyMask(CausalMask{{8, 8}})));
  EXPECT_FALSE(AnyMask(CausalMask{{8, 8}}).same_as(AnyMask(CausalMask{{8, 8}, 1})));
  EXPECT_FALSE(AnyMask(CausalMask{{8, 8}}).same_as(AnyMask(FullMask{{8, 8}})));
  EXPECT_TRUE(AnyMask(LocalMask({8, 8}, 2, 2, 0)).same_as(AnyMask(LocalMask({8, 8}, 2, 2, 0))));
}

#ifdef __SIZEOF_INT128__
TEST(Masks, HostileOffsetsAndWindowsCompareExactly) {
  // Regression (fuzz_splash): LocalMask and CausalMask evaluated q + offset (- left, + right)
  // in int64, a signed overflow (UB) for offsets or windows near INT64_MAX/MIN, which the
  // mask checks accept. The predicates must equal the exact (128-bit) formulas.
  __extension__ typedef __int128 I;  // GCC/Clang extension, hence the #ifdef
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  const std::int64_t values[] = {kMin, kMin + 1, -(std::int64_t{1} << 62), -7,       -1,  0,
                                 1,    3,        std::int64_t{1} << 62,    kMax - 1, kMax};
  for (std::int64_t offset : values) {
    const CausalMask causal{{8, 8}, offset};
    for (std::int64_t q = 0; q < 8; ++q)
      for (std::int64_t kv = 0; kv < 8; ++kv)
        ASSERT_EQ(causal(q, kv), I{q} + offset >= I{kv}) << offset << " " << q << " " << kv;
    for (std::int64_t left : values)
      for (std::int64_t right : values) {
        const LocalMask local({8, 8}, left, right, offset);
        for (std::int64_t q = 0; q < 8; ++q)
          for (std::int64_t kv = 0; kv < 8; ++kv) {
            const bool want = I{q} + offset - left <= I{kv} && I{q} + offset + right >= I{kv};
            ASSERT_EQ(local(q, kv), want)
                << offset << " " << left << " " << right << " " << q << " " << kv;
          }
      }
  }
}
#endif

}  // namespace
