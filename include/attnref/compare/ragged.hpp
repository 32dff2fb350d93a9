// SPDX-License-Identifier: Apache-2.0
/// @file compare/ragged.hpp
/// Compares a user's ragged paged attention output (and logsumexp) with attnref's reference and
/// says where it differs and why (compare/report.hpp, compare/hypotheses.hpp). Decode rows
/// (sequences of one query) and prefill rows are localized apart; rows past
/// cu_q_lens[num_seqs] are padding.
///
/// Example:
/// @code
///   attnref::compare::Report r;
///   attnref::Status s = attnref::compare::try_compare_ragged(args, got, {}, {}, &r);
///   if (s.ok() && !r.ok()) std::cerr << attnref::compare::format_report(r);
/// @endcode
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnref/compare/hypotheses.hpp"
#include "attnref/compare/report.hpp"
#include "attnref/core/status.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"

namespace attnref {
namespace compare {

/// The `[max_num_batched_tokens, num_q_heads, head_dim]` output shape of ragged attention.
/// Precondition: `check_ragged(a, ...)` passed.
template <class Q, class KV, class Index>
OutputShape ragged_output_shape(const RaggedPagedAttentionArgs<Q, KV, Index>& a) {
  OutputShape s;
  s.heads = a.num_q_heads();
  s.dim = a.head_dim();
  s.rows.assign(static_cast<std::size_t>(a.max_num_batched_tokens()),
                RowInfo{0, -1, RowKind::kPadding});
  for (std::int64_t i = 0; i < a.num_seqs_count(); ++i) {
    const auto begin = static_cast<std::int64_t>(a.cu_q_lens(i));
    const auto end = static_cast<std::int64_t>(a.cu_q_lens(i + 1));
    const auto kv_len = static_cast<std::int64_t>(a.kv_lens(i));
    const RowKind kind = end - begin == 1 ? RowKind::kDecode : RowKind::kPrefill;
    for (std::int64_t r = begin; r < end; ++r)
      s.rows[static_cast<std::size_t>(r)] = RowInfo{i, kv_len - (end - begin) + (r - begin), kind};
  }
  return s;
}

namespace detail {

/// Sequence i's query length.
template <class Q, class KV, class Index>
std::int64_t ragged_q_len(const RaggedPagedAttentionArgs<Q, KV, Index>& a, std::int64_t i) {
  return static_cast<std::int64_t>(a.cu_q_lens(i + 1)) - static_cast<std::int64_t>(a.cu_q_lens(i));
}

/// What a ragged run has: the common features, the pools' layout, bottom-right causal rows.
template <class Q, class KV, class Index>
Features ragged_features(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                         const std::vector<double>& got_lse) {
  Features f = common_features(a, a.head_dim(), got_lse);
  f.layout = dense_layout(a.k_pages);  // none for JAX's combined pool
  if (f.layout && dense_layout(a.v_pages) != f.layout) f.layout.reset();
  f.layout_inputs = "k_pages/v_pages";
  f.lengths_field = "kv_lens";
  for (std::int64_t i = 0; i < a.num_seqs_count(); ++i) {
    const std::int64_t q_len = ragged_q_len(a, i);
    f.causal_rows = f.causal_rows || (q_len > 0 && q_len < static_cast<std::int64_t>(a.kv_lens(i)));
  }
  f.swap_first = f.layout ? "k_pages" : "kv_pages";
  f.swap_second = f.layout ? "v_pages" : "";
  return f;
}

/// The sequences of a subset as a batch of their own: kv_lens (under a change), cu_q_lens and
/// page tables.
struct RaggedBatch {
  std::vector<std::int64_t> kv_lens, cu{0}, pages;
};

/// The batch of `s`'s sequences under `c`; false with `why` set when a changed kv_len overflows.
template <class Q, class KV, class Index>
bool ragged_batch(const RaggedPagedAttentionArgs<Q, KV, Index>& a, const Change& c, const Subset& s,
                  RaggedBatch* batch, std::string* why) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const std::int64_t pps = a.pages_per_seq();
  batch->kv_lens.resize(static_cast<std::size_t>(n));
  batch->pages.resize(static_cast<std::size_t>(n * pps));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t seq = s.sequences[static_cast<std::size_t>(i)];
    const std::int64_t ql = ragged_q_len(a, seq), kl = static_cast<std::int64_t>(a.kv_lens(seq));
    std::int64_t changed = 0;
    if (!checked_add(kl, c.length_delta, &changed)) {
      *why = "the changed kv_len overflows int64";
      return false;
    }
    batch->kv_lens[static_cast<std::size_t>(i)] = c.top_left ? ql : changed;
    batch->cu.push_back(batch->cu.back() + ql);
    for (std::int64_t j = 0; j < pps; ++j)
      batch->pages[static_cast<std::size_t>(i * pps + j)] =
          static_cast<std::int64_t>(a.page_indices(seq, j));
  }
  return true;
}

/// Query head qh of `s`'s sequences (`batch`) under `c`: its rows of q gathered into `q`, its
/// output into `o` [rows, head_dim] and its logsumexp into `l` [rows].
template <class Q, class KV, class Index>
Status run_ragged_head(const RaggedPagedAttentionArgs<Q, KV, Index>& a, const Change& c,
                       const Subset& s, const RaggedBatch& batch, std::int64_t qh,
                       std::vector<Q>* q, std::vector<Q>* o, std::vector<float>* l) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const std::int64_t dim = a.head_dim(), rows = batch.cu.back();
  const std::vector<std::int64_t>& cu = batch.cu;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto first =
        static_cast<std::int64_t>(a.cu_q_lens(s.sequences[static_cast<std::size_t>(i)]));
    for (std::int64_t j = 0;
         j < cu[static_cast<std::size_t>(i + 1)] - cu[static_cast<std::size_t>(i)]; ++j)
      for (std::int64_t d = 0; d < dim; ++d)
        (*q)[static_cast<std::size_t>((cu[static_cast<std::size_t>(i)] + j) * dim + d)] =
            a.q(first + j, qh, d);
  }
  RaggedPagedAttentionArgs<Q, KV, std::int64_t> b;
  b.q = TensorView<const Q, 3>(q->data(), {rows, 1, dim});
  set_head_pages(a, kv_head_of(c, qh, a.num_q_heads(), a.num_kv_heads()), c, &b);
  b.kv_lens = TensorView<const std::int64_t, 1>(batch.kv_lens.data(), {n});
  b.page_indices = TensorView<const std::int64_t, 2>(batch.pages.data(), {n, a.pages_per_seq()});
  b.cu_q_lens = TensorView<const std::int64_t, 1>(cu.data(), {n + 1});
  b.num_seqs_value = n;
  set_head_options(a, qh, c, &b);
  b.k_scale = c.swap_kv ? a.v_scale : a.k_scale;
  b.v_scale = c.swap_kv ? a.k_scale : a.v_scale;
  return try_ragged_paged_attention(b, TensorView<Q, 3>(o->data(), {rows, 1, dim}),
                                    TensorView<float, 2>(l->data(), {rows, 1}));
}

