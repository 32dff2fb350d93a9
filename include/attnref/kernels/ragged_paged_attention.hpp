// SPDX-License-Identifier: Apache-2.0
/// @file ragged_paged_attention.hpp
/// Ragged paged attention on the CPU: prefill and decode sequences in one ragged batch over one
/// shared page pool, the exact math of JAX's `ragged_paged_attention` (spec §4.4) with f32
/// accumulation (f64 for double inputs).
///
/// Example:
/// @code
///   attnref::RaggedPagedAttentionArgs<float> args;     // views over the engine's buffers
///   args.q = {q.data(), {max_tokens, 32, 128}};          // [T, Hq, D]
///   args.kv_pages = {kv.data(), {pages, 16, 16, 128}};   // [P, S, 2*Hkv, D]
///   args.kv_lens = {kv_lens.data(), {max_seqs}};
///   args.page_indices = {table.data(), {max_seqs, pages_per_seq}};
///   args.cu_q_lens = {cu.data(), {max_seqs + 1}};
///   args.num_seqs_value = live_seqs;
///   args.sm_scale = 1.0f / std::sqrt(128.0f);
///   std::vector<float> out(q.size());
///   attnref::ragged_paged_attention(args, {out.data(), {max_tokens, 32, 128}});  // throws
/// @endcode
///
/// How it runs: for each live sequence and each KV head, the G query heads sharing that KV head
/// and all q_len rows of the sequence form one (q_len * G) x D row block. K/V are read a block
/// of pages at a time (only the tokens some row can see: never past kv_len, never before the
/// earliest sliding window, never an unused page), each page once per group, and folded in with
/// one online-softmax step (`softmax_step`, the same masking code for every row). Decode rows
/// and prefill rows share this code; only the tiling depends on the row block's size: a block
/// of at most `kRaggedSmallRows` rows (a decode sequence, or a short prefill chunk) walks the
/// pages once for all KV heads with register-blocked tiles, a larger one gathers 128-token
/// blocks per KV head for matrix products and skips the rows a block cannot affect. Work items
/// go to an executor (serial by default; see core/executor.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/error.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/kernels/detail/convert.hpp"
#include "attnref/kernels/detail/tile_products.hpp"
#include "attnref/validate/ragged.hpp"

namespace attnref {

namespace detail {

/// Tokens per step: scratch is sized by this, never by the page size (a valid call with huge
/// pages and short sequences must not allocate a page's worth of scratch).
inline constexpr std::int64_t kRaggedChunkTokens = 128;

/// Keys gathered per block of the many-rows path: whole pages up to about 128 tokens, or 128
/// tokens of a larger page.
inline std::int64_t ragged_block_tokens(std::int64_t page_size) noexcept {
  if (page_size >= kRaggedChunkTokens) return kRaggedChunkTokens;
  return (kRaggedChunkTokens + page_size - 1) / page_size * page_size;
}

/// Row blocks of at most this many rows (decode: q_len x G) take the dot-product path.
inline constexpr Eigen::Index kRaggedSmallRows = 16;

/// Output view check: the shape of q, and a valid view.
template <class Q, class KV, class Index>
Status check_ragged_out(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                        const TensorView<Q, 3>& out) {
  const auto& e = out.extents;
  const auto& q = a.q.extents;
  if (e[0] != q[0] || e[1] != q[1] || e[2] != q[2]) {
    return Status(ErrorCode::kShapeMismatch, "",
                  "out has shape ({0}, {1}, {2}); expected q's shape ({3}, {4}, {5})",
                  "the output has one row per q row, padding rows included (they are zeroed)",
                  {e[0], e[1], e[2], q[0], q[1], q[2]}, {}, "out");
  }
  return check_output_view(out, "out");
}

/// Reads one K or V element as the accumulator type, dequantized as JAX does when a scale is
/// given: `q_dtype(float(x) * scale)`.
template <class Acc, class Q, class KV>
inline Acc load_kv(const KV& x, bool scaled, float scale) noexcept {
  if (!scaled) return load_as<Acc>(x);
  if constexpr (std::is_same<Q, double>::value) {
    return load_as<double>(x) * static_cast<double>(scale);
  } else {
    const float v = load_as<float>(x) * scale;
    return load_as<Acc>(store_as<Q>(v));
  }
}

/// Per-thread buffers of the ragged kernel, sized by one sequence's row block and one page
/// block (never by the cache). Kept thread_local and grown on demand, so a steady-state serving
/// loop does not allocate.
template <class Acc>
struct RaggedScratch {
  using Matrix = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vector = Eigen::Matrix<Acc, Eigen::Dynamic, 1>;
  // Many-rows path: one KV head's rows of one sequence, a block of gathered K/V.
  Matrix q_block, acc, k_block, v_block, s;
  Vector m, l, alpha;
  std::vector<const Acc*> k_rows, v_rows;
  // Few-rows path: every KV head's rows of one sequence, one chunk of one page.
  Matrix qs, acc_s, logits_s, k_page, v_page;
  Vector m_s, l_s, alpha_s;
  std::vector<const Acc*> k_page_rows, v_page_rows;

