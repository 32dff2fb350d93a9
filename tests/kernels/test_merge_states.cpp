// SPDX-License-Identifier: Apache-2.0
// merge_attention_states: results over disjoint key sets, merged, equal the result over their
// union. Key ranges of paged problems (each part run by the paged kernel on a pool holding only
// its keys) and of splash problems (each part from the float64 oracle with the mask cut to the
// part, sinks in one part) are split at random points and merged part by part; hand-worked
// numbers; -inf and NaN states; in-place merging; the checks (shapes, overlapping views).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/executor.hpp"
#include "attnref/kernels/merge_attention_states.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/merge.hpp"
#include "reference/merge.hpp"
#include "reference/paged.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::ErrorCode;
using attnref::MergeStatesArgs;
using attnref::TensorView;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

/// A state [rows, heads, dim] in T with its logsumexp [rows, heads].
template <class T>
struct State {
  std::int64_t rows = 0, heads = 0, dim = 0;
  std::vector<T> out;
  std::vector<float> lse;

  State() = default;
  State(std::int64_t n, std::int64_t h, std::int64_t d, T fill = T(0), float lse_fill = 0.0f)
      : rows(n), heads(h), dim(d), out(at(n * h * d), fill), lse(at(n * h), lse_fill) {}
  TensorView<T, 3> out_view() { return TensorView<T, 3>(out.data(), {rows, heads, dim}); }
  TensorView<float, 2> lse_view() { return TensorView<float, 2>(lse.data(), {rows, heads}); }
  TensorView<const T, 3> cout() const {
    return TensorView<const T, 3>(out.data(), {rows, heads, dim});
  }
  TensorView<const float, 2> clse() const {
    return TensorView<const float, 2>(lse.data(), {rows, heads});
  }
};

template <class T>
MergeStatesArgs<T> merge_args(const State<T>& a, const State<T>& b) {
  MergeStatesArgs<T> m;
  m.out_a = a.cout();
  m.lse_a = a.clse();
  m.out_b = b.cout();
  m.lse_b = b.clse();
  return m;
}

/// Merges `b` into `acc` in place (out and lse are acc's own views).
template <class T>
void merge_into(State<T>& acc, const State<T>& b) {
  attnref::merge_attention_states(merge_args(acc, b), acc.out_view(), acc.lse_view());
}

template <class T>
double as_double(T x) {
  return static_cast<double>(static_cast<float>(x));
}
template <>
double as_double<double>(double x) {
  return x;
}

/// `got` against float64 `want_out` / `want_lse`: |got - want| <= tol * (1 + |want|), an
/// infinite logsumexp met exactly.
template <class T>
void expect_state_near(const State<T>& got, const std::vector<double>& want_out,
                       const std::vector<double>& want_lse, double tol, const std::string& what) {
  ASSERT_EQ(got.out.size(), want_out.size());
  ASSERT_EQ(got.lse.size(), want_lse.size());
  for (std::size_t i = 0; i < want_out.size(); ++i)
    ASSERT_NEAR(as_double(got.out[i]), want_out[i], tol * (1 + std::fabs(want_out[i])))
        << what << " out " << i;
  for (std::size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      ASSERT_EQ(static_cast<double>(got.lse[i]), want_lse[i]) << what << " lse " << i;
    } else {
      ASSERT_NEAR(got.lse[i], want_lse[i], tol * (1 + std::fabs(want_lse[i])))
          << what << " lse " << i;
    }
  }
}

// --- hand-worked --------------------------------------------------------------------------------

TEST(MergeStates, HandWorkedNumbers) {
  // w_a = exp(0 - log 3) = 1/3, w_b = 1: out = (1/3 (1, 2) + (3, 4)) / (4/3) = (2.5, 3.5),
  // lse = log 3 + log(4/3) = log 4.
  State<double> a(1, 1, 2), b(1, 1, 2), out(1, 1, 2);
  a.out = {1.0, 2.0};
  a.lse = {0.0f};
  b.out = {3.0, 4.0};
  b.lse = {std::log(3.0f)};
  ASSERT_TRUE(
      attnref::try_merge_attention_states(merge_args(a, b), out.out_view(), out.lse_view()).ok());
  // The weights come from f32 logsumexps: f32 accuracy.
  EXPECT_NEAR(out.out[0], 2.5, 1e-6);
  EXPECT_NEAR(out.out[1], 3.5, 1e-6);
  EXPECT_NEAR(out.lse[0], std::log(4.0f), 1e-6);
}

