// SPDX-License-Identifier: Apache-2.0
// Test-only float64 oracle of paged attention (decode), read straight from the arguments:
//   out[b, qh, :] = sum_{t < lengths[b]} softmax_t(cap(sm_scale * q[b, qh] . k_t)) v_t,
// k_t / v_t the K/V row of token t through the page table (k_t head_dim wide, v_t head_dim_v:
// v_pages' own last extent, 512 of MLA's 576), a zero row for length 0, and
//   lse[b, qh] = log sum_{t < lengths[b]} exp(cap(sm_scale * q[b, qh] . k_t)), -inf for length 0
// (when asked for). Engine features, in the pipeline's order: the ALiBi bias
// slope[qh] * (t - (lengths[b] - 1)) (absolute convention: -slope[qh] * |t - (lengths[b] - 1)|)
// is added after the cap (soft_cap_order kAlibiThenCap: before it); a sliding window W keeps
// the keys t > lengths[b] - 1 - W; a sink s[qh] is one more logit in the max and the sum with
// no value row (a row with no key and a sink: out 0, lse = s[qh]). Int8 pages
// dequantize as JAX does (w * scale / 127.5, one scale per token or per element), fp8 pages as
// fp8(w) * scale (scale 1 without scales; fp8 values from their bit fields); float pages
// round to bf16 when `round_kv_to_bf16` asks for it. Independent of the kernels: plain loops over
// the views' own indexing.
// Non-finite inputs (docs/hostile-inputs.md): a row whose largest logit is NaN (any NaN logit),
// +inf, or -inf (all logits -inf: 0/0) is NaN; otherwise IEEE arithmetic, so a -inf logit has
// weight 0 and NaN/Inf in a live V row reach the sum (0 * NaN = NaN).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <attnref/validate/paged.hpp>

#include "common.hpp"