  static void fit(Matrix& x, Eigen::Index rows, Eigen::Index cols) {
    if (x.rows() < rows || x.cols() != cols) x.resize(std::max(rows, x.rows()), cols);
  }
  static void fit(Vector& x, Eigen::Index rows) {
    if (x.rows() < rows) x.resize(rows);
  }
  static void fit(std::vector<const Acc*>& x, Eigen::Index n) {
    if (static_cast<Eigen::Index>(x.size()) < n) x.resize(static_cast<std::size_t>(n));
  }
  void fit_many(Eigen::Index rows, Eigen::Index block, Eigen::Index dim) {
    fit(q_block, rows, dim);
    fit(acc, rows, dim);
    fit(s, rows, block);
    fit(m, rows);
    fit(l, rows);
    fit(alpha, rows);
    fit(k_block, block, dim);
    fit(v_block, block, dim);
    fit(k_rows, block);
    fit(v_rows, block);
  }
  void fit_few(Eigen::Index rows, Eigen::Index chunk, Eigen::Index page_keys, Eigen::Index dim) {
    fit(qs, rows, dim);
    fit(acc_s, rows, dim);
    fit(logits_s, rows, chunk);
    fit(m_s, rows);
    fit(l_s, rows);
    fit(alpha_s, rows);
    fit(k_page, page_keys, dim);
    fit(v_page, page_keys, dim);
    fit(k_page_rows, page_keys);
    fit(v_page_rows, page_keys);
  }
};

template <class Q, class KV, class Index, class Executor>
void ragged_paged_attention_impl(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                                 const TensorView<Q, 3>& out, Executor&& executor) {
  using Acc = AccumulatorOf<Q, KV>;
  using Matrix = typename RaggedScratch<Acc>::Matrix;
  using Vector = typename RaggedScratch<Acc>::Vector;

  const std::int64_t tokens = a.max_num_batched_tokens();
  const std::int64_t hq = a.num_q_heads();
  const std::int64_t hkv = a.num_kv_heads();
  const std::int64_t dim = a.head_dim();
  const std::int64_t page_size = a.page_size();
  const std::int64_t group = group_size(hq, hkv);
  const std::int64_t n = a.num_seqs_count();
  const std::int64_t live_rows = a.cu_q_lens(n);
  const Acc scale = static_cast<Acc>(a.sm_scale);
  const bool capped = a.soft_cap.has_value();
  const Acc cap = capped ? static_cast<Acc>(*a.soft_cap) : Acc(1);
  const bool window = a.sliding_window.has_value();
  const std::int64_t w = window ? *a.sliding_window : 0;
  const bool k_scaled = a.k_scale.has_value();
  const bool v_scaled = a.v_scale.has_value();
  const float k_scale = k_scaled ? *a.k_scale : 1.0f;
  const float v_scale = v_scaled ? *a.v_scale : 1.0f;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();

  // Padding rows are defined as zero.
  for (std::int64_t t = live_rows; t < tokens; ++t)
    for (std::int64_t h = 0; h < hq; ++h)
      for (std::int64_t d = 0; d < dim; ++d) out(t, h, d) = store_as<Q>(Acc(0));

  std::int64_t max_q_len = 0;
  for (std::int64_t i = 0; i < n; ++i)
    max_q_len = std::max<std::int64_t>(max_q_len, a.cu_q_lens(i + 1) - a.cu_q_lens(i));
  if (max_q_len == 0) return;

  const std::int64_t block = ragged_block_tokens(page_size);
  const Eigen::Index d_idx = static_cast<Eigen::Index>(dim);
  const bool q_contiguous = a.q.strides[2] == 1;
  const bool kv_contiguous = a.kv_pages.strides[3] == 1;
  // f32 pages with f32 accumulation (f64 with f64) can be read where they lie.
  constexpr bool kDirect = std::is_same<std::remove_cv_t<KV>, Acc>::value;
  const Eigen::Index small_rows = static_cast<Eigen::Index>(kRaggedSmallRows * hkv);
  const std::int64_t chunk = std::min(page_size, kRaggedChunkTokens);
  const Eigen::Index page_keys = static_cast<Eigen::Index>(chunk * hkv);

  // One contiguous row of `dim` elements to the accumulator type, vectorised.
  auto widen_row = [dim](const KV* src, Acc* dst) {
    if constexpr (std::is_same<KV, Eigen::bfloat16>::value && std::is_same<Acc, float>::value) {
      widen_bf16(src, dim, dst);
    } else {
      using Row = Eigen::Array<Acc, Eigen::Dynamic, 1>;
      using SrcRow = Eigen::Array<KV, Eigen::Dynamic, 1>;
      const Eigen::Index len = static_cast<Eigen::Index>(dim);
      Eigen::Map<Row>(dst, len) = Eigen::Map<const SrcRow>(src, len).template cast<Acc>();
    }
  };

  // Converts K and V of `count` tokens from `slot0` of `page`, KV head h, into rows
  // buf_row0 + t * buf_step of the buffers, and points k_out/v_out (step out_step) at them.
  // Gathering beats reading f32 rows in place: a page is read front to back, which the
  // hardware prefetcher follows.
  auto load_rows = [&](std::int64_t page, std::int64_t slot0, std::int64_t count, std::int64_t h,
                       Matrix& kd_buf, Matrix& vd_buf, std::int64_t buf_row0, std::int64_t buf_step,
                       const Acc** k_out, const Acc** v_out, std::int64_t out_step) {
    for (std::int64_t t = 0; t < count; ++t) {
      const Acc** kp = k_out + t * out_step;
      const Acc** vp = v_out + t * out_step;
      const Eigen::Index br = static_cast<Eigen::Index>(buf_row0 + t * buf_step);
      Acc* kd = kd_buf.row(br).data();
      Acc* vd = vd_buf.row(br).data();
      if (kv_contiguous) {
        const KV* ks = &a.kv_pages(page, slot0 + t, 2 * h, 0);
        const KV* vs = &a.kv_pages(page, slot0 + t, 2 * h + 1, 0);
        if (k_scaled) {
          for (std::int64_t d = 0; d < dim; ++d) kd[d] = load_kv<Acc, Q>(ks[d], true, k_scale);
        } else {
          widen_row(ks, kd);
        }
        if (v_scaled) {
          for (std::int64_t d = 0; d < dim; ++d) vd[d] = load_kv<Acc, Q>(vs[d], true, v_scale);
        } else {
          widen_row(vs, vd);
        }
      } else {
        for (std::int64_t d = 0; d < dim; ++d) {
          kd[d] = load_kv<Acc, Q>(a.kv_pages(page, slot0 + t, 2 * h, d), k_scaled, k_scale);
          vd[d] = load_kv<Acc, Q>(a.kv_pages(page, slot0 + t, 2 * h + 1, d), v_scaled, v_scale);
        }
      }
      *kp = kd;
      *vp = vd;
    }
  };

  // One online-softmax step for one row: scale, cap, fold the visible logits [v0, v0 + nv) of
  // `x` into (m, l) and leave exp(x - m_new) there (0 elsewhere); returns the rescale factor.
  auto softmax_step = [&](auto x, Eigen::Index v0, Eigen::Index nv, Acc& m_row, Acc& l_row) {
    if (nv <= 0) {  // nothing visible in this block: the row's state is unchanged
      x.setZero();
      return Acc(1);
    }
    auto seg = x.segment(v0, nv).array();
    seg *= scale;
    if (capped) seg = cap * (seg / cap).tanh();
    const Acc m_new = std::max(m_row, seg.maxCoeff());
    const Acc a_row = std::exp(m_row - m_new);  // exp(-inf) = 0 on the first block
    seg = (seg - m_new).exp();
    l_row = a_row * l_row + seg.sum();
    m_row = m_new;
    x.head(v0).setZero();
    x.tail(x.size() - v0 - nv).setZero();
    return a_row;
  };

  // One work item: sequence i, KV heads [h_begin, h_end) (all of them on the few-rows path).
  auto run_item = [&](std::int64_t i, std::int64_t h_begin, std::int64_t h_end,
                      RaggedScratch<Acc>& sc) {
    Matrix &q_block = sc.q_block, &acc = sc.acc, &k_block = sc.k_block, &v_block = sc.v_block,
           &s = sc.s, &qs = sc.qs, &acc_s = sc.acc_s, &logits_s = sc.logits_s, &k_page = sc.k_page,
           &v_page = sc.v_page;
    Vector &m = sc.m, &l = sc.l, &alpha = sc.alpha, &m_s = sc.m_s, &l_s = sc.l_s,
           &alpha_s = sc.alpha_s;
    std::vector<const Acc*>&k_rows = sc.k_rows, &v_rows = sc.v_rows, &k_page_rows = sc.k_page_rows,
                      &v_page_rows = sc.v_page_rows;
    const std::int64_t row0 = a.cu_q_lens(i);
    const std::int64_t q_len = a.cu_q_lens(i + 1) - row0;
    const std::int64_t kv_len = a.kv_lens(i);
    if (q_len == 0) return;
    const std::int64_t first_pos = kv_len - q_len;  // position of row 0
    // Keys any row can see: [key_lo, kv_len).
    const std::int64_t key_lo = window ? std::max<std::int64_t>(0, first_pos - w + 1) : 0;
    const Eigen::Index rows = static_cast<Eigen::Index>(q_len * group);

    if (rows <= kRaggedSmallRows) {
      // Few rows (decode): all KV heads together, page by page, so a token-major page is read
      // front to back once. Row h * rows + r * G + g holds query head h * G + g of row r.
      sc.fit_few(small_rows, static_cast<Eigen::Index>(chunk), page_keys, d_idx);
      const Eigen::Index all = rows * static_cast<Eigen::Index>(hkv);
      const bool in_place = kv_contiguous && !k_scaled && !v_scaled;
      for (std::int64_t r = 0; r < q_len; ++r)
        for (std::int64_t qh = 0; qh < hq; ++qh) {
          const std::int64_t h = qh / group, g = qh % group;
          Acc* dst = qs.row(static_cast<Eigen::Index>(h * q_len * group + r * group + g)).data();
          for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(a.q(row0 + r, qh, d));
        }
      acc_s.topRows(all).setZero();
      m_s.head(all).setConstant(neg_inf);
      l_s.head(all).setZero();
      for (std::int64_t lo = key_lo, hi = 0; lo < kv_len; lo = hi) {
        // Tokens [lo, hi): within one page, at most `chunk` of them.
        hi = std::min(std::min(lo + chunk, lo - lo % page_size + page_size), kv_len);
        const std::int64_t page = a.page_indices(i, lo / page_size);
        const Eigen::Index nk = static_cast<Eigen::Index>(hi - lo);
        // K/V rows of KV head h for tokens [lo, hi): in place (f32/f64 pool, contiguous rows,
        // no dequantization) or converted token-major (the page read front to back) into
        // k_page/v_page row t * Hkv + h. Either way a pointer and a token stride per head.
        const Acc* k_base0 = nullptr;
        const Acc* v_base0 = nullptr;
        std::int64_t ld = 0, head_step = 0;
        if constexpr (kDirect) {
          if (in_place) {
            k_base0 = &a.kv_pages(page, lo % page_size, 0, 0);
            v_base0 = &a.kv_pages(page, lo % page_size, 1, 0);
            ld = a.kv_pages.strides[1];
            head_step = 2 * a.kv_pages.strides[2];
          }
        }
        if (k_base0 == nullptr) {
          for (std::int64_t t = 0; t < hi - lo; ++t)
            for (std::int64_t h = 0; h < hkv; ++h)
              load_rows(page, lo % page_size + t, 1, h, k_page, v_page, t * hkv + h, 0,
                        &k_page_rows[static_cast<std::size_t>(t * hkv + h)],
                        &v_page_rows[static_cast<std::size_t>(t * hkv + h)], 0);
          k_base0 = k_page.data();
          v_base0 = v_page.data();
          ld = hkv * dim;
          head_step = dim;
        }
        auto logits = logits_s.topLeftCorner(all, nk);
        const std::int64_t lds = logits_s.cols();
        for (std::int64_t h = 0; h < hkv; ++h) {
          const Eigen::Index base = static_cast<Eigen::Index>(h) * rows;
          qk_rows<Acc>(qs.row(base).data(), dim, rows, k_base0 + h * head_step, ld, nk, dim,
                       logits_s.row(base).data(), lds);
        }
        for (Eigen::Index row = 0; row < all; ++row) {
          const std::int64_t pos = first_pos + (row % rows) / group;
          const std::int64_t vis_hi = std::min(hi, pos + 1);
          const std::int64_t vis_lo = window ? std::max(lo, pos - w + 1) : lo;
          alpha_s[row] =
              softmax_step(logits.row(row), static_cast<Eigen::Index>(vis_lo - lo),
                           static_cast<Eigen::Index>(vis_hi - vis_lo), m_s[row], l_s[row]);
        }
        acc_s.topRows(all) = alpha_s.head(all).asDiagonal() * acc_s.topRows(all);
        for (std::int64_t h = 0; h < hkv; ++h) {
          const Eigen::Index base = static_cast<Eigen::Index>(h) * rows;
          pv_rows<Acc>(logits_s.row(base).data(), lds, rows, v_base0 + h * head_step, ld, nk, dim,
                       acc_s.row(base).data(), dim);
        }
      }
      for (std::int64_t r = 0; r < q_len; ++r)
        for (std::int64_t qh = 0; qh < hq; ++qh) {
          const std::int64_t h = qh / group, g = qh % group;
          const Eigen::Index row = static_cast<Eigen::Index>(h * q_len * group + r * group + g);
          const Acc inv = l_s[row] > Acc(0) ? Acc(1) / l_s[row] : Acc(0);
          for (std::int64_t d = 0; d < dim; ++d)
            out(row0 + r, qh, d) = store_as<Q>(acc_s(row, static_cast<Eigen::Index>(d)) * inv);
        }
      return;
    }

    sc.fit_many(rows, static_cast<Eigen::Index>(block), d_idx);
    for (std::int64_t h = h_begin; h < h_end; ++h) {
      // Row r * G + g holds query head h * G + g of token row0 + r.
      for (std::int64_t r = 0; r < q_len; ++r) {
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t qh = h * group + g;
          Acc* dst = q_block.row(static_cast<Eigen::Index>(r * group + g)).data();
          if (q_contiguous) {
            const Q* src = &a.q(row0 + r, qh, 0);
            for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(src[d]);
          } else {
            for (std::int64_t d = 0; d < dim; ++d) dst[d] = load_as<Acc>(a.q(row0 + r, qh, d));
          }
        }
      }
      acc.topRows(rows).setZero();
      m.head(rows).setConstant(neg_inf);
      l.head(rows).setZero();

      // Blocks aligned to page boundaries, starting at the page holding key_lo.
      for (std::int64_t c0 = key_lo - key_lo % page_size; c0 < kv_len; c0 += block) {
        const std::int64_t lo = std::max(c0, key_lo);
        const std::int64_t hi = std::min(c0 + block, kv_len);
        // Rows that see any key in [lo, hi): pos >= lo and pos - w < hi - 1.
        std::int64_t r_lo = std::max<std::int64_t>(0, lo - first_pos);
        std::int64_t r_hi = q_len;
        // hi - 1 - first_pos + w; a window near INT64_MAX (valid: R7 only asks w > 0) would
        // overflow it, and then no row is excluded.
        std::int64_t w_hi = 0;
        if (window && checked_add(hi - 1 - first_pos, w, &w_hi)) r_hi = std::min(r_hi, w_hi);
        if (r_lo >= r_hi) continue;
        const Eigen::Index nk = static_cast<Eigen::Index>(hi - lo);
        const Eigen::Index br = static_cast<Eigen::Index>(r_lo * group);
        const Eigen::Index nr = static_cast<Eigen::Index>((r_hi - r_lo) * group);
        // K and V of keys [lo, hi), page by page, gathered into contiguous blocks.
        for (std::int64_t c = lo; c < hi;) {
          const std::int64_t page = a.page_indices(i, c / page_size);
          const std::int64_t slot0 = c % page_size;
          const std::int64_t run = std::min(page_size - slot0, hi - c);
          load_rows(page, slot0, run, h, k_block, v_block, c - lo, 1,
                    &k_rows[static_cast<std::size_t>(c - lo)],
                    &v_rows[static_cast<std::size_t>(c - lo)], 1);
          c += run;
        }
        auto logits = s.block(0, 0, nr, nk);
        logits.noalias() = q_block.middleRows(br, nr) * k_block.topRows(nk).transpose();
        for (Eigen::Index row = 0; row < nr; ++row) {
          const std::int64_t r = r_lo + static_cast<std::int64_t>(row) / group;
          const std::int64_t pos = first_pos + r;
          // Visible keys of this row inside [lo, hi): [vis_lo, vis_hi).
          const std::int64_t vis_hi = std::min(hi, pos + 1);
          const std::int64_t vis_lo = window ? std::max(lo, pos - w + 1) : lo;
          alpha[row] =
              softmax_step(logits.row(row), static_cast<Eigen::Index>(vis_lo - lo),
                           static_cast<Eigen::Index>(std::max<std::int64_t>(0, vis_hi - vis_lo)),
                           m[br + row], l[br + row]);
        }
        auto acc_rows = acc.middleRows(br, nr);
        acc_rows = alpha.head(nr).asDiagonal() * acc_rows;
        acc_rows.noalias() += logits * v_block.topRows(nk);
      }

      // Normalize and store. Every row sees at least its own position (q_len <= kv_len).
      for (std::int64_t r = 0; r < q_len; ++r) {
        for (std::int64_t g = 0; g < group; ++g) {
          const Eigen::Index row = static_cast<Eigen::Index>(r * group + g);
          const Acc inv = l[row] > Acc(0) ? Acc(1) / l[row] : Acc(0);
          const std::int64_t qh = h * group + g;
          for (std::int64_t d = 0; d < dim; ++d)
            out(row0 + r, qh, d) = store_as<Q>(acc(row, static_cast<Eigen::Index>(d)) * inv);
        }
      }
    }
  };

