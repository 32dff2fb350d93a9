// SPDX-License-Identifier: Apache-2.0
/// @file tile_products.hpp
/// The two small products of the grouped-head inner loop, register-blocked on Eigen's packet
/// primitives (the SIMD abstraction under Eigen's own kernels: SSE, AVX, AVX-512, NEON, or a
/// scalar fallback), instead of Eigen's packing GEMM, which is slow at these tile sizes and has a
/// cliff at two rows:
///   scores[r, t] = q[r, :] . k[t, :]     (rows of a query block against a K tile)
///   out[r, :]   += p[r, t] * v[t, :]     (probabilities times a V tile)
/// Rows are taken in blocks of 8, 4, 2 and 1, so any group size works, and every K and V row is
/// loaded once per row block, not once per query row. K and V come from a row source: rows
/// already in the accumulator type (`AccRows`), or 16/8-bit page rows widened in registers as
/// they are loaded (`WideRows`), with no scratch round trip; either finds its rows by a stride
/// (`StridedRows`) or by a list of addresses (`ListedRows`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "attnref/core/dtype.hpp"
#include "attnref/core/float8.hpp"
#include "attnref/kernels/detail/packet_sums.hpp"
#include "attnref/kernels/detail/rows_ahead.hpp"
#include "attnref/kernels/detail/widen.hpp"

