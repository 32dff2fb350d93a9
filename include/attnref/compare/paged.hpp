// SPDX-License-Identifier: Apache-2.0
/// @file compare/paged.hpp
/// Compares a user's paged attention output (and logsumexp) with attnref's reference and says
/// where it differs and why (compare/report.hpp, compare/hypotheses.hpp).
///
/// Example:
/// @code
///   attnref::compare::Report r;
///   attnref::Status s = attnref::compare::try_compare_paged(args, got, {}, {}, &r);
///   if (s.ok() && !r.ok()) std::cerr << attnref::compare::format_report(r);
/// @endcode
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnref/compare/hypotheses.hpp"
#include "attnref/compare/report.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/paged.hpp"

namespace attnref {
namespace compare {
/// The `[batch, num_q_heads, head_dim_v]` output shape of paged attention: one decode row per
/// sequence; a sequence of length 0 is a padding row.
template <class Q, class KV, class Index>
OutputShape paged_output_shape(const PagedAttentionArgs<Q, KV, Index>& a) {
  OutputShape s;
  s.heads = a.num_q_heads();
  s.dim = a.head_dim_v();
  for (std::int64_t b = 0; b < a.batch(); ++b) {
    const auto len = static_cast<std::int64_t>(a.lengths(b));
    s.rows.push_back({b, len - 1, len == 0 ? RowKind::kPadding : RowKind::kPlain});
  }
  return s;
}

namespace detail {

/// What a paged run has: the common features, the pools' layout (none with scales: those have
/// their own), K and V swappable when equally wide.
template <class Q, class KV, class Index>
Features paged_features(const PagedAttentionArgs<Q, KV, Index>& a,
                        const std::vector<double>& got_lse) {
  Features f = common_features(a, a.head_dim(), got_lse);
  f.layout = dense_layout(a.k_pages);
  if (f.layout && dense_layout(a.v_pages) != f.layout) f.layout.reset();
  if (!a.k_scales.empty_view()) f.layout.reset();  // int8 always; fp8 optionally
  f.layout_inputs = "k_pages/v_pages";
  f.lengths_field = "lengths";
  // K and V of different widths cannot swap (MLA).
  f.swap_first = a.head_dim_v() == a.head_dim() ? "k_pages" : "";
  f.swap_second = "v_pages";
  f.swap_scales = true;
  return f;
}

/// The sequences of a subset as a batch of their own: lengths (under a change) and page tables.
struct PagedBatch {
  std::vector<std::int64_t> lengths, pages;
};

/// The batch of `s`'s sequences under `c`; false with `why` set when a changed length overflows.
template <class Q, class KV, class Index>
bool paged_batch(const PagedAttentionArgs<Q, KV, Index>& a, const Change& c, const Subset& s,
                 PagedBatch* batch, std::string* why) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const std::int64_t pps = a.pages_per_sequence();
  batch->lengths.resize(static_cast<std::size_t>(n));
  batch->pages.resize(static_cast<std::size_t>(n * pps));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = s.sequences[static_cast<std::size_t>(i)];
    const auto len = static_cast<std::int64_t>(a.lengths(b));
    std::int64_t changed = 0;
    if (!checked_add(len, c.length_delta, &changed)) {
      *why = "the changed length overflows int64";
      return false;
    }
    batch->lengths[static_cast<std::size_t>(i)] = len == 0 ? 0 : changed;
    for (std::int64_t j = 0; j < pps; ++j)
      batch->pages[static_cast<std::size_t>(i * pps + j)] =
          static_cast<std::int64_t>(a.page_indices(b, j));
  }
  return true;
}

/// Query head qh of `s`'s sequences (`batch`) under `c`: its rows of q gathered into `q`, its
/// output into `o` [n, head_dim_v] and its logsumexp into `l` [n].
template <class Q, class KV, class Index>
Status run_paged_head(const PagedAttentionArgs<Q, KV, Index>& a, const Change& c, const Subset& s,
                      const PagedBatch& batch, std::int64_t qh, std::vector<Q>* q,
                      std::vector<Q>* o, std::vector<float>* l) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const std::int64_t dim = a.head_dim(), dv = a.head_dim_v();
  const std::int64_t kv_head = kv_head_of(c, qh, a.num_q_heads(), a.num_kv_heads());
  PagedAttentionArgs<Q, KV, std::int64_t> b;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t d = 0; d < dim; ++d)
      (*q)[static_cast<std::size_t>(i * dim + d)] =
          a.q(s.sequences[static_cast<std::size_t>(i)], qh, d);
  b.q = TensorView<const Q, 3>(q->data(), {n, 1, dim});
  set_head_pages(a, kv_head, c, &b);
  if (!a.k_scales.empty_view()) {
    b.k_scales = one_head(c.swap_kv ? a.v_scales : a.k_scales, kv_head);
    b.v_scales = one_head(c.swap_kv ? a.k_scales : a.v_scales, kv_head);
  }
  b.lengths = TensorView<const std::int64_t, 1>(batch.lengths.data(), {n});
  b.page_indices =
      TensorView<const std::int64_t, 2>(batch.pages.data(), {n, a.pages_per_sequence()});
  b.round_kv_to_bf16 = a.round_kv_to_bf16;
  set_head_options(a, qh, c, &b);
  return try_paged_attention(b, TensorView<Q, 3>(o->data(), {n, 1, dv}),
                             TensorView<float, 2>(l->data(), {n, 1}));
}

