// SPDX-License-Identifier: Apache-2.0
// Paged attention's engine features against the float64 oracle (reference/paged.hpp): sliding
// window (keys before it NaN and their page-table entries -1: never read), attention sinks (a
// sequence of length 0 sees no key but its sink), ALiBi after the soft cap, all three together,
// GQA, serial and split-KV on a thread pool, logsumexp checked; ALiBi's absolute convention and
// ALiBi before the soft cap; hand-worked cases; every new check (code, JAX id, message).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnref/core/executor.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "reference/paged_batch.hpp"

namespace {

using attnref::ErrorCode;
using attnref::TensorView;
using paged_test::LogicalBatch;
using paged_test::Shape;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

struct Features {
  std::optional<std::int64_t> window;
  bool sinks = false;
  bool alibi = false;
  std::optional<float> cap;
  attnref::AlibiConvention alibi_convention = attnref::AlibiConvention::kSigned;
  attnref::SoftCapOrder soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
};

/// A batch as f32 arguments in JAX's layout with the features set. Every K/V slot the kernel
/// must not read (past the length, before the window) is NaN, and page-table entries of pages
/// wholly before the window are -1.
struct Inputs {
  std::vector<float> q, k, v, sinks, slopes;
  std::vector<std::int32_t> lengths, table;
  attnref::PagedAttentionArgs<float> args;
  attnref::PagedAttentionArgs<double, double, std::int64_t> oracle_args;

  Inputs(LogicalBatch& lb, const Features& f, std::mt19937& rng) {
    const Shape& sh = lb.shape;
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.dim));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t h = 0; h < sh.hq; ++h) {
      sinks.push_back(2.0f * u(rng));
      slopes.push_back(0.25f * std::pow(2.0f, -static_cast<float>(h)));  // one per head
    }
    for (double x : lb.q) q.push_back(static_cast<float>(x));
    const auto convert = [](double x) { return static_cast<float>(x); };
    k = paged_test::to_physical<float>(lb, lb.k, attnref::KvLayout::kJax, kNaN, convert);
    v = paged_test::to_physical<float>(lb, lb.v, attnref::KvLayout::kJax, kNaN, convert);
    lengths.assign(lb.lengths.begin(), lb.lengths.end());
    table.assign(lb.table.begin(), lb.table.end());
    if (f.window) {
      // Before the window: NaN K/V (these slots belong to this sequence only), no page.
      for (std::int64_t b = 0; b < sh.batch; ++b) {
        const std::int64_t first = std::max<std::int64_t>(0, lb.lengths[at(b)] - *f.window);
        for (std::int64_t t = 0; t < first; ++t) {
          const std::int64_t page = table[at(b * sh.pages_per_seq + t / sh.page_size)];
          for (std::int64_t h = 0; h < sh.hkv; ++h)
            for (std::int64_t d = 0; d < sh.dim; ++d) {
              const std::int64_t o =
                  ((h * lb.total_pages + page) * sh.page_size + t % sh.page_size) * sh.dim + d;
              k[at(o)] = v[at(o)] = kNaN;
            }
        }
        for (std::int64_t j = 0; (j + 1) * sh.page_size <= first; ++j)
          table[at(b * sh.pages_per_seq + j)] = -1;
      }
    }
    args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
    args.k_pages = {k.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
    args.v_pages = {v.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
    args.lengths = {lengths.data(), {sh.batch}};
    args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
    args.sm_scale = scale;
    args.soft_cap = f.cap;
    args.sliding_window = f.window;
    if (f.sinks) args.sinks = {sinks.data(), {sh.hq}};
    if (f.alibi) args.alibi_slopes = {slopes.data(), {sh.hq}};
    args.alibi_convention = f.alibi_convention;
    args.soft_cap_order = f.soft_cap_order;
    oracle_args = lb.args(scale, f.cap ? std::optional<double>(*f.cap) : std::nullopt);
    oracle_args.alibi_convention = f.alibi_convention;
    oracle_args.soft_cap_order = f.soft_cap_order;
    oracle_args.sliding_window = args.sliding_window;
    oracle_args.sinks = args.sinks;
    oracle_args.alibi_slopes = args.alibi_slopes;
  }
};

