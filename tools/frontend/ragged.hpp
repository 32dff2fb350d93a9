// SPDX-License-Identifier: Apache-2.0
/// @file ragged.hpp
/// Ragged paged attention (continuous batching) from arrays and options: the one builder of
/// `RaggedPagedAttentionArgs` that attnref-run and the Python module share, over JAX's combined
/// K/V pool or an engine's separate K and V pools. As paged.hpp: `check_ragged_ranks`,
/// `check_ragged_dtypes`, then `with_ragged_args` (the caller's index arrays in their own
/// dtype, JAX's order of checks), `check_ragged_call` or `with_ragged_run_args`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "array.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/validate/ragged.hpp"
#include "options.hpp"

namespace attnref {
namespace frontend {

/// The arrays and options of one ragged call.
struct RaggedInputs {
  Array q;
  Array kv_pages;          ///< JAX's combined pool [P, S, 2 * Hkv, D] ...
  Array k_pages, v_pages;  ///< ... or separate pools in `layout` (k_pages given)
  Array kv_lens, page_indices, cu_q_lens;
  Array num_seqs;                            ///< a one-element index array ...
  std::optional<std::int64_t> num_seqs_int;  ///< ... or a host integer
  KvLayout layout = KvLayout::kJax;
  CommonOptions common;
  std::optional<std::int64_t> sliding_window, num_kv_pages_per_block, num_queries_per_block,
      vmem_limit_bytes;
  std::optional<float> k_scale, v_scale;
  HeadValues sinks, alibi_slopes;