/// `Predict` for ragged attention: one change over `s`, head by head.
template <class Q, class KV, class Index>
bool predict_ragged(const RaggedPagedAttentionArgs<Q, KV, Index>& a, const Change& c,
                    const Subset& s, std::vector<double>* out, std::vector<double>* lse,
                    std::string* why) {
  const auto n = static_cast<std::int64_t>(s.sequences.size());
  const auto nh = static_cast<std::int64_t>(s.heads.size());
  const std::int64_t dim = a.head_dim();
  RaggedBatch batch;
  if (!ragged_batch(a, c, s, &batch, why)) return false;
  const std::int64_t rows = batch.cu.back();
  if (rows == 0) return false;
  std::vector<Q> q(static_cast<std::size_t>(rows * dim)), o(q.size());
  std::vector<float> l(static_cast<std::size_t>(rows));
  out->assign(static_cast<std::size_t>(rows * nh * dim), 0.0);
  lse->assign(static_cast<std::size_t>(rows * nh), 0.0);
  for (std::int64_t hi = 0; hi < nh; ++hi) {
    const Status st =
        run_ragged_head(a, c, s, batch, s.heads[static_cast<std::size_t>(hi)], &q, &o, &l);
    if (!st.ok()) {
      *why = st.message();
      return false;
    }
    // Into the order (sequence, head, row, dim).
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t c0 = batch.cu[static_cast<std::size_t>(i)],
                         ql = batch.cu[static_cast<std::size_t>(i + 1)] - c0;
      const std::int64_t base = c0 * nh + hi * ql;  // rows of earlier sequences, all heads
      for (std::int64_t j = 0; j < ql; ++j) {
        for (std::int64_t d = 0; d < dim; ++d)
          (*out)[static_cast<std::size_t>((base + j) * dim + d)] =
              value_of(o[static_cast<std::size_t>((c0 + j) * dim + d)]);
        (*lse)[static_cast<std::size_t>(base + j)] = l[static_cast<std::size_t>(c0 + j)];
      }
    }
  }
  return true;
}

}  // namespace detail