/// Random states (lse in [-30, 30], a few -inf, NaN and +inf rows) merged by the kernel and by
/// the float64 oracle of reference/merge.hpp.
TEST(MergeStates, RandomStatesMatchTheFloat64Oracle) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> value(-3, 3), lse(-30, 30);
  const std::int64_t rows = 64, heads = 2, dim = 7;
  State<float> a(rows, heads, dim), b(rows, heads, dim), out(rows, heads, dim);
  for (float& x : a.out) x = value(rng);
  for (float& x : b.out) x = value(rng);
  for (float& x : a.lse) x = lse(rng);
  for (float& x : b.lse) x = lse(rng);
  a.lse[3] = -kInf;
  b.lse[5] = -kInf;
  a.lse[7] = b.lse[7] = -kInf;
  a.lse[9] = kNaN;
  b.lse[11] = kInf;
  ASSERT_TRUE(
      attnref::try_merge_attention_states(merge_args(a, b), out.out_view(), out.lse_view()).ok());
  attnref::reference::MergeState ra, rb;
  for (float x : a.out) ra.out.push_back(x);
  for (float x : b.out) rb.out.push_back(x);
  for (float x : a.lse) ra.lse.push_back(x);
  for (float x : b.lse) rb.lse.push_back(x);
  const attnref::reference::MergeState want = attnref::reference::merge_states(ra, rb, dim);
  for (std::size_t r = 0; r < want.lse.size(); ++r) {
    if (std::isnan(want.lse[r])) {
      EXPECT_TRUE(std::isnan(out.lse[r])) << r;
      for (std::int64_t d = 0; d < dim; ++d)
        EXPECT_TRUE(std::isnan(out.out[r * at(dim) + at(d)])) << r;
      continue;
    }
    if (std::isinf(want.lse[r])) {
      EXPECT_EQ(static_cast<double>(out.lse[r]), want.lse[r]) << r;
    } else {
      EXPECT_NEAR(out.lse[r], want.lse[r], 1e-5 * (1 + std::fabs(want.lse[r]))) << r;
    }
    for (std::int64_t d = 0; d < dim; ++d) {
      const double w = want.out[r * at(dim) + at(d)];
      EXPECT_NEAR(out.out[r * at(dim) + at(d)], w, 1e-5 * (1 + std::fabs(w))) << r << ", " << d;
    }
  }
}

// --- paged: each part run by the kernel ---------------------------------------------------------

/// A decode problem with dense per-sequence keys: q [B, Hq, D], K/V [B, L, Hkv, D] (L the
/// longest length), lengths [B].
struct DecodeProblem {
  std::int64_t batch, hq, hkv, dim, max_len;
  std::vector<double> q, k, v;
  std::vector<std::int64_t> lengths;
  double key(const std::vector<double>& x, std::int64_t b, std::int64_t t, std::int64_t h,
             std::int64_t d) const {
    return x[at(((b * max_len + t) * hkv + h) * dim + d)];
  }
};

DecodeProblem make_decode(std::mt19937& rng, std::int64_t batch, std::int64_t hq, std::int64_t hkv,
                          std::int64_t dim, std::int64_t max_len) {
  DecodeProblem p{batch, hq, hkv, dim, max_len, {}, {}, {}, {}};
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::int64_t i = 0; i < batch * hq * dim; ++i)
    p.q.push_back(static_cast<double>(static_cast<float>(normal(rng))));
  for (std::int64_t i = 0; i < batch * max_len * hkv * dim; ++i) {
    p.k.push_back(static_cast<double>(static_cast<float>(normal(rng))));
    p.v.push_back(static_cast<double>(static_cast<float>(normal(rng))));
  }
  for (std::int64_t b = 0; b < batch; ++b)
    p.lengths.push_back(b == 0 ? 0 : static_cast<std::int64_t>(rng() % at(max_len + 1)));
  p.lengths.back() = max_len;
  return p;
}

