// SPDX-License-Identifier: Apache-2.0
/// @file outputs.hpp
/// The output checks every family shares, in one order: the output's shape, then its view (valid,
/// distinct elements), then the optional logsumexp's shape, its view, and that it is apart from
/// the output. The families' `check_f_output` (validate/paged.hpp, ragged.hpp, splash.hpp) give
/// the expected shapes and their own texts.
#pragma once

#include <array>
#include <cstdint>

#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {
namespace detail {

/// `out` of shape `expected`, then a valid view of distinct elements. `message_format` (a
/// literal) takes the actual shape as {0}..{2} and the expected one as {3}..{5}.
template <class T>
Status check_out_tensor(const TensorView<T, 3>& out, const std::array<std::int64_t, 3>& expected,
                        const char* message_format, const char* hint) {
  const auto& e = out.extents;
  if (e != expected) {
    return Status(ErrorCode::kShapeMismatch, "", message_format, hint,
                  {e[0], e[1], e[2], expected[0], expected[1], expected[2]}, {}, "out");
  }
  return check_output_view(out, "out");
}

/// An empty `logsumexp`, or one of shape `[rows, heads]`, a valid view of distinct elements and
/// apart from `out`. `hint` (a literal) says what its shape is.
template <class T>
Status check_logsumexp_tensor(const TensorView<T, 3>& out, const TensorView<float, 2>& logsumexp,
                              std::int64_t rows, std::int64_t heads, const char* hint) {
  if (logsumexp.empty_view()) return Status();
  const auto& l = logsumexp.extents;
  if (l[0] != rows || l[1] != heads) {
    return Status(ErrorCode::kShapeMismatch, "", "{f} has shape ({0}, {1}); expected ({2}, {3})",
                  hint, {l[0], l[1], rows, heads}, {}, "logsumexp");
  }
  ATTNREF_RETURN_IF_ERROR(check_output_view(logsumexp, "logsumexp"));
  return check_disjoint_outputs(out, logsumexp, "logsumexp", "{f} and out share memory");
}

}  // namespace detail
}  // namespace attnref
