// SPDX-License-Identifier: Apache-2.0
/// @file splash_attention.hpp
/// Splash attention reference kernels (spec §2.5, §2.6): block-sparse masked attention over
/// q `[Hq, Sq, Dqk]`, k `[Hkv, Skv, Dqk]`, v `[Hkv, Skv, Dv]`, forward (+ logsumexp) and
/// backward (dq, dk, dv, dsinks).
///
/// Semantics (design.md §6):
///  - logits `x = sm_scale * q.k` (no implicit 1/sqrt(d)), then the soft cap `c * tanh(x / c)`,
///    then the mask (mask AND segment ids);
///  - a masked position has probability exactly 0. For JAX's default mask_value this equals
///    JAX's result on every row with an allowed key; `mask_value` is validated only;
///  - a sink `s_h` is one extra logit with a zero value vector;
///  - a row with no allowed key and no sink gives output 0 and logsumexp -inf (JAX: undefined);
///  - accumulation in f32 (f64 when an input is double); out in q's dtype, logsumexp f32;
///  - results depend on the block sizes only through rounding. Empty tiles are skipped without
///    reading K/V; full tiles evaluate no mask; the query heads that share a KV head reuse each
///    K/V sub-block.
///
/// Example:
/// @code
///   attnref::SplashAttentionArgs<float> args;
///   args.q = {q.data(), {8, 1024, 128}};
///   args.k = {k.data(), {2, 1024, 128}};
///   args.v = {v.data(), {2, 1024, 128}};
///   args.sm_scale = 1.0f / std::sqrt(128.0f);
///   attnref::CausalMask mask{{1024, 1024}};
///   std::vector<float> out(8 * 1024 * 128), lse(8 * 1024);
///   attnref::splash_attention(args, mask, attnref::TensorView<float, 3>(out.data(), {8, 1024,
///   128}),
///                             attnref::TensorView<float, 2>(lse.data(), {8, 1024}));
/// @endcode
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/error.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/masks/mask_info.hpp"
#include "attnref/validate/heads.hpp"
#include "attnref/validate/splash.hpp"

