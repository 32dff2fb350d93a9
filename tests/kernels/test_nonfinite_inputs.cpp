// SPDX-License-Identifier: Apache-2.0
// NaN and Inf in live inputs, the same rule in every family (docs/hostile-inputs.md, "NaN and
// Inf in live inputs"): the result is the float64 formula's under IEEE arithmetic. A NaN or +inf
// logit (from q, a visible K row, its int8 scales, or a splash sink), or logits all -inf, makes
// the row NaN; NaN/Inf in a visible V row reach the weighted sum; rows that do not see a key
// never see its data; values nobody reads (past a length, padding pages and rows, masked blocks)
// change nothing. Each case puts one bad value into a small valid call and checks which rows
// are non-finite, by hand, and every element against the float64 oracles of reference/ (NaN
// where the oracle is NaN, the same infinity where it is infinite, close elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnref/kernels/paged_attention.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "reference/paged.hpp"
#include "reference/ragged.hpp"
#include "reference/splash_problem.hpp"

namespace {

using attnref::TensorView;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

/// Every element against the oracle: NaN where it is NaN, the same infinity, or close.
template <class T>
void expect_like_oracle(const std::vector<T>& got, const std::vector<double>& want, double tol,
                        const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = want[i];
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << what << "[" << i << "] = " << g << ", the oracle's is NaN";
    } else if (std::isinf(w)) {
      ASSERT_EQ(g, w) << what << "[" << i << "]";
    } else {
      ASSERT_NEAR(g, w, tol * (1.0 + std::abs(w))) << what << "[" << i << "]";
    }
  }
}

/// The rows (of `width` elements) holding a non-finite element, or a NaN one.
template <class T>
std::set<std::int64_t> bad_rows(const std::vector<T>& x, std::int64_t width, bool nan_only) {
  std::set<std::int64_t> rows;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = static_cast<double>(x[i]);
    if (nan_only ? std::isnan(v) : !std::isfinite(v))
      rows.insert(static_cast<std::int64_t>(i) / width);
  }
  return rows;
}

/// Each test's docs/hostile-inputs.md row: `| <text> (test_nonfinite_inputs) | `ok` |`.
std::vector<std::string>& doc_rows() {
  static std::vector<std::string> rows;
  return rows;
}
struct DocRow {
  explicit DocRow(const char* text) { doc_rows().emplace_back(text); }
};

// ---------------------------------------------------------------------------------------------
// Paged: 3 sequences (lengths 5, 9, 0), Hq 4, Hkv 2 (group 2), D 8, pages of 4 tokens. Every
// K/V element past a length or in an unused page is NaN from the start.

struct Paged {
  static constexpr std::int64_t B = 3, Hq = 4, Hkv = 2, D = 8, S = 4, PPS = 3, P = 10;
  std::vector<float> q, k, v;
  std::vector<std::int8_t> k8, v8;
  std::vector<float> ks, vs;  // int8 scales per token [Hkv, P, S, 1]
  std::vector<std::int32_t> lengths{5, 9, 0};
  std::vector<std::int32_t> table{7, 2, -1, 4, 0, 9, -1, -1, -1};

