// SPDX-License-Identifier: Apache-2.0
/// @file float8.hpp
/// The two 8-bit float formats of fp8 KV caches (vLLM `kv_cache_dtype` fp8_e4m3 / fp8_e5m2,
/// FlashInfer, JAX's ragged kernel with ml_dtypes' float8_e4m3fn / float8_e5m2), stored as their
/// bit patterns and decoded exactly to float through a 256-entry table:
///  - `float8_e4m3fn`: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity; 0x7f and
///    0xff are NaN; largest finite magnitude 448 (0x7e); smallest subnormal 2^-9 (0x01);
///  - `float8_e5m2`: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: exponent all
///    ones is infinity (mantissa 0: 0x7c, 0xfc) or NaN; largest finite 57344 (0x7b); smallest
///    subnormal 2^-16 (0x01).
/// Every value of both formats is exact in float (and in bfloat16 and half). No Eigen.
///
/// Example:
/// @code
///   const attnref::float8_e4m3fn x = attnref::float8_e4m3fn::from_bits(0x38);
///   float f = static_cast<float>(x);  // 1.0f
/// @endcode
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace attnref {
namespace detail {

/// 2^e for a small integer e, exact, usable in constant expressions.
constexpr float fp8_pow2(int e) noexcept {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return v;
}

/// The value of fp8 code `bits` with `E` exponent and `M` mantissa bits and exponent bias
/// `Bias`. `Finite` formats (the "fn" ones) have no infinity and one NaN code per sign (all
/// exponent and mantissa bits set); the others follow IEEE 754 (exponent all ones: infinity
/// with mantissa 0, NaN otherwise).
template <int E, int M, int Bias, bool Finite>
constexpr float fp8_decode(std::uint8_t bits) noexcept {
  constexpr int kExpMax = (1 << E) - 1;
  constexpr int kManMax = (1 << M) - 1;
  const bool negative = (bits & 0x80) != 0;
  const int exponent = (bits >> M) & kExpMax;
  const int mantissa = bits & kManMax;
  if (exponent == kExpMax) {
    if (Finite ? mantissa == kManMax : mantissa != 0)
      return std::numeric_limits<float>::quiet_NaN();
    if (!Finite) {
      return negative ? -std::numeric_limits<float>::infinity()
                      : std::numeric_limits<float>::infinity();
    }
  }
  // Subnormals (exponent 0) have no implicit leading 1 and the exponent of 1.
  const float magnitude =
      exponent == 0 ? static_cast<float>(mantissa) * fp8_pow2(1 - Bias - M)
                    : static_cast<float>((1 << M) + mantissa) * fp8_pow2(exponent - Bias - M);
  return negative ? -magnitude : magnitude;
}

/// All 256 codes of a format, decoded.
template <int E, int M, int Bias, bool Finite>
constexpr std::array<float, 256> fp8_table() noexcept {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b)
    t[static_cast<std::size_t>(b)] = fp8_decode<E, M, Bias, Finite>(static_cast<std::uint8_t>(b));
  return t;
}

inline constexpr std::array<float, 256> kFloat8E4M3FNTable = fp8_table<4, 3, 7, true>();
inline constexpr std::array<float, 256> kFloat8E5M2Table = fp8_table<5, 2, 15, false>();

}  // namespace detail

/// An fp8 e4m3fn element: the code as stored (ml_dtypes' float8_e4m3fn, vLLM's fp8_e4m3).
struct float8_e4m3fn {
  std::uint8_t bits;
  /// The element whose code is `b`.
  static constexpr float8_e4m3fn from_bits(std::uint8_t b) noexcept { return float8_e4m3fn{b}; }
  /// Its exact value (NaN for 0x7f and 0xff).
  constexpr float to_float() const noexcept { return detail::kFloat8E4M3FNTable[bits]; }
  constexpr explicit operator float() const noexcept { return to_float(); }
  constexpr explicit operator double() const noexcept { return to_float(); }
  /// Whether the code is a number (every code but 0x7f and 0xff).
  constexpr bool is_finite() const noexcept { return (bits & 0x7F) != 0x7F; }
};

/// An fp8 e5m2 element: the code as stored (ml_dtypes' float8_e5m2, vLLM's fp8_e5m2).
struct float8_e5m2 {
  std::uint8_t bits;
  /// The element whose code is `b`.
  static constexpr float8_e5m2 from_bits(std::uint8_t b) noexcept { return float8_e5m2{b}; }
  /// Its exact value (+-inf for 0x7c/0xfc, NaN for the other codes of exponent 31).
  constexpr float to_float() const noexcept { return detail::kFloat8E5M2Table[bits]; }
  constexpr explicit operator float() const noexcept { return to_float(); }
  constexpr explicit operator double() const noexcept { return to_float(); }
  /// Whether the code is a number (exponent bits not all ones).
  constexpr bool is_finite() const noexcept { return (bits & 0x7C) != 0x7C; }
};

static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1,
              "fp8 elements are one byte, so a view over a cache's bytes steps element by element");
static_assert(detail::kFloat8E4M3FNTable[0x7E] == 448.0f &&
                  detail::kFloat8E5M2Table[0x7B] == 57344.0f,
              "largest finite values");

}  // namespace attnref
