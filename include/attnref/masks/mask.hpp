// SPDX-License-Identifier: Apache-2.0
/// @file mask.hpp
/// Splash attention masks: predicates `bool(q, kv)` over absolute 0-based positions, with JAX's
/// formulas (spec §3.1). `true` means "may attend".
///  - `FullMask`, `CausalMask` (q + offset >= kv), `LocalMask` (a band, each side optional),
///    `ChunkedCausalMask`, `DenseMask` (an explicit bool [Sq, Skv] view), `PredicateMask<F>`
///    (any callable, the FlexAttention `mask_mod` idea);
///  - `a & b`, `a | b` (`AndMask`, `OrMask`), `AnyMask` (type-erased), `MultiHeadMask` (one mask
///    per query head).
/// Constructor checks (JAX's K2..K12 that exist in C++) run in `check_mask(m)`, which returns a
/// `Status`; `validate_mask(m)` throws (both in validate/mask_checks.hpp, with the checks
/// themselves). K1 (conversion to bool), K6/K7 (element types of MultiHeadMask), K8/K9
/// (rank/dtype of a dense mask) and K10/K13 are compile-time in C++.
/// No Eigen, no RTTI. The validators do not include this header (only validate/mask_checks.hpp).
///
/// Example:
/// @code
///   attnref::CausalMask causal{{512, 512}};
///   attnref::LocalMask local{{512, 512}, 128, 0};     // window: 128 left, 0 right
///   auto both = causal & local;                        // AndMask
///   auto per_head = attnref::MultiHeadMask({causal, local, causal, local});
///   if (attnref::Status s = attnref::check_mask(per_head); !s.ok()) ...
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/validate/mask_checks.hpp"

namespace attnref {

namespace detail {

/// `a + b >= c`, exact for any int64 values: offsets and windows are not range-checked, so
/// `q + offset` may leave int64 (JAX's Python ints do not overflow).
constexpr bool sum_ge(std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
  std::int64_t s = 0;
  if (!checked_add(a, b, &s)) return b > 0;  // above INT64_MAX (>= c) or below INT64_MIN (< c)
  return s >= c;
}

/// `a - b <= c`, exact for any int64 values.
constexpr bool diff_le(std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  if (b == kMin) return a < 0 && (a + kMax) + 1 <= c;  // a - b = a + 2^63
  std::int64_t d = 0;
  if (!checked_add(a, -b, &d)) return b > 0;  // below INT64_MIN (<= c) or above INT64_MAX (> c)
  return d <= c;
}

}  // namespace detail

/// Every position may attend (JAX's FullMask).
struct FullMask : MaskBase {
  MaskShape shape{};  ///< (q_seq_len, kv_seq_len)

  FullMask() = default;
  explicit FullMask(MaskShape shape_) : shape(shape_) {}
  constexpr bool operator()(std::int64_t, std::int64_t) const noexcept { return true; }
  Status check() const { return detail::check_mask_shape_nonnegative(shape); }
  friend bool operator==(const FullMask& a, const FullMask& b) { return a.shape == b.shape; }
};

/// `q + offset >= kv` (JAX's CausalMask). A positive offset lets each row see `offset` more keys.
struct CausalMask : MaskBase {
  MaskShape shape{};             ///< (q_seq_len, kv_seq_len)
  std::int64_t offset = 0;       ///< shifts the diagonal toward larger kv
  std::int64_t shard_count = 1;  ///< JAX's shard_count; only checked (K11)

