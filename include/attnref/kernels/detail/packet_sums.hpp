// SPDX-License-Identifier: Apache-2.0
/// @file packet_sums.hpp
/// Two register-level helpers of the tile products, each with a portable path:
///  - `in_register`: GCC folds a packet load into every multiply-add that uses it, so a K
///    or V packet shared by 4 query rows was loaded 4 times, and the loads, not the
///    multiply-adds, bounded the products (on AVX2, P.V in L1 ran nearly twice as fast with the
///    packet held in a register);
///  - `sum_lanes`: the horizontal sums of 8 or 16 accumulators at once by transposing adds (21
///    instructions for 8 on AVX, 45 for 16 on AVX-512, 9 per 4 on SSE), instead of separate
///    reductions (on AVX-512 they were a quarter of the Q.K tile's samples in fp8 decode), and
///    on AVX-512 `PairedLaneSums` for two sets of 8 that are ready one after the other; each
///    sum is added in exactly the order of Eigen's `predux`, so the results are bit for bit the
///    same.
#pragma once

#include <cstddef>
#include <type_traits>

#include <Eigen/Core>

#if defined(__SSE__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace attnref {
namespace detail {

/// `p`, made opaque to the optimiser so that it stays in a register instead of being reloaded
/// from memory at each use (no instruction is emitted).
template <class Packet>
EIGEN_ALWAYS_INLINE Packet in_register(Packet p) noexcept {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
#if defined(__AVX512F__)
  asm("" : "+v"(p));
#else
  asm("" : "+x"(p));
#endif
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(p));
#endif
  return p;
}

// Comparing Eigen's packet types with the raw vector types drops their attributes in the
// template argument (-Wignored-attributes); only the type's identity is used.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif

#if defined(__SSE__)
/// shuffle(x, y, Lo) + shuffle(x, y, Hi), each shuffle taking 2 lanes of x and 2 of y within
/// each 128-bit lane: one step of the transposing sums, for 4-, 8- and 16-lane packets.
template <int Lo, int Hi, class Packet>
EIGEN_ALWAYS_INLINE Packet add_shuffles(Packet x, Packet y) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_same<Packet, __m512>::value)
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, Lo), _mm512_shuffle_ps(x, y, Hi));
#endif
#if defined(__AVX__)
  if constexpr (std::is_same<Packet, __m256>::value)
    return _mm256_add_ps(_mm256_shuffle_ps(x, y, Lo), _mm256_shuffle_ps(x, y, Hi));
#endif
  if constexpr (std::is_same<Packet, __m128>::value)
    return _mm_add_ps(_mm_shuffle_ps(x, y, Lo), _mm_shuffle_ps(x, y, Hi));
}

/// Within each 128-bit lane, lane j of the result holds the sum of that 128-bit lane of aj,
/// each ((x0 + x2) + (x1 + x3)) as Eigen's SSE `predux`: for 4-lane packets, the lane sums of
/// a0..a3 as one packet; the last two steps of the wider sums.
template <class Packet>
EIGEN_ALWAYS_INLINE Packet sum_lanes4(Packet a0, Packet a1, Packet a2, Packet a3) noexcept {
  // c01 = [a0[0]+a0[2], a0[1]+a0[3], a1[0]+a1[2], a1[1]+a1[3]], c23 likewise.
  const Packet c01 = add_shuffles<_MM_SHUFFLE(1, 0, 1, 0), _MM_SHUFFLE(3, 2, 3, 2)>(a0, a1);
  const Packet c23 = add_shuffles<_MM_SHUFFLE(1, 0, 1, 0), _MM_SHUFFLE(3, 2, 3, 2)>(a2, a3);
  return add_shuffles<_MM_SHUFFLE(2, 0, 2, 0), _MM_SHUFFLE(3, 1, 3, 1)>(c01, c23);
}
#endif

#if defined(__AVX__)
/// The same for a[0..7], 8-lane packets: the halves are added first (Eigen's AVX `predux`), two
/// packets at a time, then the 4-lane steps run in both halves at once.
EIGEN_ALWAYS_INLINE __m256 sum_lanes8(const __m256* a) noexcept {
  __m256 h[4];  // h[i] = [lo(a[i]) + hi(a[i]) | lo(a[i + 4]) + hi(a[i + 4])]
  for (int i = 0; i < 4; ++i)
    h[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20),
                         _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  return sum_lanes4(h[0], h[1], h[2], h[3]);
}
#endif

#if defined(__AVX512F__)
/// a + b, where a and b are two shuffles of x and y picking 128-bit lanes (lo and hi of the
/// imm8 selectors): one step of the transposing sums.
template <int Lo, int Hi>
EIGEN_ALWAYS_INLINE __m512 add_lanes128(__m512 x, __m512 y) noexcept {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, Lo), _mm512_shuffle_f32x4(x, y, Hi));
}