/// Paged arguments in T over the keys [lo[b], hi[b]) of each sequence: a pool of pages of
/// `page_size` tokens holding just those keys, pages in order, lengths hi - lo.
template <class T>
struct PagedPart {
  std::vector<T> q, k, v;
  std::vector<std::int64_t> lengths, table;
  attnref::PagedAttentionArgs<T, T, std::int64_t> args;

  PagedPart(const DecodeProblem& p, const std::vector<std::int64_t>& lo,
            const std::vector<std::int64_t>& hi, std::int64_t page_size, float sm_scale) {
    const std::int64_t pps = (p.max_len + page_size - 1) / page_size + 1;
    const std::int64_t pages = p.batch * pps;
    for (double x : p.q) q.push_back(static_cast<T>(x));
    k.assign(at(p.hkv * pages * page_size * p.dim), static_cast<T>(kNaN));
    v.assign(k.size(), static_cast<T>(kNaN));
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t n = hi[at(b)] - lo[at(b)];
      lengths.push_back(n);
      for (std::int64_t j = 0; j < pps; ++j) table.push_back(b * pps + j);
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t h = 0; h < p.hkv; ++h)
          for (std::int64_t d = 0; d < p.dim; ++d) {
            const std::size_t i =
                at(((h * pages + b * pps + t / page_size) * page_size + t % page_size) * p.dim + d);
            k[i] = static_cast<T>(p.key(p.k, b, lo[at(b)] + t, h, d));
            v[i] = static_cast<T>(p.key(p.v, b, lo[at(b)] + t, h, d));
          }
    }
    args.q = {q.data(), {p.batch, p.hq, p.dim}};
    args.k_pages = {k.data(), {p.hkv, pages, page_size, p.dim}};
    args.v_pages = {v.data(), {p.hkv, pages, page_size, p.dim}};
    args.lengths = {lengths.data(), {p.batch}};
    args.page_indices = {table.data(), {p.batch, pps}};
    args.sm_scale = sm_scale;
  }
};

TEST(MergeStates, PagedKeyRangesSplitAtRandomPointsMergeToTheWhole) {
  std::mt19937 rng(41);
  attnref::ThreadPoolExecutor pool(3);
  int merges = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t hkv = 1 + trial % 2, group = 1 + trial % 4, dim = 8 + 8 * (trial % 3);
    const std::int64_t page_size = 1 + trial % 5, max_len = 5 + trial * 3;
    const DecodeProblem p = make_decode(rng, 4, hkv * group, hkv, dim, max_len);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    const std::int64_t parts = 2 + trial % 3;
    // Random cut points per sequence, sorted: empty parts happen (-inf states).
    std::vector<std::vector<std::int64_t>> cuts(at(parts + 1));
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t len = p.lengths[at(b)];
      std::vector<std::int64_t> c{0, len};
      for (std::int64_t i = 1; i < parts; ++i)
        c.push_back(static_cast<std::int64_t>(rng() % at(len + 1)));
      std::sort(c.begin(), c.end());
      for (std::int64_t i = 0; i <= parts; ++i) cuts[at(i)].push_back(c[at(i)]);
    }
    State<float> acc;
    for (std::int64_t i = 0; i < parts; ++i) {
      PagedPart<float> part(p, cuts[at(i)], cuts[at(i + 1)], page_size, scale);
      State<float> s(p.batch, p.hq, p.dim, kNaN, kNaN);
      attnref::paged_attention(part.args, s.out_view(), s.lse_view(), pool);
      if (i == 0) {
        acc = s;
      } else {
        merge_into(acc, s);
        ++merges;
      }
    }
    // The whole: the float64 oracle over [0, length), and the kernel in one piece.
    const PagedPart<double> whole(p, cuts.front(), cuts.back(), page_size, scale);
    std::vector<double> want_lse;
    const std::vector<double> want_out =
        attnref::reference::paged_attention(whole.args, nullptr, &want_lse);
    expect_state_near(acc, want_out, want_lse, 1e-5, "trial " + std::to_string(trial));
    PagedPart<float> whole_f(p, cuts.front(), cuts.back(), page_size, scale);
    State<float> one(p.batch, p.hq, p.dim, kNaN, kNaN);
    attnref::paged_attention(whole_f.args, one.out_view(), one.lse_view());
    for (std::size_t i = 0; i < one.out.size(); ++i)
      ASSERT_NEAR(acc.out[i], one.out[i], 2e-6 * (1 + std::fabs(one.out[i]))) << i;
  }
  EXPECT_GE(merges, 12);
}

