// Paged MLA decode, the shape FlashMLA and FlashInfer's MLA kernels run: q [batch, Hq, 576], one
// KV head whose latent cache rows are 576 wide (512 latent + 64 rotary), V a view of the first
// 512 columns of the same memory (head_dim_v 512), pages of 64. The kernel against the float64
// oracle (reference/paged.hpp) in f32 and bf16, with lengths 0 and off the page grid, grouped
// heads, split-KV, the engine features and scaled 8-bit caches; then a small 64/48 shape for the
// paths the large one does not take; the engine configuration such a call gives; the
// comparison report on an MLA call.
#include <gtest/gtest.h>

#include <attnref/compare/paged.hpp>
#include <attnref/core/executor.hpp>
#include <attnref/kernels/paged_attention.hpp>
#include <attnref/validate/engines.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reference/paged.hpp"

namespace {

using attnref::TensorView;

std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

struct MlaShape {
  std::int64_t hq = 16, hkv = 1, dim = 576, dim_v = 512, page_size = 64;
  std::vector<std::int32_t> lengths{0, 1, 63, 64, 65, 200};
  std::int64_t pps = 4;       ///< pages per sequence
  std::int64_t row_pad = 0;   ///< elements between two latent rows past dim (never read)
  bool v_of_its_own = false;  ///< V in a buffer of its own instead of a view of K's memory
};

/// A decode batch over a latent cache [Hkv, P, S, dim] (rows `dim + row_pad` apart): K is the
/// cache, V the view of its first dim_v columns (or a buffer of its own). Every element the
/// kernel must not read is NaN: slots past each length, pages no sequence reads, the row
/// padding, and the page-table entries past each length point outside the pool.
template <class T>
struct MlaBatch {
  MlaShape sh;
  std::int64_t batch = 0, pages = 0, ld = 0;
  std::vector<T> q, cache, v_own;
  std::vector<std::int32_t> lengths, table;
  attnref::PagedAttentionArgs<T, T> args;

  MlaBatch(const MlaShape& shape, std::uint32_t seed) : sh(shape) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const T nan = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
    batch = static_cast<std::int64_t>(sh.lengths.size());
    pages = batch * sh.pps + 3;
    ld = sh.dim + sh.row_pad;
    lengths = sh.lengths;
    q.resize(ix(batch * sh.hq * sh.dim));
    for (T& x : q) x = static_cast<T>(u(rng));
    cache.assign(ix(sh.hkv * pages * sh.page_size * ld), nan);
    const std::int64_t ld_v = sh.v_of_its_own ? sh.dim_v : ld;
    if (sh.v_of_its_own) v_own.assign(ix(sh.hkv * pages * sh.page_size * sh.dim_v), nan);
    std::vector<std::int32_t> order(ix(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    table.assign(ix(batch * sh.pps), 1 << 30);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = lengths[ix(b)];
      for (std::int64_t j = 0; j * sh.page_size < len; ++j)
        table[ix(b * sh.pps + j)] = order[ix(b * sh.pps + j)];
      for (std::int64_t t = 0; t < len; ++t) {
        const std::int64_t page = table[ix(b * sh.pps + t / sh.page_size)];
        for (std::int64_t h = 0; h < sh.hkv; ++h) {
          const std::int64_t row = (h * pages + page) * sh.page_size + t % sh.page_size;
          for (std::int64_t d = 0; d < sh.dim; ++d)
            cache[ix(row * ld + d)] = static_cast<T>(u(rng));
          for (std::int64_t d = 0; sh.v_of_its_own && d < sh.dim_v; ++d)
            v_own[ix(row * sh.dim_v + d)] = static_cast<T>(u(rng));
        }
      }
    }
    const T* v_data = sh.v_of_its_own ? v_own.data() : cache.data();
    args.q = {q.data(), {batch, sh.hq, sh.dim}};
    args.k_pages = {cache.data(),
                    {sh.hkv, pages, sh.page_size, sh.dim},
                    {pages * sh.page_size * ld, sh.page_size * ld, ld, 1}};
    args.v_pages = {v_data,
                    {sh.hkv, pages, sh.page_size, sh.dim_v},
                    {pages * sh.page_size * ld_v, sh.page_size * ld_v, ld_v, 1}};
    args.lengths = {lengths.data(), {batch}};
    args.page_indices = {table.data(), {batch, sh.pps}};
    args.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.dim)));
  }
};