  Paged() {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> w(-127, 127);
    q.resize(ix(B * Hq * D));
    for (float& x : q) x = normal(rng);
    k.assign(ix(Hkv * P * S * D), kNaN);
    v = k;
    k8.assign(k.size(), std::int8_t{-128});
    v8 = k8;
    ks.assign(ix(Hkv * P * S), kNaN);
    vs = ks;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < lengths[ix(b)]; ++t)
        for (std::int64_t h = 0; h < Hkv; ++h) {
          ks[ix(row(b, t, h))] = 0.5f + 0.01f * static_cast<float>(t);
          vs[ix(row(b, t, h))] = 0.75f;
          for (std::int64_t d = 0; d < D; ++d) {
            k[ix(at(b, t, h, d))] = normal(rng);
            v[ix(at(b, t, h, d))] = normal(rng);
            k8[ix(at(b, t, h, d))] = static_cast<std::int8_t>(w(rng));
            v8[ix(at(b, t, h, d))] = static_cast<std::int8_t>(w(rng));
          }
        }
  }
  /// Token t of sequence b, KV head h, through the page table: the (h, page, slot) row.
  std::int64_t row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return (h * P + table[ix(b * PPS + t / S)]) * S + t % S;
  }
  std::int64_t at(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return row(b, t, h) * D + d;
  }
  std::int64_t q_at(std::int64_t b, std::int64_t qh, std::int64_t d) const {
    return (b * Hq + qh) * D + d;
  }

  template <class KV>
  attnref::PagedAttentionArgs<float, KV, std::int32_t> args(const std::vector<KV>& kp,
                                                            const std::vector<KV>& vp) const {
    attnref::PagedAttentionArgs<float, KV, std::int32_t> a;
    a.q = {q.data(), {B, Hq, D}};
    a.k_pages = {kp.data(), {Hkv, P, S, D}};
    a.v_pages = {vp.data(), {Hkv, P, S, D}};
    a.lengths = {lengths.data(), {B}};
    a.page_indices = {table.data(), {B, PPS}};
    a.sm_scale = 0.35f;
    if constexpr (std::is_same<KV, std::int8_t>::value) {
      a.k_scales = {ks.data(), {Hkv, P, S, 1}};
      a.v_scales = {vs.data(), {Hkv, P, S, 1}};
    }
    return a;
  }
};

/// Claims 16 threads and runs serially: the kernel splits each sequence's pages (split-KV) and
/// merges the partial softmax states.
struct SplittingExecutor {
  int concurrency() const noexcept { return 16; }
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) const {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
  }
};

/// Runs the paged kernel (serial, then split-KV) and checks it against the oracle, and that the
/// rows with a non-finite element are exactly `bad`.
template <class KV>
void check_paged(const attnref::PagedAttentionArgs<float, KV, std::int32_t>& a,
                 const std::set<std::int64_t>& bad) {
  const std::vector<double> want = attnref::reference::paged_attention(a);
  for (int split = 0; split < 2; ++split) {
    SCOPED_TRACE(split ? "split-KV" : "serial");
    std::vector<float> out(ix(Paged::B * Paged::Hq * Paged::D), -7.0f);
    const TensorView<float, 3> ov(out.data(), {Paged::B, Paged::Hq, Paged::D});
    const attnref::Status s = split ? attnref::try_paged_attention(a, ov, SplittingExecutor{})
                                    : attnref::try_paged_attention(a, ov);
    ASSERT_TRUE(s.ok()) << s.message();
    expect_like_oracle(out, want, 2e-5, "out");
    EXPECT_EQ(bad_rows(out, Paged::D, false), bad);
    for (std::int64_t i = 2 * Paged::Hq * Paged::D; i < 3 * Paged::Hq * Paged::D; ++i)
      EXPECT_EQ(out[ix(i)], 0.0f) << "length 0 gives zeros";
  }
}

/// The output rows b * Hq + qh of sequence b for the query heads of KV head h.
std::set<std::int64_t> paged_group(std::int64_t b, std::int64_t h) {
  return {b * Paged::Hq + 2 * h, b * Paged::Hq + 2 * h + 1};
}

const DocRow kPagedQ{
    "paged: NaN, and +inf, in a live q row: that row NaN, the rest equal the "
    "float64 oracle, serial and split-KV"};
TEST(NonFinitePaged, LiveQRow) {
  for (float bad : {kNaN, kInf}) {
    Paged p;
    p.q[ix(p.q_at(1, 2, 3))] = bad;
    check_paged(p.args(p.k, p.v), {1 * Paged::Hq + 2});
  }
}

const DocRow kPagedK{
    "paged: NaN in a live K row: the rows of its KV head's query heads NaN; +inf: "
    "NaN where q.k is +inf, weight 0 where it is -inf"};
