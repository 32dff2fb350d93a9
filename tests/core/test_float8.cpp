// SPDX-License-Identifier: Apache-2.0
// fp8 elements (core/float8.hpp): the decoding tables against the bit fields (computed
// independently in reference/common.hpp) and hand-worked values, and the paged and ragged checks
// that fp8 pages add: their optional scales, and NaN/infinity codes in live rows (data tier).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <attnref/core/float8.hpp>
#include <attnref/validate/paged.hpp>
#include <attnref/validate/ragged.hpp>

#include "reference/common.hpp"

namespace {

using attnref::DType;
using attnref::ErrorCode;
using attnref::float8_e4m3fn;
using attnref::float8_e5m2;
using attnref::Profile;
using attnref::Status;
using attnref::reference::fp8_bits_value;

/// Bitwise-equal doubles, NaN equal to NaN (the tables have no signed NaN semantics to check).
void expect_same(double want, float got, int code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "code " << code;
  } else {
    EXPECT_EQ(want, static_cast<double>(got)) << "code " << code;
    EXPECT_EQ(std::signbit(want), std::signbit(got)) << "code " << code;
  }
}

TEST(Float8, E4M3FNTableMatchesBitFields) {
  for (int b = 0; b < 256; ++b) {
    const auto x = float8_e4m3fn::from_bits(static_cast<std::uint8_t>(b));
    expect_same(fp8_bits_value(static_cast<std::uint8_t>(b), 4, 3, 7, true), x.to_float(), b);
    EXPECT_EQ(x.is_finite(), b != 0x7F && b != 0xFF) << b;
    EXPECT_EQ(attnref::element_is_finite(x), x.is_finite()) << b;
  }
}

TEST(Float8, E5M2TableMatchesBitFields) {
  for (int b = 0; b < 256; ++b) {
    const auto x = float8_e5m2::from_bits(static_cast<std::uint8_t>(b));
    expect_same(fp8_bits_value(static_cast<std::uint8_t>(b), 5, 2, 15, false), x.to_float(), b);
    EXPECT_EQ(x.is_finite(), (b & 0x7C) != 0x7C) << b;
    EXPECT_EQ(attnref::element_is_finite(x), x.is_finite()) << b;
  }
}