namespace attnref {

/// The gradients a splash backward pass writes. `dsinks` is optional (empty view: not written).
template <class Q, class KV = Q>
struct SplashGradients {
  TensorView<Q, 3> dq;          ///< [num_q_heads, q_seq_len, head_dim_qk], q's dtype
  TensorView<KV, 3> dk;         ///< [num_kv_heads, kv_seq_len, head_dim_qk], k's dtype
  TensorView<KV, 3> dv;         ///< [num_kv_heads, kv_seq_len, head_dim_v], v's dtype
  TensorView<float, 1> dsinks;  ///< [num_q_heads], only with sinks
};

namespace detail {

template <class Acc>
using SplashMatrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// rows [row0, row0 + rows) of head `head` of a [H, S, D] view, converted to Acc and scaled.
template <class Acc, class T>
void load_rows(const TensorView<const T, 3>& view, std::int64_t head, std::int64_t row0,
               std::int64_t rows, Acc scale, SplashMatrix<Acc>& dst) {
  const std::int64_t dim = view.extents[2];
  dst.resize(rows, dim);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* src = view.data + view.offset(head, row0 + r, 0);
    const std::int64_t stride = view.strides[2];
    Acc* out = dst.data() + r * dim;
    for (std::int64_t d = 0; d < dim; ++d) out[d] = load_as<Acc>(src[d * stride]) * scale;
  }
}

/// The q-side state of one query head over one q block.
template <class Acc>
struct SplashRowState {
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> m;  ///< running max (-inf: nothing seen yet)
  Eigen::Matrix<Acc, Eigen::Dynamic, 1> l;  ///< running sum of exp(x - m)
  SplashMatrix<Acc> o;                      ///< running sum of exp(x - m) * v
  SplashMatrix<Acc> q;                      ///< sm_scale * q rows
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Applies the soft cap and the mask to logits `s` [rows, cols] of tile (i, j), whose columns
/// start at absolute kv position `t0`: masked entries become -inf. `tile_col0` is `t0 - j*bkv`.
template <class Acc, class Q, class KV>
void cap_and_mask(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info, std::int64_t h,
                  std::int64_t i, std::int64_t j, std::int64_t r0, std::int64_t t0,
                  std::int64_t tile_col0, SplashMatrix<Acc>& s) {
  if (a.soft_cap) {
    const Acc c = static_cast<Acc>(*a.soft_cap);
    s = (s.array() / c).tanh().matrix() * c;
  }
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const auto rows = s.rows(), cols = s.cols();
  if (info.kind(h, i, j) == BlockKind::kPartial) {
    const std::uint8_t* p = info.partial_block(h, i, j);
    for (Eigen::Index r = 0; r < rows; ++r) {
      const std::uint8_t* pr = p + r * info.pattern_cols + tile_col0;
      for (Eigen::Index c = 0; c < cols; ++c)
        if (!pr[c]) s(r, c) = neg_inf;
    }
  }
  if (a.has_segment_ids()) {
    for (Eigen::Index r = 0; r < rows; ++r) {
      const std::int32_t qs = a.q_segment_ids(r0 + r);
      for (Eigen::Index c = 0; c < cols; ++c)
        if (a.kv_segment_ids(t0 + c) != qs) s(r, c) = neg_inf;
    }
  }
}

/// KV head read by query head h (all heads share head 0 under MQA).
template <class Q, class KV>
std::int64_t splash_kv_head(const SplashAttentionArgs<Q, KV>& a, std::int64_t h) {
  return a.is_mqa ? 0 : kv_head_of(h, a.num_q_heads(), a.num_kv_heads());
}

template <class Q, class KV>
Status check_splash_outputs(const SplashAttentionArgs<Q, KV>& a, const TensorView<Q, 3>& out,
                            const TensorView<float, 2>& lse) {
  const auto& e = out.extents;
  if (e[0] != a.num_q_heads() || e[1] != a.q_seq_len() || e[2] != a.head_dim_v()) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "{f} has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
                  "out is [num_q_heads, q_seq_len, head_dim_v]",
                  {e[0], e[1], e[2], a.num_q_heads(), a.q_seq_len(), a.head_dim_v()}, {}, "out");
  }
  ATTNREF_RETURN_IF_ERROR(check_output_view(out, "out"));
  if (!lse.empty_view()) {
    if (lse.extents[0] != a.num_q_heads() || lse.extents[1] != a.q_seq_len()) {
      return Status(ErrorCode::kShapeMismatch, "", "{f} has shape ({0}, {1}); expected ({2}, {3})",
                    "logsumexp is [num_q_heads, q_seq_len]",
                    {lse.extents[0], lse.extents[1], a.num_q_heads(), a.q_seq_len()}, {},
                    "logsumexp");
    }
    ATTNREF_RETURN_IF_ERROR(check_output_view(lse, "logsumexp"));
  }
  return Status();
}

