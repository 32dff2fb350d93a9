// SPDX-License-Identifier: Apache-2.0
/// @file dtype.hpp
/// Element types attnref understands, as a runtime tag with numpy-style names.
/// Eigen's half and bfloat16 are only forward-declared here, so this header needs no Eigen.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

namespace attnref {

/// Runtime tag of an element type.
enum class DType : std::int64_t {
  kUnknown = 0,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt8,
  kInt32,
  kInt64,
  kBool,
};

/// numpy's name for a dtype ("float32", "int8", ...); "bfloat16" as in ml_dtypes.
constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    default:
      return "unknown";
  }
}

namespace detail {
template <class T>
struct DTypeOf {
  static constexpr DType value = DType::kUnknown;
};
template <>
struct DTypeOf<Eigen::half> {
  static constexpr DType value = DType::kFloat16;
};
template <>
struct DTypeOf<Eigen::bfloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<std::int8_t> {
  static constexpr DType value = DType::kInt8;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
}  // namespace detail

/// The runtime tag of element type `T` (cv-qualifiers ignored).
template <class T>
constexpr DType dtype_of = detail::DTypeOf<std::remove_cv_t<T>>::value;

/// True for element types the kernels accept as attention inputs (q, K, V).
template <class T>
constexpr bool is_float_dtype = dtype_of<T> == DType::kFloat16 || dtype_of<T> == DType::kBFloat16 ||
                                dtype_of<T> == DType::kFloat32 || dtype_of<T> == DType::kFloat64;

/// True for index element types (lengths, page tables, cumulative offsets).
template <class T>
constexpr bool is_index_dtype = dtype_of<T> == DType::kInt32 || dtype_of<T> == DType::kInt64;

/// Whether one element is a finite number, read from its bits (no conversion, no Eigen).
template <class T>
inline bool element_is_finite(const T& x) noexcept {
  constexpr DType kT = dtype_of<T>;
  if constexpr (kT == DType::kFloat16 || kT == DType::kBFloat16) {
    static_assert(sizeof(T) == 2, "half types are 16 bits");
    std::uint16_t bits;
    std::memcpy(&bits, &x, 2);
    const std::uint16_t exp_mask = kT == DType::kFloat16 ? 0x7C00 : 0x7F80;
    return (bits & exp_mask) != exp_mask;
  } else if constexpr (kT == DType::kFloat32 || kT == DType::kFloat64) {
    return std::isfinite(x);
  } else {
    return true;
  }
}

}  // namespace attnref
