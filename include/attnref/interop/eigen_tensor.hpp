// SPDX-License-Identifier: Apache-2.0
/// @file eigen_tensor.hpp
/// Views over Eigen's unsupported Tensor module: `Eigen::Tensor` and `Eigen::TensorMap`, in
/// RowMajor (the natural order: strides as in numpy) or ColMajor (strides reversed, so the view
/// still indexes with Eigen's own index order). Not pulled in by the umbrella header.
///
/// Example:
/// @code
///   Eigen::Tensor<float, 3, Eigen::RowMajor> q(8, 32, 128);
///   attnref::TensorView<const float, 3> view = attnref::view_of(q);
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include <unsupported/Eigen/CXX11/Tensor>

#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// A view of any Eigen tensor expression that has storage (`Tensor`, `TensorMap`). The element
/// type is const when the tensor is const.
template <class EigenTensor>
auto view_of(EigenTensor& tensor) {
  using Plain = std::remove_const_t<EigenTensor>;
  using Scalar =
      std::conditional_t<std::is_const<EigenTensor>::value ||
                             std::is_const<typename Plain::Scalar>::value ||
                             std::is_const<std::remove_pointer_t<decltype(tensor.data())>>::value,
                         const typename Plain::Scalar, typename Plain::Scalar>;
  constexpr size_t kRank = static_cast<size_t>(Plain::NumDimensions);
  constexpr bool kRowMajor = static_cast<int>(Plain::Layout) == static_cast<int>(Eigen::RowMajor);
  std::array<std::int64_t, kRank> extents{};
  for (size_t i = 0; i < kRank; ++i) extents[i] = static_cast<std::int64_t>(tensor.dimensions()[i]);
  // Dense strides, saturating where they pass int64 (a map of (0, 2^40, 2^40) holds no element
  // but its outer stride would be 2^80; check_view accepts it, as no element is reached).
  // ColMajor: the row-major strides of the reversed extents, reversed.
  std::array<std::int64_t, kRank> strides{};
  if (kRowMajor) {
    strides = row_major_strides<kRank>(extents);
  } else {
    std::array<std::int64_t, kRank> reversed{};
    for (size_t i = 0; i < kRank; ++i) reversed[i] = extents[kRank - 1 - i];
    const std::array<std::int64_t, kRank> r = row_major_strides<kRank>(reversed);
    for (size_t i = 0; i < kRank; ++i) strides[i] = r[kRank - 1 - i];
  }
  return TensorView<Scalar, kRank>(tensor.data(), extents, strides,
                                   static_cast<std::int64_t>(tensor.size()));
}

}  // namespace attnref
