// SPDX-License-Identifier: Apache-2.0
/// @file paged_attention.hpp
/// Paged attention (decode), the reference kernel. One query token per sequence; K/V live in
/// fixed-size pages behind a page table; grouped-query attention.
///
/// out[b, qh, :] = sum_{t < lengths[b]} softmax_t(cap(sm_scale * q[b, qh] . k_t)) v_t,
/// with k_t = k_pages[kv_head_of(qh), page_indices[b, t / S], t % S, :], cap(x) = c tanh(x / c)
/// when a soft cap c is set, and a zero row when lengths[b] == 0.
///
/// The grouped-head inner loop: for each (sequence, KV head) the G query heads sharing the KV
/// head are processed together, page by page, with an online softmax, so every K/V page is read
/// once per group. Nothing past `lengths[b]` is read: not the rest of the last page, not the
/// unused pages.
///
/// Example:
/// @code
///   attnref::PagedAttentionArgs<float> args;  // q, k_pages, v_pages, lengths, page_indices
///   ...
///   std::vector<float> out_buf(batch * num_q_heads * head_dim);
///   attnref::TensorView<float, 3> out(out_buf.data(), {batch, num_q_heads, head_dim});
///   attnref::paged_attention(args, out);  // validates (reference profile), then runs
/// @endcode
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/online_softmax.hpp"
#include "attnref/validate/paged.hpp"