template <class T>
double value_of(T x) {
  return static_cast<double>(static_cast<float>(x));
}

/// The largest |got - want| / (tol + tol |want|); infinity for a non-finite `got`.
template <class T>
double worst_ratio(const std::vector<T>& got, const std::vector<double>& want, double tol) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double g = value_of(got[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(g - want[i]) / (tol + tol * std::fabs(want[i])));
  }
  return worst;
}

/// Runs the kernel on `args` (output and logsumexp, on `executor`) and checks both against the
/// oracle: the output within `tol`, the logsumexp within 1e-4 (f32 in every dtype).
template <class Q, class KV, class Executor = attnref::SerialExecutor>
void expect_matches_oracle(const attnref::PagedAttentionArgs<Q, KV>& args, double tol,
                           Executor&& executor = Executor{}) {
  const std::int64_t batch = args.batch(), hq = args.num_q_heads(), dv = args.head_dim_v();
  std::vector<Q> out(ix(batch * hq * dv), static_cast<Q>(-7.0f));
  std::vector<float> lse(ix(batch * hq), -7.0f);
  const attnref::Status s =
      attnref::try_paged_attention(args, TensorView<Q, 3>(out.data(), {batch, hq, dv}),
                                   TensorView<float, 2>(lse.data(), {batch, hq}), executor);
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::vector<double> want_lse;
  const std::vector<double> want = attnref::reference::paged_attention(args, nullptr, &want_lse);
  EXPECT_LE(worst_ratio(out, want, tol), 1.0);
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      EXPECT_EQ(lse[i], -std::numeric_limits<float>::infinity()) << "row " << i;
    } else {
      EXPECT_NEAR(lse[i], want_lse[i], 1e-4 * (1.0 + std::fabs(want_lse[i]))) << "row " << i;
    }
  }
}

// f32 accumulation of 576-long dot products: a few f32 ulps of the logits; bf16 output: a few
// bf16 ulps (2^-8 relative).
constexpr double kF32Tol = 2e-5, kBf16Tol = 2e-2;

TEST(PagedMla, Float32SixteenHeads) {
  MlaBatch<float> m(MlaShape{}, 1);
  expect_matches_oracle(m.args, kF32Tol);
}

TEST(PagedMla, BFloat16HundredTwentyEightHeads) {
  MlaShape sh;
  sh.hq = 128;
  sh.lengths = {130, 0, 64, 7};
  MlaBatch<Eigen::bfloat16> m(sh, 2);
  expect_matches_oracle(m.args, kBf16Tol);
}

TEST(PagedMla, RowPaddingAndAVOfItsOwnGiveTheSameAnswers) {
  MlaShape sh;
  sh.row_pad = 8;  // a cache row 584 elements apart: the padding is NaN and never read
  MlaBatch<float> padded(sh, 3);
  expect_matches_oracle(padded.args, kF32Tol);
  sh.row_pad = 0;
  sh.v_of_its_own = true;
  MlaBatch<Eigen::bfloat16> own(sh, 4);
  expect_matches_oracle(own.args, kBf16Tol);
}

TEST(PagedMla, SplitKvOnAThreadPool) {
  // One sequence, one KV head: fewer items than threads, so the pages are split and merged.
  attnref::ThreadPoolExecutor pool(4);
  MlaShape sh;
  sh.lengths = {250};
  MlaBatch<float> f32(sh, 5);
  expect_matches_oracle(f32.args, kF32Tol, pool);
  sh.lengths = {0, 129};
  MlaBatch<Eigen::bfloat16> bf16(sh, 6);
  expect_matches_oracle(bf16.args, kBf16Tol, pool);
}

