// SPDX-License-Identifier: Apache-2.0
/// @file splash.hpp
/// Splash attention (prefill and training) from arrays and options: the one builder of
/// `SplashAttentionArgs` and its `MultiHeadMask` that attnref-run and the Python module share.
/// `check_splash_ranks`, `check_splash_dtypes`, then `with_splash_args` (the args and the mask
/// in q's element type) and `check_splash_tiers`.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "array.hpp"
#include "attnref/compare/splash.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"
#include "options.hpp"

namespace attnref {
namespace frontend {

/// One head's mask, or every head's: a mask the library computes, or a bool array.
struct MaskSpec {
  enum class Kind { kFull, kCausal, kLocal, kChunked, kArray };
  Kind kind = Kind::kFull;
  std::int64_t offset = 0;                  ///< kCausal, kLocal: the diagonal's offset
  std::optional<std::int64_t> left, right;  ///< kLocal: keys before and after the diagonal
  std::int64_t chunk = 0;                   ///< kChunked
  Array array;            ///< kArray: [1 or Hq, Sq, Skv] (JAX's form), or one head's [Sq, Skv]
  bool one_head = false;  ///< kArray: `array` is one head's mask (shared, or in a list)
};

/// The arrays and options of one splash call.
struct SplashInputs {
  Array q, k, v, dout, q_segment_ids, kv_segment_ids;
  HeadValues sinks, alibi_slopes;
  std::optional<std::int64_t> sliding_window;
  CommonOptions common;
  SplashBlockSizes blocks = SplashBlockSizes::get_default();
  /// One spec: every head's mask; more: one per query head.
  std::vector<MaskSpec> mask{MaskSpec{}};
  bool backward = false;  ///< also the backward pass's checks