  CausalMask() = default;
  explicit CausalMask(MaskShape shape_, std::int64_t offset_ = 0, std::int64_t shard_count_ = 1)
      : shape(shape_), offset(offset_), shard_count(shard_count_) {}
  constexpr bool operator()(std::int64_t q, std::int64_t kv) const noexcept {
    return detail::sum_ge(q, offset, kv);  // q + offset >= kv without overflow
  }
  Status check() const {
    ATTNREF_RETURN_IF_ERROR(detail::check_mask_shape_nonnegative(shape));
    return detail::check_shard_count(shape, shard_count);
  }
  friend bool operator==(const CausalMask& a, const CausalMask& b) {
    return a.shape == b.shape && a.offset == b.offset;
  }
};

/// A band around the (offset) diagonal (JAX's LocalMask):
/// `(!left || q + offset - *left <= kv) && (!right || q + offset + *right >= kv)`.
/// Both sides unset allows everything. JAX requires the offset argument; here it is the third.
struct LocalMask : MaskBase {
  MaskShape shape{};                  ///< (q_seq_len, kv_seq_len)
  std::optional<std::int64_t> left;   ///< keys allowed before the diagonal; unset = unbounded
  std::optional<std::int64_t> right;  ///< keys allowed after the diagonal; unset = unbounded
  std::int64_t offset = 0;
  std::int64_t shard_count = 1;

  LocalMask() = default;
  LocalMask(MaskShape shape_, std::optional<std::int64_t> left_, std::optional<std::int64_t> right_,
            std::int64_t offset_, std::int64_t shard_count_ = 1)
      : shape(shape_), left(left_), right(right_), offset(offset_), shard_count(shard_count_) {}
  /// Positions are >= 0, so kv - q cannot overflow; offset -/+ a side is compared exactly.
  constexpr bool operator()(std::int64_t q, std::int64_t kv) const noexcept {
    return (!left || detail::diff_le(offset, *left, kv - q)) &&
           (!right || detail::sum_ge(offset, *right, kv - q));
  }
  Status check() const {
    ATTNREF_RETURN_IF_ERROR(detail::check_mask_shape_nonnegative(shape));
    return detail::check_shard_count(shape, shard_count);
  }
  friend bool operator==(const LocalMask& a, const LocalMask& b) {
    return a.shape == b.shape && a.left == b.left && a.right == b.right && a.offset == b.offset;
  }
};

/// Causal attention inside chunks of `chunk_size` tokens (JAX's ChunkedCausalMask):
/// `q / chunk == kv / chunk && q >= kv`. No offset.
struct ChunkedCausalMask : MaskBase {
  MaskShape shape{};
  std::int64_t chunk_size = 0;
  std::int64_t shard_count = 1;

  ChunkedCausalMask() = default;
  ChunkedCausalMask(MaskShape shape_, std::int64_t chunk_size_, std::int64_t shard_count_ = 1)
      : shape(shape_), chunk_size(chunk_size_), shard_count(shard_count_) {}
  constexpr bool operator()(std::int64_t q, std::int64_t kv) const noexcept {
    return q / chunk_size == kv / chunk_size && q >= kv;
  }
  Status check() const {
    ATTNREF_RETURN_IF_ERROR(detail::check_mask_shape_nonnegative(shape));
    ATTNREF_RETURN_IF_ERROR(detail::check_chunk_size(chunk_size));
    return detail::check_shard_count(shape, shard_count);
  }
  friend bool operator==(const ChunkedCausalMask& a, const ChunkedCausalMask& b) {
    return a.shape == b.shape && a.chunk_size == b.chunk_size;
  }
};

/// An explicit boolean mask `[q_seq_len, kv_seq_len]` (JAX's NumpyMask). Not owned. The rank
/// and dtype checks K8/K9 are compile-time: the view is `TensorView<const bool, 2>`.
struct DenseMask : MaskBase {
  TensorView<const bool, 2> mask;  ///< [q_seq_len, kv_seq_len]

  DenseMask() = default;
  explicit DenseMask(TensorView<const bool, 2> mask_) : mask(mask_) {}
  MaskShape shape() const noexcept { return mask.extents; }
  bool operator()(std::int64_t q, std::int64_t kv) const noexcept { return mask(q, kv); }
  Status check() const { return check_view(mask, "mask"); }
  friend bool operator==(const DenseMask& a, const DenseMask& b) {
    return a.mask.data == b.mask.data && a.mask.extents == b.mask.extents &&
           a.mask.strides == b.mask.strides;
  }
};

/// Any callable `bool(std::int64_t q, std::int64_t kv)` as a mask (FlexAttention's mask_mod).
template <class F>
struct PredicateMask : MaskBase {
  MaskShape shape{};
  F predicate;