/// Compares `got` ([max_num_batched_tokens, num_q_heads, head_dim], C order) and, when not
/// empty, `got_lse` ([max_num_batched_tokens, num_q_heads]) with the reference for `a` and
/// writes the report. Validates `a` (reference profile) and the sizes first; on error `report`
/// is untouched.
/// A call run as an item of a `StoppableExecutor` (an interactive interrupt) returns early once
/// it stops, `report` untouched; under any other executor it runs to the end.
template <class Q, class KV, class Index>
Status try_compare_ragged(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                          const std::vector<double>& got, const std::vector<double>& got_lse,
                          const Options& opt, Report* report) {
  ATTNREF_RETURN_IF_ERROR(check_ragged(a, Profile::kReference));
  const std::int64_t tokens = a.max_num_batched_tokens(), hq = a.num_q_heads();
  const std::int64_t dim = a.head_dim();
  ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got.size(), tokens * hq * dim, "got"));
  if (!got_lse.empty())
    ATTNREF_RETURN_IF_ERROR(detail::check_got_size(got_lse.size(), tokens * hq, "got_lse"));
  std::vector<Q> ref(static_cast<std::size_t>(tokens * hq * dim));
  std::vector<float> ref_lse(static_cast<std::size_t>(tokens * hq));
  ragged_paged_attention_unchecked(a, TensorView<Q, 3>(ref.data(), {tokens, hq, dim}),
                                   TensorView<float, 2>(ref_lse.data(), {tokens, hq}));
  if (attnref::detail::stop_requested()) return Status();  // `ref` is incomplete
  Report r;
  const OutputShape shape = ragged_output_shape(a);
  const RowErrors e = detail::tally_reference(shape, got, ref, got_lse, ref_lse, opt, &r);
  if (r.ok() || r.padding_only) {
    *report = r;
    return Status();
  }
  const Subset subset = pick_subset(
      shape, e,
      [&](std::int64_t i) {
        const std::int64_t keys = saturating_add(static_cast<std::int64_t>(a.kv_lens(i)), 1);
        const std::int64_t rows = std::max<std::int64_t>(detail::ragged_q_len(a, i), 1);
        return saturating_mul(saturating_mul(rows, keys), dim);
      },
      opt, &r);
  const Predict predict = [&](const Change& c, const Subset& s, std::vector<double>* out,
                              std::vector<double>* lse, std::string* why) {
    return detail::predict_ragged(a, c, s, out, lse, why);
  };
  try_changes(candidate_changes(detail::ragged_features(a, got_lse)), shape, subset, got, got_lse,
              opt, predict, &r);
  if (!attnref::detail::stop_requested()) *report = r;
  return Status();
}

}  // namespace compare
}  // namespace attnref
