// Views over Eigen::Tensor and Eigen::TensorMap index the same elements as Eigen does.
#include <gtest/gtest.h>

#include <attnref/interop/eigen_tensor.hpp>

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

}  // namespace
