// SPDX-License-Identifier: Apache-2.0
/// @file checked_math.hpp
/// Overflow-checked int64 arithmetic. Sizes and offsets are products of caller-supplied
/// numbers; an overflow must become an error, never a wrapped value that indexes memory.
#pragma once

#include <cstdint>
#include <limits>

namespace attnref {

/// `*out = a * b`; returns false (and leaves `*out` unspecified) on int64 overflow.
constexpr bool checked_mul(std::int64_t a, std::int64_t b, std::int64_t* out) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return !__builtin_mul_overflow(a, b, out);
#else
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if (a == 0 || b == 0) {
    *out = 0;
    return true;
  }
  if ((a == -1 && b == kMin) || (b == -1 && a == kMin)) return false;
  if (a > 0 ? (b > 0 ? a > kMax / b : b < kMin / a) : (b > 0 ? a < kMin / b : a < kMax / b))
    return false;
  *out = a * b;
  return true;
#endif
}

/// `*out = a + b`; returns false on int64 overflow.
constexpr bool checked_add(std::int64_t a, std::int64_t b, std::int64_t* out) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return !__builtin_add_overflow(a, b, out);
#else
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if ((b > 0 && a > kMax - b) || (b < 0 && a < kMin - b)) return false;
  *out = a + b;
  return true;
#endif
}

/// a * b for a, b >= 0, or INT64_MAX where that overflows (a work estimate, not a size).
constexpr std::int64_t saturating_mul(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t out = 0;
  return checked_mul(a, b, &out) ? out : std::numeric_limits<std::int64_t>::max();
}

/// a + b for a, b >= 0, or INT64_MAX where that overflows.
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t out = 0;
  return checked_add(a, b, &out) ? out : std::numeric_limits<std::int64_t>::max();
}

/// min(t + n, end) for n >= 0 without forming t + n, which overflows for a token t near
/// INT64_MAX (a valid length over pages whose slots alias one row).
constexpr std::int64_t advance_within(std::int64_t t, std::int64_t n, std::int64_t end) noexcept {
  return end - t < n ? end : t + n;
}

/// ceil(a / b) for a >= 0, b > 0 (callers validate the signs first).
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace attnref
