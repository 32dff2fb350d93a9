// SPDX-License-Identifier: Apache-2.0
/// @file widen.hpp
/// Widening a packet of 16-bit or 8-bit K/V elements to f32 in registers, so the tile products
/// read pages directly instead of converting them into a scratch buffer first. The only
/// intrinsics of the library live here, each next to a portable path that gives the same bits:
///  - bf16: the upper half of a float's bits (a shift; SSE2, AVX2, AVX-512);
///  - half: the hardware conversion where the compiler targets it (F16C, AVX-512F), else
///    Eigen's exact software conversion, element by element;
///  - int8: sign extension and an exact int-to-float conversion (AVX2, AVX-512);
///  - fp8 (e4m3fn, e5m2): on AVX-512 VBMI, byte-table lookups (`vpermt2b`) that give 4 packets
///    of 64 codes in 10 instructions (`widen_packets`); else the half-precision converter on AVX2
///    with F16C and on AVX-512 (an e5m2 code is the upper byte of a binary16; e4m3fn is shifted
///    into one, then scaled by 2^8), integer arithmetic on the bit fields on AVX2 without F16C
///    (a gather from the table was slower than scalar lookups on AMD Zen 3), or the 256-entry
///    table.
/// Every conversion is exact, so which path the build takes never changes a result
/// (tests/kernels/test_widened_tiles.cpp compares them bit for bit against the converted-scratch
/// path), with one exception the kernels route around: e4m3fn's two NaN codes, which the F16C
/// paths give as +-480 (mending them cost a fifth of e4m3 decode); without VBMI, `widens_exactly`
/// looks for them first, and a piece of rows that holds one is converted through the table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#if defined(__SSE2__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "attnref/core/dtype.hpp"
#include "attnref/core/float8.hpp"

namespace attnref {
namespace detail {

/// One element widened to float, exactly.
template <class E>
inline float widen_scalar(const E& x) noexcept {
  if constexpr (is_fp8_dtype<E>) {
    return x.to_float();
  } else if constexpr (std::is_same<E, Eigen::bfloat16>::value) {
    std::uint16_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  } else {
    return static_cast<float>(x);
  }
}

#if defined(__AVX2__)
/// 8 fp8 codes (zero-extended to 32 bits) to floats with integer arithmetic, no table: normal
/// codes move their exponent and mantissa into place and rebias; subnormals are m * 2^-(bias +
/// mantissa bits - 1), exact in float; e4m3fn's 0x7f is NaN, e5m2's top exponent inf or NaN.
template <class E>
inline __m256 fp8_to_float_avx2(__m256i codes) noexcept {
  constexpr bool kE4M3 = std::is_same<E, float8_e4m3fn>::value;
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15;
  const __m256i mag = _mm256_and_si256(codes, _mm256_set1_epi32(0x7f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal =
      _mm256_add_epi32(_mm256_slli_epi32(mag, 23 - kMant), _mm256_set1_epi32((127 - kBias) << 23));
  const __m256 sub =
      _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(kE4M3 ? 0x1p-9f : 0x1p-16f));
  const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(1 << kMant), mag));
  __m256 f = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, is_sub);
  if constexpr (kE4M3) {
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
    f = _mm256_blendv_ps(f, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), is_nan);
  } else {  // exponent 31: inf (mantissa 0) or NaN
    const __m256i special =
        _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                        _mm256_slli_epi32(_mm256_and_si256(mag, _mm256_set1_epi32(3)), 21));
    const __m256 is_special = _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7b)));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(special), is_special);
  }
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}
#endif

