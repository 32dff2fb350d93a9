// SPDX-License-Identifier: Apache-2.0
// Shared pieces of attnref's libFuzzer harnesses: a reader that turns fuzz bytes into numbers
// (returning zeros once the bytes run out, so every input decodes to something), a table of
// hostile integers and reals, a small PRNG for bulk tensor data, and a check that ends the run
// with a readable report (libFuzzer then saves the input as a crash).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <attnref/core/status.hpp>

namespace attnref_fuzz {

/// Fails the fuzz run: prints what broke and aborts (libFuzzer reports a crash with the input).
[[noreturn]] inline void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "\nattnref fuzz invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define ATTNREF_FUZZ_CHECK(cond, detail)                                \
  do {                                                                  \
    if (!(cond)) ::attnref_fuzz::fail(#cond, (detail));                 \
  } while (false)

/// Consumes fuzz bytes front to back. Past the end every read gives 0.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}

  bool empty() const noexcept { return p_ == end_; }
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - p_); }

  std::uint8_t u8() noexcept { return p_ != end_ ? *p_++ : 0; }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept {
    return static_cast<std::uint32_t>(u16()) | (static_cast<std::uint32_t>(u16()) << 16);
  }
  std::uint64_t u64() noexcept {
    return static_cast<std::uint64_t>(u32()) | (static_cast<std::uint64_t>(u32()) << 32);
  }
  bool flag() noexcept { return (u8() & 1) != 0; }
  /// True with probability about k/256.
  bool chance(int k) noexcept { return u8() < k; }
  /// An integer in [lo, hi] (hi - lo < 2^16).
  std::int64_t range(std::int64_t lo, std::int64_t hi) noexcept {
    if (hi <= lo) return lo;
    return lo + static_cast<std::int64_t>(u16() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  /// A byte string of length in [0, max_len].
  std::string bytes(std::size_t max_len) {
    const std::size_t n = static_cast<std::size_t>(range(0, static_cast<std::int64_t>(max_len)));
    std::string s;
    for (std::size_t i = 0; i < n && !empty(); ++i) s += static_cast<char>(u8());
    return s;
  }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

/// Integers that break careless size arithmetic.
inline std::int64_t hostile_int(Reader& r, std::int64_t near) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  switch (r.u8() % 20) {
    case 0: return -1;
    case 1: return 0;
    case 2: return 1;
    case 3: return near;
    case 4: return near + 1;
    case 5: return near - 1;
    case 6: return std::numeric_limits<std::int32_t>::max();
    case 7: return std::int64_t{1} << 31;
    case 8: return std::int64_t{1} << 32;
    case 9: return std::numeric_limits<std::int32_t>::min();
    case 10: return std::int64_t{1} << 62;
    case 11: return kMax;
    case 12: return kMin;
    case 13: return kMax / 2 + 1;
    case 14: return std::int64_t{3037000500};  // ~sqrt(INT64_MAX): squares overflow
    case 15: return -near;
    case 16: return 2 * near;
    case 17: return std::int64_t{1} << 20;
    case 18: return static_cast<std::int64_t>(r.u64());
    default: return r.range(-4, 40);
  }
}

/// Reals that break careless option checks.
inline float hostile_real(Reader& r) {
  switch (r.u8() % 16) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -std::numeric_limits<float>::infinity();
    case 3: return 0.0f;
    case 4: return -0.0f;
    case 5: return std::numeric_limits<float>::denorm_min();
    case 6: return std::numeric_limits<float>::max();
    case 7: return -std::numeric_limits<float>::max();
    case 8: return 1e-30f;
    case 9: return 1e30f;
    case 10: return -1.0f;
    case 11: {
      const std::uint32_t bits = r.u32();
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default: return static_cast<float>(r.range(-64, 64)) / 8.0f;
  }
}

/// splitmix64: bulk tensor values from a fuzz-chosen seed (bytes are too few to fill tensors).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Small values on a grid of 1/8 in [-2, 2]: well-conditioned sums.
  float small() noexcept { return static_cast<float>(static_cast<int>(next() % 33) - 16) / 8.0f; }

 private:
  std::uint64_t s_;
};

/// Every error must render: a code with a name, a message and a hint that format without
/// crashing (the renderer reads format strings and stored values).
inline void check_error_renders(const attnref::Status& s) {
  if (s.ok()) return;
  ATTNREF_FUZZ_CHECK(std::strcmp(attnref::error_code_name(s.code()), "unknown") != 0,
                     "an error code without a name");
  const std::string m = s.message();
  ATTNREF_FUZZ_CHECK(!m.empty() && m != "ok", "an error with an empty message");
  (void)s.hint();
  (void)s.to_string();
}

/// Elements of a buffer the harness allocates: keeps the harness itself under ~64 MiB.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 20;

}  // namespace attnref_fuzz