/// The forward pass proper. Preconditions: inputs, MaskInfo and outputs checked.
template <class Q, class KV>
void splash_forward_unchecked(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info,
                              const TensorView<Q, 3>& out, const TensorView<float, 2>& lse) {
  using Acc = AccumulatorOf<Q, KV>;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const std::int64_t hq = a.num_q_heads();
  const std::int64_t hkv = a.is_mqa ? 1 : a.num_kv_heads();
  const std::int64_t group = hq / hkv;
  const std::int64_t dv = a.head_dim_v();
  const std::int64_t bkv = info.block_kv;
  const std::int64_t bc = std::max<std::int64_t>(1, std::min(a.block_sizes.kv_compute(), bkv));
  const Acc scale = static_cast<Acc>(a.sm_scale);
  std::vector<SplashRowState<Acc>> state(static_cast<size_t>(group));
  SplashMatrix<Acc> kc, vc, s;
  for (std::int64_t kh = 0; kh < hkv; ++kh) {
    const std::int64_t h0 = kh * group;
    for (std::int64_t i = 0; i < info.num_q_blocks; ++i) {
      const std::int64_t r0 = i * info.block_q;
      const std::int64_t rows = info.q_rows(i);
      for (std::int64_t g = 0; g < group; ++g) {
        SplashRowState<Acc>& st = state[static_cast<size_t>(g)];
        load_rows<Acc>(a.q, h0 + g, r0, rows, scale, st.q);
        st.o.setZero(rows, dv);
        if (a.has_sinks()) {
          st.m.setConstant(rows, static_cast<Acc>(a.sinks(h0 + g)));
          st.l.setOnes(rows);
        } else {
          st.m.setConstant(rows, neg_inf);
          st.l.setZero(rows);
        }
      }
      for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
        bool any = false;
        for (std::int64_t g = 0; g < group && !any; ++g)
          any = info.kind(h0 + g, i, j) != BlockKind::kEmpty;
        if (!any) continue;  // skipped: K/V of this tile are never read
        const std::int64_t cols = info.kv_cols(j);
        for (std::int64_t c0 = 0; c0 < cols; c0 += bc) {
          const std::int64_t t0 = j * bkv + c0;
          const std::int64_t n = std::min(bc, cols - c0);
          load_rows<Acc>(a.k, kh, t0, n, Acc(1), kc);
          load_rows<Acc>(a.v, kh, t0, n, Acc(1), vc);
          for (std::int64_t g = 0; g < group; ++g) {
            const std::int64_t h = h0 + g;
            if (info.kind(h, i, j) == BlockKind::kEmpty) continue;
            SplashRowState<Acc>& st = state[static_cast<size_t>(g)];
            s.noalias() = st.q * kc.transpose();
            cap_and_mask<Acc>(a, info, h, i, j, r0, t0, c0, s);
            for (Eigen::Index r = 0; r < rows; ++r) {
              const Acc tile_max = s.row(r).maxCoeff();
              const Acc m_new = std::max(st.m[r], tile_max);
              if (m_new == neg_inf) {  // nothing allowed so far in this row
                s.row(r).setZero();
                continue;
              }
              const Acc alpha = std::exp(st.m[r] - m_new);
              // Eigen's vectorized exp clamps its argument, so exp(-inf) is not exactly 0:
              // masked entries are zeroed by a select.
              s.row(r) = (s.row(r).array() == neg_inf)
                             .select(Acc(0), (s.row(r).array() - m_new).exp())
                             .matrix();
              st.l[r] = alpha * st.l[r] + s.row(r).sum();
              st.o.row(r) *= alpha;
              st.m[r] = m_new;
            }
            st.o.noalias() += s * vc;
          }
        }
      }
      for (std::int64_t g = 0; g < group; ++g) {
        const SplashRowState<Acc>& st = state[static_cast<size_t>(g)];
        const std::int64_t h = h0 + g;
        for (std::int64_t r = 0; r < rows; ++r) {
          const bool live = st.l[r] > Acc(0);
          const Acc inv = live ? Acc(1) / st.l[r] : Acc(0);
          Q* dst = out.data + out.offset(h, r0 + r, 0);
          for (std::int64_t d = 0; d < dv; ++d)
            dst[d * out.strides[2]] = store_as<Q>(st.o(r, d) * inv);
          if (!lse.empty_view()) {
            lse(h, r0 + r) = live ? static_cast<float>(st.m[r] + std::log(st.l[r])) : kNegInf;
          }
        }
      }
    }
  }
}