/// Runs the kernel (serial, and on 8 threads: the split-KV path for small batches) and checks
/// out and logsumexp against the oracle.
void check_against_oracle(const Shape& sh, const Features& f, unsigned seed,
                          const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937 rng(seed);
  LogicalBatch lb = paged_test::make_batch(sh, rng);
  const Inputs in(lb, f, rng);
  std::vector<double> want_lse;
  const std::vector<double> want =
      attnref::reference::paged_attention(in.oracle_args, nullptr, &want_lse);
  attnref::ThreadPoolExecutor pool(8);
  for (int threads : {1, 8}) {
    std::vector<float> out(in.q.size(), kNaN), lse(at(sh.batch * sh.hq), kNaN);
    const TensorView<float, 3> out_view(out.data(), in.args.q.extents);
    const TensorView<float, 2> lse_view(lse.data(), {sh.batch, sh.hq});
    if (threads == 1) {
      attnref::paged_attention(in.args, out_view, lse_view);
    } else {
      attnref::paged_attention(in.args, out_view, lse_view, pool);
    }
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
          << "threads " << threads << " element " << i;
    for (std::size_t i = 0; i < want_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        ASSERT_EQ(static_cast<double>(lse[i]), want_lse[i]) << "threads " << threads << " " << i;
      } else {
        ASSERT_NEAR(lse[i], want_lse[i], 2e-6 * (1 + std::fabs(want_lse[i])))
            << "threads " << threads << " row " << i;
      }
    }
  }
}

// Six sequences with lengths 0, 1, S-1, S, S+1, capacity (make_batch's pattern); one KV head
// for the split-KV path (fewer items than threads), two query heads per KV head.
const Shape kGqa{6, 4, 2, 16, 4, 5, 2};
const Shape kSplit{6, 4, 1, 16, 4, 6, 1};

TEST(PagedWindow, MatchesTheOracleAndNeverReadsBeforeTheWindow) {
  unsigned seed = 1;
  for (std::int64_t w : {1, 3, 4, 9, 1000})
    for (const Shape& sh : {kGqa, kSplit}) {
      Features f;
      f.window = w;
      check_against_oracle(sh, f, seed++, "window " + std::to_string(w));
    }
}

TEST(PagedWindow, AWindowAsLongAsTheSequenceIsNoWindow) {
  std::mt19937 rng(7);
  LogicalBatch lb = paged_test::make_batch(kGqa, rng);
  Features f;
  const Inputs plain(lb, f, rng);
  f.window = kGqa.pages_per_seq * kGqa.page_size;
  const Inputs windowed(lb, f, rng);
  std::vector<float> a(plain.q.size()), b(plain.q.size());
  attnref::paged_attention(plain.args, TensorView<float, 3>(a.data(), plain.args.q.extents));
  attnref::paged_attention(windowed.args, TensorView<float, 3>(b.data(), plain.args.q.extents));
  EXPECT_EQ(a, b);
}

TEST(PagedSinks, MatchTheOracleAndAnEmptySequenceGetsItsSinkAsLogsumexp) {
  for (const Shape& sh : {kGqa, kSplit}) {
    Features f;
    f.sinks = true;
    check_against_oracle(sh, f, 20 + static_cast<unsigned>(sh.hkv), "sinks");
  }
  // Length 0 (sequence 0): out 0, logsumexp = the sink (the only logit).
  std::mt19937 rng(21);
  LogicalBatch lb = paged_test::make_batch(kGqa, rng);
  Features f;
  f.sinks = true;
  const Inputs in(lb, f, rng);
  ASSERT_EQ(in.lengths[0], 0);
  std::vector<float> out(in.q.size(), kNaN), lse(at(kGqa.batch * kGqa.hq), kNaN);
  attnref::paged_attention(in.args, TensorView<float, 3>(out.data(), in.args.q.extents),
                           TensorView<float, 2>(lse.data(), {kGqa.batch, kGqa.hq}));
  for (std::int64_t h = 0; h < kGqa.hq; ++h) {
    EXPECT_EQ(lse[at(h)], in.sinks[at(h)]) << h;
    for (std::int64_t d = 0; d < kGqa.dim; ++d) EXPECT_EQ(out[at(h * kGqa.dim + d)], 0.0f);
  }
}