TEST(NonFinitePaged, LiveKRow) {
  Paged p;
  p.k[ix(p.at(1, 6, 0, 2))] = kNaN;  // sequence 1, token 6 (page 0, slot 2), KV head 0
  check_paged(p.args(p.k, p.v), paged_group(1, 0));
  // +inf in element 2: the logit is +inf for a query head with q[2] > 0 (a NaN row) and -inf
  // for one with q[2] < 0 (that token gets weight 0; the row stays finite).
  Paged pi;
  pi.k[ix(pi.at(1, 6, 0, 2))] = kInf;
  std::set<std::int64_t> bad;
  for (std::int64_t qh = 0; qh < 2; ++qh)
    if (pi.q[ix(pi.q_at(1, qh, 2))] > 0) bad.insert(1 * Paged::Hq + qh);
  check_paged(pi.args(pi.k, pi.v), bad);
}

const DocRow kPagedV{
    "paged: NaN, and +inf, in a live V row: that element NaN (+inf) in the rows of "
    "its KV head's query heads"};
TEST(NonFinitePaged, LiveVRow) {
  for (float bad : {kNaN, kInf}) {
    Paged p;
    p.v[ix(p.at(1, 6, 1, 5))] = bad;
    check_paged(p.args(p.k, p.v), paged_group(1, 1));
  }
}

const DocRow kPagedScales{
    "paged int8: NaN in the K or V scale of a live token: the rows of its KV "
    "head's query heads NaN"};
TEST(NonFinitePaged, LiveInt8Scales) {
  Paged p;
  p.ks[ix(p.row(0, 4, 1))] = kNaN;  // sequence 0, its last token, KV head 1
  check_paged(p.args(p.k8, p.v8), paged_group(0, 1));
  Paged pv;
  pv.vs[ix(pv.row(1, 8, 0))] = kNaN;  // sequence 1, its last token (a page of its own)
  check_paged(pv.args(pv.k8, pv.v8), paged_group(1, 0));
}

const DocRow kPagedInfScales{
    "paged int8: +inf in the K or V scale of a live token: dequantized element by element "
    "(finite scales are applied to the products instead): a zero code gives 0 * inf = NaN, "
    "so the K case makes the rows of its KV head NaN and the V case NaN or +-inf elements"};
TEST(NonFinitePaged, InfiniteInt8Scales) {
  Paged p;
  p.ks[ix(p.row(1, 6, 0))] = kInf;
  p.k8[ix(p.at(1, 6, 0, 3))] = 0;  // (0 * inf) / 127.5 = NaN in every q . k of the group
  // Factored, q . w is finite and nonzero, its product with inf +-inf: only some rows NaN.
  std::int64_t dot = 0;
  for (std::int64_t d = 0; d < Paged::D; ++d) dot += p.k8[ix(p.at(1, 6, 0, d))];
  ASSERT_NE(dot, 0);
  check_paged(p.args(p.k8, p.v8), paged_group(1, 0));
  Paged pv;
  pv.vs[ix(pv.row(1, 8, 0))] = kInf;
  pv.v8[ix(pv.at(1, 8, 0, 5))] = 0;
  check_paged(pv.args(pv.k8, pv.v8), paged_group(1, 0));
}

const DocRow kPagedAllNegInf{
    "paged: logits all -inf (q -inf times a positive K column): the row "
    "NaN (0/0), not zeros"};
TEST(NonFinitePaged, AllLogitsNegativeInfinity) {
  Paged p;
  for (std::int64_t d = 0; d < Paged::D; ++d) p.q[ix(p.q_at(1, 3, d))] = d == 0 ? -kInf : 0.0f;
  for (std::int64_t t = 0; t < 9; ++t)
    p.k[ix(p.at(1, t, 1, 0))] = 0.5f + std::abs(p.k[ix(p.at(1, t, 1, 0))]);
  check_paged(p.args(p.k, p.v), {1 * Paged::Hq + 3});
}

