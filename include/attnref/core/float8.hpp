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

/// An fp8 element of the format that `fp8_decode<E, M, Bias, Finite>` decodes: the code as
/// stored.
template <int E, int M, int Bias, bool Finite>
struct Float8 {
  /// Every code's value.
  static constexpr std::array<float, 256> kTable = fp8_table<E, M, Bias, Finite>();
  /// The bits that are all set in, and only in, the codes that are not a number: exponent and
  /// mantissa for a `Finite` format (its NaN), the exponent otherwise (infinity and NaN).
  static constexpr int kNonFinite = Finite ? 0x7F : ((1 << E) - 1) << M;

  std::uint8_t bits;
  /// The element whose code is `b`.
  static constexpr Float8 from_bits(std::uint8_t b) noexcept { return Float8{b}; }
  /// Its exact value.
  constexpr float to_float() const noexcept { return kTable[bits]; }
  constexpr explicit operator float() const noexcept { return to_float(); }
  constexpr explicit operator double() const noexcept { return to_float(); }
  /// Whether the code is a number.
  constexpr bool is_finite() const noexcept { return (bits & kNonFinite) != kNonFinite; }
};

}  // namespace detail

/// An fp8 e4m3fn element (ml_dtypes' float8_e4m3fn, vLLM's fp8_e4m3): NaN for 0x7f and 0xff.
using float8_e4m3fn = detail::Float8<4, 3, 7, true>;

/// An fp8 e5m2 element (ml_dtypes' float8_e5m2, vLLM's fp8_e5m2): +-inf for 0x7c/0xfc, NaN for
/// the other codes of exponent 31.
using float8_e5m2 = detail::Float8<5, 2, 15, false>;

static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1,
              "fp8 elements are one byte, so a view over a cache's bytes steps element by element");
static_assert(float8_e4m3fn::kTable[0x7E] == 448.0f && float8_e5m2::kTable[0x7B] == 57344.0f,
              "largest finite values");
static_assert(float8_e4m3fn::kNonFinite == 0x7F && float8_e5m2::kNonFinite == 0x7C,
              "the non-finite codes of each format");

}  // namespace attnref