TEST(PagedAlibi, MatchesTheOracleAloneAndAfterTheSoftCap) {
  for (const Shape& sh : {kGqa, kSplit}) {
    Features f;
    f.alibi = true;
    check_against_oracle(sh, f, 30, "alibi");
    f.cap = 0.5f;  // a small cap: a bias added before it would be squashed too
    check_against_oracle(sh, f, 31, "alibi + soft cap");
  }
}

TEST(PagedFeatures, WindowSinksAlibiAndSoftCapTogether) {
  unsigned seed = 40;
  for (const Shape& sh : {kGqa, kSplit, Shape{3, 8, 2, 8, 1, 12, 0}}) {
    Features f;
    f.window = 5;
    f.sinks = f.alibi = true;
    f.cap = 2.0f;
    check_against_oracle(sh, f, seed++, "all features");
  }
}

TEST(PagedConventions, AbsoluteAlibiAndAlibiBeforeTheCapMatchTheOracle) {
  unsigned seed = 50;
  for (const Shape& sh : {kGqa, kSplit}) {
    Features f;
    f.alibi = true;
    f.alibi_convention = attnref::AlibiConvention::kAbsolute;
    check_against_oracle(sh, f, seed++, "absolute alibi");
    f.cap = 0.5f;
    check_against_oracle(sh, f, seed++, "absolute alibi + soft cap");
    f.alibi_convention = attnref::AlibiConvention::kSigned;
    f.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
    check_against_oracle(sh, f, seed++, "alibi then soft cap");
    f.alibi_convention = attnref::AlibiConvention::kAbsolute;
    check_against_oracle(sh, f, seed++, "absolute alibi then soft cap");
    f.window = 5;
    f.sinks = true;
    f.cap = 2.0f;
    check_against_oracle(sh, f, seed++, "absolute alibi then soft cap, window, sinks");
  }
}

TEST(PagedConventions, TheOrderChangesTheResultTheConventionDoesNotInDecode) {
  std::mt19937 rng(60);
  LogicalBatch lb = paged_test::make_batch(kGqa, rng);
  Features f;
  f.alibi = true;
  f.cap = 0.5f;
  const auto run = [&](const Features& g) {
    std::mt19937 r(61);
    const Inputs in(lb, g, r);
    std::vector<float> out(in.q.size());
    attnref::paged_attention(in.args, TensorView<float, 3>(out.data(), in.args.q.extents));
    return out;
  };
  const std::vector<float> plain = run(f);
  Features absolute = f;
  absolute.alibi_convention = attnref::AlibiConvention::kAbsolute;
  EXPECT_EQ(run(absolute), plain);  // every key is at or left of the decode query
  Features inside = f;
  inside.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  EXPECT_NE(run(inside), plain);
}

