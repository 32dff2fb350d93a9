// SPDX-License-Identifier: Apache-2.0
// Test-only pieces the float64 oracles share: element conversion to double and bfloat16
// rounding, both written here so that no oracle depends on the kernels' own conversions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace attnref {
namespace reference {

/// The value an element stands for, in double (half and bfloat16 widen through float, exactly).
template <class T>
double to_double(const T& x) {
  if constexpr (std::is_same<T, double>::value) {
    return x;
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