const DocRow kPagedUnread{
    "paged: NaN past each length, in padding pages, in the q row of a "
    "length-0 sequence: all rows finite and equal the oracle"};
TEST(NonFinitePaged, UnreadValuesChangeNothing) {
  Paged p;  // K/V past the lengths and in unused pages are NaN already (int8: NaN scales)
  for (std::int64_t d = 0; d < Paged::D; ++d) p.q[ix(p.q_at(2, 1, d))] = kNaN;
  check_paged(p.args(p.k, p.v), {});
  check_paged(p.args(p.k8, p.v8), {});
}

// ---------------------------------------------------------------------------------------------
// Ragged: sequence 0 prefills 9 rows over 11 keys (the many-rows path), sequence 1 decodes 1
// row over 6 keys, sequence 2 has 3 rows over 5 keys (the few-rows path, rows seeing different
// keys); 3 padding rows. Hq 4, Hkv 2, D 8, pages of 4. Unread K/V, padding q rows: NaN.

struct Ragged {
  static constexpr std::int64_t T = 16, Hq = 4, Hkv = 2, D = 8, S = 4, PPS = 3, P = 9, MaxSeqs = 4;
  std::vector<float> q, k, v;
  std::vector<std::int64_t> kv_lens{11, 6, 5, 0};
  std::vector<std::int64_t> cu{0, 9, 10, 13, 13};
  std::vector<std::int64_t> table{5, 1, 7, 0, 8, -1, 3, 6, -1, -1, -1, -1};
  std::optional<std::int64_t> window;

  Ragged() {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    q.assign(ix(T * Hq * D), kNaN);
    for (std::int64_t i = 0; i < 13 * Hq * D; ++i) q[ix(i)] = normal(rng);
    k.assign(ix(Hkv * P * S * D), kNaN);
    v = k;
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t t = 0; t < kv_lens[ix(i)]; ++t)
        for (std::int64_t h = 0; h < Hkv; ++h)
          for (std::int64_t d = 0; d < D; ++d) {
            k[ix(at(i, t, h, d))] = normal(rng);
            v[ix(at(i, t, h, d))] = normal(rng);
          }
  }
  std::int64_t at(std::int64_t i, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return ((h * P + table[ix(i * PPS + t / S)]) * S + t % S) * D + d;
  }
  std::int64_t q_at(std::int64_t row, std::int64_t qh, std::int64_t d) const {
    return (row * Hq + qh) * D + d;
  }
  attnref::RaggedPagedAttentionArgs<float, float, std::int64_t> args() const {
    attnref::RaggedPagedAttentionArgs<float, float, std::int64_t> a;
    a.q = {q.data(), {T, Hq, D}};
    a.k_pages = {k.data(), {Hkv, P, S, D}};
    a.v_pages = {v.data(), {Hkv, P, S, D}};
    a.kv_lens = {kv_lens.data(), {MaxSeqs}};
    a.page_indices = {table.data(), {MaxSeqs, PPS}};
    a.cu_q_lens = {cu.data(), {MaxSeqs + 1}};
    a.num_seqs_value = 3;
    a.sm_scale = 0.35f;
    a.sliding_window = window;
    return a;
  }
};

/// Runs the ragged kernel and checks it against the oracle; the output rows (token row * Hq +
/// query head) with a non-finite element must be exactly `bad`.
void check_ragged(const Ragged& r, const std::set<std::int64_t>& bad) {
  const auto a = r.args();
  const std::vector<double> want = attnref::reference::ragged_paged_attention(a);
  std::vector<float> out(ix(Ragged::T * Ragged::Hq * Ragged::D), -7.0f);
  const attnref::Status s = attnref::try_ragged_paged_attention(
      a, TensorView<float, 3>(out.data(), {Ragged::T, Ragged::Hq, Ragged::D}));
  ASSERT_TRUE(s.ok()) << s.message();
  expect_like_oracle(out, want, 2e-5, "out");
  EXPECT_EQ(bad_rows(out, Ragged::D, false), bad);
}