// Worked by hand: one sequence of two keys, q = k = 0 (every dot product 0), v = 1 and 3.
TEST(PagedFeatures, HandWorkedSinkAndAlibi) {
  const std::vector<float> q = {0.0f}, k = {0.0f, 0.0f}, v = {1.0f, 3.0f};
  const std::vector<std::int32_t> lengths = {2}, table = {0};
  const std::vector<float> sink = {0.0f}, slope = {1.0f};
  attnref::PagedAttentionArgs<float> a;
  a.q = {q.data(), {1, 1, 1}};
  a.k_pages = {k.data(), {1, 1, 2, 1}};
  a.v_pages = {v.data(), {1, 1, 2, 1}};
  a.lengths = {lengths.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  float out = kNaN, lse = kNaN;
  const TensorView<float, 3> o(&out, {1, 1, 1});
  const TensorView<float, 2> l(&lse, {1, 1});
  // Sink 0: three logits 0, weights 1/3: out (1 + 3) / 3, lse log 3.
  a.sinks = {sink.data(), {1}};
  attnref::paged_attention(a, o, l);
  EXPECT_NEAR(out, 4.0 / 3.0, 1e-6);
  EXPECT_NEAR(lse, std::log(3.0), 1e-6);
  // ALiBi slope 1 (query at position 1): logits -1 and 0: out (e^-1 + 3) / (e^-1 + 1).
  a.sinks = {};
  a.alibi_slopes = {slope.data(), {1}};
  attnref::paged_attention(a, o, l);
  const double e = std::exp(-1.0);
  EXPECT_NEAR(out, (e + 3.0) / (e + 1.0), 1e-6);
  EXPECT_NEAR(lse, std::log(e + 1.0), 1e-6);
  // Absolute ALiBi: -1 * |0 - 1| = -1 and 0, the same logits (no key right of the query).
  a.alibi_convention = attnref::AlibiConvention::kAbsolute;
  attnref::paged_attention(a, o, l);
  EXPECT_NEAR(out, (e + 3.0) / (e + 1.0), 1e-6);  // 2.462117
  // Soft cap 1 after ALiBi: logits tanh(-1) = -0.761594 and tanh(0) = 0, weights
  // e^-0.761594 = 0.466921 and 1: out (0.466921 + 3) / 1.466921 = 2.363399,
  // lse log 1.466921 = 0.383166. Cap first instead: tanh(0) - 1 = -1 and 0, as above.
  a.alibi_convention = attnref::AlibiConvention::kSigned;
  a.soft_cap = 1.0f;
  a.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  attnref::paged_attention(a, o, l);
  EXPECT_NEAR(out, 2.363399, 1e-6);
  EXPECT_NEAR(lse, 0.383166, 1e-6);
  a.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  attnref::paged_attention(a, o, l);
  EXPECT_NEAR(out, (e + 3.0) / (e + 1.0), 1e-6);
  a.soft_cap = std::nullopt;
  // Window 1: only the last key.
  a.alibi_slopes = {};
  a.sliding_window = 1;
  attnref::paged_attention(a, o, l);
  EXPECT_EQ(out, 3.0f);
  EXPECT_EQ(lse, 0.0f);
}

// --- checks -----------------------------------------------------------------------------------

struct Tiny {
  std::vector<float> q = std::vector<float>(2 * 4 * 2, 0.5f), k = std::vector<float>(16, 0.5f),
                     v = std::vector<float>(16, 0.5f), four = {0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<std::int32_t> lengths = {3, 2}, table = {0, 1, 1, 0};
  attnref::PagedAttentionArgs<float> a;
  Tiny() {
    a.q = {q.data(), {2, 4, 2}};
    a.k_pages = {k.data(), {2, 2, 2, 2}};
    a.v_pages = {v.data(), {2, 2, 2, 2}};
    a.lengths = {lengths.data(), {2}};
    a.page_indices = {table.data(), {2, 2}};
  }
};

TEST(PagedFeatureChecks, WindowMustBePositive) {
  Tiny t;
  for (std::int64_t w : {0, -3}) {
    t.a.sliding_window = w;
    const attnref::Status s = attnref::check_paged(t.a, attnref::Profile::kReference);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidSlidingWindow);
    EXPECT_EQ(std::string(s.jax_check()), "");
    EXPECT_EQ(s.message(), "sliding_window=" + std::to_string(w) + " must be positive.");
  }
  t.a.sliding_window = std::numeric_limits<std::int64_t>::max();  // hostile but valid
  EXPECT_TRUE(attnref::check_paged(t.a, attnref::Profile::kReference).ok());
}

TEST(PagedFeatureChecks, SinksAndSlopesMustHaveOneValuePerQueryHead) {
  Tiny t;
  t.a.sinks = {t.four.data(), {3}};
  attnref::Status s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kSinksShape);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "sinks must have shape (4,), one logit per query head. Got (3,).");
  t.a.sinks = {t.four.data(), {4}};
  t.a.alibi_slopes = {t.four.data(), {2}};
  s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kAlibiSlopesShape);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_slopes must have shape (4,), one slope per query head. Got (2,).");
  EXPECT_STREQ(attnref::error_code_name(s.code()), "alibi_slopes_shape");
  t.a.alibi_slopes = {nullptr, {4}};  // null data for 4 elements: the view check
  s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kNullData);
}