/// The fused backward pass. Preconditions: inputs, MaskInfo and tensors checked.
template <class Q, class KV>
void splash_backward_unchecked(const SplashAttentionArgs<Q, KV>& a, const MaskInfo& info,
                               const TensorView<const Q, 3>& out,
                               const TensorView<const float, 2>& lse,
                               const TensorView<const Q, 3>& dout,
                               const SplashGradients<Q, KV>& grads) {
  using Acc = AccumulatorOf<Q, KV>;
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dqk = a.head_dim_qk();
  const std::int64_t hkv = a.is_mqa ? 1 : a.num_kv_heads();
  const std::int64_t group = hq / hkv;
  const std::int64_t dvd = a.head_dim_v();
  const Acc scale = static_cast<Acc>(a.sm_scale);
  // di[h, r] = sum_d o * dO (the "flash" form).
  std::vector<Acc> di(static_cast<size_t>(hq * sq));
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < sq; ++r) {
      Acc sum = 0;
      for (std::int64_t d = 0; d < dvd; ++d)
        sum += load_as<Acc>(out(h, r, d)) * load_as<Acc>(dout(h, r, d));
      di[static_cast<size_t>(h * sq + r)] = sum;
    }
  SplashMatrix<Acc> dq_acc = SplashMatrix<Acc>::Zero(hq * sq, dqk);
  SplashMatrix<Acc> kj, vj, dk_acc, dv_acc, qi, doi, s, t, p, dp;
  for (std::int64_t kh = 0; kh < hkv; ++kh) {
    for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
      const std::int64_t t0 = j * info.block_kv;
      const std::int64_t cols = info.kv_cols(j);
      bool any = false;
      for (std::int64_t g = 0; g < group && !any; ++g)
        for (std::int64_t i = 0; i < info.num_q_blocks && !any; ++i)
          any = info.kind(kh * group + g, i, j) != BlockKind::kEmpty;
      dk_acc.setZero(cols, dqk);
      dv_acc.setZero(cols, dvd);
      if (any) {
        load_rows<Acc>(a.k, kh, t0, cols, Acc(1), kj);
        load_rows<Acc>(a.v, kh, t0, cols, Acc(1), vj);
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t h = kh * group + g;
          for (std::int64_t i = 0; i < info.num_q_blocks; ++i) {
            if (info.kind(h, i, j) == BlockKind::kEmpty) continue;
            const std::int64_t r0 = i * info.block_q;
            const std::int64_t rows = info.q_rows(i);
            load_rows<Acc>(a.q, h, r0, rows, scale, qi);
            load_rows<Acc>(dout, h, r0, rows, Acc(1), doi);
            s.noalias() = qi * kj.transpose();
            if (a.soft_cap) {
              const Acc c = static_cast<Acc>(*a.soft_cap);
              t = (s.array() / c).tanh().matrix();  // d = tanh(xu / c)
            }
            cap_and_mask<Acc>(a, info, h, i, j, r0, t0, 0, s);
            p.resize(rows, cols);
            for (Eigen::Index r = 0; r < rows; ++r) {
              const Acc l = static_cast<Acc>(lse(h, r0 + r));
              if (l == -std::numeric_limits<Acc>::infinity()) {
                p.row(r).setZero();  // a row with no allowed key has no gradient
              } else {
                p.row(r) = (s.row(r).array() == -std::numeric_limits<Acc>::infinity())
                               .select(Acc(0), (s.row(r).array() - l).exp())
                               .matrix();
              }
            }
            dv_acc.noalias() += p.transpose() * doi;
            dp.noalias() = doi * vj.transpose();
            for (Eigen::Index r = 0; r < rows; ++r)
              dp.row(r).array() -= di[static_cast<size_t>(h * sq + r0 + r)];
            dp.array() *= p.array();  // ds
            if (a.soft_cap) dp.array() *= (Acc(1) - t.array().square());
            dk_acc.noalias() += dp.transpose() * qi;
            dq_acc.middleRows(h * sq + r0, rows).noalias() += (dp * kj) * scale;
          }
        }
      }
      for (std::int64_t r = 0; r < cols; ++r) {
        for (std::int64_t d = 0; d < dqk; ++d) grads.dk(kh, t0 + r, d) = store_as<KV>(dk_acc(r, d));
        for (std::int64_t d = 0; d < dvd; ++d) grads.dv(kh, t0 + r, d) = store_as<KV>(dv_acc(r, d));
      }
    }
  }
  for (std::int64_t h = 0; h < hq; ++h)
    for (std::int64_t r = 0; r < sq; ++r)
      for (std::int64_t d = 0; d < dqk; ++d) grads.dq(h, r, d) = store_as<Q>(dq_acc(h * sq + r, d));
  if (!grads.dsinks.empty_view()) {
    for (std::int64_t h = 0; h < hq; ++h) {
      const Acc sink = static_cast<Acc>(a.sinks(h));
      Acc sum = 0;
      for (std::int64_t r = 0; r < sq; ++r)
        sum -= std::exp(sink - static_cast<Acc>(lse(h, r))) * di[static_cast<size_t>(h * sq + r)];
      grads.dsinks(h) = static_cast<float>(sum);
    }
  }
}

}  // namespace detail