// --- splash: each part from the oracle ----------------------------------------------------------

/// Parts of a causal splash problem (with sinks when `sinks`) over the key ranges between
/// `cuts`, from the float64 oracle; the sinks go with the first part only (one extra logit in
/// the whole softmax).
struct SplashParts {
  splash_ref::Problem p;
  std::vector<attnref::reference::SplashForwardResult> parts;
  attnref::reference::SplashForwardResult whole;
};

SplashParts splash_parts(std::mt19937& rng, bool sinks, const std::vector<std::int64_t>& cuts) {
  SplashParts s;
  splash_ref::Problem& p = s.p;
  p.hq = 4;
  p.hkv = 2;
  p.sq = 24;
  p.skv = 24;
  p.dqk = p.dv = 8;
  p.scale = 0.5;
  splash_ref::fill(p.q, at(p.hq * p.sq * p.dqk), rng, -1, 1);
  splash_ref::fill(p.k, at(p.hkv * p.skv * p.dqk), rng, -1, 1);
  splash_ref::fill(p.v, at(p.hkv * p.skv * p.dv), rng, -1, 1);
  if (sinks) p.sinks = {0.5, -1.0, 2.0, 0.0};
  p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  s.whole = splash_ref::forward(p);
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    splash_ref::Problem part = p;
    const std::int64_t lo = cuts[i], hi = cuts[i + 1];
    part.allowed = [lo, hi](std::int64_t, std::int64_t r, std::int64_t t) {
      return t <= r && t >= lo && t < hi;
    };
    if (i > 0) part.sinks.clear();
    s.parts.push_back(splash_ref::forward(part));
  }
  return s;
}

/// An oracle result [Hq, Sq, Dv] as a state in T (rows = Sq here: [Sq, Hq, Dv] is not needed,
/// any [N, H, D] works, so heads are the rows).
template <class T>
State<T> as_state(const splash_ref::Problem& p, const attnref::reference::SplashForwardResult& f) {
  State<T> s(p.hq, p.sq, p.dv);
  for (std::size_t i = 0; i < f.out.size(); ++i) s.out[i] = static_cast<T>(f.out[i]);
  for (std::size_t i = 0; i < f.lse.size(); ++i) s.lse[i] = static_cast<float>(f.lse[i]);
  return s;
}

template <class T>
void splash_split_merges(double tol) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<std::int64_t> cuts{0, 24};
    for (int i = 0; i < 1 + trial % 3; ++i) cuts.push_back(static_cast<std::int64_t>(rng() % 25));
    std::sort(cuts.begin(), cuts.end());
    const SplashParts s = splash_parts(rng, trial % 2 == 1, cuts);
    State<T> acc = as_state<T>(s.p, s.parts[0]);
    for (std::size_t i = 1; i < s.parts.size(); ++i) merge_into(acc, as_state<T>(s.p, s.parts[i]));
    expect_state_near(acc, s.whole.out, s.whole.lse, tol, "trial " + std::to_string(trial));
  }
}

TEST(MergeStates, SplashKeyRangesSplitAtRandomPointsMergeToTheWholeFloat) {
  splash_split_merges<float>(1e-5);
}

TEST(MergeStates, SplashKeyRangesMergeToTheWholeDoubleWithinFloat32Logsumexp) {
  splash_split_merges<double>(2e-6);  // the weights come from f32 logsumexps
}

TEST(MergeStates, HalfAndBfloat16StatesMergeWithinTheirRounding) {
  splash_split_merges<Eigen::half>(4e-3);
  splash_split_merges<Eigen::bfloat16>(3e-2);
}