TEST(PagedFeatureChecks, SlopesMustBeFiniteAndSinksAreScannedByTheDataTier) {
  Tiny t;
  std::vector<float> slopes = t.four;
  slopes[1] = kNaN;
  t.a.alibi_slopes = {slopes.data(), {4}};
  attnref::Status s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidAlibiSlope);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_slopes[1]=nan must be finite.");
  EXPECT_STREQ(attnref::error_code_name(s.code()), "invalid_alibi_slope");
  // The shape tier alone does not read them.
  EXPECT_TRUE(attnref::check_paged_shapes(t.a, attnref::Profile::kReference).ok());
  slopes[1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(attnref::check_paged(t.a, attnref::Profile::kReference).message(),
            "alibi_slopes[1]=inf must be finite.");
  t.a.alibi_slopes = {};
  std::vector<float> sinks = t.four;
  sinks[2] = -std::numeric_limits<float>::infinity();
  t.a.sinks = {sinks.data(), {4}};
  ASSERT_TRUE(attnref::check_paged(t.a, attnref::Profile::kReference).ok());
  s = attnref::check_paged_data(t.a);
  EXPECT_EQ(s.code(), ErrorCode::kNonFiniteData);
  EXPECT_EQ(s.message(), "sinks[2] is not finite");
}

TEST(PagedFeatureChecks, ConventionsMustBeEnumeratorsAndAreNotInJax) {
  Tiny t;
  t.a.alibi_convention = static_cast<attnref::AlibiConvention>(7);
  attnref::Status s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidConvention);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_convention must be one of [signed, absolute]. Got 7.");
  EXPECT_STREQ(attnref::error_code_name(s.code()), "invalid_convention");
  t.a.alibi_convention = attnref::AlibiConvention::kAbsolute;
  t.a.soft_cap_order = static_cast<attnref::SoftCapOrder>(-1);
  s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidConvention);
  EXPECT_EQ(s.message(), "soft_cap_order must be one of [cap_then_alibi, alibi_then_cap]. Got -1.");
  t.a.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  EXPECT_TRUE(attnref::check_paged(t.a, attnref::Profile::kReference).ok());
  // JAX's kernel has neither option: a non-default value is refused under the jax profile.
  s = attnref::check_paged_shapes(t.a, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's paged_attention has no alibi_convention option.");
  t.a.alibi_convention = attnref::AlibiConvention::kSigned;
  s = attnref::check_paged_shapes(t.a, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's paged_attention has no soft_cap_order option.");
  t.a.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  EXPECT_NE(attnref::check_paged_shapes(t.a, attnref::Profile::kJax).code(),
            ErrorCode::kOptionNotInJax);
}

TEST(PagedFeatureChecks, PagesBeforeTheWindowAreNotChecked) {
  Tiny t;
  t.table[0] = -5;         // sequence 0 (length 3): its page 0 holds keys 0, 1
  t.a.sliding_window = 1;  // ... which a window of 1 never reads
  EXPECT_TRUE(attnref::check_paged(t.a, attnref::Profile::kReference).ok());
  t.a.sliding_window = 2;  // key 1 is on page 0 now
  const attnref::Status s = attnref::check_paged(t.a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kPageIndexOutOfRange);
  EXPECT_EQ(s.message(), "page_indices[0, 0]=-5 is outside [0, 2) (total_pages)");
}

}  // namespace
