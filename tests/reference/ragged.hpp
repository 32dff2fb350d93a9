// SPDX-License-Identifier: Apache-2.0
// Test-only float64 oracle of ragged paged attention (spec §4.4), read straight from the
// arguments: for sequence i with q_len = cu_q_lens[i+1] - cu_q_lens[i] and kv_len = kv_lens[i],
// query row r sits at position pos = kv_len - q_len + r and sees keys c in
// (pos - sliding_window, pos]; per query head qh (KV head qh / (Hq / Hkv)):
//   out[cu_q_lens[i] + r, qh] = sum_c softmax_c(cap(sm_scale * q . k_c)) v_c,
// rows past cu_q_lens[num_seqs] are 0; the logsumexp (when asked for) is
//   lse[cu_q_lens[i] + r, qh] = log sum_c exp(cap(sm_scale * q . k_c)), -inf past
// cu_q_lens[num_seqs]. Engine features, in the pipeline's order: the ALiBi bias
// slope[qh] * (c - pos) (absolute convention: -slope[qh] * |c - pos|) is added after the cap
// (soft_cap_order kAlibiThenCap: before it); a sink s[qh] is one more logit in the max and
// the sum with no value row. With k_scale / v_scale K/V dequantize as the spec writes
// it, q_dtype(f32(x) * scale) (f64 for double q). Independent of the kernels: plain loops over
// the views' own indexing.
// Non-finite inputs (docs/hostile-inputs.md): a row whose largest visible logit is NaN (any NaN
// logit), +inf, or -inf (all -inf: 0/0) is NaN; otherwise IEEE arithmetic, so a -inf logit has
// weight 0 and NaN/Inf in a visible V row reach the sum (0 * NaN = NaN).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <attnref/validate/ragged.hpp>

#include "common.hpp"