#if defined(__AVX2__) && defined(__F16C__)
/// The 8 fp8 codes in the low half of `b` to floats through the half-precision converter: an
/// e5m2 code is the upper byte of the binary16 with the same value (infinities and NaNs
/// included); an e4m3fn code's exponent and mantissa move one bit right (binary16 keeps one
/// more exponent bit) and the result is 2^8 too small (bias 15 against 7: an exact product
/// fixes it). Fewer instructions than `fp8_to_float_avx2`, the same values for every code but
/// e4m3fn's NaN codes (0x7f, 0xff), which come out as +-480, one step past the largest finite
/// 448: callers check for them with `has_nan_code`.
template <class E>
inline __m256 fp8_to_float_f16c(__m128i b) noexcept {
  const __m128i high = _mm_unpacklo_epi8(_mm_setzero_si128(), b);  // each code << 8
  if constexpr (std::is_same<E, float8_e5m2>::value) {
    return _mm256_cvtph_ps(high);
  } else {
    // Arithmetic shift right by 1 copies the sign into bit 14; the mask clears it.
    const __m128i h = _mm_and_si128(_mm_srai_epi16(high, 1), _mm_set1_epi16(0x3fff | -0x8000));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
  }
}
#endif

#if defined(__AVX512F__)
/// The 16 fp8 codes of `b` to floats through AVX-512F's half-precision converter, as
/// `fp8_to_float_f16c` does for 8 (e4m3fn's NaN codes likewise come out as +-480).
template <class E>
inline __m512 fp8_to_float_avx512(__m128i b) noexcept {
  if constexpr (std::is_same<E, float8_e5m2>::value) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));  // each code << 8
  } else {
    // Sign-extended and shifted left by 7: exponent and mantissa land in bits 7-13 and the sign
    // in bits 14 and 15; clearing bit 14 leaves the binary16 (one instruction fewer than
    // shifting the code to the top and back).
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                       _mm256_set1_epi16(0x3fff | -0x8000));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
  }
}
#endif

#if defined(__AVX512VBMI__)
/// Bytes 2 and 3 of the float bits of each fp8 magnitude (codes 0-127): every value of both
/// formats (NaN and infinity included) is a bfloat16, so its float's low two bytes are zero and
/// two byte lookups with the sign put back give the float exactly.
struct Fp8FloatBytes {
  alignas(64) std::array<std::uint8_t, 128> byte2{}, byte3{};
};

/// The float bits of a non-negative fp8 value (x86's quiet NaN for NaN), in a constant expression.
constexpr std::uint32_t fp8_magnitude_bits(float v) noexcept {
  if (v != v) return 0x7FC00000u;
  if (v > std::numeric_limits<float>::max()) return 0x7F800000u;
  if (v == 0.0f) return 0;
  int e = 0;
  for (; v >= 2.0f; v *= 0.5f) ++e;
  for (; v < 1.0f; v *= 2.0f) --e;
  return (static_cast<std::uint32_t>(e + 127) << 23) |
         static_cast<std::uint32_t>((v - 1.0f) * 8388608.0f);
}

template <class E>
constexpr Fp8FloatBytes fp8_float_bytes() noexcept {
  Fp8FloatBytes t;
  for (std::size_t m = 0; m < 128; ++m) {
    const std::uint32_t bits = fp8_magnitude_bits(E{static_cast<std::uint8_t>(m)}.to_float());
    t.byte2[m] = static_cast<std::uint8_t>(bits >> 16);
    t.byte3[m] = static_cast<std::uint8_t>(bits >> 24);
  }
  return t;
}

template <class E>
inline constexpr Fp8FloatBytes kFp8FloatBytes = fp8_float_bytes<E>();

/// The byte order that makes the in-lane unpacks of `fp8_to_float_vbmi` give codes in order:
/// byte 16L + 4m + k takes code 16m + 4L + k (4-byte groups transposed across the lanes).
struct Fp8UnpackOrder {
  alignas(64) std::array<std::uint8_t, 64> index{};
  constexpr Fp8UnpackOrder() {
    for (std::size_t l = 0; l < 4; ++l)
      for (std::size_t m = 0; m < 4; ++m)
        for (std::size_t k = 0; k < 4; ++k)
          index[16 * l + 4 * m + k] = static_cast<std::uint8_t>(16 * m + 4 * l + k);
  }
};
inline constexpr Fp8UnpackOrder kFp8UnpackOrder{};