TEST(MergeStates, OrderOfTheTwoStatesDoesNotChangeABit) {
  std::mt19937 rng(43);
  const SplashParts s = splash_parts(rng, false, {0, 9, 24});
  const State<float> a = as_state<float>(s.p, s.parts[0]), b = as_state<float>(s.p, s.parts[1]);
  State<float> ab(a.rows, a.heads, a.dim), ba(a.rows, a.heads, a.dim);
  attnref::merge_attention_states(merge_args(a, b), ab.out_view(), ab.lse_view());
  attnref::merge_attention_states(merge_args(b, a), ba.out_view(), ba.lse_view());
  EXPECT_EQ(ab.out, ba.out);
  EXPECT_EQ(ab.lse, ba.lse);
}

// --- -inf, NaN, in place, executors -------------------------------------------------------------

TEST(MergeStates, MinusInfStatesAddNothingAndAreNotRead) {
  std::mt19937 rng(44);
  State<float> a(3, 2, 5), b(3, 2, 5, kNaN, -kInf);  // b saw no key; its out is garbage
  std::uniform_real_distribution<float> u(-2, 2);
  for (float& x : a.out) x = u(rng);
  for (float& x : a.lse) x = u(rng);
  State<float> out(3, 2, 5, kNaN, kNaN);
  attnref::merge_attention_states(merge_args(a, b), out.out_view(), out.lse_view());
  EXPECT_EQ(out.out, a.out);  // the other state exactly
  EXPECT_EQ(out.lse, a.lse);
  attnref::merge_attention_states(merge_args(b, a), out.out_view(), out.lse_view());
  EXPECT_EQ(out.out, a.out);
  EXPECT_EQ(out.lse, a.lse);
  // Both empty: zero rows and -inf.
  State<float> c(3, 2, 5, kNaN, -kInf);
  attnref::merge_attention_states(merge_args(b, c), out.out_view(), out.lse_view());
  for (float x : out.out) EXPECT_EQ(x, 0.0f);
  for (float x : out.lse) EXPECT_EQ(x, -kInf);
}

TEST(MergeStates, NanAndPlusInfLogsumexpGiveNanRowsOnly) {
  State<float> a(2, 2, 3, 1.0f, 0.5f), b(2, 2, 3, 2.0f, 0.25f);
  a.lse[1] = kNaN;   // row 0, head 1
  b.lse[2] = kNaN;   // row 1, head 0 (the other side)
  a.lse[3] = kInf;   // row 1, head 1: an overflowed state
  b.lse[0] = -kInf;  // row 0, head 0: a's values exactly
  State<float> out(2, 2, 3, 7.0f, 7.0f);
  attnref::merge_attention_states(merge_args(a, b), out.out_view(), out.lse_view());
  for (std::int64_t d = 0; d < 3; ++d) EXPECT_EQ(out.out[at(d)], 1.0f);
  EXPECT_EQ(out.lse[0], 0.5f);
  for (std::int64_t row = 1; row < 4; ++row) {
    EXPECT_TRUE(std::isnan(out.lse[at(row)])) << row;
    for (std::int64_t d = 0; d < 3; ++d) EXPECT_TRUE(std::isnan(out.out[at(row * 3 + d)])) << row;
  }
}

TEST(MergeStates, InPlaceAndOnAThreadPoolGiveTheSameBits) {
  std::mt19937 rng(45);
  const SplashParts s = splash_parts(rng, true, {0, 5, 24});
  const State<float> a = as_state<float>(s.p, s.parts[0]), b = as_state<float>(s.p, s.parts[1]);
  State<float> want(a.rows, a.heads, a.dim);
  attnref::merge_attention_states(merge_args(a, b), want.out_view(), want.lse_view());
  attnref::ThreadPoolExecutor pool(3);
  State<float> got(a.rows, a.heads, a.dim, kNaN, kNaN);
  attnref::merge_attention_states(merge_args(a, b), got.out_view(), got.lse_view(), pool);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.lse, want.lse);
  State<float> in_a = a;  // into a's own views
  EXPECT_TRUE(attnref::try_merge_attention_states(merge_args(in_a, b), in_a.out_view(),
                                                  in_a.lse_view(), pool)
                  .ok());
  EXPECT_EQ(in_a.out, want.out);
  EXPECT_EQ(in_a.lse, want.lse);
  State<float> in_b = b;  // into b's own views
  merge_into(in_b, a);
  EXPECT_EQ(in_b.out, want.out);
  // Without the logsumexp, with an executor third, and unchecked.
  State<float> o(a.rows, a.heads, a.dim, kNaN, kNaN);
  attnref::merge_attention_states(merge_args(a, b), o.out_view(), pool);
  EXPECT_EQ(o.out, want.out);
  std::fill(o.out.begin(), o.out.end(), kNaN);
  EXPECT_TRUE(attnref::try_merge_attention_states(merge_args(a, b), o.out_view(), pool).ok());
  EXPECT_EQ(o.out, want.out);
  std::fill(o.out.begin(), o.out.end(), kNaN);
  attnref::merge_attention_states_unchecked(merge_args(a, b), o.out_view(), o.lse_view());
  EXPECT_EQ(o.out, want.out);
  EXPECT_EQ(o.lse, want.lse);
  std::fill(o.out.begin(), o.out.end(), kNaN);
  std::fill(o.lse.begin(), o.lse.end(), 7.0f);
  attnref::merge_attention_states_unchecked(merge_args(a, b), o.out_view(), pool);
  EXPECT_EQ(o.out, want.out);
  for (float x : o.lse) EXPECT_EQ(x, 7.0f);  // no logsumexp asked for: not written
}