// Hand-worked codes: s eeee mmm (e4m3fn), s eeeee mm (e5m2).
TEST(Float8, HandWorkedValues) {
  const auto e4 = [](int b) {
    return float8_e4m3fn::from_bits(static_cast<std::uint8_t>(b)).to_float();
  };
  const auto e5 = [](int b) {
    return float8_e5m2::from_bits(static_cast<std::uint8_t>(b)).to_float();
  };
  EXPECT_EQ(e4(0x38), 1.0f);                  // 0 0111 000: 2^(7-7)
  EXPECT_EQ(e4(0x7E), 448.0f);                // 0 1111 110: 1.75 * 2^8, the largest
  EXPECT_EQ(e4(0x78), 256.0f);                // 0 1111 000: exponent 15 is a number here
  EXPECT_EQ(e4(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4(0x01), std::ldexp(1.0f, -9));  // smallest subnormal: 1/8 * 2^-6
  EXPECT_EQ(e4(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4(0xC4), -3.0f);  // 1 1000 100: -1.5 * 2
  EXPECT_TRUE(std::isnan(e4(0x7F)) && std::isnan(e4(0xFF)));
  EXPECT_TRUE(std::signbit(e4(0x80)) && e4(0x80) == 0.0f);
  EXPECT_EQ(e5(0x3C), 1.0f);      // 0 01111 00: 2^(15-15)
  EXPECT_EQ(e5(0x7B), 57344.0f);  // 0 11110 11: 1.75 * 2^15, the largest
  EXPECT_EQ(e5(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(e5(0x01), std::ldexp(1.0f, -16));  // smallest subnormal: 1/4 * 2^-14
  EXPECT_EQ(e5(0x7C), INFINITY);
  EXPECT_EQ(e5(0xFC), -INFINITY);
  for (int b : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(e5(b))) << b;
  EXPECT_EQ(e5(0xC2), -3.0f);  // 1 10000 10: -1.5 * 2
}

TEST(Float8, DTypeTagsAndNames) {
  EXPECT_EQ(attnref::dtype_of<float8_e4m3fn>, DType::kFloat8E4M3FN);
  EXPECT_EQ(attnref::dtype_of<const float8_e5m2>, DType::kFloat8E5M2);
  EXPECT_STREQ(attnref::dtype_name(DType::kFloat8E4M3FN), "float8_e4m3fn");
  EXPECT_STREQ(attnref::dtype_name(DType::kFloat8E5M2), "float8_e5m2");
  EXPECT_STREQ(attnref::dtype_name(DType::kVoid16), "void16");
  static_assert(attnref::is_kv_dtype<float8_e4m3fn> && !attnref::is_float_dtype<float8_e4m3fn>);
  static_assert(attnref::is_fp8_dtype<float8_e5m2> && !attnref::is_fp8_dtype<std::int8_t>);
}

// --- paged: optional scales, NaN codes in live rows ---------------------------------------------

/// Two sequences of 3 and 0 tokens, 2 KV heads, 4 query heads, page size 2, head_dim 4; every
/// code 1.0 (0x38) unless a test changes one.
struct PagedFp8 {
  static constexpr std::int64_t kHkv = 2, kPages = 3, kS = 2, kD = 4;
  std::vector<float> q = std::vector<float>(2 * 4 * kD, 0.5f);
  std::vector<float8_e4m3fn> k = std::vector<float8_e4m3fn>(kHkv * kPages * kS * kD, {0x38});
  std::vector<float8_e4m3fn> v = k;
  std::vector<float> scales = std::vector<float>(kHkv * kPages * kS, 0.25f);
  std::vector<std::int32_t> lengths{3, 0};
  std::vector<std::int32_t> table{2, 0, 1, 1};
  attnref::PagedAttentionArgs<float, float8_e4m3fn> args() const {
    attnref::PagedAttentionArgs<float, float8_e4m3fn> a;
    a.q = {q.data(), {2, 4, kD}};
    a.k_pages = {k.data(), {kHkv, kPages, kS, kD}};
    a.v_pages = {v.data(), {kHkv, kPages, kS, kD}};
    a.lengths = {lengths.data(), {2}};
    a.page_indices = {table.data(), {2, 2}};
    return a;
  }
};

TEST(Float8Paged, ScalesAreOptional) {
  PagedFp8 b;
  auto a = b.args();
  EXPECT_TRUE(attnref::check_paged(a, Profile::kReference).ok());
  a.k_scales = {b.scales.data(), {2, 3, 2, 1}};
  a.v_scales = {b.scales.data(), {2, 3, 2, 1}};
  EXPECT_TRUE(attnref::check_paged(a, Profile::kJax).ok());
  // Per tensor: one float behind all-zero strides.
  a.k_scales = attnref::TensorView<const float, 4>(b.scales.data(), {2, 3, 2, 1}, {0, 0, 0, 0});
  EXPECT_TRUE(attnref::check_paged(a, Profile::kReference).ok());
}

TEST(Float8Paged, OneSidedScalesAreAnError) {
  PagedFp8 b;
  auto a = b.args();
  a.v_scales = {b.scales.data(), {2, 3, 2, 1}};
  const Status s = attnref::check_paged(a, Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kQuantizationMismatch);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(),
            "fp8 K/V pages take both k_scales and v_scales or neither; got k_scales: 0, "
            "v_scales: 1");
}

TEST(Float8Paged, ScalesOfTheWrongShape) {
  PagedFp8 b;
  auto a = b.args();
  a.k_scales = {b.scales.data(), {2, 3, 1, 2}};
  a.v_scales = {b.scales.data(), {2, 3, 2, 1}};
  const Status s = attnref::check_paged(a, Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kScalesShape);
  EXPECT_EQ(s.message(), "k_scales has shape (2, 3, 1, 2); expected (2, 3, 2, 1) or (2, 3, 2, 4)");
}

TEST(Float8Paged, FloatScalesOnFloatPagesNameFp8) {
  std::vector<float> q(4, 1.0f), kv(4, 1.0f), scales(1, 1.0f);
  std::vector<std::int32_t> lengths{1}, table{0};
  attnref::PagedAttentionArgs<float> a;
  a.q = {q.data(), {1, 1, 4}};
  a.k_pages = {kv.data(), {1, 1, 1, 4}};
  a.v_pages = {kv.data(), {1, 1, 1, 4}};
  a.lengths = {lengths.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  a.k_scales = {scales.data(), {1, 1, 1, 1}};
  a.v_scales = {scales.data(), {1, 1, 1, 1}};
  const Status s = attnref::check_paged(a, Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kQuantizationMismatch);
  EXPECT_EQ(s.message(), "k_scales/v_scales were given but the K/V pages are not int8 or fp8");
}

TEST(Float8Paged, DataTierReportsNaNCodesInLiveRowsOnly) {
  PagedFp8 b;
  const auto at = [](std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) {
    return static_cast<std::size_t>(((h * PagedFp8::kPages + p) * PagedFp8::kS + s) * PagedFp8::kD +
                                    d);
  };
  // Sequence 0 (length 3, page table row {2, 0}): tokens 0 and 1 on page 2, token 2 on page 0
  // slot 0. Page 0 slot 1 is past the length and page 1 belongs to no live token.
  b.v[at(1, 0, 1, 3)] = float8_e4m3fn{0xFF};
  b.k[at(0, 1, 1, 2)] = float8_e4m3fn{0x7F};
  EXPECT_TRUE(attnref::check_paged_data(b.args()).ok());
  b.v[at(1, 0, 0, 3)] = float8_e4m3fn{0xFF};  // token 2: live
  const Status s = attnref::check_paged_data(b.args());
  EXPECT_EQ(s.code(), ErrorCode::kNonFiniteData);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(),
            "v_pages holds the float8_e4m3fn code 255, which is not a finite number, at "
            "sequence 0, token 2 (page 0, slot 0), kv head 1, dim 3");
  EXPECT_NE(s.hint().find("codes 127 and 255 (0x7f, 0xff) are NaN"), std::string::npos);
}

TEST(Float8Paged, DataTierChecksFp8ScalesWhenGiven) {
  PagedFp8 b;
  b.scales[1] = NAN;  // kv head 0, page 0, slot 1: dead (page 0 holds only token 2 at slot 0)
  auto a = b.args();
  a.k_scales = {b.scales.data(), {2, 3, 2, 1}};
  a.v_scales = {b.scales.data(), {2, 3, 2, 1}};
  EXPECT_TRUE(attnref::check_paged_data(a).ok());
  b.scales[0] = NAN;  // kv head 0, page 0, slot 0: token 2 of sequence 0
  const Status s = attnref::check_paged_data(a);
  EXPECT_EQ(s.code(), ErrorCode::kNonFiniteData);
  EXPECT_EQ(std::string(s.field()), "k_scales");
}

// --- ragged: NaN/infinity codes in live rows ----------------------------------------------------

TEST(Float8Ragged, DataTierReportsInfinityCodesInLiveRows) {
  // One sequence, 2 query rows, 3 KV tokens on page 1 (page size 4); e5m2 codes 1.0 (0x3C).
  std::vector<float> q(2 * 2 * 4, 0.5f);
  std::vector<float8_e5m2> k(1 * 2 * 4 * 4, float8_e5m2{0x3C}), v = k;
  std::vector<std::int32_t> kv_lens{3}, table{1}, cu{0, 2};
  attnref::RaggedPagedAttentionArgs<float, float8_e5m2> a;
  a.q = {q.data(), {2, 2, 4}};
  a.k_pages = {k.data(), {1, 2, 4, 4}};
  a.v_pages = {v.data(), {1, 2, 4, 4}};
  a.kv_lens = {kv_lens.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  a.cu_q_lens = {cu.data(), {2}};
  a.num_seqs_value = 1;
  ASSERT_TRUE(attnref::check_ragged(a, Profile::kReference).ok());
  k[(1 * 4 + 3) * 4 + 0] = float8_e5m2{0x7C};  // page 1, slot 3: past kv_len
  k[(0 * 4 + 0) * 4 + 0] = float8_e5m2{0xFF};  // page 0: not this sequence's
  EXPECT_TRUE(attnref::check_ragged_data(a).ok());
  k[(1 * 4 + 2) * 4 + 1] = float8_e5m2{0xFC};  // -inf at token 2
  const Status s = attnref::check_ragged_data(a);
  EXPECT_EQ(s.code(), ErrorCode::kNonFiniteData);
  EXPECT_EQ(s.message(),
            "k_pages holds the float8_e5m2 code 252, which is not a finite number, at sequence 0, "
            "token 2 (page 1, slot 2), kv head 0, dim 1");
  EXPECT_NE(s.hint().find("are +-inf or NaN"), std::string::npos);
}

}  // namespace
