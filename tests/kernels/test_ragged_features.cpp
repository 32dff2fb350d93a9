// SPDX-License-Identifier: Apache-2.0
// Ragged paged attention's sinks and ALiBi against the float64 oracle (reference/ragged.hpp):
// decode rows (the few-rows tiling) and prefill chunks (the many-rows tiling), GQA, with and
// without a sliding window, ALiBi after the soft cap (and before it, and with the absolute
// distance), sinks in the logsumexp, padding rows
// untouched by either (0, -inf); a thread pool gives the serial bits; every new check (code,
// JAX id, message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnref/core/executor.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "reference/ragged.hpp"

namespace {

using attnref::ErrorCode;
using attnref::TensorView;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

using SeqLens = std::vector<std::pair<std::int64_t, std::int64_t>>;  // (q_len, kv_len)

/// A ragged batch over JAX's combined pool [P, S, 2*Hkv, D], pages in random order; what the
/// kernel must not read (padding rows, K/V past kv_len or before the earliest window, unused
/// pages) is NaN.
struct Inputs {
  std::int64_t hq, hkv, dim, page_size, pages = 4, max_seqs, pps, tokens;
  std::vector<float> q, kv, sinks, slopes;
  std::vector<std::int32_t> kv_lens, table, cu;
  std::int32_t num_seqs = 0;
  std::optional<std::int64_t> window;
  std::optional<float> cap;
  bool use_sinks = false, use_alibi = false;
  attnref::AlibiConvention alibi_convention = attnref::AlibiConvention::kSigned;
  attnref::SoftCapOrder soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;

  Inputs(const SeqLens& seqs, std::int64_t hq_, std::int64_t hkv_, std::int64_t dim_,
         std::int64_t page_size_, std::optional<std::int64_t> window_, std::uint32_t seed)
      : hq(hq_), hkv(hkv_), dim(dim_), page_size(page_size_), window(window_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t h = 0; h < hq; ++h) {
      sinks.push_back(normal(rng));
      slopes.push_back(std::pow(2.0f, -1.0f - static_cast<float>(h)));
    }
    num_seqs = static_cast<std::int32_t>(seqs.size());
    max_seqs = static_cast<std::int64_t>(seqs.size()) + 1;
    std::int64_t total = 0, max_kv = 1;
    for (const auto& s : seqs) {
      total += s.first;
      max_kv = std::max(max_kv, s.second);
      pages += (s.second + page_size - 1) / page_size;
    }
    tokens = total + 2;  // padding rows
    pps = (max_kv + page_size - 1) / page_size;
    q.assign(at(tokens * hq * dim), kNaN);
    for (std::int64_t i = 0; i < total * hq * dim; ++i) q[at(i)] = normal(rng);
    kv.assign(at(pages * page_size * 2 * hkv * dim), kNaN);
    std::vector<std::int32_t> free_pages(at(pages));
    std::iota(free_pages.begin(), free_pages.end(), 0);
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    kv_lens.assign(at(max_seqs), 0);
    table.assign(at(max_seqs * pps), 1 << 29);
    cu.assign(at(max_seqs + 1), 0);
    std::size_t next = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::int64_t q_len = seqs[i].first, kv_len = seqs[i].second;
      const std::int64_t first =
          window ? std::max<std::int64_t>(0, kv_len - q_len - *window + 1) : 0;
      kv_lens[i] = static_cast<std::int32_t>(kv_len);
      cu[i + 1] = cu[i] + static_cast<std::int32_t>(q_len);
      for (std::int64_t p = 0; p * page_size < kv_len; ++p) {
        const std::int32_t page = free_pages[next++];
        table[i * at(pps) + at(p)] = page;
        for (std::int64_t s = 0; s < page_size; ++s) {
          const std::int64_t t = p * page_size + s;
          if (t < first || t >= kv_len) continue;  // never read: stays NaN
          for (std::int64_t e = 0; e < 2 * hkv * dim; ++e)
            kv[at((page * page_size + s) * 2 * hkv * dim + e)] = normal(rng);
        }
      }
    }
    for (std::size_t i = seqs.size(); i < at(max_seqs); ++i) cu[i + 1] = cu[i];
  }

  attnref::RaggedPagedAttentionArgs<float> args() const {
    attnref::RaggedPagedAttentionArgs<float> a;
    a.q = {q.data(), {tokens, hq, dim}};
    const TensorView<const float, 4> pool(kv.data(), {pages, page_size, 2 * hkv, dim});
    EXPECT_TRUE(attnref::ragged_kv_views(pool, &a.k_pages, &a.v_pages).ok());
    a.kv_lens = {kv_lens.data(), {max_seqs}};
    a.page_indices = {table.data(), {max_seqs, pps}};
    a.cu_q_lens = {cu.data(), {max_seqs + 1}};
    a.num_seqs_value = num_seqs;
    a.sm_scale = 1.0f / std::sqrt(static_cast<float>(dim));
    a.sliding_window = window;
    a.soft_cap = cap;
    if (use_sinks) a.sinks = {sinks.data(), {hq}};
    if (use_alibi) a.alibi_slopes = {slopes.data(), {hq}};
    a.alibi_convention = alibi_convention;
    a.soft_cap_order = soft_cap_order;
    return a;
  }
};