/// Output rows of token rows [r0, r1) for the query heads of KV head h.
std::set<std::int64_t> ragged_rows(std::int64_t r0, std::int64_t r1, std::int64_t h) {
  std::set<std::int64_t> rows;
  for (std::int64_t r = r0; r < r1; ++r) {
    rows.insert(r * Ragged::Hq + 2 * h);
    rows.insert(r * Ragged::Hq + 2 * h + 1);
  }
  return rows;
}

const DocRow kRaggedQ{
    "ragged: NaN, and +inf, in a live q row: that row and head NaN, the rest "
    "equal the float64 oracle"};
TEST(NonFiniteRagged, LiveQRow) {
  for (float bad : {kNaN, kInf}) {
    Ragged r;
    r.q[ix(r.q_at(3, 1, 4))] = bad;
    check_ragged(r, {3 * Ragged::Hq + 1});
    Ragged d;  // the decode row
    d.q[ix(d.q_at(9, 2, 0))] = bad;
    check_ragged(d, {9 * Ragged::Hq + 2});
  }
}

const DocRow kRaggedK{
    "ragged: NaN in a visible K row: NaN exactly in the rows that see the key "
    "(causal, sliding window), prefill and few-rows paths"};
TEST(NonFiniteRagged, VisibleKRow) {
  Ragged r;
  r.k[ix(r.at(0, 5, 0, 2))] = kNaN;  // key 5 of sequence 0: rows at positions >= 5 (rows 3..8)
  check_ragged(r, ragged_rows(3, 9, 0));
  r.window = 3;  // positions 5, 6, 7 see key 5
  check_ragged(r, ragged_rows(3, 6, 0));
  Ragged f;
  f.k[ix(f.at(2, 3, 1, 0))] = kNaN;  // sequence 2 (rows 10..12 at positions 2..4), key 3
  check_ragged(f, ragged_rows(11, 13, 1));
  Ragged i;  // +inf: each row of the group NaN or finite by the sign of q; the oracle decides
  i.k[ix(i.at(0, 5, 0, 2))] = kInf;
  std::set<std::int64_t> bad;
  for (std::int64_t row : ragged_rows(3, 9, 0))
    if (i.q[ix(i.q_at(row / Ragged::Hq, row % Ragged::Hq, 2))] > 0) bad.insert(row);
  check_ragged(i, bad);
}

const DocRow kRaggedV{
    "ragged: NaN, and +inf, in a visible V row: non-finite exactly in the rows "
    "that see the key; rows that do not see it stay finite"};
TEST(NonFiniteRagged, VisibleVRow) {
  for (float bad : {kNaN, kInf}) {
    Ragged r;
    r.v[ix(r.at(0, 5, 1, 4))] = bad;
    check_ragged(r, ragged_rows(3, 9, 1));
    r.window = 3;
    check_ragged(r, ragged_rows(3, 6, 1));
    Ragged f;
    f.v[ix(f.at(2, 3, 0, 7))] = bad;
    check_ragged(f, ragged_rows(11, 13, 0));
  }
}

const DocRow kRaggedAllNegInf{
    "ragged: logits all -inf (q -inf times a positive K column): the row "
    "NaN (0/0)"};
TEST(NonFiniteRagged, AllLogitsNegativeInfinity) {
  Ragged r;
  for (std::int64_t d = 0; d < Ragged::D; ++d) r.q[ix(r.q_at(9, 0, d))] = d == 0 ? -kInf : 0.0f;
  for (std::int64_t t = 0; t < 6; ++t)
    r.k[ix(r.at(1, t, 0, 0))] = 0.5f + std::abs(r.k[ix(r.at(1, t, 0, 0))]);
  check_ragged(r, {9 * Ragged::Hq});
}

const DocRow kRaggedUnread{
    "ragged: NaN past each kv_len, before the sliding window, in padding "
    "pages and padding q rows: all rows finite and equal the oracle"};
