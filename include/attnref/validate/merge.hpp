// SPDX-License-Identifier: Apache-2.0
/// @file merge.hpp
/// Merging attention states (kernels/merge_attention_states.hpp): the argument descriptor and
/// its checks. No Eigen.
///  - `check_merge_inputs(args)`: the two states alone (shapes, then views);
///  - `check_merge_states(args, out, lse)`: the states, then the outputs (shapes, then views),
///    each output either an input's exact view (merging in place) or apart from every input;
///  - `validate_merge(args)` and `validate_merge(args, out, lse)` throw `ShapeError` (or call
///    the error handler) where those fail.
///
/// Example:
/// @code
///   attnref::MergeStatesArgs<float> m;
///   m.out_a = {out_a.data(), {batch, heads, dim}};
///   m.lse_a = {lse_a.data(), {batch, heads}};
///   m.out_b = {out_b.data(), {batch, heads, dim}};
///   m.lse_b = {lse_b.data(), {batch, heads}};
///   if (attnref::Status s = attnref::check_merge_inputs(m); !s.ok()) ...
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// Two attention states of the same `[rows, heads]` query rows over disjoint key sets.
template <class T>
struct MergeStatesArgs {
  static_assert(is_float_dtype<T>, "states must be float, double, Eigen::half or Eigen::bfloat16");
  using value_type = T;

  TensorView<const T, 3> out_a;      ///< [rows, heads, head_dim] result over the keys A
  TensorView<const float, 2> lse_a;  ///< [rows, heads] its natural logsumexp (-inf: no key)
  TensorView<const T, 3> out_b;      ///< [rows, heads, head_dim] result over the keys B
  TensorView<const float, 2> lse_b;  ///< [rows, heads]

  std::int64_t rows() const noexcept { return out_a.extents[0]; }
  std::int64_t heads() const noexcept { return out_a.extents[1]; }
  std::int64_t head_dim() const noexcept { return out_a.extents[2]; }
};

namespace detail {

/// True when two views are the same elements in the same order (an in-place operand).
template <class A, class B, size_t Rank>
bool same_view(const TensorView<A, Rank>& a, const TensorView<B, Rank>& b) noexcept {
  return std::is_same<std::remove_const_t<A>, std::remove_const_t<B>>::value &&
         static_cast<const void*>(a.data) == static_cast<const void*>(b.data) &&
         a.extents == b.extents && a.strides == b.strides;
}

/// `kOverlappingOutput` when the output `output` (named `name`) shares memory with an input
/// without being that input's exact view. `message_format` (a literal) names the input.
template <class O, size_t RankO, class I, size_t RankI>
Status check_output_against_input(const TensorView<O, RankO>& output, const char* name,
                                  const TensorView<I, RankI>& input, const char* message_format) {
  if constexpr (RankO == RankI) {
    if (same_view(output, input)) return Status();
  }
  if (!views_share_memory(output, input)) return Status();
  return Status(ErrorCode::kOverlappingOutput, "", message_format,
                "merge in place with the input's own view, or write to a separate buffer", {}, {},
                name);
}

/// `check_output_against_input` of the output `output` (named `name`) against each state's views
/// in turn: out_a, out_b, lse_a, lse_b.
template <class T, class O, size_t Rank>
Status check_output_against_inputs(const MergeStatesArgs<T>& a, const TensorView<O, Rank>& output,
                                   const char* name) {
  ATTNREF_RETURN_IF_ERROR(check_output_against_input(
      output, name, a.out_a, "{f} shares memory with out_a but is not the same view"));
  ATTNREF_RETURN_IF_ERROR(check_output_against_input(
      output, name, a.out_b, "{f} shares memory with out_b but is not the same view"));
  ATTNREF_RETURN_IF_ERROR(check_output_against_input(
      output, name, a.lse_a, "{f} shares memory with lse_a but is not the same view"));
  return check_output_against_input(output, name, a.lse_b,
                                    "{f} shares memory with lse_b but is not the same view");
}

/// kShapeMismatch for an out_b or out of a shape other than out_a's.
inline Status check_merge_out_shape(const std::array<std::int64_t, 3>& e,
                                    const std::array<std::int64_t, 3>& ea, const char* name) {
  if (e == ea) return Status();
  return Status(ErrorCode::kShapeMismatch, "",
                "{f} has shape ({0}, {1}, {2}); expected out_a's shape ({3}, {4}, {5})",
                "both states and the output are [rows, heads, head_dim]",
                {e[0], e[1], e[2], ea[0], ea[1], ea[2]}, {}, name);
}

/// kShapeMismatch for a [rows, heads] logsumexp view of another shape.
inline Status check_merge_lse_shape(const std::array<std::int64_t, 2>& e, std::int64_t rows,
                                    std::int64_t heads, const char* name) {
  if (e[0] == rows && e[1] == heads) return Status();
  return Status(ErrorCode::kShapeMismatch, "",
                "{f} has shape ({0}, {1}); expected ({2}, {3}) (out_a's first two dimensions)",
                "a logsumexp is [rows, heads], one value per row and head of its out",
                {e[0], e[1], rows, heads}, {}, name);
}

}  // namespace detail