/// The first of `sum_lanes16`'s 4 steps for 8 of its 16 accumulators, a[0..7] (or a[8..15]):
/// b[m] = [h0 h1 of a[m] | h0 h1 of a[m + 4]] for m = 0..3, where per accumulator x, in 128-bit
/// lanes L0..L3, h0 = L0 + L2 and h1 = L1 + L3 (lane i + 8).
EIGEN_ALWAYS_INLINE void sum_lanes16_first(const __m512* a, __m512* b) noexcept {
  for (int m = 0; m < 4; ++m)
    b[m] = add_lanes128<_MM_SHUFFLE(1, 0, 1, 0), _MM_SHUFFLE(3, 2, 3, 2)>(a[m], a[m + 4]);
}

/// The other 3 steps, from the first step's 8 packets (b[0..3] of a[0..7], b[4..7] of
/// a[8..15]): lane i of the result holds the sum of a[i].
EIGEN_ALWAYS_INLINE __m512 sum_lanes16_rest(const __m512* b) noexcept {
  // c[m] = [h0 + h1 of a[m] | a[m + 4] | a[m + 8] | a[m + 12]] (lane i + 4).
  __m512 c[4];
  for (int m = 0; m < 4; ++m)
    c[m] = add_lanes128<_MM_SHUFFLE(2, 0, 2, 0), _MM_SHUFFLE(3, 1, 3, 1)>(b[m], b[m + 4]);
  // Then lane 4k + j holds the sum of a[j + 4k].
  return sum_lanes4(c[0], c[1], c[2], c[3]);
}

/// The lane sums of a[0..15], 16-lane packets, as one packet, in 4 steps that each halve the
/// lanes left to add and double the accumulators per packet: 45 instructions for 16 sums (74 by
/// the 8-accumulator form). Each sum takes the adds of Eigen's AVX-512DQ `predux`: lane i with
/// i + 8, then i + 4, then ((x0 + x2) + (x1 + x3)).
EIGEN_ALWAYS_INLINE __m512 sum_lanes16(const __m512* a) noexcept {
  __m512 b[8];
  sum_lanes16_first(a, b);
  sum_lanes16_first(a + 8, b + 4);
  return sum_lanes16_rest(b);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512DQ__)
/// The lane sums of two sets of 8 accumulators that are ready one after the other (two steps of
/// a tile), in `sum_lanes16`'s 45 instructions instead of twice the 37 of 8 at a time: the first
/// set's first step runs as soon as it is ready, so only 4 packets wait for the second. The sums
/// are bit for bit those of `sum_lanes` (Eigen's `predux`) on each set.
struct PairedLaneSums {
  __m512 b[8];
  EIGEN_ALWAYS_INLINE void first(const __m512 (&a)[8]) noexcept { sum_lanes16_first(a, b); }
  EIGEN_ALWAYS_INLINE void second(const __m512 (&a)[8]) noexcept { sum_lanes16_first(a, b + 4); }
  /// sums[0..7]: the first set's, sums[8..15]: the second's.
  EIGEN_ALWAYS_INLINE void finish(float* sums) const noexcept {
    _mm512_storeu_ps(sums, sum_lanes16_rest(b));
  }
};
#endif

/// sums[i] = predux(acc[i]) for N accumulators, bit for bit.
template <class Packet, std::size_t N, class Scalar>
EIGEN_ALWAYS_INLINE void sum_lanes(const Packet (&acc)[N], Scalar* sums) noexcept {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  if constexpr (std::is_same<Packet, __m512>::value && N % 16 == 0) {
    for (std::size_t i = 0; i < N; i += 16) _mm512_storeu_ps(sums + i, sum_lanes16(acc + i));
    return;
  }
  // Eigen's AVX-512DQ `predux` adds the 8-lane halves, then sums as on AVX.
  if constexpr (std::is_same<Packet, __m512>::value && N % 8 == 0) {
    for (std::size_t i = 0; i < N; i += 8) {
      __m256 halves[8];
      for (std::size_t k = 0; k < 8; ++k)
        halves[k] = _mm256_add_ps(_mm512_castps512_ps256(acc[i + k]),
                                  _mm512_extractf32x8_ps(acc[i + k], 1));
      _mm256_storeu_ps(sums + i, sum_lanes8(halves));
    }
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_same<Packet, __m256>::value && N % 8 == 0) {
    for (std::size_t i = 0; i < N; i += 8) _mm256_storeu_ps(sums + i, sum_lanes8(acc + i));
    return;
  }
#endif
#if defined(__SSE__)
  if constexpr (std::is_same<Packet, __m128>::value && N % 4 == 0) {
    for (std::size_t i = 0; i < N; i += 4)
      _mm_storeu_ps(sums + i, sum_lanes4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
    return;
  }
#endif
  for (std::size_t i = 0; i < N; ++i) sums[i] = Eigen::internal::predux(acc[i]);
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace detail
}  // namespace attnref
