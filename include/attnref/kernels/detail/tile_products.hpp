// SPDX-License-Identifier: Apache-2.0
/// @file tile_products.hpp
/// The two small products of the grouped-head inner loop, register-blocked on Eigen's packet
/// primitives (the SIMD abstraction under Eigen's own kernels: SSE, AVX, AVX-512, NEON, or a
/// scalar fallback), instead of Eigen's packing GEMM, which is slow at these tile sizes and has a
/// cliff at two rows:
///   scores[r, t] = q[r, :] . k[t, :]     (rows of a query block against a K tile)
///   out[r, :]   += p[r, t] * v[t, :]     (probabilities times a V tile)
/// Rows are taken in blocks of 8, 4, 2 and 1, so any group size works, and every K and V row is
/// loaded once per row block, not once per query row.
#pragma once

#include <cstddef>
#include <cstdint>

#include <Eigen/Core>

namespace attnref {
namespace detail {

template <class Acc>
using PacketOf = typename Eigen::internal::packet_traits<Acc>::type;

template <class Acc>
constexpr int kLanes = Eigen::internal::unpacket_traits<PacketOf<Acc>>::size;

/// An array bound from an int block size (bounds are size_t; -Wsign-conversion).
constexpr std::size_t dims(int n) noexcept { return static_cast<std::size_t>(n); }

/// scores[r * lds + t] = sum_d q[r * ldq + d] * k[t * ldk + d] for R rows and n tokens.
template <class Acc, int R>
inline void qk_row_block(const Acc* q, std::int64_t ldq, const Acc* k, std::int64_t ldk,
                         std::int64_t n, std::int64_t dim, Acc* scores, std::int64_t lds) {
  using Eigen::internal::ploadu;
  using Eigen::internal::pmadd;
  using Eigen::internal::predux;
  using Eigen::internal::pset1;
  using Packet = PacketOf<Acc>;
  constexpr int W = kLanes<Acc>;
  constexpr int T = R >= 8 ? 2 : 4;  // tokens per step: R * T packet accumulators
  const std::int64_t full = dim / W * W;
  std::int64_t t = 0;
  for (; t + T <= n; t += T) {
    const Acc* kt = k + t * ldk;
    Packet acc[dims(R)][dims(T)];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < T; ++j) acc[r][j] = pset1<Packet>(Acc(0));
    for (std::int64_t d = 0; d < full; d += W) {
      Packet kp[dims(T)];
      for (int j = 0; j < T; ++j) kp[j] = ploadu<Packet>(kt + j * ldk + d);
      for (int r = 0; r < R; ++r) {
        const Packet qp = ploadu<Packet>(q + r * ldq + d);
        for (int j = 0; j < T; ++j) acc[r][j] = pmadd(qp, kp[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < T; ++j) {
        Acc s = predux(acc[r][j]);
        for (std::int64_t d = full; d < dim; ++d) s += q[r * ldq + d] * kt[j * ldk + d];
        scores[r * lds + t + j] = s;
      }
  }
  for (; t < n; ++t) {
    // Formed inside the loop: a pointer one row past the last could overflow when the row
    // stride is huge (a legal stride on a dimension the call only reads once).
    const Acc* kt = k + t * ldk;
    Packet acc[dims(R)];
    for (int r = 0; r < R; ++r) acc[r] = pset1<Packet>(Acc(0));
    for (std::int64_t d = 0; d < full; d += W) {
      const Packet kp = ploadu<Packet>(kt + d);
      for (int r = 0; r < R; ++r) acc[r] = pmadd(ploadu<Packet>(q + r * ldq + d), kp, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      Acc s = predux(acc[r]);
      for (std::int64_t d = full; d < dim; ++d) s += q[r * ldq + d] * kt[d];
      scores[r * lds + t] = s;
    }
  }
}

/// out[r * ldo + d] += sum_t p[r * ldp + t] * v[t * ldv + d] for R rows: a chunk of the output
/// block stays in registers while the V rows stream through.
template <class Acc, int R>
inline void pv_row_block(const Acc* p, std::int64_t ldp, const Acc* v, std::int64_t ldv,
                         std::int64_t n, std::int64_t dim, Acc* out, std::int64_t ldo) {
  using Eigen::internal::ploadu;
  using Eigen::internal::pmadd;
  using Eigen::internal::pset1;
  using Eigen::internal::pstoreu;
  using Packet = PacketOf<Acc>;
  constexpr int W = kLanes<Acc>;
  constexpr int C = R >= 8 ? 2 : 4;  // packets per chunk: R * C accumulators
  std::int64_t d0 = 0;
  for (; d0 + C * W <= dim; d0 += C * W) {
    Packet acc[dims(R)][dims(C)];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = ploadu<Packet>(out + r * ldo + d0 + c * W);
    for (std::int64_t t = 0; t < n; ++t) {
      const Acc* vt = v + t * ldv + d0;
      Packet vp[dims(C)];
      for (int c = 0; c < C; ++c) vp[c] = ploadu<Packet>(vt + c * W);
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
      const Packet vp = ploadu<Packet>(v + t * ldv + d0);
      for (int r = 0; r < R; ++r) acc[r] = pmadd(pset1<Packet>(p[r * ldp + t]), vp, acc[r]);
    }
    for (int r = 0; r < R; ++r) pstoreu(out + r * ldo + d0, acc[r]);
  }
  for (; d0 < dim; ++d0)  // scalar tail (head_dim not a multiple of the packet size)
    for (std::int64_t t = 0; t < n; ++t)
      for (int r = 0; r < R; ++r) out[r * ldo + d0] += p[r * ldp + t] * v[t * ldv + d0];
}

/// Any number of rows, in blocks of 8, 4, 2 and 1.
template <class Acc>
inline void qk_rows(const Acc* q, std::int64_t ldq, std::int64_t rows, const Acc* k,
                    std::int64_t ldk, std::int64_t n, std::int64_t dim, Acc* scores,
                    std::int64_t lds) {
  std::int64_t r = 0;
  for (; r + 8 <= rows; r += 8)
    qk_row_block<Acc, 8>(q + r * ldq, ldq, k, ldk, n, dim, scores + r * lds, lds);
  if (r + 4 <= rows) {
    qk_row_block<Acc, 4>(q + r * ldq, ldq, k, ldk, n, dim, scores + r * lds, lds);
    r += 4;
  }
  if (r + 2 <= rows) {
    qk_row_block<Acc, 2>(q + r * ldq, ldq, k, ldk, n, dim, scores + r * lds, lds);
    r += 2;
  }
  if (r < rows) qk_row_block<Acc, 1>(q + r * ldq, ldq, k, ldk, n, dim, scores + r * lds, lds);
}

/// Any number of rows, in blocks of 8, 4, 2 and 1.
template <class Acc>
inline void pv_rows(const Acc* p, std::int64_t ldp, std::int64_t rows, const Acc* v,
                    std::int64_t ldv, std::int64_t n, std::int64_t dim, Acc* out,
                    std::int64_t ldo) {
  std::int64_t r = 0;
  for (; r + 8 <= rows; r += 8)
    pv_row_block<Acc, 8>(p + r * ldp, ldp, v, ldv, n, dim, out + r * ldo, ldo);
  if (r + 4 <= rows) {
    pv_row_block<Acc, 4>(p + r * ldp, ldp, v, ldv, n, dim, out + r * ldo, ldo);
    r += 4;
  }
  if (r + 2 <= rows) {
    pv_row_block<Acc, 2>(p + r * ldp, ldp, v, ldv, n, dim, out + r * ldo, ldo);
    r += 2;
  }
  if (r < rows) pv_row_block<Acc, 1>(p + r * ldp, ldp, v, ldv, n, dim, out + r * ldo, ldo);
}

}  // namespace detail
}  // namespace attnref