  bool separate() const noexcept { return k_pages.present(); }
  const Array& pages() const noexcept { return separate() ? k_pages : kv_pages; }
};

/// The front end's words for shapes and dtypes that depend on how it names its options.
struct RaggedHints {
  const char* pages;     ///< separate K/V pools
  const char* combined;  ///< JAX's combined pool
  const char* num_seqs;
  const char* q_dtype;
};

/// The extent JAX expects of num_seqs, kv_lens and cu_q_lens: (1,), (max_num_seqs,) and
/// (max_num_seqs + 1,). Precondition: page_indices has rank 2.
inline bool first_extent_expected(const RaggedInputs& in, const Array& x) {
  const std::int64_t first = x.shape[0];
  const std::int64_t max_seqs = in.page_indices.shape[0];
  if (&x == &in.num_seqs) return first == 1;
  if (&x == &in.kv_lens) return first == max_seqs;
  return first > 0 && first - 1 == max_seqs;
}

/// True for metadata JAX reports with its own shape text: rank 2 and the first extent JAX
/// expects (so only the rank is wrong): reported in JAX's order by `with_ragged_args`.
inline bool ragged_rank_in_jax_order(const RaggedInputs& in, const Array& x) {
  return x.present() && x.rank() == 2 && in.page_indices.rank() == 2 &&
         first_extent_expected(in, x);
}

/// Ranks, as JAX unpacks its shapes before its checks.
inline void check_ragged_ranks(const RaggedInputs& in, const RaggedHints& hints) {
  raise_if_error(check_rank(in.q, 3, "q is [max_num_batched_tokens, num_q_heads, head_dim]"));
  if (in.separate()) {
    raise_if_error(check_rank(in.k_pages, 4, hints.pages));
    raise_if_error(check_rank(in.v_pages, 4, hints.pages));
  } else {
    raise_if_error(check_rank(in.kv_pages, 4, hints.combined));
  }
  if (!ragged_rank_in_jax_order(in, in.kv_lens))
    raise_if_error(check_rank(in.kv_lens, 1, "kv_lens is [max_num_seqs]"));
  raise_if_error(check_rank(in.page_indices, 2, "page_indices is [max_num_seqs, pages_per_seq]"));
  if (!ragged_rank_in_jax_order(in, in.cu_q_lens))
    raise_if_error(check_rank(in.cu_q_lens, 1, "cu_q_lens is [max_num_seqs + 1]"));
  if (in.num_seqs.present() && !ragged_rank_in_jax_order(in, in.num_seqs))
    raise_if_error(check_rank(in.num_seqs, 1, hints.num_seqs));
}

/// Element types: q's and the (q, K/V) pair of core/kv_dtypes.hpp.
inline void check_ragged_dtypes(const RaggedInputs& in, const RaggedHints& hints) {
  if (!query_dtype_supported(in.q.dtype)) raise_if_error(dtype_error(in.q, hints.q_dtype));
  raise_if_error(in.separate() ? check_kv_dtypes(in.q.dtype, in.k_pages.dtype, in.v_pages.dtype)
                               : check_kv_dtype(in.q.dtype, in.kv_pages.dtype, "kv_pages"));
}

/// `*a`: the args over `in` but its index arrays and num_seqs, which the caller sets. The
/// error is JAX's R12 (an odd combined head count), checked first, where the combined pool
/// becomes two views.
template <class Q, class KV, class Index>
Status ragged_args_without_indices(const RaggedInputs& in,
                                   RaggedPagedAttentionArgs<Q, KV, Index>* out) {
  RaggedPagedAttentionArgs<Q, KV, Index>& a = *out;
  a.q = view_of<Q, 3>(in.q);
  if (in.separate()) {
    a.k_pages = layout_view<KV>(in.k_pages, in.layout);
    a.v_pages = layout_view<KV>(in.v_pages, in.layout);
  } else {
    ATTNREF_RETURN_IF_ERROR(ragged_kv_views(view_of<KV, 4>(in.kv_pages), &a.k_pages, &a.v_pages));
  }
  set_shared_options(in, a);
  a.k_scale = in.k_scale;
  a.v_scale = in.v_scale;
  a.num_kv_pages_per_block = in.num_kv_pages_per_block;
  a.num_queries_per_block = in.num_queries_per_block;
  a.vmem_limit_bytes = in.vmem_limit_bytes;
  return Status();
}

/// The shape tier over int32 stand-ins of the index arrays (extents only): `kv_lens`, `cu` and
/// `seqs` entries of kv_lens, cu_q_lens and num_seqs (a host num_seqs is its value).
template <class Q, class KV>
Status ragged_stand_in_shapes(const RaggedInputs& in, std::int64_t kv_lens, std::int64_t cu,
                              std::int64_t seqs) {
  RaggedPagedAttentionArgs<Q, KV, std::int32_t> a;
  ATTNREF_RETURN_IF_ERROR(ragged_args_without_indices(in, &a));
  a.kv_lens = stand_in_index(kv_lens);
  a.page_indices = stand_in_table(in.page_indices.shape[0], in.page_indices.shape[1]);
  a.cu_q_lens = stand_in_index(cu);
  if (in.num_seqs_int) {
    a.num_seqs_value = in.num_seqs_int;
  } else {
    a.num_seqs = stand_in_index(seqs);
  }
  return check_ragged_shapes(a, in.common.profile);
}

/// num_seqs, kv_lens or cu_q_lens of shape [n, m] with the n JAX expects: JAX's R1, R3 or R4,
/// in JAX's order, with the real shape in JAX's text. Each rank-2 array gets a stand-in extent
/// JAX's check rejects, so the shape tier stops at the first one.
template <class Q, class KV>
[[noreturn]] void fail_ragged_metadata_rank(const RaggedInputs& in) {
  const std::int64_t max_seqs = in.page_indices.shape[0];
  const auto rank2 = [](const Array& x) { return x.present() && x.rank() == 2; };
  const Status shapes = ragged_stand_in_shapes<Q, KV>(
      in, rank2(in.kv_lens) ? (max_seqs == 0 ? 1 : max_seqs - 1) : in.kv_lens.shape[0],
      rank2(in.cu_q_lens) ? max_seqs : in.cu_q_lens.shape[0],
      rank2(in.num_seqs) ? 2 : (in.num_seqs.present() ? in.num_seqs.shape[0] : 1));
  const std::string check = shapes.jax_check();
  for (const Array* x : {&in.num_seqs, &in.kv_lens, &in.cu_q_lens}) {
    const char* id = x == &in.num_seqs ? "R1" : x == &in.kv_lens ? "R3" : "R4";
    if (check == id && rank2(*x))
      throw Error(ragged_metadata_rank_error(id, x->shape[0], x->shape[1], max_seqs));
  }
  throw Error(shapes);
}

/// Calls `fn(args)` with `in`'s index arrays viewed in place in their own dtype (so the `jax`
/// profile's R5 sees it) and num_seqs as its value when it holds one element (read in its own
/// dtype, never narrowed), after the rank and dtype checks JAX makes first. Precondition:
/// `check_ragged_ranks` and `check_ragged_dtypes` passed.
template <class Fn>
void with_ragged_args(const RaggedInputs& in, Fn&& fn) {
  dispatch_query_and_kv(in.q.dtype, in.pages().dtype, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    if (ragged_rank_in_jax_order(in, in.num_seqs) || ragged_rank_in_jax_order(in, in.kv_lens) ||
        ragged_rank_in_jax_order(in, in.cu_q_lens)) {
      fail_ragged_metadata_rank<Q, KV>(in);
    }
    const DType seqs_dtype = in.num_seqs_int ? DType::kInt64 : in.num_seqs.dtype;
    const Status dtypes = check_ragged_index_dtypes(
        in.kv_lens.dtype, in.page_indices.dtype, in.cu_q_lens.dtype, seqs_dtype, in.common.profile);
    if (!dtypes.ok()) {
      const Status shapes =
          ragged_stand_in_shapes<Q, KV>(in, in.kv_lens.shape[0], in.cu_q_lens.shape[0],
                                        in.num_seqs.present() ? in.num_seqs.shape[0] : 1);
      if (reported_before_index_dtypes(shapes, {"R12", "R13", "R1", "R2", "R3", "R4"}))
        throw Error(shapes);
      throw Error(dtypes);
    }
    const auto call = [&](auto itag) {
      using I = typename decltype(itag)::type;
      RaggedPagedAttentionArgs<Q, KV, I> a;
      raise_if_error(ragged_args_without_indices(in, &a));
      a.kv_lens = view_of<I, 1>(in.kv_lens);
      a.page_indices = view_of<I, 2>(in.page_indices);
      a.cu_q_lens = view_of<I, 1>(in.cu_q_lens);
      static const I zero{0};
      if (in.num_seqs_int) {
        a.num_seqs_value = in.num_seqs_int;
      } else if (auto value = single_index_value(in.num_seqs)) {
        a.num_seqs_value = value;
      } else {
        // Any other extent fails JAX's R1 on a view of zeros of that extent.
        a.num_seqs =
            TensorView<const I, 1>(&zero, {in.num_seqs.shape[0]}, std::array<std::int64_t, 1>{0});
      }
      fn(a);
    };
    if (in.kv_lens.dtype == DType::kInt32) {
      call(DTypeTag<std::int32_t>{});
    } else {
      call(DTypeTag<std::int64_t>{});
    }
  });
}

/// The tiers `in.common` asks for (shape, metadata, data) under its profile.
template <class Q, class KV, class Index>
void check_ragged_tiers(const RaggedInputs& in, const RaggedPagedAttentionArgs<Q, KV, Index>& a) {
  raise_if_error(check_ragged_shapes(a, in.common.profile));
  if (in.common.metadata) raise_if_error(check_ragged_metadata(a, in.common.profile));
  if (in.common.data) raise_if_error(check_ragged_data(a));
}

/// Validates the call as `in.common` asks.
inline void check_ragged_call(const RaggedInputs& in) {
  with_ragged_args(in, [&](const auto& a) { check_ragged_tiers(in, a); });
}

/// Validates the call (on the caller's arrays: nothing is copied before), then calls
/// `fn(args)` with the index arrays widened to int64: one kernel per (Q, KV). Precondition:
/// `in.common.metadata`.
template <class Fn>
void with_ragged_run_args(const RaggedInputs& in, Fn&& fn) {
  with_ragged_args(in, [&](const auto& native) {
    check_ragged_tiers(in, native);
    using Native = std::decay_t<decltype(native)>;
    using Q = std::remove_const_t<typename decltype(Native::q)::element_type>;
    using KV = std::remove_const_t<typename decltype(Native::k_pages)::element_type>;
    RaggedPagedAttentionArgs<Q, KV, std::int64_t> a;
    raise_if_error(ragged_args_without_indices(in, &a));
    const WideIndex<1> kv_lens = widen_index<1>(in.kv_lens);
    const WideIndex<2> table = widen_index<2>(in.page_indices);
    const WideIndex<1> cu = widen_index<1>(in.cu_q_lens);
    a.kv_lens = kv_lens.view;
    a.page_indices = table.view;
    a.cu_q_lens = cu.view;
    a.num_seqs_value = native.num_seqs_count();
    fn(a);
  });
}

}  // namespace frontend
}  // namespace attnref