TEST(NonFiniteRagged, UnreadValuesChangeNothing) {
  Ragged r;  // padding q rows, K/V past kv_len and in unused pages: NaN already
  check_ragged(r, {});
  r.window = 3;  // the decode row (position 5) sees keys 3..5; sequence 2 keys >= 0
  for (std::int64_t t = 0; t < 3; ++t)
    for (std::int64_t h = 0; h < Ragged::Hkv; ++h)
      for (std::int64_t d = 0; d < Ragged::D; ++d) {
        r.k[ix(r.at(1, t, h, d))] = kNaN;
        r.v[ix(r.at(1, t, h, d))] = kInf;
      }
  check_ragged(r, {});
}

// ---------------------------------------------------------------------------------------------
// Splash: Hq 4, Hkv 2, q 40 rows, 56 keys (keys 40..55 seen by no row), D 8, blocks 16 x 16 (the
// diagonal tiles partly masked), causal; forward and backward.

struct Splash {
  splash_ref::Problem p;
  std::vector<float> q, k, v, sinks, dout;
  bool segments = false;

  Splash() {
    p.hq = 4;
    p.hkv = 2;
    p.sq = 40;
    p.skv = 56;
    p.dqk = p.dv = 8;
    p.scale = 0.35;
    std::mt19937 rng(3);
    splash_ref::fill(p.q, ix(p.hq * p.sq * p.dqk), rng, -1, 1);
    splash_ref::fill(p.k, ix(p.hkv * p.skv * p.dqk), rng, -1, 1);
    splash_ref::fill(p.v, ix(p.hkv * p.skv * p.dv), rng, -1, 1);
    std::vector<double> d;
    splash_ref::fill(d, ix(p.hq * p.sq * p.dv), rng, -1, 1);
    dout = splash_ref::to<float>(d);
    p.allowed = [](std::int64_t, std::int64_t r, std::int64_t t) { return t <= r; };
  }
  double& q_at(std::int64_t h, std::int64_t r, std::int64_t e) {
    return p.q[ix((h * p.sq + r) * p.dqk + e)];
  }
  double& k_at(std::int64_t h, std::int64_t t, std::int64_t e) {
    return p.k[ix((h * p.skv + t) * p.dqk + e)];
  }
  double& v_at(std::int64_t h, std::int64_t t, std::int64_t e) {
    return p.v[ix((h * p.skv + t) * p.dv + e)];
  }
  void with_sinks() { p.sinks = {0.25, -0.5, 0.75, 0.0}; }
  void with_segments() {  // rows and keys 0..19 segment 0, the rest segment 1
    p.q_seg.assign(ix(p.sq), 0);
    p.kv_seg.assign(ix(p.skv), 0);
    for (std::int64_t r = 20; r < p.sq; ++r) p.q_seg[ix(r)] = 1;
    for (std::int64_t t = 20; t < p.skv; ++t) p.kv_seg[ix(t)] = 1;
  }
};

/// Output rows h * Sq + r for the query heads of KV head h and rows [r0, r1).
std::set<std::int64_t> splash_rows(std::int64_t h, std::int64_t r0, std::int64_t r1) {
  std::set<std::int64_t> rows;
  for (std::int64_t qh = 2 * h; qh < 2 * h + 2; ++qh)
    for (std::int64_t r = r0; r < r1; ++r) rows.insert(qh * 40 + r);
  return rows;
}

