// SPDX-License-Identifier: Apache-2.0
/// @file tensor_view.hpp
/// `TensorView<T, Rank>`: a non-owning pointer + extents + **element** strides (not bytes), and
/// `check_view`, which proves that every element the extents describe lies inside the buffer.
/// A layout is just a choice of strides, so one kernel serves every KV-cache layout.
///
/// Example:
/// @code
///   std::vector<float> q(8 * 32 * 128);
///   attnref::TensorView<const float, 3> q_view(q.data(), {8, 32, 128});  // row-major
/// @endcode
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/status.hpp"

namespace attnref {

/// Row-major element strides for `extents`. A product that overflows saturates at INT64_MAX;
/// `check_view` then reports the overflow instead of indexing with a wrapped stride.
template <size_t Rank>
constexpr std::array<std::int64_t, Rank> row_major_strides(
    const std::array<std::int64_t, Rank>& extents) noexcept {
  std::array<std::int64_t, Rank> strides{};
  std::int64_t s = 1;
  for (size_t i = Rank; i-- > 0;) {
    strides[i] = s;
    std::int64_t next = 0;
    const std::int64_t e = extents[i] > 0 ? extents[i] : 1;
    s = checked_mul(s, e, &next) ? next : std::numeric_limits<std::int64_t>::max();
  }
  return strides;
}

namespace detail {
/// Bytes per element of `T`: its size, and 2 for Eigen's half and bfloat16, which the
/// validators see only as declarations.
template <class T>
struct ElementBytes {
  static constexpr std::int64_t value = static_cast<std::int64_t>(sizeof(T));
};
template <>
struct ElementBytes<Eigen::half> {
  static constexpr std::int64_t value = 2;
};
template <>
struct ElementBytes<Eigen::bfloat16> {
  static constexpr std::int64_t value = 2;
};
}  // namespace detail

/// A non-owning strided view of `Rank` dimensions over elements of type `T`.
template <class T, size_t Rank>
struct TensorView {
  static_assert(Rank >= 1, "a view has at least one dimension");
  using element_type = T;
  static constexpr size_t kRank = Rank;

  T* data = nullptr;                         ///< first element (offset 0)
  std::array<std::int64_t, Rank> extents{};  ///< size of each dimension
  std::array<std::int64_t, Rank> strides{};  ///< element strides of each dimension
  std::int64_t buffer_size = -1;             ///< elements the caller's buffer holds; -1 = not known

  constexpr TensorView() noexcept = default;

  /// Row-major (C order) view.
  constexpr TensorView(T* data_, const std::array<std::int64_t, Rank>& extents_,
                       std::int64_t buffer_size_ = -1) noexcept
      : data(data_),
        extents(extents_),
        strides(row_major_strides<Rank>(extents_)),
        buffer_size(buffer_size_) {}

  /// View with explicit element strides (any layout).
  constexpr TensorView(T* data_, const std::array<std::int64_t, Rank>& extents_,
                       const std::array<std::int64_t, Rank>& strides_,
                       std::int64_t buffer_size_ = -1) noexcept
      : data(data_), extents(extents_), strides(strides_), buffer_size(buffer_size_) {}

  /// A view of `T` converts to a view of `const T`.
  template <class U,
            class = std::enable_if_t<std::is_same<const U, T>::value && !std::is_same<U, T>::value>>
  constexpr TensorView(const TensorView<U, Rank>& other) noexcept  // NOLINT(implicit)
      : data(other.data),
        extents(other.extents),
        strides(other.strides),
        buffer_size(other.buffer_size) {}

  constexpr std::int64_t extent(size_t i) const noexcept { return extents[i]; }
  constexpr std::int64_t stride(size_t i) const noexcept { return strides[i]; }
  /// True when the view describes no memory at all (a default-constructed optional input).
  constexpr bool empty_view() const noexcept { return data == nullptr && numel_or_zero() == 0; }

  /// Product of the extents (0 when any is <= 0). Only meaningful after `check_view`.
  constexpr std::int64_t numel_or_zero() const noexcept {
    std::int64_t n = 1;
    for (size_t i = 0; i < Rank; ++i) {
      if (extents[i] <= 0) return 0;
      if (!checked_mul(n, extents[i], &n)) return 0;
    }
    return n;
  }