/// `Predict` for paged attention: one change over `s`, head by head.
template <class Q, class KV, class Index>
bool predict_paged(const PagedAttentionArgs<Q, KV, Index>& a, const Change& c, const Subset& s,
                   std::vector<double>* out, std::vector<double>* lse, std::string* why) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const auto nh = static_cast<std::int64_t>(s.heads.size());
  const std::int64_t dim = a.head_dim(), dv = a.head_dim_v();
  PagedBatch batch;
  if (!paged_batch(a, c, s, &batch, why)) return false;
  std::vector<Q> q(static_cast<std::size_t>(n * dim)), o(static_cast<std::size_t>(n * dv));
  std::vector<float> l(static_cast<std::size_t>(n));
  out->assign(static_cast<std::size_t>(n * nh * dv), 0.0);
  lse->assign(static_cast<std::size_t>(n * nh), 0.0);
  for (std::int64_t hi = 0; hi < nh; ++hi) {
    const Status st =
        run_paged_head(a, c, s, batch, s.heads[static_cast<std::size_t>(hi)], &q, &o, &l);
    if (!st.ok()) {
      *why = st.message();
      return false;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t d = 0; d < dv; ++d)
        (*out)[static_cast<std::size_t>((i * nh + hi) * dv + d)] =
            value_of(o[static_cast<std::size_t>(i * dv + d)]);
      (*lse)[static_cast<std::size_t>(i * nh + hi)] = l[static_cast<std::size_t>(i)];
    }
  }
  return true;
}

}  // namespace detail

/// Compares `got` ([batch, num_q_heads, head_dim_v], C order) and, when not empty, `got_lse`
/// ([batch, num_q_heads]) with the reference for `a` and writes the report. Validates `a`
/// (reference profile) and the sizes first; on error `report` is untouched.
/// A call run as an item of a `StoppableExecutor` (an interactive interrupt) returns early once
/// it stops, `report` untouched; under any other executor it runs to the end.
template <class Q, class KV, class Index>
Status try_compare_paged(const PagedAttentionArgs<Q, KV, Index>& a, const std::vector<double>& got,
                         const std::vector<double>& got_lse, const Options& opt, Report* report) {
  ATTNREF_RETURN_IF_ERROR(check_paged(a, Profile::kReference));
  const std::int64_t batch = a.batch(), hq = a.num_q_heads(), dim = a.head_dim();
  const std::int64_t dv = a.head_dim_v();  // the output's; q's and K's is dim
  ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got.size(), batch * hq * dv, "got"));
  if (!got_lse.empty())
    ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got_lse.size(), batch * hq, "got_lse"));
  std::vector<Q> ref(static_cast<std::size_t>(batch * hq * dv));
  std::vector<float> ref_lse(static_cast<std::size_t>(batch * hq));
  paged_attention_unchecked(a, TensorView<Q, 3>(ref.data(), {batch, hq, dv}),
                            TensorView<float, 2>(ref_lse.data(), {batch, hq}));
  if (attnref::detail::stop_requested()) return Status();  // `ref` is incomplete
  Report r;
  const OutputShape shape = paged_output_shape(a);
  const RowErrors e = detail::tally_reference(shape, got, ref, got_lse, ref_lse, opt, &r);
  if (r.ok() || r.padding_only) {
    *report = r;
    return Status();
  }
  const Subset subset = pick_subset(
      shape, e,
      [&](std::int64_t b) {
        return saturating_mul(saturating_add(static_cast<std::int64_t>(a.lengths(b)), 1), dim);
      },
      opt, &r);
  const Predict predict = [&](const Change& c, const Subset& s, std::vector<double>* out,
                              std::vector<double>* lse, std::string* why) {
    return detail::predict_paged(a, c, s, out, lse, why);
  };
  try_changes(candidate_changes(detail::paged_features(a, got_lse)), shape, subset, got, got_lse,
              opt, predict, &r);
  if (!attnref::detail::stop_requested()) *report = r;
  return Status();
}

}  // namespace compare
}  // namespace attnref
