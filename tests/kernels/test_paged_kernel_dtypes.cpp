// Paged-attention kernel with half, bfloat16 and int8 (+ scales) pages, against a plain float64
// implementation that sees exactly the values the kernel sees (inputs rounded to the dtype).
#include <gtest/gtest.h>

#include <attnref/kernels/paged_attention.hpp>

#include "reference/paged_batch.hpp"

namespace {

using attnref::KvLayout;
using attnref::TensorView;
using paged_test::LogicalBatch;
using paged_test::Shape;

/// Vector index from a signed element offset (offsets here are never negative).
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

template <class T>
double as_double(T x) {
  return static_cast<double>(static_cast<float>(x));
}

/// Rounds every q/K/V value of a batch to T, so the reference sees what the kernel sees.
template <class T>
LogicalBatch rounded_to(LogicalBatch lb) {
  for (auto* values : {&lb.q, &lb.k, &lb.v})
    for (double& x : *values) x = as_double(static_cast<T>(static_cast<float>(x)));
  return lb;
}

template <class T>
void check_half_type(double tolerance, std::uint32_t seed) {
  std::mt19937 rng(seed);
  int runs = 0;
  for (std::int64_t group : {1, 2, 4, 8}) {
    for (std::int64_t dim : {3, 64, 128}) {
      for (std::int64_t page_size : {1, 16}) {
        const Shape sh{6, group * 2, 2, dim, page_size, 3, 2};
        const LogicalBatch lb = rounded_to<T>(paged_test::make_batch(sh, rng));
        const KvLayout layout = static_cast<KvLayout>(runs % 3);
        const auto convert = [](double x) { return static_cast<T>(static_cast<float>(x)); };
        const T poison = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
        std::vector<T> q(lb.q.size());
        for (size_t i = 0; i < q.size(); ++i) q[i] = convert(lb.q[i]);
        const std::vector<T> k = paged_test::to_physical<T>(lb, lb.k, layout, poison, convert);
        const std::vector<T> v = paged_test::to_physical<T>(lb, lb.v, layout, poison, convert);
        std::vector<std::int64_t> lengths = lb.lengths, table = lb.table;  // int64 indices
        attnref::PagedAttentionArgs<T, T, std::int64_t> args;
        args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
        args.k_pages = attnref::kv_pages_view<const T>(k.data(), layout, sh.hkv, lb.total_pages,
                                                       sh.page_size, sh.dim);
        args.v_pages = attnref::kv_pages_view<const T>(v.data(), layout, sh.hkv, lb.total_pages,
                                                       sh.page_size, sh.dim);
        args.lengths = {lengths.data(), {sh.batch}};
        args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
        args.soft_cap = runs % 2 ? std::optional<float>(5.0f) : std::nullopt;
        std::vector<T> out(q.size(), poison);
        attnref::paged_attention(args, TensorView<T, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
        const std::vector<double> want = attnref::reference::paged_attention(
            lb.args(1.0, runs % 2 ? std::optional<double>(5.0) : std::nullopt));
        EXPECT_LE(paged_test::worst_ratio(out, want, tolerance, tolerance, as_double<T>), 1.0)
            << "G=" << group << " D=" << dim << " S=" << page_size;
        ++runs;
      }
    }
  }
}

// Output is rounded to the dtype once; accumulation is f32. Tolerance = a few output ulps.
TEST(PagedKernelDtypes, Half) { check_half_type<Eigen::half>(4e-3, 21); }
TEST(PagedKernelDtypes, BFloat16) { check_half_type<Eigen::bfloat16>(2e-2, 22); }

/// int8 pages with per-token ([..., 1]) or per-element ([..., D]) float scales; dead slots have
/// NaN scales, so reading one would poison the output.
void check_int8(bool per_element, KvLayout layout, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const Shape sh{6, 8, 2, 16, 4, 3, 2};
  LogicalBatch lb = paged_test::make_batch(sh, rng);
  const std::int64_t P = lb.total_pages, S = sh.page_size, D = sh.dim;
  const std::int64_t scale_dim = per_element ? D : 1;
  std::uniform_int_distribution<int> weight(-127, 127);
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  const std::vector<char> live = paged_test::live_slots(lb);
  std::vector<std::int8_t> kw(lb.k.size()), vw(lb.v.size());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> ks(at(sh.hkv * P * S * scale_dim), nan), vs(ks.size(), nan);
  for (std::int64_t h = 0; h < sh.hkv; ++h)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d) {
          const std::size_t logical = at(((h * P + p) * S + s) * D + d);
          const std::size_t phys = at(paged_test::physical_offset(layout, lb, h, p, s, d));
          const std::size_t si = at(((h * P + p) * S + s) * scale_dim + (per_element ? d : 0));
          const bool is_live = live[at(p * S + s)];
          kw[phys] = static_cast<std::int8_t>(weight(rng));
          vw[phys] = static_cast<std::int8_t>(weight(rng));
          if (is_live && (per_element || d == 0)) {
            ks[si] = scale(rng);
            vs[si] = scale(rng);
          }
          // What JAX's dequantization gives: (float(w) * s) / 127.5, in float.
          lb.k[logical] = is_live ? (static_cast<float>(kw[phys]) * ks[si]) / 127.5f : 0;
          lb.v[logical] = is_live ? (static_cast<float>(vw[phys]) * vs[si]) / 127.5f : 0;
        }
  std::vector<float> q(lb.q.begin(), lb.q.end());
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  attnref::PagedAttentionArgs<float, std::int8_t> args;
  args.q = {q.data(), {sh.batch, sh.hq, D}};
  args.k_pages = attnref::kv_pages_view<const std::int8_t>(kw.data(), layout, sh.hkv, P, S, D);
  args.v_pages = attnref::kv_pages_view<const std::int8_t>(vw.data(), layout, sh.hkv, P, S, D);
  args.k_scales = {ks.data(), {sh.hkv, P, S, scale_dim}};
  args.v_scales = {vs.data(), {sh.hkv, P, S, scale_dim}};
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  args.round_kv_to_bf16 = true;  // no effect on quantized pages, as in JAX
  std::vector<float> out(q.size(), nan);
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, D}));
  const std::vector<double> want = attnref::reference::paged_attention(lb.args());
  EXPECT_LE(paged_test::worst_ratio(out, want, 1e-5, 1e-5, [](float x) { return double(x); }), 1.0)
      << "per_element=" << per_element << " layout=" << attnref::to_string(layout);
}

TEST(PagedKernelDtypes, Int8PerTokenScales) {
  check_int8(false, KvLayout::kJax, 31);
  check_int8(false, KvLayout::kNhd, 32);
}
TEST(PagedKernelDtypes, Int8PerElementScales) {
  check_int8(true, KvLayout::kJax, 33);
  check_int8(true, KvLayout::kHnd, 34);
}

}  // namespace