  PredicateMask(MaskShape shape_, F predicate_) : shape(shape_), predicate(std::move(predicate_)) {}
  bool operator()(std::int64_t q, std::int64_t kv) const { return predicate(q, kv) ? true : false; }
  Status check() const { return detail::check_mask_shape_nonnegative(shape); }
};

/// Builds a PredicateMask, deducing the callable's type.
template <class F>
PredicateMask<F> make_predicate_mask(MaskShape shape, F predicate) {
  return PredicateMask<F>(shape, std::move(predicate));
}

/// `left AND right` (JAX's LogicalAnd). `from_operator` selects JAX's K2 text (built by `&`)
/// over K3 (built directly) when the shapes differ.
template <class L, class R>
struct AndMask : MaskBase {
  L left;
  R right;
  bool from_operator = false;

  AndMask(L left_, R right_, bool from_operator_ = false)
      : left(std::move(left_)), right(std::move(right_)), from_operator(from_operator_) {}
  MaskShape shape() const { return mask_shape(left); }
  bool operator()(std::int64_t q, std::int64_t kv) const { return left(q, kv) && right(q, kv); }
  Status check() const { return detail::check_binary_mask(left, right, from_operator); }
};

/// `left OR right` (JAX's LogicalOr).
template <class L, class R>
struct OrMask : MaskBase {
  L left;
  R right;
  bool from_operator = false;

  OrMask(L left_, R right_, bool from_operator_ = false)
      : left(std::move(left_)), right(std::move(right_)), from_operator(from_operator_) {}
  MaskShape shape() const { return mask_shape(left); }
  bool operator()(std::int64_t q, std::int64_t kv) const { return left(q, kv) || right(q, kv); }
  Status check() const { return detail::check_binary_mask(left, right, from_operator); }
};

/// `a & b`: AndMask; shapes are checked by `check_mask` (K2).
template <class L, class R, class = std::enable_if_t<is_mask_v<L> && is_mask_v<R>>>
AndMask<std::decay_t<L>, std::decay_t<R>> operator&(L&& left, R&& right) {
  return {std::forward<L>(left), std::forward<R>(right), true};
}

/// `a | b`: OrMask; shapes are checked by `check_mask` (K2).
template <class L, class R, class = std::enable_if_t<is_mask_v<L> && is_mask_v<R>>>
OrMask<std::decay_t<L>, std::decay_t<R>> operator|(L&& left, R&& right) {
  return {std::forward<L>(left), std::forward<R>(right), true};
}

namespace detail {

template <class M, class = void>
struct HasEquality : std::false_type {};
template <class M>
struct HasEquality<M, std::void_t<decltype(std::declval<const M&>() == std::declval<const M&>())>>
    : std::true_type {};

/// A distinct address per type: stands in for typeid so that mask equality needs no RTTI
/// (builds with -fno-rtti). The variable is mutable so that no linker folds two of them.
template <class T>
struct TypeTag {
  static char id;
};
template <class T>
char TypeTag<T>::id = 0;
template <class T>
const void* type_tag() noexcept {
  return &TypeTag<T>::id;
}

}  // namespace detail

/// A type-erased single-head mask (shared, immutable). Lets heads of different mask types live
/// in one `MultiHeadMask`. Tiles are evaluated with one virtual call each.
class AnyMask : public MaskBase {
 public:
  AnyMask() = default;

  /// Wraps any single-head mask. Only mask types convert: JAX's K6 ("masks should be of type
  /// Mask") and K7 (no nested MultiHeadMask) are compile errors.
  template <class M, class = std::enable_if_t<is_mask_v<M> &&
                                              !std::is_same<std::decay_t<M>, AnyMask>::value>>
  AnyMask(M mask)  // NOLINT(google-explicit-constructor): heads convert implicitly
      : impl_(std::make_shared<Model<M>>(std::move(mask))) {}