/// Forward pass against a pre-built MaskInfo (built with `block_sizes.block_q/block_kv`; reuse
/// it across calls). Validates (`check_splash(args, info, profile)` and the output shapes),
/// throws `ShapeError` on error, then writes `out` [Hq, Sq, Dv] and, when given, `logsumexp`
/// [Hq, Sq].
template <class Q, class KV>
void splash_forward(const SplashAttentionArgs<Q, KV>& args, const MaskInfo& info,
                    TensorView<Q, 3> out, TensorView<float, 2> logsumexp = {},
                    Profile profile = Profile::kReference) {
  throw_if_error(check_splash(args, info, profile));
  throw_if_error(detail::check_splash_outputs(args, out, logsumexp));
  detail::splash_forward_unchecked(args, info, out, logsumexp);
}

/// Forward pass: classifies `mask` into (block_q, block_kv) tiles, validates, runs.
template <class Q, class KV, class M>
void splash_attention(const SplashAttentionArgs<Q, KV>& args, const M& mask, TensorView<Q, 3> out,
                      TensorView<float, 2> logsumexp = {}, Profile profile = Profile::kReference) {
  throw_if_error(check_splash(args, mask, profile));
  MaskInfo info;
  throw_if_error(build_mask_info(mask, args.block_sizes.block_q, args.block_sizes.block_kv, profile,
                                 &info, args.sharding));
  throw_if_error(detail::check_splash_outputs(args, out, logsumexp));
  detail::splash_forward_unchecked(args, info, out, logsumexp);
}

/// Backward pass against a MaskInfo built with the dkv block sizes (`block_sizes.q_dkv()`,
/// `kv_dkv()`). `out` and `logsumexp` are the forward's; gradients per spec §2.6 (one fused
/// pass: dk/dv summed over the query heads of each KV head, all heads under MQA).
template <class Q, class KV>
void splash_backward(const SplashAttentionArgs<Q, KV>& args, const MaskInfo& info,
                     TensorView<const Q, 3> out, TensorView<const float, 2> logsumexp,
                     TensorView<const Q, 3> dout, const SplashGradients<Q, KV>& grads,
                     Profile profile = Profile::kReference) {
  SplashAttentionArgs<Q, KV> fwd = args;  // the MaskInfo carries the dkv blocks
  fwd.block_sizes.block_q = info.block_q;
  fwd.block_sizes.block_kv = info.block_kv;
  fwd.block_sizes.block_kv_compute = args.block_sizes.kv_dkv_compute();
  throw_if_error(check_splash(fwd, info, Profile::kReference));
  if (profile == Profile::kJax)
    throw_if_error(
        check_splash_backward(args, FullMask{{info.q_seq_len, info.kv_seq_len}}, profile));
  throw_if_error(check_splash_backward_tensors(args, out, logsumexp, dout, grads.dq, grads.dk,
                                               grads.dv, grads.dsinks));
  detail::splash_backward_unchecked(args, info, out, logsumexp, dout, grads);
}

/// Backward pass: classifies `mask` with the dkv block sizes, validates
/// (`check_splash_backward`), runs.
template <class Q, class KV, class M>
void splash_attention_backward(const SplashAttentionArgs<Q, KV>& args, const M& mask,
                               TensorView<const Q, 3> out, TensorView<const float, 2> logsumexp,
                               TensorView<const Q, 3> dout, const SplashGradients<Q, KV>& grads,
                               Profile profile = Profile::kReference) {
  throw_if_error(check_splash_backward(args, mask, profile));
  MaskInfo info;
  throw_if_error(build_mask_info(mask, args.block_sizes.q_dkv(), args.block_sizes.kv_dkv(),
                                 Profile::kReference, &info, args.sharding));
  throw_if_error(check_splash_backward_tensors(args, out, logsumexp, dout, grads.dq, grads.dk,
                                               grads.dv, grads.dsinks));
  detail::splash_backward_unchecked(args, info, out, logsumexp, dout, grads);
}

}  // namespace attnref