namespace attnref {
namespace reference {

/// Error scales of a ragged result for callers that size tolerances (the fuzz harness); lo, hi
/// are [T, Hq, D].
struct RaggedBounds : ValueRange {
  std::vector<double> logit_mag;  ///< [T, Hq]: largest sum_d |sm_scale q_d k_d| or |bias|
  /// [T, Hq]: largest sum_d |q_d * k_d|, before sm_scale: the kernels compute q . k in the
  /// accumulator first (JAX: `(q . k) * sm_scale` in f32), so this is what can overflow there.
  std::vector<double> dot_mag;
  std::vector<double> v_max;  ///< [T, Hq]: largest |v| seen
};

/// K or V element as the math sees it (dequantized when the scale is given).
template <class Q, class KV, class Index>
double ragged_kv_value(const RaggedPagedAttentionArgs<Q, KV, Index>& a, bool is_v,
                       std::int64_t page, std::int64_t slot, std::int64_t h, std::int64_t d) {
  // The stored K or V element of KV head h at (page, slot, d), through the [Hkv, P, S, D] views.
  const KV x = (is_v ? a.v_pages : a.k_pages)(h, page, slot, d);
  const std::optional<float>& scale = is_v ? a.v_scale : a.k_scale;
  if (!scale) return to_double(x);
  if constexpr (std::is_same<Q, double>::value) {
    return to_double(x) * static_cast<double>(*scale);
  } else {
    return to_double(static_cast<Q>(static_cast<float>(to_double(x)) * *scale));
  }
}

/// Plain float64 ragged paged attention: [T, Hq, D] row-major. `bounds`, when given, gets the
/// error scales of every row; `lse`, when given, the natural logsumexp of every row [T, Hq].
template <class Q, class KV, class Index>
std::vector<double> ragged_paged_attention(const RaggedPagedAttentionArgs<Q, KV, Index>& a,
                                           RaggedBounds* bounds = nullptr,
                                           std::vector<double>* lse = nullptr) {
  const std::int64_t tokens = a.max_num_batched_tokens(), hq = a.num_q_heads();
  const std::int64_t dim = a.head_dim(), page_size = a.page_size();
  const std::int64_t group = hq / a.num_kv_heads();
  const auto n = static_cast<size_t>(tokens * hq * dim);
  std::vector<double> out(n, 0.0);
  if (bounds) {
    bounds->reset(n);
    bounds->logit_mag.assign(static_cast<size_t>(tokens * hq), 0.0);
    bounds->dot_mag.assign(static_cast<size_t>(tokens * hq), 0.0);
    bounds->v_max.assign(static_cast<size_t>(tokens * hq), 0.0);
  }
  if (lse) lse->assign(static_cast<size_t>(tokens * hq), -std::numeric_limits<double>::infinity());
  const double scale = static_cast<double>(a.sm_scale);
  const std::int64_t hkv = a.num_kv_heads();
  std::vector<double> w, k_seq, v_seq;
  for (std::int64_t i = 0; i < a.num_seqs_count(); ++i) {
    const std::int64_t row0 = static_cast<std::int64_t>(a.cu_q_lens(i));
    const std::int64_t q_len = static_cast<std::int64_t>(a.cu_q_lens(i + 1)) - row0;
    const std::int64_t kv_len = static_cast<std::int64_t>(a.kv_lens(i));
    if (q_len <= 0) continue;
    // K and V of the keys some row sees, [key_lo, kv_len), dequantized once per sequence
    // ([key, Hkv, D]): the loops below then cost plain array reads.
    std::int64_t key_lo = 0;
    if (a.sliding_window && kv_len - q_len - *a.sliding_window + 1 > 0)
      key_lo = kv_len - q_len - *a.sliding_window + 1;
    const std::int64_t keys = kv_len - key_lo;
    k_seq.assign(static_cast<size_t>(keys * hkv * dim), 0.0);
    v_seq.assign(k_seq.size(), 0.0);
    for (std::int64_t c = key_lo; c < kv_len; ++c) {
      const std::int64_t page = static_cast<std::int64_t>(a.page_indices(i, c / page_size));
      for (std::int64_t h = 0; h < hkv; ++h)
        for (std::int64_t d = 0; d < dim; ++d) {
          const size_t at = static_cast<size_t>(((c - key_lo) * hkv + h) * dim + d);
          k_seq[at] = ragged_kv_value(a, false, page, c % page_size, h, d);
          v_seq[at] = ragged_kv_value(a, true, page, c % page_size, h, d);
        }
    }
    auto kv_at = [&](std::int64_t c, std::int64_t h, std::int64_t d) {
      return static_cast<size_t>(((c - key_lo) * hkv + h) * dim + d);
    };
    for (std::int64_t r = 0; r < q_len; ++r) {
      const std::int64_t t = row0 + r, pos = kv_len - q_len + r;
      std::int64_t first = 0;
      if (a.sliding_window && pos - *a.sliding_window + 1 > 0) first = pos - *a.sliding_window + 1;
      for (std::int64_t qh = 0; qh < hq; ++qh) {
        const std::int64_t h = qh / group;
        const size_t row = static_cast<size_t>(t * hq + qh);
        w.clear();
        const bool has_sink = !a.sinks.empty_view();
        const double sink = has_sink ? static_cast<double>(a.sinks(qh)) : 0.0;
        double max_w = has_sink ? sink : -std::numeric_limits<double>::infinity();
        for (std::int64_t c = first; c <= pos; ++c) {
          double dot = 0.0, mag = 0.0;
          for (std::int64_t d = 0; d < dim; ++d) {
            const double term = to_double(a.q(t, qh, d)) * k_seq[kv_at(c, h, d)];
            dot += term;
            mag += std::fabs(term);
          }
          double x = scale * dot;
          if (bounds) {
            const double m = std::isfinite(mag) ? std::fabs(scale) * mag
                                                : std::numeric_limits<double>::infinity();
            bounds->logit_mag[row] = std::max(bounds->logit_mag[row], m);
            bounds->dot_mag[row] = std::max(bounds->dot_mag[row], mag);
          }
          double bias = 0.0;
          if (!a.alibi_slopes.empty_view()) {
            bias = alibi_bias(static_cast<double>(a.alibi_slopes(qh)), c, pos, a.alibi_convention);
            // The bias is rounded in float too: it scales the error like a logit.
            if (bounds) bounds->logit_mag[row] = std::max(bounds->logit_mag[row], std::fabs(bias));
          }
          x = capped_logit(x, a.soft_cap.has_value(),
                           static_cast<double>(a.soft_cap.value_or(1.0f)), bias, a.soft_cap_order);
          w.push_back(x);
          max_w = (std::isnan(x) || std::isnan(max_w)) ? std::nan("") : std::max(max_w, x);
        }
        if (!std::isfinite(max_w)) {  // NaN / +inf logit, or all -inf (a row sees >= 1 key)
          for (std::int64_t d = 0; d < dim; ++d)
            out[row * static_cast<size_t>(dim) + static_cast<size_t>(d)] = std::nan("");
          if (lse) (*lse)[row] = std::nan("");
          continue;
        }
        double sum = has_sink ? std::exp(sink - max_w) : 0.0;
        for (double& x : w) sum += (x = std::exp(x - max_w));
        if (lse && !w.empty()) (*lse)[row] = max_w + std::log(sum);
        for (std::int64_t c = first; c <= pos; ++c) {
          const double p = w[static_cast<size_t>(c - first)] / sum;
          for (std::int64_t d = 0; d < dim; ++d) {
            const size_t at = row * static_cast<size_t>(dim) + static_cast<size_t>(d);
            const double v = v_seq[kv_at(c, h, d)];
            out[at] += p * v;
            if (bounds) {
              bounds->add(at, v, c == first && !has_sink);  // a sink: a zero value row
              bounds->v_max[row] = std::max(bounds->v_max[row], std::fabs(v));
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace reference
}  // namespace attnref
