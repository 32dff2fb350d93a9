// SPDX-License-Identifier: Apache-2.0
// The float64 oracle of merging two attention states (out, logsumexp) of the same query rows
// over disjoint key sets, written from the definition: the union's softmax weights are each
// part's exp(lse) share, so out = (e^lse_a out_a + e^lse_b out_b) / (e^lse_a + e^lse_b) and
// lse = log(e^lse_a + e^lse_b), taken about the larger lse so neither exponential overflows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace attnref {
namespace reference {

/// A state of `rows` (query rows times heads) rows of `dim` values, in C order.
struct MergeState {
  std::vector<double> out;  ///< [rows, dim]
  std::vector<double> lse;  ///< [rows]
};

/// `a` merged with `b` row by row. A part with lse -inf saw no key and adds nothing (its out is
/// never read); both -inf give a zero row and -inf. A NaN or +inf lse gives a NaN row and lse.
inline MergeState merge_states(const MergeState& a, const MergeState& b, std::int64_t dim) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  MergeState m{std::vector<double>(a.out.size(), 0.0), std::vector<double>(a.lse.size(), -inf)};
  for (std::size_t r = 0; r < a.lse.size(); ++r) {
    const double la = a.lse[r], lb = b.lse[r];
    const auto row = [&](const MergeState& s, std::int64_t d) {
      return s.out[r * static_cast<std::size_t>(dim) + static_cast<std::size_t>(d)];
    };
    double* out = &m.out[r * static_cast<std::size_t>(dim)];
    if (std::isnan(la) || std::isnan(lb) || la == inf || lb == inf) {
      m.lse[r] = nan;
      for (std::int64_t d = 0; d < dim; ++d) out[d] = nan;
      continue;
    }
    if (la == -inf && lb == -inf) continue;
    const double top = std::max(la, lb);
    const double wa = la == -inf ? 0.0 : std::exp(la - top);
    const double wb = lb == -inf ? 0.0 : std::exp(lb - top);
    for (std::int64_t d = 0; d < dim; ++d) {
      const double va = wa == 0.0 ? 0.0 : wa * row(a, d);
      const double vb = wb == 0.0 ? 0.0 : wb * row(b, d);
      out[d] = (va + vb) / (wa + wb);
    }
    m.lse[r] = top + std::log(wa + wb);
  }
  return m;
}

}  // namespace reference
}  // namespace attnref