namespace attnref {
namespace detail {

template <class Acc>
using ConstTile = Eigen::Map<const RowMajorMatrix<Acc>, Eigen::Unaligned, Eigen::OuterStride<>>;

/// The first `rows` token rows of page `page` of KV head `head`, as an Acc matrix [rows, D].
/// Float pages already in Acc with unit dim stride are mapped in place; anything else (other
/// dtypes, int8 dequantization, bf16 rounding, strided dims) is converted into `scratch`.
template <class Acc, class KV>
ConstTile<Acc> page_tile(const TensorView<const KV, 4>& pages,
                         const TensorView<const float, 4>& scales, std::int64_t head,
                         std::int64_t page, std::int64_t rows, bool round_to_bf16_first,
                         RowMajorMatrix<Acc>& scratch) {
  const std::int64_t dim = pages.extents[3];
  const KV* base = pages.data + head * pages.strides[0] + page * pages.strides[1];
  if constexpr (std::is_same<KV, Acc>::value) {
    if (!round_to_bf16_first && pages.strides[3] == 1)
      return ConstTile<Acc>(base, rows, dim, Eigen::OuterStride<>(pages.strides[2]));
  }
  for (std::int64_t t = 0; t < rows; ++t) {
    const KV* row = base + t * pages.strides[2];
    for (std::int64_t d = 0; d < dim; ++d) {
      const KV w = row[d * pages.strides[3]];
      Acc x;
      if constexpr (std::is_same<KV, std::int8_t>::value) {
        const std::int64_t sd = scales.extents[3] == 1 ? 0 : d;
        x = static_cast<Acc>(dequantize_int8(w, scales(head, page, t, sd)));
      } else {
        x = load_as<Acc>(w);
        if (round_to_bf16_first) x = static_cast<Acc>(round_to_bf16(static_cast<float>(x)));
      }
      scratch(t, d) = x;
    }
  }
  return ConstTile<Acc>(scratch.data(), rows, dim, Eigen::OuterStride<>(scratch.cols()));
}

/// Scores of a block of query rows against a tile: scores[r, t] = cap(sm_scale * q_r . k_t).
template <class Acc, class QBlock, class Tile, class Scores>
void tile_scores(const QBlock& q, const Tile& k, Acc sm_scale, const std::optional<float>& cap,
                 Scores& scores) {
  for (Eigen::Index t = 0; t < k.rows(); ++t)
    for (Eigen::Index r = 0; r < q.rows(); ++r) scores(r, t) = q.row(r).dot(k.row(t)) * sm_scale;
  if (cap) {
    const Acc c = static_cast<Acc>(*cap);
    scores = (c * (scores.array() / c).tanh()).matrix();
  }
}

/// out_rows += probabilities [rows, n] * v [n, Dv], one V row at a time so each row is loaded
/// once for the whole block of query rows.
template <class Probs, class Tile, class Out>
void accumulate_values(const Probs& p, const Tile& v, Out& o) {
  for (Eigen::Index t = 0; t < v.rows(); ++t)
    for (Eigen::Index r = 0; r < p.rows(); ++r) o.row(r) += p(r, t) * v.row(t);
}

}  // namespace detail

/// Runs paged attention without validating. Precondition: `check_paged(args, profile).ok()` for
/// some profile, and `out` a valid `[batch, num_q_heads, head_dim]` view (see
/// `check_paged_output`). Use it to validate once and run many times.
template <class Q, class KV, class Index>
void paged_attention_unchecked(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out) {
  using Acc = detail::AccumulatorOf<Q, KV>;
  const std::int64_t num_kv_heads = a.num_kv_heads();
  const std::int64_t group = group_size(a.num_q_heads(), num_kv_heads);
  const std::int64_t dim = a.head_dim();
  const std::int64_t page_size = a.page_size();
  const bool round_kv = a.round_kv_to_bf16 && !PagedAttentionArgs<Q, KV, Index>::kQuantized;
  const Acc sm_scale = static_cast<Acc>(a.sm_scale);

  // Scratch sized by one group and one page, never by the cache.
  detail::RowMajorMatrix<Acc> q_block(group, dim), scores(group, page_size);
  detail::RowMajorMatrix<Acc> k_scratch(page_size, dim), v_scratch(page_size, dim);
  detail::OnlineSoftmax<Acc> state;

  for (std::int64_t b = 0; b < a.batch(); ++b) {
    const std::int64_t length = a.lengths(b);
    for (std::int64_t h = 0; h < num_kv_heads; ++h) {
      const std::int64_t first_q_head = h * group;  // query heads [h*G, (h+1)*G) read KV head h
      for (std::int64_t g = 0; g < group; ++g)
        for (std::int64_t d = 0; d < dim; ++d)
          q_block(g, d) = detail::load_as<Acc>(a.q(b, first_q_head + g, d));
      state.reset(group, dim);
      for (std::int64_t j = 0; j * page_size < length; ++j) {
        const std::int64_t page = a.page_indices(b, j);
        const std::int64_t rows = std::min(page_size, length - j * page_size);
        const auto k = detail::page_tile<Acc>(a.k_pages, a.k_scales, h, page, rows, round_kv,
                                              k_scratch);
        auto s = scores.leftCols(rows);
        detail::tile_scores<Acc>(q_block, k, sm_scale, a.soft_cap, s);
        state.rescale_and_exponentiate(s);
        const auto v = detail::page_tile<Acc>(a.v_pages, a.v_scales, h, page, rows, round_kv,
                                              v_scratch);
        detail::accumulate_values(s, v, state.o);
      }
      state.finish([&](Eigen::Index g, Eigen::Index d, Acc value) {
        out(b, first_q_head + g, d) = detail::store_as<Q>(value);
      });
    }
  }
}

/// Checks that `out` is a valid, writable `[batch, num_q_heads, head_dim]` view.
template <class Q, class KV, class Index>
Status check_paged_output(const PagedAttentionArgs<Q, KV, Index>& a, const TensorView<Q, 3>& out) {
  ATTNREF_RETURN_IF_ERROR(check_view(out, "out"));
  if (!detail::same_extents(out.extents, a.q.extents)) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "out has shape ({0}, {1}, {2}); expected q's shape ({3}, {4}, {5})",
                  "the output is [batch, num_q_heads, head_dim] like q",
                  {out.extents[0], out.extents[1], out.extents[2], a.q.extents[0], a.q.extents[1],
                   a.q.extents[2]},
                  {}, "out");
  }
  return Status();
}

/// Validates with `Profile::kReference` (shapes, metadata, output view), then runs. Returns the
/// first error without touching `out`.
template <class Q, class KV, class Index>
Status try_paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out) {
  ATTNREF_RETURN_IF_ERROR(check_paged(a, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(check_paged_output(a, out));
  paged_attention_unchecked(a, out);
  return Status();
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Index>
void paged_attention(const PagedAttentionArgs<Q, KV, Index>& a, TensorView<Q, 3> out) {
  throw_if_error(try_paged_attention(a, out));
}

}  // namespace attnref