  // Work items, handed out by the executor: a few-rows (decode) sequence is one item with all
  // its KV heads; a many-rows sequence is one item per KV head.
  std::vector<std::array<std::int64_t, 2>> items;  // (sequence, KV head or -1 for all)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t q_len = a.cu_q_lens(i + 1) - a.cu_q_lens(i);
    if (q_len == 0) continue;
    if (q_len * group <= kRaggedSmallRows) {
      items.push_back({i, -1});
    } else {
      for (std::int64_t h = 0; h < hkv; ++h) items.push_back({i, h});
    }
  }
  executor.parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t k) {
    thread_local RaggedScratch<Acc> scratch;
    const std::array<std::int64_t, 2>& item = items[static_cast<std::size_t>(k)];
    if (item[1] < 0) {
      run_item(item[0], 0, hkv, scratch);
    } else {
      run_item(item[0], item[1], item[1] + 1, scratch);
    }
  });
}

}  // namespace detail

/// Runs ragged paged attention without validating: for callers that ran `check_ragged` (any
/// profile) and `out`'s shape check once and reuse the same metadata. Inputs that fail the
/// checks are undefined behaviour (out-of-range reads).
/// `out`: [max_num_batched_tokens, num_q_heads, head_dim]; rows at or past
/// `cu_q_lens[num_seqs]` are written as zero. `executor` (see core/executor.hpp) runs the
/// (sequence, KV head) items; the result does not depend on it.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void ragged_paged_attention_unchecked(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                      TensorView<Q, 3> out, Executor&& executor = Executor{}) {
  detail::ragged_paged_attention_impl(args, out, std::forward<Executor>(executor));
}

/// Validates (`check_ragged` with `Profile::kReference`, then `out`'s shape), then runs.
/// Returns the first failed check; `out` is untouched on error.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
Status try_ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                                  TensorView<Q, 3> out, Executor&& executor = Executor{}) {
  ATTNREF_RETURN_IF_ERROR(check_ragged(args, Profile::kReference));
  ATTNREF_RETURN_IF_ERROR(detail::check_ragged_out(args, out));
  detail::ragged_paged_attention_impl(args, out, std::forward<Executor>(executor));
  return Status();
}

/// Validates, then runs; throws `ShapeError` (or calls the error handler) on invalid input.
template <class Q, class KV, class Index, class Executor = SerialExecutor>
void ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& args,
                            TensorView<Q, 3> out, Executor&& executor = Executor{}) {
  throw_if_error(try_ragged_paged_attention(args, out, std::forward<Executor>(executor)));
}

}  // namespace attnref
