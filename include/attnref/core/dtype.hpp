// SPDX-License-Identifier: Apache-2.0
/// @file dtype.hpp
/// Element types attnref understands, as a runtime tag with numpy-style names.
/// Eigen's half and bfloat16 are only forward-declared here, so this header needs no Eigen.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attnref/core/float8.hpp"

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
  kFloat8E4M3FN,  ///< attnref::float8_e4m3fn (fp8 K/V)
  kFloat8E5M2,    ///< attnref::float8_e5m2 (fp8 K/V)
  // Raw codes as a .npy file holds them (bf16 and fp8 dumps); never a kernel element type.
  kUInt8,   ///< numpy uint8 (`|u1`)
  kUInt16,  ///< numpy uint16 (`<u2`)
  kVoid8,   ///< numpy's 1-byte void (`|V1`): what np.save writes for ml_dtypes' float8 types
  kVoid16,  ///< numpy's 2-byte void (`|V2`): what np.save writes for ml_dtypes' bfloat16
};

/// numpy's name for a dtype ("float32", "int8", "void16" for `|V2`, ...); "bfloat16",
/// "float8_e4m3fn" and "float8_e5m2" as in ml_dtypes.
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
    case DType::kFloat8E4M3FN:
      return "float8_e4m3fn";
    case DType::kFloat8E5M2:
      return "float8_e5m2";
    case DType::kUInt8:
      return "uint8";
    case DType::kUInt16:
      return "uint16";
    case DType::kVoid8:
      return "void8";
    case DType::kVoid16:
      return "void16";
    default:
      return "unknown";
  }
}

namespace detail {
/// One row of `dtype_of`'s table: the element type `T` has the tag `D`.
template <class T, DType D>
struct DTypeRow {
  using type = T;
  static constexpr DType value = D;
};

/// The tag of `T` in `Rows`, or kUnknown.
template <class T, class... Rows>
constexpr DType dtype_in() noexcept {
  DType tag = DType::kUnknown;
  ((tag = std::is_same_v<T, typename Rows::type> ? Rows::value : tag), ...);
  return tag;
}
}  // namespace detail

/// The runtime tag of element type `T` (cv-qualifiers ignored).
template <class T>
constexpr DType dtype_of = detail::dtype_in<
    std::remove_cv_t<T>, detail::DTypeRow<Eigen::half, DType::kFloat16>,
    detail::DTypeRow<Eigen::bfloat16, DType::kBFloat16>, detail::DTypeRow<float, DType::kFloat32>,
    detail::DTypeRow<double, DType::kFloat64>, detail::DTypeRow<std::int8_t, DType::kInt8>,
    detail::DTypeRow<std::int32_t, DType::kInt32>, detail::DTypeRow<std::int64_t, DType::kInt64>,
    detail::DTypeRow<bool, DType::kBool>, detail::DTypeRow<float8_e4m3fn, DType::kFloat8E4M3FN>,
    detail::DTypeRow<float8_e5m2, DType::kFloat8E5M2>>();

/// True for element types the kernels accept as attention inputs (q, K, V).
template <class T>
constexpr bool is_float_dtype = dtype_of<T> == DType::kFloat16 || dtype_of<T> == DType::kBFloat16 ||
                                dtype_of<T> == DType::kFloat32 || dtype_of<T> == DType::kFloat64;

/// True for the fp8 element types (K/V only, with optional scales).
template <class T>
constexpr bool is_fp8_dtype =
    dtype_of<T> == DType::kFloat8E4M3FN || dtype_of<T> == DType::kFloat8E5M2;

/// True for element types the kernels accept as K/V pages: a float type, int8 (with scales) or
/// fp8.
template <class T>
constexpr bool is_kv_dtype = is_float_dtype<T> || dtype_of<T> == DType::kInt8 || is_fp8_dtype<T>;

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
  } else if constexpr (kT == DType::kFloat8E4M3FN || kT == DType::kFloat8E5M2) {
    return x.is_finite();
  } else {
    return true;
  }
}

}  // namespace attnref