  bool is_mqa() const noexcept { return k.rank() == 2; }
};

/// A per-head mask array: [q_seq_len, kv_seq_len] bool.
inline void check_head_mask_array(const Array& a) {
  raise_if_error(check_rank(a, 2, "a per-head mask is [q_seq_len, kv_seq_len]"));
  raise_if_error(check_mask_dtype(a.dtype));
}

/// Ranks (JAX's S2, S3) and the mask arrays' dtype and head count.
inline void check_splash_ranks(const SplashInputs& in) {
  raise_if_error(check_rank(in.q, 3, "q is [num_q_heads, q_seq_len, head_dim_qk]"));
  raise_if_error(check_key_rank(in.k.rank(), in.is_mqa()));
  raise_if_error(check_rank(in.v, in.k.rank(),
                            "v has k's rank: [num_kv_heads, kv_seq_len, head_dim_v], or MQA "
                            "[kv_seq_len, head_dim_v]"));
  for (const MaskSpec& m : in.mask) {
    if (m.kind != MaskSpec::Kind::kArray) continue;
    if (m.one_head) {
      check_head_mask_array(m.array);
      continue;
    }
    raise_if_error(check_mask_rank(m.array.rank(), m.array.shape.data()));
    raise_if_error(check_mask_dtype(m.array.dtype));
    raise_if_error(check_mask_head_count(m.array.shape[0], in.q.shape[0]));
  }
  for (const Array* seg : {&in.q_segment_ids, &in.kv_segment_ids}) {
    if (!seg->present()) continue;
    raise_if_error(check_rank(*seg, 1, "segment ids are [sequence length]"));
    if (seg->dtype != DType::kInt32) raise_if_error(dtype_error(*seg, "segment ids must be int32"));
  }
  if (in.dout.present())
    raise_if_error(check_rank(in.dout, 3, "dout is [num_q_heads, q_seq_len, head_dim_v]"));
}

/// dout, when given, is the gradient of out: [num_q_heads, q_seq_len, head_dim_v].
inline void check_splash_dout(const SplashInputs& in) {
  if (!in.dout.present()) return;
  const std::vector<std::int64_t> want{in.q.shape[0], in.q.shape[1], in.v.shape.back()};
  if (in.dout.shape == want) return;
  raise_if_error(Status(
      ErrorCode::kShapeMismatch, "", "dout has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
      "dout is the gradient of out [num_q_heads, q_seq_len, head_dim_v]",
      {in.dout.shape[0], in.dout.shape[1], in.dout.shape[2], want[0], want[1], want[2]}, {},
      "dout"));
}

/// q's dtype is a query dtype (`q_hint`, the front end's words); k, v and dout take it.
inline void check_splash_dtypes(const SplashInputs& in, const char* q_hint) {
  if (!query_dtype_supported(in.q.dtype)) raise_if_error(dtype_error(in.q, q_hint));
  for (const Array* x : {&in.k, &in.v, &in.dout}) {
    if (x->present() && x->dtype != in.q.dtype)
      raise_if_error(dtype_mismatch(*x, in.q, "k, v and dout take q's dtype"));
  }
}

/// `[num_kv_heads, kv_seq_len, d]` view of k or v, or `[1, kv_seq_len, d]` of MQA's 2-D arrays.
template <class T>
TensorView<const T, 3> splash_kv_view(const Array& a) {
  if (a.rank() == 3) return view_of<T, 3>(a);
  const TensorView<const T, 2> v2 = view_of<T, 2>(a);
  return TensorView<const T, 3>(v2.data, {1, v2.extents[0], v2.extents[1]},
                                {0, v2.strides[0], v2.strides[1]});
}

template <class T>
SplashAttentionArgs<T> splash_args(const SplashInputs& in) {
  SplashAttentionArgs<T> a;
  a.q = view_of<T, 3>(in.q);
  a.k = splash_kv_view<T>(in.k);
  a.v = splash_kv_view<T>(in.v);
  a.is_mqa = in.is_mqa();
  if (in.q_segment_ids.present()) a.q_segment_ids = view_of<std::int32_t, 1>(in.q_segment_ids);
  if (in.kv_segment_ids.present()) a.kv_segment_ids = view_of<std::int32_t, 1>(in.kv_segment_ids);
  set_shared_options(in, a);
  a.block_sizes = in.blocks;
  return a;
}

/// One head's mask from its spec (a 2-D array for kArray).
inline AnyMask head_mask(const MaskSpec& m, MaskShape shape) {
  switch (m.kind) {
    case MaskSpec::Kind::kCausal:
      return CausalMask{shape, m.offset};
    case MaskSpec::Kind::kLocal:
      return LocalMask{shape, m.left, m.right, m.offset};
    case MaskSpec::Kind::kChunked:
      return ChunkedCausalMask{shape, m.chunk};
    case MaskSpec::Kind::kArray:
      return DenseMask{view_of<bool, 2>(m.array)};
    case MaskSpec::Kind::kFull:
      break;
  }
  return FullMask{shape};
}

/// The mask of the call. Heads of no element, or all at one address (stride 0), are one mask
/// shared by every head, so a (2^24, 0, 0) array does not become 2^24 mask objects.
inline MultiHeadMask splash_mask(const SplashInputs& in, MaskShape shape) {
  if (in.mask.size() != 1) {
    std::vector<AnyMask> heads;
    for (const MaskSpec& m : in.mask) heads.push_back(head_mask(m, shape));
    return MultiHeadMask(std::move(heads));
  }
  const MaskSpec& m = in.mask.front();
  if (m.kind != MaskSpec::Kind::kArray || m.one_head) return MultiHeadMask{head_mask(m, shape)};
  const TensorView<const bool, 3> all = view_of<bool, 3>(m.array);
  const auto head = [&](std::int64_t h) {
    return DenseMask{TensorView<const bool, 2>(all.data + h * all.strides[0],
                                               {all.extents[1], all.extents[2]},
                                               {all.strides[1], all.strides[2]})};
  };
  if (all.extents[1] == 0 || all.extents[2] == 0 || all.strides[0] == 0)
    return MultiHeadMask{head(0)};
  std::vector<AnyMask> heads;
  heads.reserve(static_cast<std::size_t>(all.extents[0]));
  for (std::int64_t h = 0; h < all.extents[0]; ++h) heads.emplace_back(head(h));
  return MultiHeadMask(std::move(heads));
}

/// What a comparison report may change in the mask: a single causal or local mask's offset and
/// left side (any other mask is left as it is).
inline compare::SplashMaskParams splash_mask_params(const SplashInputs& in) {
  using Kind = compare::SplashMaskParams::Kind;
  compare::SplashMaskParams p;
  if (in.mask.size() != 1) return p;
  const MaskSpec& m = in.mask.front();
  if (m.kind == MaskSpec::Kind::kCausal) p.kind = Kind::kCausal;
  if (m.kind == MaskSpec::Kind::kLocal) p.kind = Kind::kLocal;
  p.offset = m.offset;
  p.left = m.left;
  p.right = m.right;
  return p;
}

/// Calls `fn(args, mask)` in q's element type. Precondition: `check_splash_ranks` and
/// `check_splash_dtypes` passed.
template <class Fn>
void with_splash_args(const SplashInputs& in, Fn&& fn) {
  dispatch_query(in.q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SplashAttentionArgs<T> a = splash_args<T>(in);
    const MultiHeadMask mask = splash_mask(in, {a.q_seq_len(), a.kv_seq_len()});
    fn(a, mask);
  });
}

/// The tiers `in.common` asks for (shape, metadata, the backward's checks, data).
template <class T>
void check_splash_tiers(const SplashInputs& in, const SplashAttentionArgs<T>& a,
                        const MultiHeadMask& mask) {
  const Profile p = in.common.profile;
  raise_if_error(check_splash_shapes(a, mask, p));
  if (in.common.metadata) raise_if_error(check_splash_metadata(a, mask, p));
  if (in.backward) raise_if_error(check_splash_backward(a, mask, p));
  if (in.common.data) raise_if_error(check_splash_data(a));
}

/// Validates the call as `in.common` asks.
inline void check_splash_call(const SplashInputs& in) {
  with_splash_args(
      in, [&](const auto& a, const MultiHeadMask& mask) { check_splash_tiers(in, a, mask); });
}

}  // namespace frontend
}  // namespace attnref