  /// True when some extent is 0: the view holds no elements, however large the others are.
  /// Kernels and scans test this before looping over the other extents.
  constexpr bool holds_no_elements() const noexcept {
    for (size_t i = 0; i < Rank; ++i)
      if (extents[i] == 0) return true;
    return false;
  }

  /// Element offset of an index tuple. Unchecked: validate the view and the indices first.
  template <class... I>
  constexpr std::int64_t offset(I... idx) const noexcept {
    static_assert(sizeof...(I) == Rank, "one index per dimension");
    return offset_of(std::make_index_sequence<Rank>{}, static_cast<std::int64_t>(idx)...);
  }

  /// Element access. Unchecked: validate the view and the indices first.
  template <class... I>
  constexpr T& operator()(I... idx) const noexcept {
    return data[offset(idx...)];
  }

 private:
  // One scalar multiply-add per index, from registers. A loop over an array of the indices let
  // GCC 12 vectorise it on AVX-512DQ: the indices went through the stack into one 4-lane load
  // (a failed store forward) and a vpmullq, which dominated the per-page helpers of 8-bit
  // decode with pages of 16.
  template <std::size_t... K, class... I>
  constexpr std::int64_t offset_of(std::index_sequence<K...>, I... idx) const noexcept {
    return (std::int64_t{0} + ... + (idx * strides[K]));
  }
};

/// Validates a view: extents and strides non-negative, element count and largest offset within
/// int64 (the offset in bytes too), data non-null when elements exist, and (when `buffer_size >=
/// 0`) every element inside the buffer. `name` names the tensor in the message; the returned Status
/// keeps the pointer, so `name` must outlive it (string literals do).
template <class T, size_t Rank>
constexpr Status check_view(const TensorView<T, Rank>& v, const char* name) noexcept {
  std::int64_t numel = 1;
  std::int64_t last = 0;  // largest element offset
  for (size_t i = 0; i < Rank; ++i) {
    const auto dim = static_cast<std::int64_t>(i);
    if (v.extents[i] < 0) {
      return Status(ErrorCode::kNegativeExtent, "",
                    "{f} has a negative extent {0} in dimension {1}", "extents must be >= 0",
                    {v.extents[i], dim}, {}, name);
    }
    if (v.strides[i] < 0) {
      return Status(ErrorCode::kNegativeStride, "",
                    "{f} has a negative stride {0} in dimension {1}",
                    "attnref views take non-negative element strides; reverse the data instead",
                    {v.strides[i], dim}, {}, name);
    }
    if (!checked_mul(numel, v.extents[i], &numel)) {
      return Status(ErrorCode::kSizeOverflow, "",
                    "{f}: the number of elements overflows int64 at dimension {0}",
                    "check the extents; one of them is not a real size", {dim}, {}, name);
    }
  }
  if (numel == 0) return Status();
  for (size_t i = 0; i < Rank; ++i) {
    std::int64_t reach = 0;
    if (!checked_mul(v.extents[i] - 1, v.strides[i], &reach) || !checked_add(last, reach, &last)) {
      return Status(ErrorCode::kSizeOverflow, "",
                    "{f}: the largest element offset overflows int64 at dimension {0}",
                    "check the extents and strides", {static_cast<std::int64_t>(i)}, {}, name);
    }
  }
  // Kernels address elements through byte offsets: the last byte must be within int64 too.
  std::int64_t end_bytes = 0;
  if (!checked_mul(last, detail::ElementBytes<std::remove_cv_t<T>>::value, &end_bytes) ||
      !checked_add(end_bytes, detail::ElementBytes<std::remove_cv_t<T>>::value, &end_bytes)) {
    return Status(ErrorCode::kSizeOverflow, "",
                  "{f}: the largest element offset {0} overflows int64 in bytes ({1}-byte "
                  "elements)",
                  "check the extents and strides",
                  {last, detail::ElementBytes<std::remove_cv_t<T>>::value}, {}, name);
  }
  if (v.data == nullptr) {
    return Status(ErrorCode::kNullData, "", "{f} has {0} elements but a null data pointer",
                  "pass the buffer's pointer, or zero extents for an absent tensor", {numel}, {},
                  name);
  }
  if (v.buffer_size >= 0 && last >= v.buffer_size) {
    return Status(ErrorCode::kOutOfBuffer, "",
                  "{f}: extents and strides reach element offset {0}, past the buffer of {1} "
                  "elements",
                  "the strides do not match the buffer's layout, or the buffer is too small",
                  {last, v.buffer_size}, {}, name);
  }
  return Status();
}

/// `check_view`, plus: no two elements share an address, so writes cannot overwrite each other
/// (or race across threads). Sufficient test: ordered by stride, each dimension's stride exceeds
/// the reach of all faster dimensions. For outputs.
template <class T, size_t Rank>
Status check_output_view(const TensorView<T, Rank>& v, const char* name) noexcept {
  ATTNREF_RETURN_IF_ERROR(check_view(v, name));
  if (v.numel_or_zero() <= 1) return Status();
  std::array<size_t, Rank> order{};
  size_t n = 0;
  for (size_t i = 0; i < Rank; ++i)
    if (v.extents[i] > 1) order[n++] = i;
  for (size_t i = 1; i < n; ++i)  // insertion sort by stride: Rank is tiny
    for (size_t j = i; j > 0 && v.strides[order[j]] < v.strides[order[j - 1]]; --j)
      std::swap(order[j], order[j - 1]);
  std::int64_t reach = 0;  // largest offset spanned by the faster dimensions (no overflow:
                           // check_view proved the whole view's largest offset fits)
  for (size_t i = 0; i < n; ++i) {
    const size_t d = order[i];
    if (v.strides[d] <= reach) {
      return Status(ErrorCode::kOverlappingOutput, "",
                    "{f}: dimension {0} (stride {1}) overlaps the elements of faster dimensions, "
                    "which span {2} elements",
                    "give the output distinct elements, e.g. row-major strides",
                    {static_cast<std::int64_t>(d), v.strides[d], reach + 1}, {}, name);
    }
    reach += (v.extents[d] - 1) * v.strides[d];
  }
  return Status();
}

/// Whether two views reach a common byte: compares the address ranges [first byte, last byte]
/// they span, so two views interleaved in one buffer count as sharing too. A view with no
/// elements shares nothing. Precondition: both passed `check_view`.
template <class A, size_t RankA, class B, size_t RankB>
bool views_share_memory(const TensorView<A, RankA>& a, const TensorView<B, RankB>& b) noexcept {
  if (a.numel_or_zero() == 0 || b.numel_or_zero() == 0) return false;
  const auto span_end = [](const auto& v) {  // one past the last byte
    std::uintptr_t last = 0;
    for (size_t i = 0; i < v.extents.size(); ++i)
      last += static_cast<std::uintptr_t>((v.extents[i] - 1) * v.strides[i]);
    using T = typename std::decay_t<decltype(v)>::element_type;
    return reinterpret_cast<std::uintptr_t>(v.data) + (last + 1) * sizeof(T);
  };
  const std::uintptr_t a_lo = reinterpret_cast<std::uintptr_t>(a.data);
  const std::uintptr_t b_lo = reinterpret_cast<std::uintptr_t>(b.data);
  return a_lo < span_end(b) && b_lo < span_end(a);
}

/// `kOverlappingOutput` when the output `second` (named `name`) shares memory with the output
/// `first` (`views_share_memory`): one would overwrite the other. `message_format` (a string
/// literal) names both, e.g. "{f} and out share memory". Precondition: both passed `check_view`.
template <class A, size_t RankA, class B, size_t RankB>
Status check_disjoint_outputs(const TensorView<A, RankA>& first, const TensorView<B, RankB>& second,
                              const char* name, const char* message_format) noexcept {
  if (!views_share_memory(first, second)) return Status();
  return Status(ErrorCode::kOverlappingOutput, "", message_format,
                "give each output its own buffer (address ranges are compared, so outputs "
                "interleaved in one buffer are refused too)",
                {}, {}, name);
}

}  // namespace attnref
