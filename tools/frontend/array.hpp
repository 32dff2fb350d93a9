// SPDX-License-Identifier: Apache-2.0
/// @file array.hpp
/// The front end's runtime-typed array and its error. attnref-run and the Python module both
/// turn their inputs (`.npy` files; numpy arrays and DLPack tensors) into `Array`s, then build
/// the family args from them with the builders of this folder (paged.hpp, ragged.hpp,
/// splash.hpp, merge.hpp). A failed check is thrown as `Error`, which each front end renders in
/// its own words (an exit status and a line on stderr; `attnref.ShapeError`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {
namespace frontend {

/// A failed check, rendered when thrown: a Status may name a field whose storage (an Array's
/// name) the unwinding frees.
class Error : public std::exception {
 public:
  explicit Error(const Status& s)
      : code(error_code_name(s.code())),
        jax_check(s.jax_check()),
        message(s.message()),
        hint(s.hint()),
        field(s.field()),
        text(s.to_string()) {
    for (int i = 0; i < 8; ++i) values[static_cast<std::size_t>(i)] = s.value(i);
    for (int i = 0; i < 2; ++i) reals[static_cast<std::size_t>(i)] = s.real(i);
  }
  /// `s` with its message replaced by `message_` (a value a Status cannot carry, such as a
  /// numpy dtype's name).
  Error(const Status& s, const std::string& message_) : Error(s) {
    message = message_;
    text = "error[" + code + "] " + message + (hint.empty() ? "" : " (hint: " + hint + ")");
  }
  const char* what() const noexcept override { return text.c_str(); }

  std::string code, jax_check, message, hint, field, text;
  std::array<std::int64_t, 8> values{};
  std::array<double, 2> reals{};
};

/// Throws `status` as an Error when it is one.
inline void raise_if_error(const Status& status) {
  if (!status.ok()) throw Error(status);
}

/// One input array, read in place: its dtype, extents, element strides and first element.
/// `keep_alive` holds what owns the memory (a numpy array, a DLPack capsule) for the call.
struct Array {
  std::string name;  ///< the argument's name in messages: "q", "k_pages"
  DType dtype = DType::kUnknown;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  ///< in elements; empty: row-major
  const void* data = nullptr;
  std::int64_t buffer_size = -1;  ///< elements the buffer holds (a file), -1 when not known
  bool given = false;             ///< false for an optional input left out
  std::shared_ptr<const void> keep_alive;