TEST(PagedMla, EngineFeatures) {
  MlaShape sh;
  sh.lengths = {0, 100, 256};
  MlaBatch<float> m(sh, 7);
  std::vector<float> sinks(ix(sh.hq)), slopes(ix(sh.hq));
  for (std::int64_t h = 0; h < sh.hq; ++h) {
    sinks[ix(h)] = 0.25f * static_cast<float>(h % 5) - 0.5f;
    slopes[ix(h)] = 0.01f * static_cast<float>(h + 1);
  }
  m.args.soft_cap = 2.0f;
  m.args.sliding_window = 70;  // the window starts inside a page; the page before is not read
  m.args.sinks = {sinks.data(), {sh.hq}};
  m.args.alibi_slopes = {slopes.data(), {sh.hq}};
  expect_matches_oracle(m.args, kF32Tol);
  m.args.round_kv_to_bf16 = true;  // converted rows instead of rows in place
  expect_matches_oracle(m.args, kF32Tol);
}

/// An 8-bit latent cache (int8 codes or e4m3 codes of magnitude 1/8..2), per-token K scales and
/// per-token or per-element V scales, V again a view of K's codes; the rows the kernel must not
/// read have NaN scales (int8) or NaN codes (fp8).
template <class KV>
void expect_scaled_cache_matches(bool per_element_v, std::uint32_t seed) {
  MlaShape sh;
  sh.lengths = {0, 65, 140};
  MlaBatch<float> m(sh, seed);  // its NaNs mark the rows and columns never read
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<KV> codes(m.cache.size());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const bool live = std::isfinite(m.cache[i]);
    const int b = byte(rng);
    if constexpr (std::is_same<KV, std::int8_t>::value)
      codes[i] = static_cast<std::int8_t>(b - 128);
    else  // sign, exponent 4..7, any mantissa; dead elements 0x7f (NaN)
      codes[i] = KV::from_bits(static_cast<std::uint8_t>(live ? (b & 0x9f) | 0x20 : 0x7f));
  }
  const std::int64_t rows = sh.hkv * m.pages * sh.page_size;
  const std::int64_t dv_scales = per_element_v ? sh.dim_v : 1;
  std::vector<float> k_scales(ix(rows)), v_scales(ix(rows * dv_scales));
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool live = std::isfinite(m.cache[ix(r * m.ld)]);
    k_scales[ix(r)] = live ? u(rng) : nan;
    for (std::int64_t d = 0; d < dv_scales; ++d)
      v_scales[ix(r * dv_scales + d)] = live ? u(rng) : nan;
  }
  attnref::PagedAttentionArgs<float, KV> a;
  a.q = m.args.q;
  a.k_pages = {codes.data(), m.args.k_pages.extents, m.args.k_pages.strides};
  a.v_pages = {codes.data(), m.args.v_pages.extents, m.args.v_pages.strides};
  a.lengths = m.args.lengths;
  a.page_indices = m.args.page_indices;
  a.sm_scale = m.args.sm_scale;
  a.k_scales = {k_scales.data(), {sh.hkv, m.pages, sh.page_size, 1}};
  a.v_scales = {v_scales.data(), {sh.hkv, m.pages, sh.page_size, dv_scales}};
  expect_matches_oracle(a, kF32Tol);
}

TEST(PagedMla, Int8AndFp8LatentCaches) {
  expect_scaled_cache_matches<std::int8_t>(false, 8);
  expect_scaled_cache_matches<std::int8_t>(true, 9);
  expect_scaled_cache_matches<attnref::float8_e4m3fn>(false, 10);
  expect_scaled_cache_matches<attnref::float8_e4m3fn>(true, 11);
}