namespace attnref {
namespace detail {

// The packet primitives of Eigen's own kernels, which the products are written in.
using Eigen::internal::ploadu;
using Eigen::internal::pmadd;
using Eigen::internal::predux;
using Eigen::internal::pset1;
using Eigen::internal::pstoreu;

template <class Acc>
using PacketOf = typename Eigen::internal::packet_traits<Acc>::type;

template <class Acc>
constexpr int kLanes = Eigen::internal::unpacket_traits<PacketOf<Acc>>::size;

/// An array bound from an int block size (bounds are size_t; -Wsign-conversion).
constexpr std::size_t dims(int n) noexcept { return static_cast<std::size_t>(n); }

/// Forces a lambda of the tile products inline (GCC and Clang): the hot loops are written once
/// as lambdas called from more than one place.
#if defined(__GNUC__)
#define ATTNREF_LAMBDA_INLINE __attribute__((always_inline))
#else
#define ATTNREF_LAMBDA_INLINE
#endif

/// Vector registers of the target: 32 with AVX-512 and on AArch64, 16 on x86 before it.
#if defined(__AVX512F__) || defined(__aarch64__)
inline constexpr int kVectorRegisters = 32;
#else
inline constexpr int kVectorRegisters = 16;
#endif

/// Accumulators per row of an R-row block, so that R of them times this use at most half the
/// registers (the rest hold the K or V packets and the broadcast q or p): more spill to the
/// stack in the innermost loop (on AVX2, 4 rows x 4 columns measured 1.3x slower than 4 x 2, and
/// 4 x 3 slower too). The order of every sum is the same whatever the tile shape.
constexpr int columns_per_row(int rows) noexcept {
  const int c = kVectorRegisters / 2 / rows;
  return c < 1 ? 1 : c > 4 ? 4 : c;
}

/// a * b + c for the scalar tails: fused where the target has FMA, so that the compiler's choice
/// of whether to contract a product into a sum (it differs by call site) never changes a result.
template <class Acc>
inline Acc madd(Acc a, Acc b, Acc c) noexcept {
#if defined(FP_FAST_FMAF) && defined(FP_FAST_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// Where row t of a K or V tile starts: `data + t * ld` (the rows of one page, or of any
/// strided matrix). Formed per access: a pointer one row past the last could overflow when the
/// row stride is huge (a legal stride on a dimension the call only reads once).
template <class E>
struct StridedRows {
  const E* data;
  std::int64_t ld;
  const E* row(std::int64_t t) const noexcept { return data + t * ld; }
};

/// Where row t starts when the rows lie on several pages: `rows[t]`, one address per token, so
/// one tile covers a softmax step over small pages (`ChunkRows` in paged_attention.hpp).
template <class E>
struct ListedRows {
  const char* const* rows;
  const E* row(std::int64_t t) const noexcept { return reinterpret_cast<const E*>(rows[t]); }
};

/// K or V rows already in the accumulator type, unit dim stride, found through `Rows`.
template <class Acc, class Rows = StridedRows<Acc>>
struct AccRows {
  Rows rows;
  template <class Packet>
  Packet packet(std::int64_t t, std::int64_t d) const noexcept {
    return Eigen::internal::ploadu<Packet>(rows.row(t) + d);
  }
  /// Packets d, d + W, ..., d + (G - 1) W of row t.
  template <class Packet, int G>
  void packets(std::int64_t t, std::int64_t d, Packet* out) const noexcept {
    constexpr int W = Eigen::internal::unpacket_traits<Packet>::size;
    for (int g = 0; g < G; ++g) out[g] = in_register(packet<Packet>(t, d + g * W));
  }
  /// Packets per `packets` call that cost least per packet.
  static constexpr int kPacketsPerLoad = 1;
  Acc scalar(std::int64_t t, std::int64_t d) const noexcept { return rows.row(t)[d]; }
};

/// Whether K/V elements of type KV can reach the tile products as `WideRows` for accumulator
/// Acc: f32 accumulation over 16-bit or 8-bit pages (f32 and f64 pages are read as they are).
template <class Acc, class KV>
inline constexpr bool kWidenableRows =
    std::is_same<Acc, float>::value && !std::is_same<KV, float>::value &&
    !std::is_same<KV, double>::value;

/// Whether elements of type E carry a dequantization scale (int8 and fp8).
template <class E>
inline constexpr bool kScaledElements = std::is_same<E, std::int8_t>::value || is_fp8_dtype<E>;

/// K or V rows stored as E (bf16, half, int8 or fp8; unit dim stride, found through `Rows`)
/// widened to f32 in registers, exactly. 8-bit rows give their codes' values unscaled: the
/// kernels apply a row's scale to the products (row_scales.hpp).
template <class E, class Rows = StridedRows<E>>
struct WideRows {
  Rows rows;

  template <class Packet>
  Packet packet(std::int64_t t, std::int64_t d) const noexcept {
    return widen_packet<Packet>(rows.row(t) + d);
  }
  template <class Packet, int G>
  void packets(std::int64_t t, std::int64_t d, Packet* out) const noexcept {
    widen_packets<Packet, G>(rows.row(t) + d, out);
    for (int g = 0; g < G; ++g) out[g] = in_register(out[g]);
  }
  static constexpr int kPacketsPerLoad = kPacketsPerWidening<PacketOf<float>, E>;
  float scalar(std::int64_t t, std::int64_t d) const noexcept {
    return widen_scalar(rows.row(t)[d]);
  }
};

/// scores[r * lds + t] = sum_d q[r * ldq + d] * k(t, d) for R rows and n tokens; row t of
/// `ahead` is asked for as token t is read.
template <class Acc, int R, class KRows>
inline void qk_row_block(const Acc* q, std::int64_t ldq, const KRows& k, std::int64_t n,
                         std::int64_t dim, Acc* scores, std::int64_t lds, const RowsAhead& ahead) {
  using Packet = PacketOf<Acc>;
  constexpr int W = kLanes<Acc>;
  constexpr int G = KRows::kPacketsPerLoad;  // packets of a token per load
  // Tokens per step: R * T packet accumulators. A G-packet load holds G packets and its
  // lookup tables in registers too, so it takes at most 8 accumulators (16 spilled to the stack).
  constexpr int T = G > 1 ? std::max(1, std::min(columns_per_row(R), 8 / R)) : columns_per_row(R);
  const std::int64_t full = dim / W * W;
  // acc[r * T + j] = the packet sums of row r and token t0 + j.
  const auto accumulate = [&](std::int64_t t0, Packet(&acc)[dims(R * T)]) ATTNREF_LAMBDA_INLINE {
    for (int j = 0; j < T; ++j) ahead.fetch_row(t0 + j);
    for (int i = 0; i < R * T; ++i) acc[i] = pset1<Packet>(Acc(0));
    std::int64_t d = 0;
    if constexpr (G > 1) {  // G packets of each token at a time: each sum in the same order
      for (; d + G * W <= full; d += G * W) {
        Packet kp[dims(T)][dims(G)];
        for (int j = 0; j < T; ++j) k.template packets<Packet, G>(t0 + j, d, kp[j]);
        for (int g = 0; g < G; ++g)
          for (int r = 0; r < R; ++r) {
            const Packet qp = in_register(ploadu<Packet>(q + r * ldq + d + g * W));
            for (int j = 0; j < T; ++j) acc[r * T + j] = pmadd(qp, kp[j][g], acc[r * T + j]);
          }
      }
    }
    for (; d < full; d += W) {
      Packet kp[dims(T)];
      for (int j = 0; j < T; ++j) kp[j] = in_register(k.template packet<Packet>(t0 + j, d));
      for (int r = 0; r < R; ++r) {
        const Packet qp = in_register(ploadu<Packet>(q + r * ldq + d));
        for (int j = 0; j < T; ++j) acc[r * T + j] = pmadd(qp, kp[j], acc[r * T + j]);
      }
    }
  };
  // scores of tokens t0.. from their lane sums (sums[r * T + j]) and the scalar tail.
  const auto store = [&](std::int64_t t0, const Acc* sums) ATTNREF_LAMBDA_INLINE {
    // No scalar tail (D a multiple of the packet): a row's T sums are copied at once; the loop
    // per sum around the empty tail loop took 15% of int8 Q.K's samples with K in L2.
    if (full == dim) {
      for (int r = 0; r < R; ++r) std::copy_n(sums + r * T, T, scores + r * lds + t0);
    } else {
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < T; ++j) {
          Acc s = sums[r * T + j];
          for (std::int64_t e = full; e < dim; ++e)
            s = madd(q[r * ldq + e], k.scalar(t0 + j, e), s);
          scores[r * lds + t0 + j] = s;
        }
    }
  };
  std::int64_t t = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  if constexpr (std::is_same<Acc, float>::value && W == 16 && R * T == 8) {
    // Two steps' lane sums at once (`PairedLaneSums`): with 4-packet loads (fp8 on VBMI) a step
    // holds 8 accumulators, whose sums alone took 37 instructions to the 16's 45.
    for (; t + 2 * T <= n; t += 2 * T) {
      Packet acc[dims(R * T)];
      PairedLaneSums pair;
      accumulate(t, acc);
      pair.first(acc);
      accumulate(t + T, acc);
      pair.second(acc);
      Acc sums[dims(2 * R * T)];
      pair.finish(sums);
      store(t, sums);
      store(t + T, sums + R * T);
    }
  }
#endif
  for (; t + T <= n; t += T) {
    Packet acc[dims(R * T)];
    accumulate(t, acc);
    Acc sums[dims(R * T)];
    sum_lanes(acc, sums);
    store(t, sums);
  }
  for (; t < n; ++t) {
    ahead.fetch_row(t);
    Packet acc[dims(R)];
    for (int r = 0; r < R; ++r) acc[r] = pset1<Packet>(Acc(0));
    for (std::int64_t d = 0; d < full; d += W) {
      const Packet kp = in_register(k.template packet<Packet>(t, d));
      for (int r = 0; r < R; ++r) acc[r] = pmadd(ploadu<Packet>(q + r * ldq + d), kp, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      Acc s = predux(acc[r]);
      for (std::int64_t d = full; d < dim; ++d) s = madd(q[r * ldq + d], k.scalar(t, d), s);
      scores[r * lds + t] = s;
    }
  }
}

/// out[r * ldo + d] += sum_t p[r * ldp + t] * v(t, d) for R rows: a chunk of the output block
/// stays in registers while the V rows stream through; the rows of `ahead` are asked for on the
/// way.
template <class Acc, int R, class VRows>
inline void pv_row_block(const Acc* p, std::int64_t ldp, const VRows& v, std::int64_t n,
                         std::int64_t dim, Acc* out, std::int64_t ldo, const RowsAhead& ahead) {
  using Packet = PacketOf<Acc>;
  constexpr int W = kLanes<Acc>;
  constexpr int C = columns_per_row(R);  // packets per chunk: R * C accumulators
  // The rows of `ahead` are spread over the passes over D, a slice per pass, one row every
  // `passes` tokens between the multiply-adds: asked for in one burst before the pass, they
  // filled the line-fill buffers and stalled it (44% of fp8 P.V samples on that loop).
  const std::int64_t passes = dim / (C * W);
  const std::int64_t per_pass = passes > 0 ? (n + passes - 1) / passes : n;
  if (passes == 0)
    for (std::int64_t t = 0; t < n; ++t) ahead.fetch_row(t);
  std::int64_t d0 = 0;
  for (std::int64_t pass = 0; d0 + C * W <= dim; d0 += C * W, ++pass) {
    std::int64_t next = pass * per_pass, countdown = 1;
    const std::int64_t slice_end = std::min(n, next + per_pass);
    Packet acc[dims(R)][dims(C)];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = ploadu<Packet>(out + r * ldo + d0 + c * W);
    for (std::int64_t t = 0; t < n; ++t) {
      if (--countdown == 0) {
        countdown = passes;
        if (next < slice_end) ahead.fetch_row(next++);
      }
      Packet vp[dims(C)];
      v.template packets<Packet, C>(t, d0, vp);
      for (int r = 0; r < R; ++r) {
        const Packet pr = pset1<Packet>(p[r * ldp + t]);
        for (int c = 0; c < C; ++c) acc[r][c] = pmadd(pr, vp[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) pstoreu(out + r * ldo + d0 + c * W, acc[r][c]);
  }
  for (; d0 + W <= dim; d0 += W) {  // whole packets left over
    Packet acc[dims(R)];
    for (int r = 0; r < R; ++r) acc[r] = ploadu<Packet>(out + r * ldo + d0);
    for (std::int64_t t = 0; t < n; ++t) {
      const Packet vp = in_register(v.template packet<Packet>(t, d0));
      for (int r = 0; r < R; ++r) acc[r] = pmadd(pset1<Packet>(p[r * ldp + t]), vp, acc[r]);
    }
    for (int r = 0; r < R; ++r) pstoreu(out + r * ldo + d0, acc[r]);
  }
  for (; d0 < dim; ++d0)  // scalar tail (head_dim not a multiple of the packet size)
    for (std::int64_t t = 0; t < n; ++t)
      for (int r = 0; r < R; ++r)
        out[r * ldo + d0] = madd(p[r * ldp + t], Acc(v.scalar(t, d0)), out[r * ldo + d0]);
}

/// The two products as types, so that `row_blocks` can take either.
struct ScoresProduct {
  template <class Acc, int R, class... Args>
  static void block(const Args&... args) {
    qk_row_block<Acc, R>(args...);
  }
};
struct ValuesProduct {
  template <class Acc, int R, class... Args>
  static void block(const Args&... args) {
    pv_row_block<Acc, R>(args...);
  }
};

/// `Product::block` over any number of rows, in blocks of 8, 4, 2 and 1; the first block asks
/// for `ahead`.
template <class Product, class Acc, class Rows>
inline void row_blocks(const Acc* a, std::int64_t lda, std::int64_t rows, const Rows& kv,
                       std::int64_t n, std::int64_t dim, Acc* out, std::int64_t ldo,
                       RowsAhead ahead) {
  std::int64_t r = 0;
  for (; r + 8 <= rows; r += 8, ahead = {})
    Product::template block<Acc, 8>(a + r * lda, lda, kv, n, dim, out + r * ldo, ldo, ahead);
  if (r + 4 <= rows) {
    Product::template block<Acc, 4>(a + r * lda, lda, kv, n, dim, out + r * ldo, ldo, ahead);
    r += 4;
    ahead = {};
  }
  if (r + 2 <= rows) {
    Product::template block<Acc, 2>(a + r * lda, lda, kv, n, dim, out + r * ldo, ldo, ahead);
    r += 2;
    ahead = {};
  }
  if (r < rows)
    Product::template block<Acc, 1>(a + r * lda, lda, kv, n, dim, out + r * ldo, ldo, ahead);
}

/// scores[r, t] = q[r, :] . k[t, :] for any number of query rows.
template <class Acc, class KRows>
inline void qk_rows(const Acc* q, std::int64_t ldq, std::int64_t rows, const KRows& k,
                    std::int64_t n, std::int64_t dim, Acc* scores, std::int64_t lds,
                    RowsAhead ahead = {}) {
  row_blocks<ScoresProduct>(q, ldq, rows, k, n, dim, scores, lds, ahead);
}

/// out[r, :] += p[r, t] * v[t, :] for any number of probability rows.
template <class Acc, class VRows>
inline void pv_rows(const Acc* p, std::int64_t ldp, std::int64_t rows, const VRows& v,
                    std::int64_t n, std::int64_t dim, Acc* out, std::int64_t ldo,
                    RowsAhead ahead = {}) {
  row_blocks<ValuesProduct>(p, ldp, rows, v, n, dim, out, ldo, ahead);
}

}  // namespace detail
}  // namespace attnref
