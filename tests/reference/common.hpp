// SPDX-License-Identifier: Apache-2.0
// Test-only pieces the float64 oracles share: element conversion to double and bfloat16
// rounding, both written here so that no oracle depends on the kernels' own conversions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <attnref/core/float8.hpp>
#include <attnref/validate/logit_conventions.hpp>

namespace attnref {
namespace reference {

/// The value of an 8-bit float code with `e` exponent and `m` mantissa bits and exponent
/// `bias`, from its bit fields with std::ldexp (independent of attnref's decoding table).
/// `finite_only` formats (e4m3fn) have no infinity: only all-ones exponent and mantissa is NaN.
inline double fp8_bits_value(std::uint8_t bits, int e, int m, int bias, bool finite_only) {
  const int exponent = (bits >> m) & ((1 << e) - 1);
  const int mantissa = bits & ((1 << m) - 1);
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int all_ones = (1 << e) - 1;
  if (exponent == all_ones) {
    if (finite_only && mantissa == (1 << m) - 1) return std::nan("");
    if (!finite_only) return mantissa == 0 ? sign * HUGE_VAL : std::nan("");
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), 1 - bias - m);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -m), exponent - bias);
}

/// The value an element stands for, in double (half and bfloat16 widen through float, exactly;
/// fp8 codes from their bit fields).
template <class T>
double to_double(const T& x) {
  if constexpr (std::is_same<T, double>::value) {
    return x;
  } else if constexpr (std::is_same<T, float8_e4m3fn>::value) {
    return fp8_bits_value(x.bits, 4, 3, 7, true);
  } else if constexpr (std::is_same<T, float8_e5m2>::value) {
    return fp8_bits_value(x.bits, 5, 2, 15, false);
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}

/// float(x) rounded to the nearest bfloat16, ties to even, by bit manipulation.
inline double round_to_bf16(double x) {
  float f = static_cast<float>(x);
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&f, &u, sizeof f);
  return static_cast<double>(f);
}

/// The ALiBi bias of key position `key` seen from query position `query`: slope * (key - query),
/// or -slope * |key - query| with the absolute convention.
inline double alibi_bias(double slope, std::int64_t key, std::int64_t query,
                         AlibiConvention convention) {
  const double d = static_cast<double>(key - query);
  return convention == AlibiConvention::kAbsolute ? -slope * std::fabs(d) : slope * d;
}

/// A scaled logit x with the soft cap c (when `capped`) and a bias, in `order`:
/// c * tanh(x / c) + bias, or c * tanh((x + bias) / c).
inline double capped_logit(double x, bool capped, double cap, double bias, SoftCapOrder order) {
  if (order == SoftCapOrder::kAlibiThenCap) x += bias;
  if (capped) x = cap * std::tanh(x / cap);
  return order == SoftCapOrder::kAlibiThenCap ? x : x + bias;
}

/// Per output element, the range [lo, hi] of the values a softmax averaged (0, 0 when none): a
/// weighted mean must stay inside it (the fuzz harnesses' tolerance check).
struct ValueRange {
  std::vector<double> lo, hi;

  void reset(std::size_t n) {
    lo.assign(n, 0.0);
    hi.assign(n, 0.0);
  }
  /// Widens element i to hold v; `first` starts a new range.
  void add(std::size_t i, double v, bool first) {
    lo[i] = first ? v : std::min(lo[i], v);
    hi[i] = first ? v : std::max(hi[i], v);
  }
};

}  // namespace reference
}  // namespace attnref
