// SPDX-License-Identifier: Apache-2.0
/// @file online_softmax.hpp
/// The running state of a softmax over KV tiles for a block of query rows (flash-attention's
/// online softmax): per row the running max m, the running sum l and an unnormalised output o.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

namespace attnref {
namespace detail {

template <class Acc>
using RowMajorMatrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Online-softmax state of `rows` query rows with value dimension `dim_v`.
template <class Acc>
struct OnlineSoftmax {
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> m;  ///< [rows] running max of the logits
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> l;  ///< [rows] running sum of exp(logit - m)
  RowMajorMatrix<Acc> o;                    ///< [rows, dim_v] running sum of exp(logit - m) * v

  void reset(std::int64_t rows, std::int64_t dim_v) {
    m.setConstant(rows, -std::numeric_limits<Acc>::infinity());
    l.setZero(rows);
    o.setZero(rows, dim_v);
  }

  /// Folds one tile of logits `scores` [rows, n] into the state: exponentiates them in place
  /// (scores become probabilities relative to the new max) and rescales the old sums.
  /// Entries equal to -inf are masked out. Returns nothing; the caller then adds
  /// `scores * V_tile` to `o`.
  template <class Scores>
  void rescale_and_exponentiate(Scores& scores) {
    for (Eigen::Index r = 0; r < scores.rows(); ++r) {
      const Acc tile_max = scores.row(r).maxCoeff();
      const Acc new_max = tile_max > m[r] ? tile_max : m[r];
      if (new_max == -std::numeric_limits<Acc>::infinity()) {  // nothing allowed yet
        scores.row(r).setZero();
        continue;
      }
      const Acc alpha = std::exp(m[r] - new_max);  // exp(-inf) = 0 on the first tile
      scores.row(r) = (scores.row(r).array() - new_max).exp().matrix();
      l[r] = l[r] * alpha + scores.row(r).sum();
      o.row(r) *= alpha;
      m[r] = new_max;
    }
  }
};

}  // namespace detail
}  // namespace attnref
