// SPDX-License-Identifier: Apache-2.0
/// @file mask_checks.hpp
/// The container-free part of the masks: the shape type, the mask base, and the constructor
/// checks every mask runs (JAX's K2, K3, K11 and shape sanity), plus the generic accessors
/// `mask_shape`, `mask_num_heads` and `check_mask`. No containers, no RTTI, no Eigen: the
/// validators (validate/splash.hpp) include this header and never see masks/mask.hpp, which
/// includes it for its mask types' checks.
///
/// Example:
/// @code
///   attnref::CausalMask causal{{512, 512}};                   // masks/mask.hpp
///   attnref::Status s = attnref::check_mask(causal);          // shape sanity, K11
///   std::int64_t heads = attnref::mask_num_heads(causal);     // 1
///   attnref::MaskShape shape = attnref::mask_shape(causal);   // (512, 512)
/// @endcode
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/status.hpp"

namespace attnref {

/// (q_seq_len, kv_seq_len) of a single-head mask.
using MaskShape = std::array<std::int64_t, 2>;

/// Base of every single-head mask type. Conversion to bool is deleted: JAX's K1 ("Conversion to
/// bool is unsupported. Could be caused by using logical instead of bitwise operations on
/// masks.") becomes a compile error; combine masks with `&` and `|`, not `&&` and `||`.
struct MaskBase {
  explicit operator bool() const = delete;
};

/// True for single-head mask types (those deriving from MaskBase).
template <class M>
inline constexpr bool is_mask_v = std::is_base_of<MaskBase, std::decay_t<M>>::value;

class MultiHeadMask;  // masks/mask.hpp; named here only to count its heads

/// The (q_seq_len, kv_seq_len) of any single-head mask (a `shape` member or `shape()`).
template <class M>
MaskShape mask_shape(const M& m) {
  if constexpr (std::is_member_function_pointer<decltype(&M::shape)>::value) {
    return m.shape();
  } else {
    return m.shape;
  }
}

/// Number of heads of a mask: 1 for a single-head mask.
template <class M>
std::int64_t mask_num_heads(const M& m) {
  if constexpr (std::is_same<M, MultiHeadMask>::value) {
    return m.num_heads();
  } else {
    return 1;
  }
}

/// The constructor checks of any mask (K2..K5, K11, K12 and the view checks of a DenseMask).
template <class M>
Status check_mask(const M& m) {
  return m.check();
}

/// Throwing wrapper of `check_mask`.
template <class M>
void validate_mask(const M& m) {
  throw_if_error(check_mask(m));
}

namespace detail {

/// Shape sanity of every mask: no negative dimension.
inline Status check_mask_shape_nonnegative(const MaskShape& s) {
  if (s[0] < 0 || s[1] < 0) {
    return Status(ErrorCode::kMaskShape, "", "mask shape ({0}, {1}) has a negative dimension",
                  "a mask's shape is (q_seq_len, kv_seq_len)", {s[0], s[1]});
  }
  return Status();
}

/// K11: Sq % shard_count^2 == 0 (JAX's text), after shard_count >= 1 (ours).
inline Status check_shard_count(const MaskShape& s, std::int64_t shard_count) {
  if (shard_count <= 0) {
    return Status(ErrorCode::kInvalidMaskParameter, "", "shard_count={0} must be positive.",
                  "use shard_count=1 on a single device", {shard_count}, {}, "shard_count");
  }
  std::int64_t squared = 0;
  if (!checked_mul(shard_count, shard_count, &squared) || s[0] % squared != 0) {
    return Status(ErrorCode::kInvalidMaskParameter, "K11",
                  "Shard count squared ({0}) must divide Q seq_len ({1}) evenly.",
                  "use shard_count=1 on a single device, or pad q_seq_len to a multiple of {0}",
                  {squared, s[0]}, {}, "shard_count");
  }
  return Status();
}

/// K12: a chunked-causal mask's chunk is positive.
inline Status check_chunk_size(std::int64_t chunk_size) {
  if (chunk_size <= 0) {
    return Status(ErrorCode::kInvalidMaskParameter, "K12", "chunk_size must be positive",
                  "got chunk_size={0}; use the attention chunk length, e.g. 512", {chunk_size}, {},
                  "chunk_size");
  }
  return Status();
}

/// Both operands of `&` / `|` (or of AndMask / OrMask built directly): each one's own checks,
/// then equal shapes (K2 from an operator, K3 otherwise).
template <class L, class R>
Status check_binary_mask(const L& left, const R& right, bool from_operator) {
  ATTNREF_RETURN_IF_ERROR(left.check());
  ATTNREF_RETURN_IF_ERROR(right.check());
  const MaskShape a = mask_shape(left);
  const MaskShape b = mask_shape(right);
  if (a != b) {
    if (from_operator) {
      return Status(ErrorCode::kMaskShape, "K2",
                    "Invalid shape for other: ({0}, {1}), expected: ({2}, {3})",
                    "both sides of & and | must have the same (q_seq_len, kv_seq_len)",
                    {b[0], b[1], a[0], a[1]});
    }
    return Status(ErrorCode::kMaskShape, "K3", "Masks must have the same shape",
                  "got ({0}, {1}) and ({2}, {3})", {a[0], a[1], b[0], b[1]});
  }
  return Status();
}

/// K4 and K5 of a multi-head mask, given its head count and a callable `shape_of(h)`.
template <class ShapeOf>
Status check_head_shapes(std::int64_t num_heads, const ShapeOf& shape_of) {
  if (num_heads == 0) {
    return Status(ErrorCode::kMaskHeadCount, "K4", "Unsupported empty tuple of masks",
                  "give one mask (shared by all heads) or one per query head");
  }
  const MaskShape s0 = shape_of(0);
  for (std::int64_t h = 0; h < num_heads; ++h) {
    const MaskShape s = shape_of(h);
    if (s != s0) {
      return Status(ErrorCode::kMaskShape, "K5",
                    "Unexpected mask shape, got: ({0}, {1}), expected: ({2}, {3})",
                    "every head's mask has the same (q_seq_len, kv_seq_len)",
                    {s[0], s[1], s0[0], s0[1]});
    }
  }
  return Status();
}

}  // namespace detail

}  // namespace attnref
