// SPDX-License-Identifier: Apache-2.0
/// @file merge_attention_states.hpp
/// Merging attention states: two results (out, logsumexp) of the same query rows over disjoint
/// key sets A and B give the exact result over A ∪ B (the split-KV / flash-decoding reduction,
/// cascade attention over a shared prefix and a private suffix). Per row and head:
///
///   m = max(lse_a, lse_b),  w_a = exp(lse_a - m),  w_b = exp(lse_b - m),
///   out = (w_a out_a + w_b out_b) / (w_a + w_b),  lse = m + log(w_a + w_b).
///
/// A state with lse -inf saw no key: it adds nothing and its out row is not read, so merging it
/// with another gives that other exactly; both -inf give a zero row and -inf. A NaN lse gives a
/// NaN row and NaN lse (bad data is not hidden); so does +inf (an overflowed state). The weights
/// and sums are taken in f32 (f64 for double states); lse is f32 as every kernel writes it.
///
/// An output may be its input exactly (the same view: merging in place), or apart from every
/// input; a partial overlap is refused (`kOverlappingOutput`). The arguments and their checks
/// (`MergeStatesArgs`, `check_merge_inputs`, `check_merge_states`, `validate_merge`) are in
/// validate/merge.hpp.
///
/// Example (in place: the second half of the keys merged into the first half's result):
/// @code
///   attnref::MergeStatesArgs<float> m;
///   m.out_a = {out_a.data(), {batch, heads, dim}};   // e.g. paged attention over keys [0, t)
///   m.lse_a = {lse_a.data(), {batch, heads}};
///   m.out_b = {out_b.data(), {batch, heads, dim}};   // ... and over keys [t, length)
///   m.lse_b = {lse_b.data(), {batch, heads}};
///   attnref::TensorView<float, 3> out(out_a.data(), {batch, heads, dim});  // a's own views
///   attnref::TensorView<float, 2> lse(lse_a.data(), {batch, heads});
///   attnref::merge_attention_states(m, out, lse);  // throws on invalid views
/// @endcode
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/executor_arg.hpp"
#include "attnref/kernels/detail/online_softmax.hpp"
#include "attnref/validate/merge.hpp"

namespace attnref {

namespace detail {

/// One partial softmax state of a row over some keys: running max `m`, sum `l` of
/// exp(logit - m) and the unnormalised output `o` [dim] (sum of exp(logit - m) v). A normalised
/// result (out, lse) is the state (lse, 1, out). An `empty` state saw no key (no logit at all):
/// it adds nothing and its `o` is not read. A state that saw keys whose logits were all -inf
/// (only an infinite input makes one) is not empty: the merged row is NaN (the rule of
/// docs/hostile-inputs.md, "NaN and Inf in live inputs").
template <class Acc>
struct PartialState {
  Acc m;
  Acc l;
  const Acc* o;
  bool empty;
};

/// The merged running max and sum of `merge_partial_states`, and whether any state saw a key.
template <class Acc>
struct MergedState {
  Acc m;
  Acc l;
  bool has_logits;