/// The forward (out and logsumexp) against the oracle, then the backward's gradients against
/// the oracle's; the forward rows with a non-finite element must be exactly `bad` (their
/// logsumexp NaN where the whole row is), and when `dq_bad` is given, so must dq's rows.
void check_splash(Splash& s, const std::set<std::int64_t>& bad,
                  const std::set<std::int64_t>* dq_bad = nullptr) {
  splash_ref::Problem& p = s.p;
  s.q = splash_ref::to<float>(p.q);
  s.k = splash_ref::to<float>(p.k);
  s.v = splash_ref::to<float>(p.v);
  std::vector<float> sinks32, slopes32;
  attnref::SplashAttentionArgs<double> ad = p.args(&sinks32, &slopes32);
  attnref::SplashAttentionArgs<float> a;
  a.q = {s.q.data(), {p.hq, p.sq, p.dqk}};
  a.k = {s.k.data(), {p.hkv, p.skv, p.dqk}};
  a.v = {s.v.data(), {p.hkv, p.skv, p.dv}};
  a.sm_scale = ad.sm_scale;
  a.q_segment_ids = ad.q_segment_ids;
  a.kv_segment_ids = ad.kv_segment_ids;
  a.sinks = ad.sinks;
  a.block_sizes.block_q = a.block_sizes.block_kv = 16;
  const attnref::CausalMask mask{{p.sq, p.skv}};
  const auto f = splash_ref::forward(p);
  std::vector<float> out(ix(p.hq * p.sq * p.dv), -7.0f), lse(ix(p.hq * p.sq), -7.0f);
  const TensorView<float, 3> ov(out.data(), {p.hq, p.sq, p.dv});
  const TensorView<float, 2> lv(lse.data(), {p.hq, p.sq});
  attnref::Status st = attnref::try_splash_attention(a, mask, ov, lv);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_like_oracle(out, f.out, 2e-5, "out");
  expect_like_oracle(lse, f.lse, 2e-5, "lse");
  EXPECT_EQ(bad_rows(out, p.dv, false), bad);

  const auto g = splash_ref::backward(p, f, splash_ref::back(s.dout));
  std::vector<float> dq(ix(p.hq * p.sq * p.dqk)), dk(ix(p.hkv * p.skv * p.dqk)),
      dv(ix(p.hkv * p.skv * p.dv)), dsinks(ix(p.hq));
  attnref::SplashGradients<float> grads;
  grads.dq = {dq.data(), {p.hq, p.sq, p.dqk}};
  grads.dk = {dk.data(), {p.hkv, p.skv, p.dqk}};
  grads.dv = {dv.data(), {p.hkv, p.skv, p.dv}};
  if (!p.sinks.empty()) grads.dsinks = {dsinks.data(), {p.hq}};
  st = attnref::try_splash_attention_backward(
      a, mask, TensorView<const float, 3>(out.data(), {p.hq, p.sq, p.dv}),
      TensorView<const float, 2>(lse.data(), {p.hq, p.sq}),
      TensorView<const float, 3>(s.dout.data(), {p.hq, p.sq, p.dv}), grads);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_like_oracle(dq, g.dq, 1e-4, "dq");
  expect_like_oracle(dk, g.dk, 1e-4, "dk");
  expect_like_oracle(dv, g.dv, 1e-4, "dv");
  if (!p.sinks.empty()) expect_like_oracle(dsinks, g.dsinks, 1e-4, "dsinks");
  if (dq_bad) {
    EXPECT_EQ(bad_rows(dq, p.dqk, false), *dq_bad);
  }
  // Keys 40..55 are seen by no row: their gradients are exactly 0 whatever happened.
  for (std::int64_t h = 0; h < p.hkv; ++h)
    for (std::int64_t t = 40; t < p.skv; ++t)
      for (std::int64_t e = 0; e < p.dqk; ++e) ASSERT_EQ(dk[ix((h * p.skv + t) * p.dqk + e)], 0.0f);
}

const DocRow kSplashQ{
    "splash: NaN, and +inf, in a q row: that row NaN (logsumexp NaN); backward: "
    "its dq row NaN, dk/dv NaN only for the keys it sees, the rest finite"};
TEST(NonFiniteSplash, QRow) {
  for (float bad : {kNaN, kInf}) {
    Splash s;
    s.q_at(1, 20, 3) = static_cast<double>(bad);
    const std::set<std::int64_t> rows{1 * 40 + 20};
    check_splash(s, rows, &rows);
  }
}