/// The G x 16 fp8 codes at `src` (G = 1, 2 or 4) to G packets of floats, exactly (NaN codes
/// included), in 6, 7 or 10 instructions: reorder, look up bytes 2 and 3 of each float
/// (a 128-entry byte table indexed by the code's low 7 bits), put the sign back, and interleave
/// with zeros. Widening 64 codes at once costs 2.5 instructions per packet, against 6 for the
/// half-precision path with its 2^8 product, which also needs `has_nan_code` first.
template <class E, int G>
inline void fp8_to_float_vbmi(const E* src, __m512* out) noexcept {
  static_assert(G == 1 || G == 2 || G == 4, "1, 2 or 4 packets");
  const auto& bytes = kFp8FloatBytes<E>;
  __m512i codes;
  if constexpr (G == 4) {
    codes = _mm512_loadu_si512(src);
  } else if constexpr (G == 2) {
    codes = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  } else {
    codes = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
  const __m512i c = _mm512_permutexvar_epi8(_mm512_load_si512(kFp8UnpackOrder.index.data()), codes);
  const __m512i b2 = _mm512_permutex2var_epi8(_mm512_load_si512(bytes.byte2.data()), c,
                                              _mm512_load_si512(bytes.byte2.data() + 64));
  __m512i b3 = _mm512_permutex2var_epi8(_mm512_load_si512(bytes.byte3.data()), c,
                                        _mm512_load_si512(bytes.byte3.data() + 64));
  b3 = _mm512_ternarylogic_epi32(b3, c, _mm512_set1_epi8(-128), 0xF8);  // b3 | (c & 0x80)
  const __m512i zero = _mm512_setzero_si512();
  const __m512i low_words = _mm512_unpacklo_epi8(b2, b3);  // the bfloat16 bits
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, low_words));
  if constexpr (G >= 2) out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, low_words));
  if constexpr (G == 4) {
    const __m512i high_words = _mm512_unpackhi_epi8(b2, b3);
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, high_words));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, high_words));
  }
}
#endif

/// Whether `widen_packet` gives e4m3fn's NaN codes as NaN on this build (the VBMI lookup does;
/// the half-precision paths give +-480).
#if defined(__AVX512VBMI__)
inline constexpr bool kWidensE4m3NanCodes = true;
#else
inline constexpr bool kWidensE4m3NanCodes = false;
#endif

/// Whether n rows of `dim` fp8 codes (row t at `data + t * ld`, unit stride) hold an e4m3fn NaN
/// code (0x7f or 0xff), which `widen_packet` may not give as NaN. Always false for other types.
/// A byte compare over 32 codes at a time on AVX2.
template <class E>
inline bool has_nan_code([[maybe_unused]] const E* data, [[maybe_unused]] std::int64_t ld,
                         [[maybe_unused]] std::int64_t n, [[maybe_unused]] std::int64_t dim) {
  if constexpr (!std::is_same<E, float8_e4m3fn>::value) {
    return false;
  } else {
#if defined(__AVX2__)
    __m256i any = _mm256_setzero_si256();
#endif
    for (std::int64_t t = 0; t < n; ++t) {
      const auto* row = reinterpret_cast<const unsigned char*>(data + t * ld);
      std::int64_t d = 0;
#if defined(__AVX2__)
      for (; d + 32 <= dim; d += 32) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d));
        // A NaN code with its sign bit set is 0xff.
        any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_or_si256(c, _mm256_set1_epi8(-128)),
                                                     _mm256_set1_epi8(-1)));
      }
#endif
      for (; d < dim; ++d)
        if ((row[d] & 0x7f) == 0x7f) return true;
    }
#if defined(__AVX2__)
    return !_mm256_testz_si256(any, any);
#else
    return false;
#endif
  }
}