// Decode rows, short and long prefill chunks, a sequence with no rows.
const SeqLens kMixed = {{1, 7}, {20, 20}, {1, 1}, {5, 40}, {0, 4}, {13, 29}, {1, 33}};

void check_against_oracle(const Inputs& in, const std::string& what) {
  SCOPED_TRACE(what);
  const attnref::RaggedPagedAttentionArgs<float> a = in.args();
  std::vector<double> want_lse;
  const std::vector<double> want =
      attnref::reference::ragged_paged_attention(a, nullptr, &want_lse);
  std::vector<float> out(in.q.size(), kNaN), lse(at(in.tokens * in.hq), kNaN);
  attnref::ragged_paged_attention(a, TensorView<float, 3>(out.data(), a.q.extents),
                                  TensorView<float, 2>(lse.data(), {in.tokens, in.hq}));
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << "element " << i;
  for (std::size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      ASSERT_EQ(static_cast<double>(lse[i]), want_lse[i]) << "row " << i;
    } else {
      ASSERT_NEAR(lse[i], want_lse[i], 2e-6 * (1 + std::fabs(want_lse[i]))) << "row " << i;
    }
  }
  // Padding rows: neither the sinks nor ALiBi reach them.
  for (std::int64_t t = in.cu[at(in.num_seqs)]; t < in.tokens; ++t)
    for (std::int64_t h = 0; h < in.hq; ++h) {
      EXPECT_EQ(lse[at(t * in.hq + h)], kNegInf);
      EXPECT_EQ(out[at((t * in.hq + h) * in.dim)], 0.0f);
    }
  // A thread pool gives the same bits.
  attnref::ThreadPoolExecutor pool(3);
  std::vector<float> out3(out.size(), kNaN), lse3(lse.size(), kNaN);
  attnref::ragged_paged_attention(a, TensorView<float, 3>(out3.data(), a.q.extents),
                                  TensorView<float, 2>(lse3.data(), {in.tokens, in.hq}), pool);
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out3[i], out[i]) << i;
  EXPECT_EQ(lse3, lse);
}

TEST(RaggedSinks, DecodeAndPrefillRowsMatchTheOracleWithGqaAndWindows) {
  unsigned seed = 1;
  for (const std::optional<std::int64_t> window :
       {std::optional<std::int64_t>(), std::optional<std::int64_t>(1),
        std::optional<std::int64_t>(6)})
    for (std::int64_t group : {1, 4}) {
      Inputs in(kMixed, 2 * group, 2, 16, 4, window, seed++);
      in.use_sinks = true;
      check_against_oracle(in, "G " + std::to_string(group) + " window " +
                                   (window ? std::to_string(*window) : "none"));
    }
}

TEST(RaggedAlibi, MatchesTheOracleAloneAndAfterTheSoftCap) {
  unsigned seed = 10;
  for (const std::optional<float> cap : {std::optional<float>(), std::optional<float>(0.75f)})
    for (std::int64_t group : {1, 4}) {
      Inputs in(kMixed, 2 * group, 2, 8, 8, std::nullopt, seed++);
      in.use_alibi = true;
      in.cap = cap;
      check_against_oracle(in, cap ? "alibi + cap" : "alibi");
    }
}