  std::int64_t rank() const noexcept { return static_cast<std::int64_t>(shape.size()); }
  bool present() const noexcept { return given; }
};

/// kRankMismatch unless `a` has `rank` dimensions; `hint` (a literal) describes the shape.
inline Status check_rank(const Array& a, std::int64_t rank, const char* hint) {
  if (a.rank() == rank) return Status();
  return Status(
      ErrorCode::kRankMismatch, "",
      rank == 1 ? "{f} must have {0} dimension; got {1}" : "{f} must have {0} dimensions; got {1}",
      hint, {rank, a.rank()}, {}, a.name.c_str());
}

/// kDtypeNotSupported: `a`'s dtype is not one of those `hint` (a literal) lists.
inline Status dtype_error(const Array& a, const char* hint) {
  return Status(ErrorCode::kDtypeNotSupported, "",
                "{f} has dtype {d0}, which is not supported here", hint,
                {static_cast<std::int64_t>(a.dtype)}, {}, a.name.c_str());
}

/// kDtypeNotSupported: `a` must have the dtype of `like`.
inline Status dtype_mismatch(const Array& a, const Array& like, const char* hint) {
  return Status(ErrorCode::kDtypeNotSupported, "", "{f} has dtype {d0}; expected {d1}", hint,
                {static_cast<std::int64_t>(a.dtype), static_cast<std::int64_t>(like.dtype)}, {},
                a.name.c_str());
}

/// A `Rank`-dimensional view of `a` as elements of `T`, checked with `check_view` (bounded by
/// `buffer_size` when known, by the reach in bytes always). Preconditions: `a.dtype` is T's
/// (the caller dispatched on it) and `a` has `Rank` dimensions (the caller checked).
template <class T, std::size_t Rank>
TensorView<const T, Rank> view_of(const Array& a) {
  raise_if_error(check_rank(a, static_cast<std::int64_t>(Rank), "see the function's help"));
  std::array<std::int64_t, Rank> extents{};
  for (std::size_t i = 0; i < Rank; ++i) extents[i] = a.shape[i];
  std::array<std::int64_t, Rank> strides = row_major_strides<Rank>(extents);
  if (!a.strides.empty())
    for (std::size_t i = 0; i < Rank; ++i) strides[i] = a.strides[i];
  const TensorView<const T, Rank> view(static_cast<const T*>(a.data), extents, strides,
                                       a.buffer_size);
  raise_if_error(check_view(view, a.name.c_str()));
  return view;
}

/// The logical `[num_kv_heads, total_pages, page_size, head_dim]` view of a 4-d page pool (or of
/// its scales) stored in `layout`.
template <class T>
TensorView<const T, 4> layout_view(const Array& a, KvLayout layout) {
  const TensorView<const T, 4> physical = view_of<T, 4>(a);
  // The physical dim of each logical one.
  const std::array<std::size_t, 4> of =
      layout == KvLayout::kNhd   ? std::array<std::size_t, 4>{2, 0, 1, 3}
      : layout == KvLayout::kHnd ? std::array<std::size_t, 4>{1, 0, 2, 3}
                                 : std::array<std::size_t, 4>{0, 1, 2, 3};
  TensorView<const T, 4> view = physical;
  for (std::size_t i = 0; i < 4; ++i) {
    view.extents[i] = physical.extents[of[i]];
    view.strides[i] = physical.strides[of[i]];
  }
  return view;
}

/// An int32/int64 index array widened to int64, keeping each dimension of stride 0 at stride 0
/// (one copy of its values): a broadcast table that claims 2^31 entries copies what it holds,
/// not what it claims. The caller validated `a` first; the view points into `values`.
template <std::size_t Rank>
struct WideIndex {
  std::vector<std::int64_t> values;
  TensorView<const std::int64_t, Rank> view;
};

template <class I, std::size_t Rank>
WideIndex<Rank> widen_index_as(const Array& a) {
  WideIndex<Rank> w;
  const TensorView<const I, Rank> src = view_of<I, Rank>(a);
  std::array<std::int64_t, Rank> held{};  // the extents the copy holds
  for (std::size_t i = 0; i < Rank; ++i) held[i] = src.strides[i] == 0 ? 1 : src.extents[i];
  if (src.holds_no_elements()) held.fill(0);
  w.view.extents = src.extents;
  w.view.strides = row_major_strides(held);
  std::int64_t count = 1;
  for (std::size_t i = 0; i < Rank; ++i) {
    count *= held[i];
    if (held[i] == 1) w.view.strides[i] = 0;
  }
  w.values.resize(static_cast<std::size_t>(count));
  for (std::int64_t flat = 0; flat < count; ++flat) {
    std::int64_t rest = flat, at = 0;
    for (std::size_t i = Rank; i-- > 0;) {
      at += (rest % held[i]) * src.strides[i];
      rest /= held[i];
    }
    w.values[static_cast<std::size_t>(flat)] = static_cast<std::int64_t>(src.data[at]);
  }
  w.view.data = w.values.data();
  w.view.buffer_size = count;
  return w;
}

/// `widen_index_as` for an int32 or int64 array. Precondition: one of the two.
template <std::size_t Rank>
WideIndex<Rank> widen_index(const Array& a) {
  if (a.dtype == DType::kInt32) return widen_index_as<std::int32_t, Rank>(a);
  return widen_index_as<std::int64_t, Rank>(a);
}

/// The value of a one-element int32/int64 array (num_seqs); nullopt for another count or dtype.
inline std::optional<std::int64_t> single_index_value(const Array& a) {
  if (a.rank() != 1 || a.shape[0] != 1) return std::nullopt;
  if (a.dtype == DType::kInt32) return view_of<std::int32_t, 1>(a)(0);
  if (a.dtype == DType::kInt64) return view_of<std::int64_t, 1>(a)(0);
  return std::nullopt;
}

/// Whether a shape tier run over stand-in index arrays reports before the index dtype check:
/// it failed at a check JAX makes first (`earlier`), or at one of attnref's own (no JAX id).
inline bool reported_before_index_dtypes(const Status& shapes,
                                         std::initializer_list<const char*> earlier) {
  if (shapes.ok()) return false;
  const std::string id = shapes.jax_check();
  if (id.empty()) return true;
  for (const char* e : earlier)
    if (id == e) return true;
  return false;
}

/// A rank-1 view of `extent` int32 zeros at stride 0: a stand-in index array whose extent the
/// shape tier reads and whose data it never does.
inline TensorView<const std::int32_t, 1> stand_in_index(std::int64_t extent) {
  static const std::int32_t zero = 0;
  return TensorView<const std::int32_t, 1>(&zero, {extent}, std::array<std::int64_t, 1>{0});
}

/// The same, `[rows, cols]`.
inline TensorView<const std::int32_t, 2> stand_in_table(std::int64_t rows, std::int64_t cols) {
  static const std::int32_t zero = 0;
  return TensorView<const std::int32_t, 2>(&zero, {rows, cols}, std::array<std::int64_t, 2>{0, 0});
}

}  // namespace frontend
}  // namespace attnref