const DocRow kSplashK{
    "splash: NaN in a visible K row: NaN exactly in the rows that see the key "
    "(causal, inside a partly masked tile), forward and backward"};
TEST(NonFiniteSplash, VisibleKRow) {
  Splash s;
  s.k_at(0, 25, 2) = static_cast<double>(kNaN);  // rows 25..39 of query heads 0, 1 see key 25
  const std::set<std::int64_t> rows = splash_rows(0, 25, 40);
  check_splash(s, rows, &rows);
  Splash i;  // +inf: NaN or finite by the sign of q; the oracle decides
  i.k_at(0, 25, 2) = static_cast<double>(kInf);
  std::set<std::int64_t> bad;
  for (std::int64_t row : rows)
    if (i.q_at(row / 40, row % 40, 2) > 0) bad.insert(row);
  check_splash(i, bad);
}

const DocRow kSplashV{
    "splash: NaN, and +inf, in a visible V row: non-finite exactly in the rows "
    "that see the key, also inside a partly masked tile and across segments"};
TEST(NonFiniteSplash, VisibleVRow) {
  for (float bad : {kNaN, kInf}) {
    Splash s;
    s.v_at(1, 25, 4) = static_cast<double>(bad);
    check_splash(s, splash_rows(1, 25, 40));
    Splash g;  // segments: key 5 (segment 0) is seen by rows 5..19 only
    g.with_segments();
    g.v_at(0, 5, 0) = static_cast<double>(bad);
    check_splash(g, splash_rows(0, 5, 20));
  }
}

const DocRow kSplashSink{
    "splash: NaN, and +inf, in a sink: every row of that query head NaN; "
    "dsinks NaN for it"};
TEST(NonFiniteSplash, Sink) {
  for (float bad : {kNaN, kInf}) {
    Splash s;
    s.with_sinks();
    s.p.sinks[2] = static_cast<double>(bad);
    std::set<std::int64_t> rows;
    for (std::int64_t r = 0; r < 40; ++r) rows.insert(2 * 40 + r);
    check_splash(s, rows);
  }
}

const DocRow kSplashAllNegInf{
    "splash: logits all -inf (q -inf times a positive K column): the row "
    "NaN (0/0); with a finite sink, output 0 and logsumexp = the sink"};
TEST(NonFiniteSplash, AllLogitsNegativeInfinity) {
  Splash s;
  for (std::int64_t e = 0; e < 8; ++e)
    s.q_at(3, 10, e) = e == 0 ? -std::numeric_limits<double>::infinity() : 0.0;
  for (std::int64_t t = 0; t <= 10; ++t) s.k_at(1, t, 0) = 0.5 + std::abs(s.k_at(1, t, 0));
  check_splash(s, {3 * 40 + 10});
  s.with_sinks();
  check_splash(s, {});
}

const DocRow kSplashUnread{
    "splash: NaN in K/V rows no row sees (in empty and partly masked "
    "tiles): all finite, equal the oracle, their gradients 0"};
TEST(NonFiniteSplash, UnreadValuesChangeNothing) {
  Splash s;
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t t = 40; t < 56; ++t)
      for (std::int64_t e = 0; e < 8; ++e) {
        s.k_at(h, t, e) = static_cast<double>(kNaN);
        s.v_at(h, t, e) = static_cast<double>(kInf);
      }
  const std::set<std::int64_t> none;
  check_splash(s, none, &none);
}

// docs/hostile-inputs.md lists every case above.
TEST(NonFinite, DocTableMatches) {
  std::ifstream in(std::string(ATTNREF_SOURCE_DIR) + "/docs/hostile-inputs.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  for (const std::string& text : doc_rows()) {
    const std::string line = "| " + text + " (test_nonfinite_inputs) | `ok` |";
    EXPECT_NE(ss.str().find(line), std::string::npos) << "docs/hostile-inputs.md lacks: " << line;
  }
}

}  // namespace