TEST(RaggedFeatures, SinksAlibiWindowAndSoftCapTogether) {
  unsigned seed = 20;
  for (std::int64_t page_size : {1, 4, 16}) {
    Inputs in(kMixed, 8, 2, 16, page_size, 5, seed++);
    in.use_sinks = in.use_alibi = true;
    in.cap = 3.0f;
    check_against_oracle(in, "page size " + std::to_string(page_size));
  }
}

TEST(RaggedConventions, AbsoluteAlibiAndAlibiBeforeTheCapMatchTheOracle) {
  unsigned seed = 30;
  for (std::int64_t group : {1, 4}) {
    Inputs in(kMixed, 2 * group, 2, 8, 8, std::nullopt, seed++);
    in.use_alibi = true;
    in.alibi_convention = attnref::AlibiConvention::kAbsolute;
    check_against_oracle(in, "absolute alibi");
    in.cap = 0.75f;
    check_against_oracle(in, "absolute alibi + cap");
    in.alibi_convention = attnref::AlibiConvention::kSigned;
    in.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
    check_against_oracle(in, "alibi then cap");
    in.alibi_convention = attnref::AlibiConvention::kAbsolute;
    check_against_oracle(in, "absolute alibi then cap");
  }
  Inputs in(kMixed, 8, 2, 16, 4, 5, seed++);
  in.use_sinks = in.use_alibi = true;
  in.cap = 3.0f;
  in.alibi_convention = attnref::AlibiConvention::kAbsolute;
  in.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  check_against_oracle(in, "absolute alibi then cap, window, sinks");
}

// Worked by hand: one sequence, 2 keys, q = k = 0, v = 1 and 3, two rows (positions 0 and 1).
TEST(RaggedFeatures, HandWorkedSinkAndAlibi) {
  const std::vector<float> q = {0.0f, 0.0f}, kv = {0.0f, 1.0f, 0.0f, 3.0f};  // [1, 2, 2, 1]
  const std::vector<std::int32_t> kv_lens = {2}, table = {0}, cu = {0, 2};
  const std::vector<float> sink = {0.0f}, slope = {1.0f};
  attnref::RaggedPagedAttentionArgs<float> a;
  a.q = {q.data(), {2, 1, 1}};
  ASSERT_TRUE(attnref::ragged_kv_views(TensorView<const float, 4>(kv.data(), {1, 2, 2, 1}),
                                       &a.k_pages, &a.v_pages)
                  .ok());
  a.kv_lens = {kv_lens.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  a.cu_q_lens = {cu.data(), {2}};
  a.num_seqs_value = 1;
  a.sinks = {sink.data(), {1}};
  a.alibi_slopes = {slope.data(), {1}};
  std::vector<float> out(2, kNaN), lse(2, kNaN);
  attnref::ragged_paged_attention(a, TensorView<float, 3>(out.data(), {2, 1, 1}),
                                  TensorView<float, 2>(lse.data(), {2, 1}));
  // Row 0 sees key 0 (logit 0) and the sink 0: out 1/2, lse log 2.
  EXPECT_NEAR(out[0], 0.5, 1e-6);
  EXPECT_NEAR(lse[0], std::log(2.0), 1e-6);
  // Row 1: keys 0 (0 + 1 * (0 - 1) = -1) and 1 (0), sink 0: out (e^-1 + 3) / (e^-1 + 2).
  const double e = std::exp(-1.0);
  EXPECT_NEAR(out[1], (e + 3.0) / (e + 2.0), 1e-6);
  EXPECT_NEAR(lse[1], std::log(e + 2.0), 1e-6);
  // Absolute ALiBi: -1 * |0 - 1| = -1, the same (keys never lie right of a row).
  a.alibi_convention = attnref::AlibiConvention::kAbsolute;
  attnref::ragged_paged_attention(a, TensorView<float, 3>(out.data(), {2, 1, 1}),
                                  TensorView<float, 2>(lse.data(), {2, 1}));
  EXPECT_NEAR(out[1], (e + 3.0) / (e + 2.0), 1e-6);
  // Soft cap 1 after ALiBi: row 1's logits tanh(-1) = -0.761594 and tanh(0) = 0, sink 0:
  // weights 0.466921, 1, 1: out (0.466921 + 3) / 2.466921 = 1.405364, lse log 2.466921 =
  // 0.902971; row 0 (logit tanh(0) = 0 and the sink) stays 1/2.
  a.soft_cap = 1.0f;
  a.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  attnref::ragged_paged_attention(a, TensorView<float, 3>(out.data(), {2, 1, 1}),
                                  TensorView<float, 2>(lse.data(), {2, 1}));
  EXPECT_NEAR(out[0], 0.5, 1e-6);
  EXPECT_NEAR(out[1], 1.405364, 1e-6);
  EXPECT_NEAR(lse[1], 0.902971, 1e-6);
}

// --- checks -----------------------------------------------------------------------------------

TEST(RaggedFeatureChecks, SinksAndSlopesShapesValuesAndTiers) {
  Inputs in({{1, 3}, {2, 2}}, 4, 2, 4, 2, std::nullopt, 3);
  attnref::RaggedPagedAttentionArgs<float> a = in.args();
  std::vector<float> five = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  a.sinks = {five.data(), {5}};
  attnref::Status s = attnref::check_ragged_shapes(a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kSinksShape);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "sinks must have shape (4,), one logit per query head. Got (5,).");
  a.sinks = {five.data(), {4}};
  a.alibi_slopes = {five.data(), {1}};
  s = attnref::check_ragged(a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kAlibiSlopesShape);
  EXPECT_EQ(s.message(), "alibi_slopes must have shape (4,), one slope per query head. Got (1,).");
  five[3] = -std::numeric_limits<float>::infinity();
  a.alibi_slopes = {five.data(), {4}};
  EXPECT_TRUE(attnref::check_ragged_shapes(a, attnref::Profile::kReference).ok());
  s = attnref::check_ragged(a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidAlibiSlope);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "alibi_slopes[3]=-inf must be finite.");
  std::vector<float> out(in.q.size(), 7.0f);
  EXPECT_EQ(
      attnref::try_ragged_paged_attention(a, TensorView<float, 3>(out.data(), a.q.extents)).code(),
      ErrorCode::kInvalidAlibiSlope);
  for (float x : out) ASSERT_EQ(x, 7.0f);
  // Sinks: NaN only in the data tier.
  a.alibi_slopes = {};
  five[0] = kNaN;
  ASSERT_TRUE(attnref::check_ragged(a, attnref::Profile::kReference).ok());
  s = attnref::check_ragged_data(a);
  EXPECT_EQ(s.code(), ErrorCode::kNonFiniteData);
  EXPECT_EQ(s.message(), "sinks[0] is not finite");
}

