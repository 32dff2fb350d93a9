// SPDX-License-Identifier: Apache-2.0
/// @file convert.hpp
/// Element conversions shared by the kernels: the accumulation type of a dtype pair, loads into
/// it, and the bf16 rounding that reproduces JAX's TPU kernel.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

namespace attnref {
namespace detail {

/// f32 accumulation, or f64 when any input is double.
template <class... T>
using AccumulatorOf =
    std::conditional_t<(std::is_same<std::remove_cv_t<T>, double>::value || ...), double, float>;

/// Converts any supported element (float, double, Eigen::half, Eigen::bfloat16, int8, fp8) to
/// `Acc`.
template <class Acc, class T>
inline Acc load_as(const T& x) noexcept {
  return static_cast<Acc>(x);
}

/// Converts an accumulator back to the output element type (round to nearest even).
template <class T, class Acc>
inline T store_as(Acc x) noexcept {
  return static_cast<T>(x);
}

/// Rounds a float to the nearest bfloat16 (ties to even) and back: what JAX's paged kernel does
/// to float K/V before use.
inline float round_to_bf16(float x) noexcept { return static_cast<float>(Eigen::bfloat16(x)); }

/// Widens `n` bfloat16 values to float: a bf16 is the upper half of a float's bits, so this is a
/// shift that compilers vectorise (Eigen's element-wise cast is not vectorised for bf16 here).
inline void widen_bf16(const Eigen::bfloat16* src, std::int64_t n, float* dst) noexcept {
  const auto* bits = reinterpret_cast<const std::uint16_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(dst + i, &u, sizeof(float));
  }
}

/// JAX's int8 dequantization: (float(w) * s) / 127.5, rounded in that order.
inline float dequantize_int8(std::int8_t w, float scale) noexcept {
  return (static_cast<float>(w) * scale) / 127.5f;
}

}  // namespace detail
}  // namespace attnref
