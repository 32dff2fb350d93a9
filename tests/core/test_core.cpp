// Core layer: Status rendering, ShapeError, checked math, dtypes, views and their checks.
#include <gtest/gtest.h>

#include <attnref/core/checked_math.hpp>
#include <attnref/core/dtype.hpp>
#include <attnref/core/error.hpp>
#include <attnref/core/kv_dtypes.hpp>
#include <attnref/core/kv_layout.hpp>
#include <attnref/core/status.hpp>
#include <attnref/core/tensor_view.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

using attnref::ErrorCode;
using attnref::Status;
using attnref::TensorView;
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

TEST(Status, DefaultIsOkAndRendersOk) {
  constexpr Status s;
  static_assert(s.ok(), "a default Status is success");
  EXPECT_EQ(s.message(), "ok");
  EXPECT_EQ(s.hint(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_EQ(std::string(s.jax_check()), "");
}

TEST(Status, RendersEveryPlaceholderKind) {
  const Status s(ErrorCode::kShapeMismatch, "P1", "{f}: {0} and {7}, real {r0} / {r1}, {d2}",
                 "divisors of {3}: {k3}",
                 {5, 0, static_cast<std::int64_t>(attnref::DType::kInt64), 12, 0, 0, 0, -9},
                 {0.5, 30.0}, "tensor");
  EXPECT_EQ(s.message(), "tensor: 5 and -9, real 0.5 / 30.0, int64");
  EXPECT_EQ(s.hint(), "divisors of 12: 1, 2, 3, 4, 6, 12");
  EXPECT_EQ(s.to_string(),
            "error[shape_mismatch] tensor: 5 and -9, real 0.5 / 30.0, int64 (hint: divisors of "
            "12: 1, 2, 3, 4, 6, 12)");
  EXPECT_EQ(s.value(7), -9);
  EXPECT_EQ(s.real(1), 30.0);
  EXPECT_EQ(std::string(s.field()), "tensor");
}

TEST(Status, RealsUsePythonRepr) {
  auto render = [](double v) {
    return Status(ErrorCode::kInvalidSoftCap, "", "{r0}", "", {}, {v, 0.0}).message();
  };
  EXPECT_EQ(render(0.0), "0.0");
  EXPECT_EQ(render(-2.0), "-2.0");
  EXPECT_EQ(render(0.1), "0.1");
  EXPECT_EQ(render(1e30), "1e+30");
  EXPECT_EQ(render(1e-5), "1e-05");
  EXPECT_EQ(render(123456.5), "123456.5");
  EXPECT_EQ(render(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(render(static_cast<double>(0.1f)), "0.1");
  EXPECT_EQ(render(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(render(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(render(static_cast<double>(-2.3819763e+38f)), "-2.3819763e+38");
}

TEST(Status, UnknownPlaceholdersAndUnmatchedBracesStayLiteral) {
  const Status s(ErrorCode::kBadFile, "", "a {x} b {9} c {", "");
  EXPECT_EQ(s.message(), "a {x} b {9} c {");
}

TEST(Status, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(ErrorCode::kBadFile); ++c)
    EXPECT_NE(std::string(attnref::error_code_name(static_cast<ErrorCode>(c))), "unknown") << c;
  EXPECT_EQ(std::string(attnref::error_code_name(ErrorCode::kGqaNotDivisible)),
            "gqa_not_divisible");
}

#if !defined(ATTNREF_NO_EXCEPTIONS)  // built with -fno-exceptions too (preset noexcept)
TEST(ShapeError, CarriesTheStatusAndIsAnInvalidArgument) {
  const Status s(ErrorCode::kGqaNotDivisible, "P2", "bad {0}", "fix", {3});
  try {
    attnref::throw_if_error(s);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "error[gqa_not_divisible] bad 3 (hint: fix)");
    const auto* shape_error = dynamic_cast<const attnref::ShapeError*>(&e);
    ASSERT_NE(shape_error, nullptr);
    EXPECT_EQ(shape_error->status().code(), ErrorCode::kGqaNotDivisible);
    EXPECT_EQ(std::string(shape_error->status().jax_check()), "P2");
  }
  EXPECT_NO_THROW(attnref::throw_if_error(Status()));
}
#endif

TEST(CheckedMath, DetectsOverflow) {
  std::int64_t r = 0;
  EXPECT_TRUE(attnref::checked_mul(1 << 20, 1 << 20, &r));
  EXPECT_EQ(r, std::int64_t{1} << 40);
  EXPECT_FALSE(attnref::checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 32, &r));
  EXPECT_FALSE(attnref::checked_mul(-1, std::numeric_limits<std::int64_t>::min(), &r));
  EXPECT_TRUE(attnref::checked_add(kMax - 1, 1, &r));
  EXPECT_FALSE(attnref::checked_add(kMax, 1, &r));
  EXPECT_EQ(attnref::ceil_div(0, 16), 0);
  EXPECT_EQ(attnref::ceil_div(17, 16), 2);
  EXPECT_EQ(attnref::ceil_div(16, 16), 1);
}

TEST(DType, NamesAndFiniteness) {
  EXPECT_STREQ(attnref::dtype_name(attnref::dtype_of<const float>), "float32");
  EXPECT_STREQ(attnref::dtype_name(attnref::dtype_of<std::int32_t>), "int32");
  EXPECT_STREQ(attnref::dtype_name(attnref::dtype_of<std::int8_t>), "int8");
  EXPECT_STREQ(attnref::dtype_name(attnref::dtype_of<char>), "unknown");
  EXPECT_TRUE(attnref::element_is_finite(1.0f));
  EXPECT_FALSE(attnref::element_is_finite(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_FALSE(attnref::element_is_finite(-std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(attnref::element_is_finite(std::int8_t{-128}));
}

// The (q, K/V pages) table every front end shares, written out by hand: 16 pairs.
TEST(KvDtypes, TheTableHasTheSixteenPairsAndDispatchesEachToItsTypes) {
  using attnref::DType;
  const std::vector<std::pair<DType, DType>> want = {
      {DType::kFloat16, DType::kFloat16},       {DType::kFloat16, DType::kInt8},
      {DType::kFloat64, DType::kFloat64},       {DType::kFloat64, DType::kInt8},
      {DType::kFloat32, DType::kFloat32},       {DType::kFloat32, DType::kInt8},
      {DType::kFloat32, DType::kBFloat16},      {DType::kFloat32, DType::kFloat16},
      {DType::kFloat32, DType::kFloat8E4M3FN},  {DType::kFloat32, DType::kFloat8E5M2},
      {DType::kBFloat16, DType::kBFloat16},     {DType::kBFloat16, DType::kInt8},
      {DType::kBFloat16, DType::kFloat32},      {DType::kBFloat16, DType::kFloat16},
      {DType::kBFloat16, DType::kFloat8E4M3FN}, {DType::kBFloat16, DType::kFloat8E5M2},
  };
  int supported = 0;
  for (int qi = 0; qi <= static_cast<int>(DType::kVoid16); ++qi) {
    for (int ki = 0; ki <= static_cast<int>(DType::kVoid16); ++ki) {
      const auto q = static_cast<DType>(qi), kv = static_cast<DType>(ki);
      const bool expected =
          std::find(want.begin(), want.end(), std::make_pair(q, kv)) != want.end();
      ASSERT_EQ(attnref::kv_dtype_supported(q, kv), expected)
          << attnref::dtype_name(q) << " query, " << attnref::dtype_name(kv) << " pages";
      if (!expected) continue;
      ++supported;
      EXPECT_TRUE(attnref::check_kv_dtype(q, kv, "k_pages").ok());
      const auto got = attnref::dispatch_query_and_kv(q, kv, [](auto qt, auto kvt) {
        return std::make_pair(attnref::dtype_of<typename decltype(qt)::type>,
                              attnref::dtype_of<typename decltype(kvt)::type>);
      });
      EXPECT_EQ(got, std::make_pair(q, kv));
    }
  }
  EXPECT_EQ(supported, 16);
  EXPECT_FALSE(attnref::query_dtype_supported(DType::kInt8));
  EXPECT_TRUE(attnref::query_dtype_supported(DType::kBFloat16));
}

TEST(KvDtypes, AnUnsupportedPairNamesThePagesBothDtypesAndTheTable) {
  const attnref::Status s =
      attnref::check_kv_dtype(attnref::DType::kFloat16, attnref::DType::kFloat8E4M3FN, "kv_pages");
  EXPECT_EQ(s.code(), attnref::ErrorCode::kDtypeNotSupported);
  EXPECT_EQ(s.message(),
            "kv_pages has dtype float8_e4m3fn; a float16 query reads K/V pages of its own dtype "
            "or int8 with scales (float32 and bfloat16 queries also read float32, bfloat16, "
            "float16 and fp8 pages)");
  EXPECT_EQ(s.hint(),
            "store the pages in q's dtype or as int8 with float32 scales, or use a float32 or "
            "bfloat16 query");
}

TEST(KvDtypes, SeparatePagesAreCheckedKThenVThenForOneDtype) {
  using attnref::DType;
  EXPECT_TRUE(
      attnref::check_kv_dtypes(DType::kBFloat16, DType::kFloat8E5M2, DType::kFloat8E5M2).ok());
  attnref::Status s = attnref::check_kv_dtypes(DType::kFloat16, DType::kFloat16, DType::kBFloat16);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kDtypeNotSupported);
  EXPECT_STREQ(s.field(), "v_pages");
  s = attnref::check_kv_dtypes(DType::kFloat16, DType::kFloat32, DType::kBFloat16);
  EXPECT_STREQ(s.field(), "k_pages");  // K is reported before V
  s = attnref::check_kv_dtypes(DType::kFloat32, DType::kInt8, DType::kFloat8E4M3FN);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kQuantizationMismatch);
  EXPECT_EQ(s.message(), "k_pages (int8) and v_pages (float8_e4m3fn) must have the same dtype");
  EXPECT_EQ(s.hint(), "quantize K and V together, or neither");
}

TEST(TensorView, RowMajorStridesAndAccess) {
  std::vector<int> data(24);
  for (int i = 0; i < 24; ++i) data[static_cast<size_t>(i)] = i;
  TensorView<const int, 3> v(data.data(), {2, 3, 4});
  EXPECT_EQ(v.strides, (std::array<std::int64_t, 3>{12, 4, 1}));
  EXPECT_EQ(v(1, 2, 3), 23);
  EXPECT_EQ(v.numel_or_zero(), 24);
  EXPECT_TRUE(attnref::check_view(v, "v").ok());
  TensorView<int, 3> mutable_view(data.data(), {2, 3, 4});
  TensorView<const int, 3> converted = mutable_view;  // T -> const T
  EXPECT_EQ(converted(0, 1, 0), 4);
}

TEST(TensorView, CheckViewErrors) {
  std::vector<float> buf(16);
  struct Case {
    TensorView<const float, 2> view;
    ErrorCode code;
    std::string message;
  };
  const Case cases[] = {
      {{buf.data(), {-1, 4}},
       ErrorCode::kNegativeExtent,
       "x has a negative extent -1 in dimension 0"},
      {{buf.data(), {2, 4}, {-4, 1}},
       ErrorCode::kNegativeStride,
       "x has a negative stride -4 in dimension 0"},
      {{buf.data(), {kMax, 4}},
       ErrorCode::kSizeOverflow,
       "x: the number of elements overflows int64 at dimension 1"},
      {{buf.data(), {2, 4}, {kMax, 1}},
       ErrorCode::kSizeOverflow,
       "x: the largest element offset overflows int64 at dimension 1"},
      {{nullptr, {2, 4}}, ErrorCode::kNullData, "x has 8 elements but a null data pointer"},
      {{buf.data(), {4, 4}, {5, 1}, 16},
       ErrorCode::kOutOfBuffer,
       "x: extents and strides reach element offset 18, past the buffer of 16 elements"},
  };
  for (const Case& c : cases) {
    const Status s = attnref::check_view(c.view, "x");
    EXPECT_EQ(s.code(), c.code) << c.message;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(std::string(s.jax_check()), "");
  }
  // Zero-size views read nothing, so null data and huge strides are fine.
  EXPECT_TRUE(attnref::check_view(TensorView<const float, 2>(nullptr, {0, 4}), "x").ok());
  EXPECT_TRUE(
      attnref::check_view(TensorView<const float, 2>(buf.data(), {4, 4}, {4, 1}, 16), "x").ok());
}

TEST(TensorView, RowMajorStridesSaturateInsteadOfWrapping) {
  // extents whose product overflows: strides saturate and check_view reports the overflow.
  TensorView<const float, 3> v(nullptr, {2, std::int64_t{1} << 40, std::int64_t{1} << 40});
  EXPECT_EQ(v.strides[0], kMax);
  EXPECT_EQ(attnref::check_view(v, "q").code(), ErrorCode::kSizeOverflow);
}

TEST(KvLayout, AllLayoutsAddressTheSameLogicalElement) {
  const std::int64_t h = 3, p = 5, s = 4, d = 2;
  std::vector<int> jax(h * p * s * d), nhd(jax.size()), hnd(jax.size());
  for (std::int64_t a = 0; a < h; ++a)
    for (std::int64_t b = 0; b < p; ++b)
      for (std::int64_t c = 0; c < s; ++c)
        for (std::int64_t e = 0; e < d; ++e) {
          const int value = static_cast<int>(((a * 10 + b) * 10 + c) * 10 + e);
          jax[static_cast<size_t>(((a * p + b) * s + c) * d + e)] = value;
          nhd[static_cast<size_t>(((b * s + c) * h + a) * d + e)] = value;
          hnd[static_cast<size_t>(((b * h + a) * s + c) * d + e)] = value;
        }
  using attnref::KvLayout;
  const auto vj = attnref::kv_pages_view<const int>(jax.data(), KvLayout::kJax, h, p, s, d);
  const auto vn = attnref::kv_pages_view<const int>(nhd.data(), KvLayout::kNhd, h, p, s, d);
  const auto vh = attnref::kv_pages_view<const int>(hnd.data(), KvLayout::kHnd, h, p, s, d);
  for (std::int64_t a = 0; a < h; ++a)
    for (std::int64_t b = 0; b < p; ++b)
      for (std::int64_t c = 0; c < s; ++c)
        for (std::int64_t e = 0; e < d; ++e) {
          EXPECT_EQ(vn(a, b, c, e), vj(a, b, c, e));
          EXPECT_EQ(vh(a, b, c, e), vj(a, b, c, e));
        }
  // From the physical shape (what a .npy file carries), each layout's axes in its own order.
  const auto pn = attnref::kv_pages_view<const int>(nhd.data(), KvLayout::kNhd, {p, s, h, d});
  const auto ph = attnref::kv_pages_view<const int>(hnd.data(), KvLayout::kHnd, {p, h, s, d});
  const auto pj = attnref::kv_pages_view<const int>(jax.data(), KvLayout::kJax, {h, p, s, d});
  for (const auto* v : {&pn, &ph, &pj}) {
    EXPECT_EQ(v->extents, vj.extents);
  }
  EXPECT_EQ(pn.strides, vn.strides);
  EXPECT_EQ(ph.strides, vh.strides);
  EXPECT_EQ(pj.strides, vj.strides);
  attnref::KvLayout parsed;
  EXPECT_TRUE(attnref::parse_kv_layout("hnd", &parsed));
  EXPECT_EQ(parsed, KvLayout::kHnd);
  EXPECT_FALSE(attnref::parse_kv_layout("bshd", &parsed));
}

}  // namespace

namespace {

TEST(TensorView, OutputViewsMustNotOverlap) {
  std::vector<float> buf(64);
  using V = attnref::TensorView<float, 3>;
  EXPECT_TRUE(attnref::check_output_view(V(buf.data(), {2, 3, 4}), "out").ok());
  EXPECT_TRUE(
      attnref::check_output_view(V(buf.data(), {2, 3, 4}, {1, 2, 6}), "out").ok());  // col-major
  EXPECT_TRUE(
      attnref::check_output_view(V(buf.data(), {2, 1, 4}, {8, 0, 1}), "out").ok());  // unit dim
  EXPECT_TRUE(
      attnref::check_output_view(V(buf.data(), {2, 3, 4}, {16, 5, 1}), "out").ok());  // padded
  struct Case {
    V view;
    std::string message;
  };
  const Case cases[] = {
      {V(buf.data(), {2, 3, 4}, {0, 4, 1}),
       "out: dimension 0 (stride 0) overlaps the elements of faster dimensions, which span 1 "
       "elements"},
      {V(buf.data(), {2, 3, 4}, {12, 3, 1}),
       "out: dimension 1 (stride 3) overlaps the elements of faster dimensions, which span 4 "
       "elements"},
      {V(buf.data(), {2, 2, 2}, {2, 2, 1}),
       "out: dimension 1 (stride 2) overlaps the elements of faster dimensions, which span 4 "
       "elements"},
  };
  for (const Case& c : cases) {
    const Status s = attnref::check_output_view(c.view, "out");
    EXPECT_EQ(s.code(), ErrorCode::kOverlappingOutput);
    EXPECT_EQ(std::string(s.jax_check()), "");
    EXPECT_EQ(s.message(), c.message);
  }
  // check_view's own errors come first.
  EXPECT_EQ(attnref::check_output_view(V(nullptr, {2, 3, 4}, {0, 0, 0}), "out").code(),
            ErrorCode::kNullData);
}

}  // namespace
