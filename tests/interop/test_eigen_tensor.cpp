// Views over Eigen::Tensor and Eigen::TensorMap index the same elements as Eigen does.
#include <gtest/gtest.h>

#include <attnref/interop/eigen_tensor.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

TEST(EigenTensorView, RowMajorTensor) {
  Eigen::Tensor<float, 3, Eigen::RowMajor> t(2, 3, 4);
  for (int i = 0; i < 24; ++i) t.data()[i] = static_cast<float>(i);
  attnref::TensorView<float, 3> v = attnref::view_of(t);
  EXPECT_EQ(v.extents, (std::array<std::int64_t, 3>{2, 3, 4}));
  EXPECT_EQ(v.strides, (std::array<std::int64_t, 3>{12, 4, 1}));
  EXPECT_EQ(v.buffer_size, 24);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(v(a, b, c), t(a, b, c));
  EXPECT_TRUE(attnref::check_view(v, "t").ok());
}

TEST(EigenTensorView, ColMajorTensorKeepsEigensIndexOrder) {
  Eigen::Tensor<double, 2> t(3, 5);  // ColMajor by default
  for (int i = 0; i < 15; ++i) t.data()[i] = i;
  const auto v = attnref::view_of(t);
  EXPECT_EQ(v.strides, (std::array<std::int64_t, 2>{1, 3}));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b) EXPECT_EQ(v(a, b), t(a, b));
}

TEST(EigenTensorView, ConstTensorMapGivesAConstView) {
  const std::vector<int> data{1, 2, 3, 4, 5, 6};
  Eigen::TensorMap<const Eigen::Tensor<const int, 2, Eigen::RowMajor>> map(data.data(), 2, 3);
  auto v = attnref::view_of(map);
  static_assert(std::is_same<decltype(v), attnref::TensorView<const int, 2>>::value, "const");
  EXPECT_EQ(v(1, 2), 6);
  const Eigen::Tensor<float, 1, Eigen::RowMajor> ct(4);
  static_assert(
      std::is_same<decltype(attnref::view_of(ct)), attnref::TensorView<const float, 1>>::value,
      "a const tensor gives a const view");
}

// A map of (0, 2^40, 2^40) holds no element, but its dense outer stride would be 2^80: the
// strides saturate at INT64_MAX instead of overflowing (UBSan reported the product), and the
// view is valid, as no element is reached. ColMajor's strides run the other way.
TEST(EigenTensorView, EmptyMapWithHugeExtentsHasSaturatedStrides) {
  float x = 0.0f;
  const Eigen::Index big = Eigen::Index{1} << 40;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  Eigen::TensorMap<Eigen::Tensor<float, 3, Eigen::RowMajor>> row_major(&x, 0, big, big);
  const auto r = attnref::view_of(row_major);
  EXPECT_EQ(r.strides, (std::array<std::int64_t, 3>{kMax, big, 1}));
  EXPECT_TRUE(attnref::check_view(r, "r").ok());
  Eigen::TensorMap<Eigen::Tensor<float, 3>> col_major(&x, 0, big, big);
  const auto c = attnref::view_of(col_major);
  EXPECT_EQ(c.strides, (std::array<std::int64_t, 3>{1, 1, big}));
  EXPECT_TRUE(attnref::check_view(c, "c").ok());
}

}  // namespace