/// Checks the states alone: out_b of out_a's shape `[rows, heads, head_dim]`, lse_a and lse_b
/// `[rows, heads]`, then every view valid. A caller that sizes its outputs from out_a's shape
/// checks this first: with head_dim 0, out_a holds no element whatever rows and heads say, and only
/// the logsumexps' shapes show that `[rows, heads]` is real data.
template <class T>
Status check_merge_inputs(const MergeStatesArgs<T>& a) {
  ATTNREF_RETURN_IF_ERROR(detail::check_merge_out_shape(a.out_b.extents, a.out_a.extents, "out_b"));
  ATTNREF_RETURN_IF_ERROR(
      detail::check_merge_lse_shape(a.lse_a.extents, a.rows(), a.heads(), "lse_a"));
  ATTNREF_RETURN_IF_ERROR(
      detail::check_merge_lse_shape(a.lse_b.extents, a.rows(), a.heads(), "lse_b"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.out_a, "out_a"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.lse_a, "lse_a"));
  ATTNREF_RETURN_IF_ERROR(check_view(a.out_b, "out_b"));
  return check_view(a.lse_b, "lse_b");
}

/// Checks the states (`check_merge_inputs`) and the outputs: `out` of out_a's shape, `lse`
/// (when not empty) `[rows, heads]`, `out` and `lse` apart from each other and each either an
/// input's exact view or apart from it.
template <class T>
Status check_merge_states(const MergeStatesArgs<T>& a, const TensorView<T, 3>& out,
                          const TensorView<float, 2>& lse = {}) {
  ATTNREF_RETURN_IF_ERROR(check_merge_inputs(a));
  ATTNREF_RETURN_IF_ERROR(detail::check_merge_out_shape(out.extents, a.out_a.extents, "out"));
  ATTNREF_RETURN_IF_ERROR(check_output_view(out, "out"));
  if (!lse.empty_view()) {
    ATTNREF_RETURN_IF_ERROR(detail::check_merge_lse_shape(lse.extents, a.rows(), a.heads(), "lse"));
    ATTNREF_RETURN_IF_ERROR(check_output_view(lse, "lse"));
    ATTNREF_RETURN_IF_ERROR(check_disjoint_outputs(out, lse, "lse", "{f} and out share memory"));
  }
  ATTNREF_RETURN_IF_ERROR(detail::check_output_against_inputs(a, out, "out"));
  if (!lse.empty_view())
    ATTNREF_RETURN_IF_ERROR(detail::check_output_against_inputs(a, lse, "lse"));
  return Status();
}

/// Throwing wrapper of `check_merge_inputs`: throws `ShapeError` (or calls the error handler).
template <class T>
void validate_merge(const MergeStatesArgs<T>& a) {
  throw_if_error(check_merge_inputs(a));
}

/// Throwing wrapper of `check_merge_states`: throws `ShapeError` (or calls the error handler).
template <class T>
void validate_merge(const MergeStatesArgs<T>& a, const TensorView<T, 3>& out,
                    const TensorView<float, 2>& lse = {}) {
  throw_if_error(check_merge_states(a, out, lse));
}

}  // namespace attnref
