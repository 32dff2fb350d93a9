// SPDX-License-Identifier: Apache-2.0
/// @file isa.hpp
/// Instruction-set levels of the kernels: the level a translation unit was compiled for
/// (`compiled_isa()`, fixed by the compiler flags of the code that includes attnref) and the
/// best level this CPU and its operating system can run (`cpu_isa()`). The shipped binaries
/// (the Python module, the command-line tool, the wheel) are built once per level and start
/// the best one at run time; a header user gets the level of their own flags
/// (docs/integration.md).
#pragma once

#include <cstring>
#include <initializer_list>

namespace attnref {

/// Levels in increasing order. x86-64: kBaseline is SSE2 (any x86-64), kAvx2 is x86-64-v3
/// (AVX2, FMA, F16C), kAvx512 is x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) with AVX-512 VBMI. Other
/// architectures have kBaseline only (NEON on aarch64).
enum class IsaLevel { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

/// The name users see and set (ATTNREF_ISA): "baseline", "avx2", "avx512".
constexpr const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kBaseline:
      break;
  }
  return "baseline";
}

/// Parses a level name; false (and `out` untouched) for any other text.
inline bool parse_isa_level(const char* text, IsaLevel& out) {
  if (text == nullptr) return false;
  for (IsaLevel level : {IsaLevel::kBaseline, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (std::strcmp(text, isa_name(level)) == 0) {
      out = level;
      return true;
    }
  }
  return false;
}

/// The level the including translation unit is compiled for: the intrinsics paths of the
/// kernels (kernels/detail/) follow the same macros.
constexpr IsaLevel compiled_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__AVX512VBMI__)
  return IsaLevel::kAvx512;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  return IsaLevel::kAvx2;
#else
  return IsaLevel::kBaseline;
#endif
}

/// The best level this CPU runs, the operating system's support for the wider registers
/// included (GCC's and Clang's __builtin_cpu_supports check XGETBV).
inline IsaLevel cpu_isa() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi")) {
    return IsaLevel::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    // F16C comes with every AVX2 CPU; GCC 12's __builtin_cpu_supports cannot name it.
    return IsaLevel::kAvx2;
  }
#endif
  return IsaLevel::kBaseline;
}

/// The level the shipped binaries start: the CPU's best, or the lower one `forced` names (the
/// value of the environment variable ATTNREF_ISA; null or empty: none). A forced level above
/// the CPU's runs at the CPU's. False, `out` untouched, for a name that is no level.
inline bool choose_isa(const char* forced, IsaLevel& out) {
  IsaLevel level = cpu_isa();
  if (forced != nullptr && forced[0] != '\0') {
    IsaLevel wanted = IsaLevel::kBaseline;
    if (!parse_isa_level(forced, wanted)) return false;
    if (wanted < level) level = wanted;
  }
  out = level;
  return true;
}

}  // namespace attnref