/// Whether `widen_packet` gives n rows of `dim` elements of E (row t at `data + t * ld`) their
/// exact values: always, but for e4m3fn rows holding a NaN code on builds without the VBMI
/// lookup.
template <class E>
inline bool widens_exactly(const E* data, std::int64_t ld, std::int64_t n, std::int64_t dim) {
  if constexpr (std::is_same<E, float8_e4m3fn>::value && !kWidensE4m3NanCodes)
    return !has_nan_code(data, ld, n, dim);
  else
    return true;
}

/// The portable path: element by element into a small aligned buffer, then one packet load.
template <class Packet, class E>
inline Packet widen_packet_portable(const E* src) noexcept {
  constexpr auto W = static_cast<std::size_t>(Eigen::internal::unpacket_traits<Packet>::size);
  alignas(64) float tmp[W];
  for (std::size_t i = 0; i < W; ++i) tmp[i] = widen_scalar(src[i]);
  return Eigen::internal::pload<Packet>(tmp);
}

// Comparing Eigen's packet types with the raw vector types drops their attributes in the
// template argument (-Wignored-attributes); only the type's identity is used.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif

/// W consecutive elements at `src` (unit stride) widened to a packet of W floats.
template <class Packet, class E>
inline Packet widen_packet(const E* src) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_same<Packet, __m512>::value) {
    if constexpr (std::is_same<E, Eigen::bfloat16>::value) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (std::is_same<E, Eigen::half>::value) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    } else if constexpr (std::is_same<E, std::int8_t>::value) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    } else if constexpr (is_fp8_dtype<E>) {
#if defined(__AVX512VBMI__)
      if constexpr (std::is_same<E, float8_e4m3fn>::value) {  // exact for the NaN codes too
        __m512 p;
        fp8_to_float_vbmi<E, 1>(src, &p);
        return p;
      }
#endif
      return fp8_to_float_avx512<E>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    }
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_same<Packet, __m256>::value) {
    if constexpr (std::is_same<E, Eigen::bfloat16>::value) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (std::is_same<E, Eigen::half>::value) {
#if defined(__F16C__)
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
#endif
    } else if constexpr (std::is_same<E, std::int8_t>::value) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    } else if constexpr (is_fp8_dtype<E>) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
#if defined(__F16C__)
      return fp8_to_float_f16c<E>(b);
#else
      return fp8_to_float_avx2<E>(_mm256_cvtepu8_epi32(b));
#endif
    }
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_same<Packet, __m128>::value && std::is_same<E, Eigen::bfloat16>::value) {
    // Interleaving zeros below each bf16 gives its float bits (little endian).
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
#endif
  if constexpr (std::is_same<E, float>::value) {
    return Eigen::internal::ploadu<Packet>(src);
  } else {
    return widen_packet_portable<Packet>(src);
  }
}

/// How many packets `widen_packets` widens at once for the fewest instructions: 4 for fp8 on
/// AVX-512 VBMI (a table lookup whose fixed cost 4 packets share), 1 otherwise.
template <class Packet, class E>
inline constexpr int kPacketsPerWidening =
#if defined(__AVX512VBMI__)
    std::is_same<Packet, __m512>::value&& is_fp8_dtype<E> ? 4 :
#endif
                                                          1;

/// G packets of W consecutive elements at `src` (unit stride) widened, as G `widen_packet`s
/// give them.
template <class Packet, int G, class E>
inline void widen_packets(const E* src, Packet* out) noexcept {
#if defined(__AVX512VBMI__)
  if constexpr (std::is_same<Packet, __m512>::value && is_fp8_dtype<E> && G > 1) {
    fp8_to_float_vbmi<E, G>(src, out);
    return;
  }
#endif
  constexpr int W = Eigen::internal::unpacket_traits<Packet>::size;
  for (int g = 0; g < G; ++g) out[g] = widen_packet<Packet>(src + g * W);
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace detail
}  // namespace attnref