// --- checks -------------------------------------------------------------------------------------

struct ErrorCase {
  const char* what;
  ErrorCode code;
  const char* message;
};

TEST(MergeStates, BadViewsAreRefusedWithCodeAndMessageAndNothingIsWritten) {
  State<float> a(2, 3, 4, 1.0f, 0.0f), b(2, 3, 4, 2.0f, 0.0f);
  std::vector<float> buf(200, 7.0f);  // outputs carved out of one buffer
  const MergeStatesArgs<float> good = merge_args(a, b);
  const TensorView<float, 3> out(buf.data(), {2, 3, 4});
  const TensorView<float, 2> lse(buf.data() + 100, {2, 3});
  ASSERT_TRUE(attnref::check_merge_states(good, out, lse).ok());

  std::vector<float> wide(2 * 3 * 5, 1.0f), lse32(6, 0.0f);
  const auto run = [&](const MergeStatesArgs<float>& m, TensorView<float, 3> o,
                       TensorView<float, 2> l) {
    return attnref::try_merge_attention_states(m, o, l);
  };
  {
    MergeStatesArgs<float> m = good;
    m.out_b = {wide.data(), {2, 3, 5}};
    const attnref::Status s = run(m, out, lse);
    EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
    EXPECT_EQ(s.message(), "out_b has shape (2, 3, 5); expected out_a's shape (2, 3, 4)");
  }
  {
    const attnref::Status s = run(good, TensorView<float, 3>(buf.data(), {3, 2, 4}), lse);
    EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
    EXPECT_EQ(s.message(), "out has shape (3, 2, 4); expected out_a's shape (2, 3, 4)");
  }
  {
    MergeStatesArgs<float> m = good;
    m.lse_a = {lse32.data(), {3, 2}};
    const attnref::Status s = run(m, out, lse);
    EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
    EXPECT_EQ(s.message(),
              "lse_a has shape (3, 2); expected (2, 3) (out_a's first two dimensions)");
  }
  {
    MergeStatesArgs<float> m = good;
    m.lse_b = {lse32.data(), {2, 2}};
    EXPECT_EQ(run(m, out, lse).message(),
              "lse_b has shape (2, 2); expected (2, 3) (out_a's first two dimensions)");
  }
  EXPECT_EQ(run(good, out, TensorView<float, 2>(buf.data() + 100, {6, 1})).message(),
            "lse has shape (6, 1); expected (2, 3) (out_a's first two dimensions)");
  {
    MergeStatesArgs<float> m = good;
    m.out_a = {nullptr, {2, 3, 4}};
    const attnref::Status s = run(m, out, lse);
    EXPECT_EQ(s.code(), ErrorCode::kNullData);
    EXPECT_EQ(s.message(), "out_a has 24 elements but a null data pointer");
  }
  const ErrorCase overlapping[] = {
      {"out's own elements", ErrorCode::kOverlappingOutput,
       "out: dimension 1 (stride 0) overlaps the elements of faster dimensions, which span 1 "
       "elements"},
      {"lse inside out", ErrorCode::kOverlappingOutput, "lse and out share memory"},
      {"out over half of out_a", ErrorCode::kOverlappingOutput,
       "out shares memory with out_a but is not the same view"},
      {"out over out_b, other strides", ErrorCode::kOverlappingOutput,
       "out shares memory with out_b but is not the same view"},
      {"out over lse_a", ErrorCode::kOverlappingOutput,
       "out shares memory with lse_a but is not the same view"},
      {"lse over lse_b shifted", ErrorCode::kOverlappingOutput,
       "lse shares memory with lse_b but is not the same view"},
      {"lse inside out_a", ErrorCode::kOverlappingOutput,
       "lse shares memory with out_a but is not the same view"},
  };
  std::vector<float> pool(48, 1.0f);  // room for an input and a shifted output over it
  for (const ErrorCase& c : overlapping) {
    const std::string what = c.what;
    MergeStatesArgs<float> m = good;
    TensorView<float, 3> o = out;
    TensorView<float, 2> l = lse;
    if (what == "out's own elements") o = TensorView<float, 3>(buf.data(), {2, 3, 4}, {12, 0, 1});
    if (what == "lse inside out") l = TensorView<float, 2>(buf.data() + 20, {2, 3});
    if (what == "out over half of out_a") {
      m.out_a = {pool.data(), {2, 3, 4}};
      o = TensorView<float, 3>(pool.data() + 12, {2, 3, 4});
    }
    if (what == "out over out_b, other strides") {  // the same elements in another order
      o = TensorView<float, 3>(b.out.data(), {2, 3, 4}, {12, 1, 3});
    }
    if (what == "out over lse_a") m.lse_a = {buf.data() + 4, {2, 3}};
    if (what == "lse over lse_b shifted") {
      m.lse_b = {pool.data(), {2, 3}};
      l = TensorView<float, 2>(pool.data() + 1, {2, 3});
    }
    if (what == "lse inside out_a") l = TensorView<float, 2>(a.out.data() + 2, {2, 3});
    const attnref::Status s = run(m, o, l);
    EXPECT_EQ(s.code(), c.code) << what;
    EXPECT_EQ(s.message(), c.message) << what;
  }
  for (float x : buf) ASSERT_EQ(x, 7.0f);
  for (float x : a.out) ASSERT_EQ(x, 1.0f);
  for (float x : b.out) ASSERT_EQ(x, 2.0f);
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  EXPECT_THROW(attnref::merge_attention_states(good, TensorView<float, 3>(buf.data(), {3, 2, 4})),
               attnref::ShapeError);
#endif
}

