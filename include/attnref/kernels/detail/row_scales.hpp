// SPDX-License-Identifier: Apache-2.0
/// @file row_scales.hpp
/// 8-bit K/V scales factored out of the tile products. With one scale per token (or one per
/// tensor) the scale is the same for a whole K or V row, so the kernels multiply the products
/// instead of every element: a score q . (w * s) becomes (q . w) * s, and a V row's weight p
/// becomes p * s before p * w is summed (flash attention's usual treatment of a per-tensor fp8
/// scale, as FlashInfer's k_scale and v_scale). The value is the same in real arithmetic; only
/// the rounding moves (one rounding per product instead of one per element), and every family
/// stays within its float64-oracle tolerance. Per-element scales, bf16 queries over scaled
/// ragged pages (their dequantized values are rounded to bf16) and non-finite scales are still
/// dequantized element by element: IEEE's classes of inf * 0 and NaN differ between the two
/// orders, and docs/hostile-inputs.md follows the element-wise formula.
#pragma once

#include <cmath>
#include <cstdint>

#include <Eigen/Core>

namespace attnref {
namespace detail {

/// The scales of the tokens of a piece of page rows: token t's at `data[t * ld]` (ld 0: one for
/// all). Empty (`data` null): the rows were dequantized already, or have no scale.
struct RowScales {
  const float* data = nullptr;
  std::int64_t ld = 0;

  explicit operator bool() const noexcept { return data != nullptr; }
  float operator[](std::int64_t t) const noexcept { return data[t * ld]; }

  /// Whether the first n scales are all finite (only then are they factored out).
  bool finite(std::int64_t n) const noexcept {
    if (n <= 0) return true;
    if (ld == 0) return std::isfinite(data[0]);  // one scale for all
    // x * 0 is 0 for a finite x and NaN for an infinite or NaN one, so one vectorised sum
    // answers for all of them (a test and branch per scale was 3.5% of int8 decode).
    using Strided = Eigen::Map<const Eigen::ArrayXf, Eigen::Unaligned, Eigen::InnerStride<>>;
    const float zeros = ld == 1 ? (Eigen::Map<const Eigen::ArrayXf>(data, n) * 0.0f).sum()
                                : (Strided(data, n, Eigen::InnerStride<>(ld)) * 0.0f).sum();
    return zeros == 0.0f;
  }
};

/// tile[r * ld + t] times scales[t] for `rows` rows and n tokens, then divided by 127.5 with
/// `kDivide` (JAX's paged int8, in its order): the scores of a K piece, or the probabilities
/// before a V piece. Vectorised along the tokens (a divide per element would cost a third of the
/// products it follows).
template <bool kDivide>
inline void scale_columns(float* tile, std::int64_t ld, std::int64_t rows, std::int64_t n,
                          const RowScales& scales) {
  constexpr std::int64_t kBlock = 64;
  alignas(64) float block[kBlock];
  for (std::int64_t t0 = 0; t0 < n; t0 += kBlock) {
    const std::int64_t m = n - t0 < kBlock ? n - t0 : kBlock;
    for (std::int64_t t = 0; t < m; ++t) block[t] = scales[t0 + t];
    const Eigen::Map<const Eigen::ArrayXf, Eigen::Aligned64> s(block, m);
    for (std::int64_t r = 0; r < rows; ++r) {
      Eigen::Map<Eigen::ArrayXf> x(tile + r * ld + t0, m);
      if constexpr (kDivide)
        x = (x * s) / 127.5f;
      else
        x *= s;
    }
  }
}

}  // namespace detail
}  // namespace attnref
