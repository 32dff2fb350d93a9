// SPDX-License-Identifier: Apache-2.0
/// @file paged.hpp
/// Paged attention (decode) from arrays and options: the one builder of `PagedAttentionArgs`
/// that attnref-run and the Python module share. The front end fills `PagedInputs`; then
/// `check_paged_ranks` and `check_paged_dtypes` (before any element is read),
/// `with_paged_args` (the args over the caller's index arrays, in their own dtype, with JAX's
/// order of checks), `check_paged_call` (the tiers the options ask for) and
/// `with_paged_run_args` (validated, then the index arrays widened to int64 for the kernel).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "array.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/validate/paged.hpp"
#include "options.hpp"

namespace attnref {
namespace frontend {

/// The arrays and options of one paged call.
struct PagedInputs {
  Array q, k_pages, v_pages, lengths, page_indices, k_scales, v_scales;
  KvLayout layout = KvLayout::kJax;
  CommonOptions common;
  std::int64_t pages_per_compute_block = 1;
  MegacoreMode megacore_mode = MegacoreMode::kNone;
  bool round_kv_to_bf16 = false;
  std::optional<std::int64_t> sliding_window;
  HeadValues sinks, alibi_slopes;
};

/// The front end's words for shapes that depend on how it names the layout option.
struct PagedHints {
  const char* pages;    ///< "pages are [...] (kv_layout='jax'), ..."
  const char* scales;   ///< "scales are ..."
  const char* q_dtype;  ///< the query dtypes and how to pass a bfloat16 one
};

/// JAX's megacore_mode from its name. Any other name is JAX's P10 in every profile, raised as
/// the option is read (JAX names the accepted values whatever the inputs); `hint` says how the
/// front end spells "none".
inline MegacoreMode megacore_mode_from_name(const std::string& name, const char* hint) {
  if (name == "kv_head") return MegacoreMode::kKvHead;
  if (name == "batch") return MegacoreMode::kBatch;
  raise_if_error(Status(ErrorCode::kInvalidMegacoreMode, "P10",
                        "megacore_mode must be one of ['kv_head', 'batch', None]", hint));
  return MegacoreMode::kNone;
}

/// True when lengths is `[batch, n]` with q's batch: JAX compares its shape with `(batch,)`
/// after P1..P4, so this is reported in JAX's order (its P5) by `with_paged_args`.
inline bool lengths_rank_in_jax_order(const PagedInputs& in) {
  return in.lengths.rank() == 2 && in.q.rank() == 3 && in.lengths.shape[0] == in.q.shape[0];
}

/// Ranks, as JAX unpacks its shapes before its checks.
inline void check_paged_ranks(const PagedInputs& in, const PagedHints& hints) {
  raise_if_error(check_rank(in.q, 3, "q is [batch, num_q_heads, head_dim]"));
  raise_if_error(check_rank(in.k_pages, 4, hints.pages));
  raise_if_error(check_rank(in.v_pages, 4, hints.pages));
  if (!lengths_rank_in_jax_order(in))
    raise_if_error(check_rank(in.lengths, 1, "lengths is [batch]"));
  raise_if_error(check_rank(in.page_indices, 2, "page_indices is [batch, pages_per_sequence]"));
  for (const Array* s : {&in.k_scales, &in.v_scales})
    if (s->present()) raise_if_error(check_rank(*s, 4, hints.scales));
}

/// Element types: q's, the (q, K/V) pair of core/kv_dtypes.hpp, float32 scales.
inline void check_paged_dtypes(const PagedInputs& in, const PagedHints& hints) {
  if (!query_dtype_supported(in.q.dtype)) raise_if_error(dtype_error(in.q, hints.q_dtype));
  raise_if_error(check_kv_dtypes(in.q.dtype, in.k_pages.dtype, in.v_pages.dtype));
  for (const Array* s : {&in.k_scales, &in.v_scales}) {
    if (s->present() && s->dtype != DType::kFloat32)
      raise_if_error(dtype_error(*s, "dequantization scales must be float32"));
  }
}

/// The args over `in` but its lengths and page table, which the caller sets.
template <class Q, class KV, class Index>
PagedAttentionArgs<Q, KV, Index> paged_args_without_indices(const PagedInputs& in) {
  PagedAttentionArgs<Q, KV, Index> a;
  a.q = view_of<Q, 3>(in.q);
  a.k_pages = layout_view<KV>(in.k_pages, in.layout);
  a.v_pages = layout_view<KV>(in.v_pages, in.layout);
  if (in.k_scales.present()) a.k_scales = layout_view<float>(in.k_scales, in.layout);
  if (in.v_scales.present()) a.v_scales = layout_view<float>(in.v_scales, in.layout);
  set_shared_options(in, a);
  a.pages_per_compute_block = in.pages_per_compute_block;
  a.megacore_mode = in.megacore_mode;
  a.round_kv_to_bf16 = in.round_kv_to_bf16;
  return a;
}

/// The shape tier over int32 stand-ins of the index arrays (extents only; `lengths_extent`
/// entries of lengths): what JAX reports before its index checks still comes first.
template <class Q, class KV>
Status paged_stand_in_shapes(const PagedInputs& in, std::int64_t lengths_extent) {
  PagedAttentionArgs<Q, KV, std::int32_t> a = paged_args_without_indices<Q, KV, std::int32_t>(in);
  a.lengths = stand_in_index(lengths_extent);
  a.page_indices = stand_in_table(in.page_indices.shape[0], in.page_indices.shape[1]);
  return check_paged_shapes(a, in.common.profile);
}

/// lengths `[batch, n]`: after P1..P4 this is JAX's P5, whose text names no shape (the hint
/// does). A batch extent other than q's makes the stand-in tier stop at P5 unless earlier.
template <class Q, class KV>
[[noreturn]] void fail_paged_lengths_rank(const PagedInputs& in) {
  const std::vector<std::int64_t>& s = in.lengths.shape;
  const Status shapes = paged_stand_in_shapes<Q, KV>(in, s[0] == 0 ? 1 : s[0] - 1);
  if (std::string(shapes.jax_check()) != "P5") throw Error(shapes);
  throw Error(paged_lengths_rank_error(s[0], s[1]));
}

/// Calls `fn(args)` with `in`'s lengths and page table viewed in place in their own dtype (so
/// the `jax` profile's P7 sees it), after the index dtype checks in JAX's order. Precondition:
/// `check_paged_ranks` and `check_paged_dtypes` passed.
template <class Fn>
void with_paged_args(const PagedInputs& in, Fn&& fn) {
  dispatch_query_and_kv(in.q.dtype, in.k_pages.dtype, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    if (in.lengths.rank() != 1) fail_paged_lengths_rank<Q, KV>(in);
    const Status dtypes =
        check_paged_index_dtypes(in.lengths.dtype, in.page_indices.dtype, in.common.profile);
    if (!dtypes.ok()) {
      const Status shapes = paged_stand_in_shapes<Q, KV>(in, in.lengths.shape[0]);
      if (reported_before_index_dtypes(shapes, {"P1", "P2", "P3", "P4", "P5", "P6"}))
        throw Error(shapes);
      throw Error(dtypes);
    }
    const auto call = [&](auto itag) {
      using I = typename decltype(itag)::type;
      PagedAttentionArgs<Q, KV, I> a = paged_args_without_indices<Q, KV, I>(in);
      a.lengths = view_of<I, 1>(in.lengths);
      a.page_indices = view_of<I, 2>(in.page_indices);
      fn(a);
    };
    if (in.lengths.dtype == DType::kInt32) {
      call(DTypeTag<std::int32_t>{});
    } else {
      call(DTypeTag<std::int64_t>{});
    }
  });
}

/// The tiers `in.common` asks for (shape, metadata, data) under its profile.
template <class Q, class KV, class Index>
void check_paged_tiers(const PagedInputs& in, const PagedAttentionArgs<Q, KV, Index>& a) {
  raise_if_error(check_paged_shapes(a, in.common.profile));
  if (in.common.metadata) raise_if_error(check_paged_metadata(a, in.common.profile));
  if (in.common.data) raise_if_error(check_paged_data(a));
}

/// Validates the call as `in.common` asks.
inline void check_paged_call(const PagedInputs& in) {
  with_paged_args(in, [&](const auto& a) { check_paged_tiers(in, a); });
}

/// Validates the call (on the caller's arrays: nothing is copied before), then calls
/// `fn(args)` with the lengths and page table widened to int64: one kernel per (Q, KV).
/// Precondition: `in.common.metadata` (the kernel reads what the metadata tier proves).
template <class Fn>
void with_paged_run_args(const PagedInputs& in, Fn&& fn) {
  with_paged_args(in, [&](const auto& native) {
    check_paged_tiers(in, native);
    using Native = std::decay_t<decltype(native)>;
    using Q = std::remove_const_t<typename decltype(Native::q)::element_type>;
    using KV = std::remove_const_t<typename decltype(Native::k_pages)::element_type>;
    PagedAttentionArgs<Q, KV, std::int64_t> a = paged_args_without_indices<Q, KV, std::int64_t>(in);
    const WideIndex<1> lengths = widen_index<1>(in.lengths);
    const WideIndex<2> table = widen_index<2>(in.page_indices);
    a.lengths = lengths.view;
    a.page_indices = table.view;
    fn(a);
  });
}

}  // namespace frontend
}  // namespace attnref