namespace attnref {
namespace reference {

/// Error scales of a paged result for callers that size tolerances (the fuzz harness); lo, hi
/// are [B, Hq, Dv].
struct PagedBounds : ValueRange {
  std::vector<double> max_logit;  ///< [B, Hq]: largest |sm_scale * q.k| before the cap, or |bias|
};

/// K or V element (h, page, slot, d) as the math sees it.
template <class Q, class KV, class Index>
double paged_kv_value(const PagedAttentionArgs<Q, KV, Index>& a, bool is_v, std::int64_t h,
                      std::int64_t page, std::int64_t slot, std::int64_t d) {
  const KV w = (is_v ? a.v_pages : a.k_pages)(h, page, slot, d);
  if constexpr (PagedAttentionArgs<Q, KV, Index>::kQuantized) {
    const TensorView<const float, 4>& scales = is_v ? a.v_scales : a.k_scales;
    const std::int64_t sd = scales.extents[3] == 1 ? 0 : d;
    return static_cast<double>(w) * static_cast<double>(scales(h, page, slot, sd)) / 127.5;
  } else if constexpr (PagedAttentionArgs<Q, KV, Index>::kFp8) {
    // fp8(w) * s, with s = 1 when no scales are given.
    const TensorView<const float, 4>& scales = is_v ? a.v_scales : a.k_scales;
    if (scales.empty_view()) return to_double(w);
    const std::int64_t sd = scales.extents[3] == 1 ? 0 : d;
    return to_double(w) * static_cast<double>(scales(h, page, slot, sd));
  } else {
    return a.round_kv_to_bf16 ? round_to_bf16(to_double(w)) : to_double(w);
  }
}

/// Plain float64 paged attention: [B, Hq, Dv] row-major (Dv: v_pages' last extent). `bounds`, when
/// given, gets the error scales of every row; `lse`, when given, the natural logsumexp of every row
/// [B, Hq].
template <class Q, class KV, class Index>
std::vector<double> paged_attention(const PagedAttentionArgs<Q, KV, Index>& a,
                                    PagedBounds* bounds = nullptr,
                                    std::vector<double>* lse = nullptr) {
  const std::int64_t batch = a.batch(), hq = a.num_q_heads(), dim = a.head_dim();
  const std::int64_t dim_v = a.v_pages.extents[3];
  const std::int64_t page_size = a.page_size(), group = hq / a.num_kv_heads();
  const auto n = static_cast<size_t>(batch * hq * dim_v);
  std::vector<double> out(n, 0.0);
  if (bounds) {
    bounds->reset(n);
    bounds->max_logit.assign(static_cast<size_t>(batch * hq), 0.0);
  }
  if (lse) lse->assign(static_cast<size_t>(batch * hq), -std::numeric_limits<double>::infinity());
  std::vector<double> w;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = static_cast<std::int64_t>(a.lengths(b));
    for (std::int64_t qh = 0; qh < hq; ++qh) {
      const std::int64_t h = qh / group;
      const size_t row = static_cast<size_t>(b * hq + qh);
      const std::int64_t first =
          a.sliding_window ? std::max<std::int64_t>(0, len - *a.sliding_window) : 0;
      const bool has_sink = !a.sinks.empty_view();
      const double sink = has_sink ? static_cast<double>(a.sinks(qh)) : 0.0;
      w.assign(static_cast<size_t>(len - first), 0.0);  // the window's keys: w[t - first]
      double max_w = has_sink ? sink : -std::numeric_limits<double>::infinity();
      for (std::int64_t t = first; t < len; ++t) {
        const std::int64_t page = static_cast<std::int64_t>(a.page_indices(b, t / page_size));
        double dot = 0.0;
        for (std::int64_t d = 0; d < dim; ++d)
          dot += to_double(a.q(b, qh, d)) * paged_kv_value(a, false, h, page, t % page_size, d);
        double x = static_cast<double>(a.sm_scale) * dot;
        if (bounds) bounds->max_logit[row] = std::max(bounds->max_logit[row], std::fabs(x));
        double bias = 0.0;
        if (!a.alibi_slopes.empty_view()) {
          bias =
              alibi_bias(static_cast<double>(a.alibi_slopes(qh)), t, len - 1, a.alibi_convention);
          // The bias is rounded in float too: it scales the error like a logit.
          if (bounds) bounds->max_logit[row] = std::max(bounds->max_logit[row], std::fabs(bias));
        }
        x = capped_logit(x, a.soft_cap.has_value(), static_cast<double>(a.soft_cap.value_or(1.0f)),
                         bias, a.soft_cap_order);
        w[static_cast<size_t>(t - first)] = x;
        max_w = (std::isnan(x) || std::isnan(max_w)) ? std::nan("") : std::max(max_w, x);
      }
      if ((len > 0 || has_sink) && !std::isfinite(max_w)) {  // NaN / +inf logit, or all -inf
        for (std::int64_t d = 0; d < dim_v; ++d)
          out[row * static_cast<size_t>(dim_v) + static_cast<size_t>(d)] = std::nan("");
        if (lse) (*lse)[row] = std::nan("");
        continue;
      }
      double sum = has_sink ? std::exp(sink - max_w) : 0.0;
      for (std::int64_t t = first; t < len; ++t)
        sum += (w[static_cast<size_t>(t - first)] =
                    std::exp(w[static_cast<size_t>(t - first)] - max_w));
      if (lse && (len > 0 || has_sink)) (*lse)[row] = max_w + std::log(sum);
      for (std::int64_t t = first; t < len; ++t) {
        const std::int64_t page = static_cast<std::int64_t>(a.page_indices(b, t / page_size));
        for (std::int64_t d = 0; d < dim_v; ++d) {
          const size_t i = row * static_cast<size_t>(dim_v) + static_cast<size_t>(d);
          const double v = paged_kv_value(a, true, h, page, t % page_size, d);
          out[i] += w[static_cast<size_t>(t - first)] / sum * v;
          // A sink is a zero value row: the output then lies between 0 and the values.
          if (bounds) bounds->add(i, v, t == first && !has_sink);
        }
      }
    }
  }
  return out;
}

}  // namespace reference
}  // namespace attnref