TEST(RaggedFeatureChecks, ConventionsMustBeEnumeratorsAndAreNotInJax) {
  Inputs in({{1, 3}, {2, 2}}, 4, 2, 4, 2, std::nullopt, 5);
  attnref::RaggedPagedAttentionArgs<float> a = in.args();
  a.soft_cap_order = static_cast<attnref::SoftCapOrder>(2);
  attnref::Status s = attnref::check_ragged_shapes(a, attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidConvention);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "soft_cap_order must be one of [cap_then_alibi, alibi_then_cap]. Got 2.");
  a.soft_cap_order = attnref::SoftCapOrder::kCapThenAlibi;
  a.alibi_convention = static_cast<attnref::AlibiConvention>(3);
  std::vector<float> out(in.q.size(), 7.0f);
  EXPECT_EQ(
      attnref::try_ragged_paged_attention(a, TensorView<float, 3>(out.data(), a.q.extents)).code(),
      ErrorCode::kInvalidConvention);
  for (float x : out) ASSERT_EQ(x, 7.0f);
  a.alibi_convention = attnref::AlibiConvention::kAbsolute;
  EXPECT_TRUE(attnref::check_ragged(a, attnref::Profile::kReference).ok());
  s = attnref::check_ragged_shapes(a, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's ragged_paged_attention has no alibi_convention option.");
  a.alibi_convention = attnref::AlibiConvention::kSigned;
  a.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  s = attnref::check_ragged_shapes(a, attnref::Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kOptionNotInJax);
  EXPECT_EQ(s.message(), "JAX's ragged_paged_attention has no soft_cap_order option.");
}

TEST(RaggedFeatureChecks, WindowKeepsR7) {
  Inputs in({{1, 3}}, 2, 1, 4, 2, 0, 4);
  const attnref::Status s = attnref::check_ragged(in.args(), attnref::Profile::kReference);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidSlidingWindow);
  EXPECT_EQ(std::string(s.jax_check()), "R7");
  EXPECT_EQ(s.message(), "sliding_window=0 must be positive.");
}

}  // namespace
