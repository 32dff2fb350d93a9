// Test support: a plain float64 paged attention and a random batch builder that writes K/V into
// any physical layout with every byte the kernel must not read set to NaN. Independent of the
// kernel: it indexes raw buffers with its own arithmetic.
#pragma once

#include <attnref/core/kv_layout.hpp>
#include <attnref/validate/paged.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

namespace paged_test {

struct Shape {
  std::int64_t batch, hq, hkv, dim, page_size, pages_per_seq, extra_pages;
};

/// A batch in logical float64 form: q [B,Hq,D], K/V [Hkv,P,S,D], lengths, page table.
struct LogicalBatch {
  Shape shape;
  std::int64_t total_pages;
  std::vector<double> q, k, v;
  std::vector<std::int64_t> lengths, table;
  double k_at(std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) const {
    return k[((h * total_pages + p) * shape.page_size + s) * shape.dim + d];
  }
  double v_at(std::int64_t h, std::int64_t p, std::int64_t s, std::int64_t d) const {
    return v[((h * total_pages + p) * shape.page_size + s) * shape.dim + d];
  }
};

/// Random batch; lengths cycle through 0, 1, S-1, S, S+1 and full capacity; the page table is a
/// random permutation; table entries past each length are -1 (never read).
inline LogicalBatch make_batch(const Shape& shape, std::mt19937& rng) {
  LogicalBatch lb;
  lb.shape = shape;
  lb.total_pages = shape.batch * shape.pages_per_seq + shape.extra_pages;
  std::normal_distribution<double> normal(0.0, 1.0);
  lb.q.resize(shape.batch * shape.hq * shape.dim);
  for (double& x : lb.q) x = normal(rng);
  lb.k.resize(shape.hkv * lb.total_pages * shape.page_size * shape.dim);
  lb.v.resize(lb.k.size());
  for (double& x : lb.k) x = normal(rng);
  for (double& x : lb.v) x = normal(rng);
  const std::int64_t s = shape.page_size, cap = shape.pages_per_seq * s;
  const std::int64_t pattern[] = {0, 1, s - 1, s, s + 1, cap};
  std::vector<std::int64_t> perm(lb.total_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    const std::int64_t len = std::min(cap, std::max<std::int64_t>(0, pattern[b % 6]));
    lb.lengths.push_back(len);
    for (std::int64_t j = 0; j < shape.pages_per_seq; ++j)
      lb.table.push_back(j * s < len ? perm[b * shape.pages_per_seq + j] : -1);
  }
  return lb;
}

/// Plain float64 paged attention: softmax over t < length of cap(scale * q.k_t), zeros for 0.
/// `kv_transform` maps a stored K/V value to what the kernel should see (identity by default).
template <class Transform>
std::vector<double> reference(const LogicalBatch& lb, double sm_scale, std::optional<double> cap,
                              Transform kv_transform) {
  const Shape& sh = lb.shape;
  const std::int64_t group = sh.hq / sh.hkv;
  std::vector<double> out(sh.batch * sh.hq * sh.dim, 0.0);
  for (std::int64_t b = 0; b < sh.batch; ++b) {
    const std::int64_t len = lb.lengths[b];
    for (std::int64_t qh = 0; qh < sh.hq; ++qh) {
      const std::int64_t h = qh / group;
      std::vector<double> logits(len);
      double max_logit = -std::numeric_limits<double>::infinity();
      for (std::int64_t t = 0; t < len; ++t) {
        const std::int64_t page = lb.table[b * sh.pages_per_seq + t / sh.page_size];
        double dot = 0;
        for (std::int64_t d = 0; d < sh.dim; ++d)
          dot += lb.q[(b * sh.hq + qh) * sh.dim + d] *
                 kv_transform(lb.k_at(h, page, t % sh.page_size, d));
        double x = dot * sm_scale;
        if (cap) x = *cap * std::tanh(x / *cap);
        logits[t] = x;
        max_logit = std::max(max_logit, x);
      }
      double denom = 0;
      for (double& x : logits) denom += (x = std::exp(x - max_logit));
      for (std::int64_t t = 0; t < len; ++t) {
        const std::int64_t page = lb.table[b * sh.pages_per_seq + t / sh.page_size];
        for (std::int64_t d = 0; d < sh.dim; ++d)
          out[(b * sh.hq + qh) * sh.dim + d] +=
              logits[t] / denom * kv_transform(lb.v_at(h, page, t % sh.page_size, d));
      }
    }
  }
  return out;
}

inline std::vector<double> reference(const LogicalBatch& lb, double sm_scale,
                                     std::optional<double> cap) {
  return reference(lb, sm_scale, cap, [](double x) { return x; });
}

/// Physical offset of logical (h, p, s, d) in `layout`, computed independently of attnref.
inline std::int64_t physical_offset(attnref::KvLayout layout, const LogicalBatch& lb,
                                    std::int64_t h, std::int64_t p, std::int64_t s,
                                    std::int64_t d) {
  const std::int64_t H = lb.shape.hkv, P = lb.total_pages, S = lb.shape.page_size,
                     D = lb.shape.dim;
  switch (layout) {
    case attnref::KvLayout::kJax: return ((h * P + p) * S + s) * D + d;
    case attnref::KvLayout::kNhd: return ((p * S + s) * H + h) * D + d;
    case attnref::KvLayout::kHnd: return ((p * H + h) * S + s) * D + d;
  }
  return -1;
}

/// Whether token slot s of page p is read by some sequence (so it must hold real data).
inline std::vector<char> live_slots(const LogicalBatch& lb) {
  const Shape& sh = lb.shape;
  std::vector<char> live(lb.total_pages * sh.page_size, 0);
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t t = 0; t < lb.lengths[b]; ++t)
      live[lb.table[b * sh.pages_per_seq + t / sh.page_size] * sh.page_size + t % sh.page_size] = 1;
  return live;
}

/// Writes logical K or V into a physical buffer of element type T; dead slots get `poison`.
template <class T, class Convert>
std::vector<T> to_physical(const LogicalBatch& lb, const std::vector<double>& logical,
                           attnref::KvLayout layout, T poison, Convert convert) {
  const Shape& sh = lb.shape;
  std::vector<T> out(logical.size(), poison);
  const std::vector<char> live = live_slots(lb);
  for (std::int64_t h = 0; h < sh.hkv; ++h)
    for (std::int64_t p = 0; p < lb.total_pages; ++p)
      for (std::int64_t s = 0; s < sh.page_size; ++s) {
        if (!live[p * sh.page_size + s]) continue;
        for (std::int64_t d = 0; d < sh.dim; ++d)
          out[physical_offset(layout, lb, h, p, s, d)] =
              convert(logical[((h * lb.total_pages + p) * sh.page_size + s) * sh.dim + d]);
      }
  return out;
}

/// max over elements of |got - want| / (atol + rtol * |want|); <= 1 means within tolerance.
template <class T, class ToDouble>
double worst_ratio(const std::vector<T>& got, const std::vector<double>& want, double atol,
                   double rtol, ToDouble to_double) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = to_double(got[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(g - want[i]) / (atol + rtol * std::fabs(want[i])));
  }
  return worst;
}

}  // namespace paged_test