  Acc inverse_sum() const noexcept { return detail::inverse_sum(m, l, has_logits); }
  float logsumexp() const noexcept { return detail::logsumexp_of(m, l, has_logits); }
};

/// Merges `count` partial states `partial(s)` of one row over disjoint key sets into `o` [dim]
/// (unnormalised, relative to the returned max) and returns the merged (m, l): the paged
/// kernel's split-KV reduction and `merge_attention_states`. Empty states are skipped; a NaN
/// max makes the result NaN (std::max would drop it), and so does a non-finite merged max of
/// states that saw keys (+inf, or all -inf).
template <class Acc, class PartialAt>
MergedState<Acc> merge_partial_states(std::int64_t count, std::int64_t dim, PartialAt&& partial,
                                      Acc* o) {
  MergedState<Acc> r{-std::numeric_limits<Acc>::infinity(), Acc(0), false};
  for (std::int64_t s = 0; s < count; ++s) {
    const PartialState<Acc> p = partial(s);
    if (p.empty) continue;
    r.has_logits = true;
    r.m = max_or_nan(r.m, p.m);
  }
  std::fill(o, o + dim, Acc(0));
  if (!std::isfinite(r.m)) return r;  // no key, or a NaN row: o is not used
  for (std::int64_t s = 0; s < count; ++s) {
    const PartialState<Acc> p = partial(s);
    if (p.empty) continue;
    const Acc w = std::exp(p.m - r.m);  // 0 for an all -inf split
    r.l += w * p.l;
    for (std::int64_t d = 0; d < dim; ++d) o[d] += w * p.o[d];
  }
  return r;
}

/// The unchecked merge: `merge_attention_states_unchecked`'s body (see there).
template <class T, class Executor>
void merge_run(const MergeStatesArgs<T>& a, const TensorView<T, 3>& out,
               const TensorView<float, 2>& lse, Executor&& executor) {
  using Acc = AccumulatorOf<T, T>;
  const std::int64_t heads = a.heads(), dim = a.head_dim();
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  // Nothing to write (no heads, or head_dim 0 and no lse): return before anything is sized or
  // walked by extents that no element backs (head_dim 2^40 with no heads; 2^40 rows of
  // broadcast logsumexps with head_dim 0). Past this, `out` or `lse` holds distinct elements
  // for every row and head, and `out` for every d.
  if (heads == 0 || (dim == 0 && lse.empty_view())) return;
  executor.parallel_for(a.rows(), [&](std::int64_t n) {
    thread_local std::vector<Acc> row_a_buf, row_b_buf, merged_buf;
    row_a_buf.resize(static_cast<size_t>(dim));
    row_b_buf.resize(static_cast<size_t>(dim));
    merged_buf.resize(static_cast<size_t>(dim));
    Acc* row_a = row_a_buf.data();
    Acc* row_b = row_b_buf.data();
    Acc* merged = merged_buf.data();
    for (std::int64_t h = 0; h < heads; ++h) {
      const Acc la = static_cast<Acc>(a.lse_a(n, h)), lb = static_cast<Acc>(a.lse_b(n, h));
      // Read every input of (n, h) before writing: `out` or `lse` may be an input's own view.
      if (la != neg_inf)
        for (std::int64_t d = 0; d < dim; ++d) row_a[d] = load_as<Acc>(a.out_a(n, h, d));
      if (lb != neg_inf)
        for (std::int64_t d = 0; d < dim; ++d) row_b[d] = load_as<Acc>(a.out_b(n, h, d));
      // The state of the larger lse first (its weight is exactly 1): merging (a, b) and (b, a)
      // then add the same terms in the same order, bit for bit, even where the compiler fuses
      // a product and a sum into one FMA (x86-64-v3 and up).
      const PartialState<Acc> sa{la, Acc(1), row_a, la == neg_inf};
      const PartialState<Acc> sb{lb, Acc(1), row_b, lb == neg_inf};
      const bool b_first = lb > la;
      const PartialState<Acc> states[2] = {b_first ? sb : sa, b_first ? sa : sb};
      const MergedState<Acc> m = merge_partial_states<Acc>(
          2, dim, [&](std::int64_t s) { return states[s]; }, merged);
      // Both empty: 0 and -inf; a NaN or +inf lse: NaN; else l is in [1, 2].
      const Acc inv = m.inverse_sum();
      for (std::int64_t d = 0; d < dim; ++d) out(n, h, d) = store_as<T>(merged[d] * inv);
      if (!lse.empty_view()) lse(n, h) = m.logsumexp();
    }
  });
}

}  // namespace detail

/// Merges without validating. Precondition: `check_merge_states(args, out, lse).ok()`. Writes
/// `out` [rows, heads, head_dim] and, when not empty, `lse` [rows, heads]; rows run on
/// `executor` (the result does not depend on it).
template <class T, class Executor = SerialExecutor>
void merge_attention_states_unchecked(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                                      TensorView<float, 2> lse = {},
                                      Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  detail::merge_run(a, out, lse, executor);
}

/// `merge_attention_states_unchecked(args, out, {}, executor)`.
template <class T, class Executor, detail::EnableIfExecutor<Executor> = 0>
void merge_attention_states_unchecked(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                                      Executor&& executor) {
  merge_attention_states_unchecked(a, out, TensorView<float, 2>{},
                                   std::forward<Executor>(executor));
}

/// Validates (`check_merge_states`), then merges. Returns the first error without touching
/// `out` or `lse`.
template <class T, class Executor = SerialExecutor>
Status try_merge_attention_states(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                                  TensorView<float, 2> lse = {}, Executor&& executor = Executor{}) {
  detail::assert_executor<Executor>();
  ATTNREF_RETURN_IF_ERROR(check_merge_states(a, out, lse));
  detail::merge_run(a, out, lse, executor);
  return Status();
}

/// `try_merge_attention_states(args, out, {}, executor)`.
template <class T, class Executor, detail::EnableIfExecutor<Executor> = 0>
Status try_merge_attention_states(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                                  Executor&& executor) {
  return try_merge_attention_states(a, out, TensorView<float, 2>{},
                                    std::forward<Executor>(executor));
}

/// Validates, then merges; throws `ShapeError` (or calls the error handler) on invalid input.
template <class T, class Executor = SerialExecutor>
void merge_attention_states(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                            TensorView<float, 2> lse = {}, Executor&& executor = Executor{}) {
  throw_if_error(try_merge_attention_states(a, out, lse, std::forward<Executor>(executor)));
}

/// `merge_attention_states(args, out, {}, executor)`.
template <class T, class Executor, detail::EnableIfExecutor<Executor> = 0>
void merge_attention_states(const MergeStatesArgs<T>& a, TensorView<T, 3> out,
                            Executor&& executor) {
  throw_if_error(
      try_merge_attention_states(a, out, TensorView<float, 2>{}, std::forward<Executor>(executor)));
}

}  // namespace attnref
