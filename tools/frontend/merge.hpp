// SPDX-License-Identifier: Apache-2.0
/// @file merge.hpp
/// Merging two attention states from arrays: the one builder of `MergeStatesArgs` that
/// attnref-run and the Python module share.
#pragma once

#include "array.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/validate/merge.hpp"

namespace attnref {
namespace frontend {

/// The arrays of one merge: two states [rows, heads, head_dim] and their logsumexps.
struct MergeInputs {
  Array out_a, lse_a, out_b, lse_b;
};

/// Ranks, then dtypes: the states share a query dtype (`state_hint`, the front end's words),
/// the logsumexps are float32.
inline void check_merge_arrays(const MergeInputs& in, const char* state_hint) {
  raise_if_error(check_rank(in.out_a, 3, "a state is [rows, heads, head_dim]"));
  raise_if_error(check_rank(in.lse_a, 2, "a logsumexp is [rows, heads]"));
  raise_if_error(check_rank(in.out_b, 3, "a state is [rows, heads, head_dim]"));
  raise_if_error(check_rank(in.lse_b, 2, "a logsumexp is [rows, heads]"));
  if (!query_dtype_supported(in.out_a.dtype)) raise_if_error(dtype_error(in.out_a, state_hint));
  if (in.out_b.dtype != in.out_a.dtype)
    raise_if_error(dtype_mismatch(in.out_b, in.out_a, "both states take one dtype"));
  for (const Array* lse : {&in.lse_a, &in.lse_b}) {
    if (lse->dtype != DType::kFloat32)
      raise_if_error(dtype_error(*lse, "a logsumexp is float32, as the kernels write it"));
  }
}

/// Calls `fn(args)` in the states' element type, after `check_merge_inputs`: the outputs take
/// out_a's shape, checked against the other inputs before anything is allocated. Precondition:
/// `check_merge_arrays` passed.
template <class Fn>
void with_merge_args(const MergeInputs& in, Fn&& fn) {
  dispatch_query(in.out_a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    MergeStatesArgs<T> m;
    m.out_a = view_of<T, 3>(in.out_a);
    m.lse_a = view_of<float, 2>(in.lse_a);
    m.out_b = view_of<T, 3>(in.out_b);
    m.lse_b = view_of<float, 2>(in.lse_b);
    raise_if_error(check_merge_inputs(m));
    fn(m);
  });
}

}  // namespace frontend
}  // namespace attnref