TEST(MergeStates, InputsAreCheckedAloneBeforeOutputsAreSizedFromOutA) {
  State<float> a(2, 3, 4, 1.0f, 0.0f), b(2, 3, 4, 2.0f, 0.0f);
  const MergeStatesArgs<float> good = merge_args(a, b);
  EXPECT_TRUE(attnref::check_merge_inputs(good).ok());
  // head_dim 0: the states hold no element, so out_a's rows and heads are only a claim, which
  // the logsumexps (real data) refute. A caller sizing [rows, heads] from out_a learns it first.
  MergeStatesArgs<float> m = good;
  const std::int64_t huge = std::int64_t{1} << 20;
  m.out_a = {a.out.data(), {huge, huge, 0}};
  m.out_b = {b.out.data(), {huge, huge, 0}};
  const attnref::Status s = attnref::check_merge_inputs(m);
  EXPECT_EQ(s.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(s.message(),
            "lse_a has shape (2, 3); expected (1048576, 1048576) "
            "(out_a's first two dimensions)");
  m = good;
  m.out_b = {nullptr, {2, 3, 4}};
  EXPECT_EQ(attnref::check_merge_inputs(m).code(), ErrorCode::kNullData);
  EXPECT_EQ(attnref::check_merge_inputs(m).message(),
            "out_b has 24 elements but a null data pointer");
  m = good;
  m.lse_b = {a.lse.data(), {3, 2}};
  EXPECT_EQ(attnref::check_merge_inputs(m).message(),
            "lse_b has shape (3, 2); expected (2, 3) (out_a's first two dimensions)");
}

#if !defined(ATTNREF_NO_EXCEPTIONS)
/// The Status of the ShapeError `fn` throws; ok when it throws none.
template <class Fn>
attnref::Status thrown_status(Fn&& fn) {
  try {
    fn();
  } catch (const attnref::ShapeError& e) {
    return e.status();
  }
  return attnref::Status();
}

struct ValidateCase {
  const char* what;
  ErrorCode code;
  const char* message;
};

// One case per error code of the merge checks, through the throwing validate_merge: the states
// alone (validate_merge(args)), then with outputs (validate_merge(args, out, lse)).
TEST(MergeStates, ValidateMergeThrowsEachErrorCodeWithItsMessage) {
  State<float> a(2, 3, 4, 1.0f, 0.0f), b(2, 3, 4, 2.0f, 0.0f);
  const MergeStatesArgs<float> good = merge_args(a, b);
  std::vector<float> buf(200, 7.0f);
  const TensorView<float, 3> out(buf.data(), {2, 3, 4});
  const TensorView<float, 2> lse(buf.data() + 100, {2, 3});
  EXPECT_NO_THROW(attnref::validate_merge(good));
  EXPECT_NO_THROW(attnref::validate_merge(good, out, lse));
  const std::int64_t huge = std::int64_t{1} << 62;
  const ValidateCase cases[] = {
      {"out_b wider", ErrorCode::kShapeMismatch,
       "out_b has shape (2, 3, 5); expected out_a's shape (2, 3, 4)"},
      {"negative head_dim", ErrorCode::kNegativeExtent,
       "out_a has a negative extent -1 in dimension 2"},
      {"negative stride", ErrorCode::kNegativeStride,
       "out_a has a negative stride -1 in dimension 2"},
      {"element count", ErrorCode::kSizeOverflow,
       "out_a: the number of elements overflows int64 at dimension 2"},
      {"null out_b", ErrorCode::kNullData, "out_b has 24 elements but a null data pointer"},
      {"lse_b past its buffer", ErrorCode::kOutOfBuffer,
       "lse_b: extents and strides reach element offset 5, past the buffer of 4 elements"},
  };
  for (const ValidateCase& c : cases) {
    const std::string what = c.what;
    MergeStatesArgs<float> m = good;
    if (what == "out_b wider") m.out_b = {b.out.data(), {2, 3, 5}};
    if (what == "negative head_dim") {
      m.out_a = {a.out.data(), {2, 3, -1}};
      m.out_b = {b.out.data(), {2, 3, -1}};
    }
    if (what == "negative stride") m.out_a = {a.out.data() + 3, {2, 3, 4}, {12, 4, -1}};
    if (what == "element count") {
      m.out_a = {a.out.data(), {2, 3, huge}};
      m.out_b = {b.out.data(), {2, 3, huge}};
    }
    if (what == "null out_b") m.out_b = {nullptr, {2, 3, 4}};
    if (what == "lse_b past its buffer") m.lse_b = {b.lse.data(), {2, 3}, 4};
    const attnref::Status s = thrown_status([&] { attnref::validate_merge(m); });
    EXPECT_EQ(s.code(), c.code) << what;
    EXPECT_EQ(s.message(), c.message) << what;
    EXPECT_EQ(s.code(), attnref::check_merge_inputs(m).code()) << what;
  }
  // The outputs: a shape, and memory shared with an input or with each other.
  const ValidateCase output_cases[] = {
      {"out transposed", ErrorCode::kShapeMismatch,
       "out has shape (3, 2, 4); expected out_a's shape (2, 3, 4)"},
      {"lse inside out", ErrorCode::kOverlappingOutput, "lse and out share memory"},
  };
  for (const ValidateCase& c : output_cases) {
    const std::string what = c.what;
    TensorView<float, 3> o = out;
    TensorView<float, 2> l = lse;
    if (what == "out transposed") o = TensorView<float, 3>(buf.data(), {3, 2, 4});
    if (what == "lse inside out") l = TensorView<float, 2>(buf.data() + 20, {2, 3});
    const attnref::Status s = thrown_status([&] { attnref::validate_merge(good, o, l); });
    EXPECT_EQ(s.code(), c.code) << what;
    EXPECT_EQ(s.message(), c.message) << what;
  }
  for (float x : buf) ASSERT_EQ(x, 7.0f);
}
#endif

}  // namespace