// A small head_dim pair (64 / 48) for speed, over every path: grouped heads (4 per KV head, 2
// KV heads), pages smaller than, equal to and larger than a chunk, serial and split-KV, V a
// view or a buffer of its own, and V wider than K.
TEST(PagedMla, SmallHeadDimsEveryPath) {
  attnref::ThreadPoolExecutor pool(3);
  int runs = 0;
  for (std::int64_t page_size : {5, 16, 128, 300}) {
    for (bool own : {false, true}) {
      for (auto dims : {std::pair<std::int64_t, std::int64_t>{64, 48}, {48, 64}}) {
        if (dims.second > dims.first && !own) continue;  // a view is narrower than its rows
        SCOPED_TRACE(::testing::Message() << "S=" << page_size << " own=" << own
                                          << " D=" << dims.first << " Dv=" << dims.second);
        MlaShape sh;
        sh.hq = 8;
        sh.hkv = 2;
        sh.dim = dims.first;
        sh.dim_v = dims.second;
        sh.page_size = page_size;
        sh.pps = (300 + page_size - 1) / page_size;
        sh.lengths = {0, 1, static_cast<std::int32_t>(page_size), 299, 77};
        sh.v_of_its_own = own;
        const auto seed = static_cast<std::uint32_t>(100 + runs++);
        MlaBatch<float> f32(sh, seed);
        expect_matches_oracle(f32.args, kF32Tol);
        expect_matches_oracle(f32.args, kF32Tol, pool);
        MlaBatch<Eigen::bfloat16> bf16(sh, seed);
        expect_matches_oracle(bf16.args, kBf16Tol);
        sh.lengths = {299};  // one sequence: split-KV
        MlaBatch<Eigen::bfloat16> one(sh, seed);
        expect_matches_oracle(one.args, kBf16Tol, pool);
      }
    }
  }
}

TEST(PagedMla, EngineConfigOfAnMlaCallIsFlashMlasShape) {
  MlaShape sh;
  sh.hq = 128;
  sh.lengths = {3, 70};
  MlaBatch<Eigen::bfloat16> m(sh, 12);
  const attnref::EngineConfig c = attnref::engine_config_of(m.args);
  EXPECT_EQ(c.head_dim, 576);
  EXPECT_EQ(c.head_dim_v, 512);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.page_size, 64);
  const attnref::EngineReport r =
      attnref::check_engine(c, {attnref::EngineKernel::kFlashMlaDecode, 90});
  EXPECT_TRUE(r.ok()) << (r.findings.empty() ? "" : r.findings[0].upstream_message());
  // head_dim_v 256 is not FlashMLA's: its rule names it.
  MlaShape narrow = sh;
  narrow.dim_v = 256;
  MlaBatch<Eigen::bfloat16> n(narrow, 13);
  const attnref::EngineReport bad = attnref::check_engine(
      attnref::engine_config_of(n.args), {attnref::EngineKernel::kFlashMlaDecode, 90});
  ASSERT_EQ(bad.findings.size(), 1u);
  EXPECT_EQ(std::string(bad.findings[0].rule().id), "flashmla.decode.head_dim_v");
}

TEST(PagedMla, CompareNamesTheCauseAndTriesNoSwap) {
  MlaShape sh;
  sh.lengths = {5, 130, 64};
  MlaBatch<float> m(sh, 14);
  namespace compare = attnref::compare;
  compare::Options o;
  o.tol = {1e-4, 1e-4};
  compare::Report right;
  ASSERT_TRUE(
      compare::try_compare_paged(m.args, attnref::reference::paged_attention(m.args), {}, o, &right)
          .ok());
  EXPECT_TRUE(right.ok());
  EXPECT_EQ(right.count, m.batch * sh.hq * sh.dim_v);
  // An output that dropped the last key of every sequence.
  std::vector<std::int32_t> shorter = m.lengths;
  for (std::int32_t& len : shorter) --len;
  attnref::PagedAttentionArgs<float> wrong = m.args;
  wrong.lengths = {shorter.data(), {m.batch}};
  compare::Report r;
  ASSERT_TRUE(
      compare::try_compare_paged(m.args, attnref::reference::paged_attention(wrong), {}, o, &r)
          .ok());
  ASSERT_EQ(r.causes.size(), 1u) << compare::format_report(r);
  EXPECT_NE(r.causes[0].what.find("length off by one"), std::string::npos)
      << compare::format_report(r);
  for (const std::string& s : r.skipped)  // K (576) and V (512) cannot swap: not even tried
    EXPECT_EQ(s.find("swapped"), std::string::npos) << s;
  // An output of q's shape is the wrong size for an MLA call.
  const std::vector<double> q_sized(ix(m.batch * sh.hq * sh.dim), 0.0);
  EXPECT_FALSE(compare::try_compare_paged(m.args, q_sized, {}, o, &r).ok());
}

}  // namespace