  MaskShape shape() const { return impl_ ? impl_->shape() : MaskShape{0, 0}; }
  bool operator()(std::int64_t q, std::int64_t kv) const { return impl_->eval(q, kv); }
  Status check() const {
    if (!impl_) {
      return Status(ErrorCode::kMaskShape, "", "an empty AnyMask holds no mask",
                    "construct AnyMask from a mask such as CausalMask");
    }
    return impl_->check();
  }
  /// Writes `mask(q, kv)` (as 0/1) for q in [q0, q1), kv in [k0, k1) to `out[(q-q0)*ld + kv-k0]`.
  void fill_tile(std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                 std::uint8_t* out, std::int64_t ld) const {
    impl_->fill_tile(q0, q1, k0, k1, out, ld);
  }
  /// True when both wrap the same mask object, or equal masks of a type with `==` (JAX
  /// deduplicates head masks by equality).
  bool same_as(const AnyMask& other) const {
    if (impl_ == other.impl_) return true;
    return impl_ && other.impl_ && impl_->same_as(*other.impl_);
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual MaskShape shape() const = 0;
    virtual bool eval(std::int64_t q, std::int64_t kv) const = 0;
    virtual Status check() const = 0;
    virtual void fill_tile(std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                           std::uint8_t* out, std::int64_t ld) const = 0;
    virtual bool same_as(const Concept& other) const = 0;
    virtual const void* type() const noexcept = 0;
    virtual const void* mask_address() const noexcept = 0;
  };
  template <class M>
  struct Model final : Concept {
    explicit Model(M m) : mask(std::move(m)) {}
    MaskShape shape() const override { return mask_shape(mask); }
    bool eval(std::int64_t q, std::int64_t kv) const override { return mask(q, kv); }
    Status check() const override { return mask.check(); }
    void fill_tile(std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                   std::uint8_t* out, std::int64_t ld) const override {
      for (std::int64_t q = q0; q < q1; ++q) {
        std::uint8_t* row = out + (q - q0) * ld;
        for (std::int64_t kv = k0; kv < k1; ++kv) row[kv - k0] = mask(q, kv) ? 1 : 0;
      }
    }
    bool same_as(const Concept& other) const override {
      if constexpr (detail::HasEquality<M>::value) {
        // Same tag means same M, so `other` holds an M. (Through its address, not a downcast
        // of `other`: g++ 12 reported a false -Warray-bounds on the downcast.)
        return other.type() == type() && *static_cast<const M*>(other.mask_address()) == mask;
      } else {
        return false;
      }
    }
    const void* type() const noexcept override { return detail::type_tag<M>(); }
    const void* mask_address() const noexcept override { return &mask; }
    M mask;
  };
  std::shared_ptr<const Concept> impl_;
};

/// One mask per query head (JAX's MultiHeadMask), shape (num_heads, q_seq_len, kv_seq_len).
/// A single head is shared by all query heads; otherwise there must be exactly num_q_heads.
class MultiHeadMask {
 public:
  MultiHeadMask() = default;
  explicit MultiHeadMask(std::vector<AnyMask> masks) : masks_(std::move(masks)) {}
  MultiHeadMask(std::initializer_list<AnyMask> masks) : masks_(masks) {}

  std::int64_t num_heads() const noexcept { return static_cast<std::int64_t>(masks_.size()); }
  const AnyMask& head(std::int64_t h) const { return masks_[static_cast<size_t>(h)]; }
  /// (q_seq_len, kv_seq_len) of head 0; (0, 0) when empty.
  MaskShape shape() const { return masks_.empty() ? MaskShape{0, 0} : masks_[0].shape(); }

  /// K4 (empty), then K5 (a head's shape differs from head 0's), then each head's own checks.
  Status check() const {
    ATTNREF_RETURN_IF_ERROR(
        detail::check_head_shapes(num_heads(), [this](std::int64_t h) { return head(h).shape(); }));
    for (const AnyMask& m : masks_) ATTNREF_RETURN_IF_ERROR(m.check());
    return Status();
  }

 private:
  std::vector<AnyMask> masks_;
};

}  // namespace attnref
