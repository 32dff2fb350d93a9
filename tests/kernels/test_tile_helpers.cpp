// SPDX-License-Identifier: Apache-2.0
// The register-level helpers of the tile products: `sum_lanes` (the horizontal sums of several
// accumulators at once) and, on AVX-512, `PairedLaneSums` (two sets of 8) must give Eigen's
// `predux` bit for bit, and the rows a decode kernel
// asks for ahead (`paged_rows_ahead`) must be the right rows of the right page, never past the
// page or the sequence. `exp_shifted` (the softmax's exp, packet by packet) must match exp in
// float64 and give exactly 0 for a masked logit (-inf) in packets and tails alike.
// `RowScales::finite` (whether 8-bit scales may be factored out of the products) must find one
// NaN or infinite scale anywhere among the first n, whatever their stride, and nothing past n.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <attnref/kernels/detail/online_softmax.hpp>
#include <attnref/kernels/detail/packet_sums.hpp>
#include <attnref/kernels/detail/row_scales.hpp>
#include <attnref/kernels/detail/rows_ahead.hpp>
#include <attnref/kernels/paged_attention.hpp>

namespace {

using attnref::TensorView;
using attnref::detail::kLanes;
using attnref::detail::PacketOf;
using attnref::detail::RowsAhead;

constexpr std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

template <std::size_t N>
void expect_sums_match_predux(const std::vector<float>& values) {
  using Packet = PacketOf<float>;
  constexpr std::size_t W = static_cast<std::size_t>(kLanes<float>);
  ASSERT_EQ(values.size(), N * W);
  Packet acc[N];
  for (std::size_t i = 0; i < N; ++i)
    acc[i] = Eigen::internal::ploadu<Packet>(values.data() + i * W);
  float sums[N];
  attnref::detail::sum_lanes(acc, sums);
  for (std::size_t i = 0; i < N; ++i) {
    const float want = Eigen::internal::predux(acc[i]);
    std::uint32_t got_bits, want_bits;
    std::memcpy(&got_bits, &sums[i], sizeof got_bits);
    std::memcpy(&want_bits, &want, sizeof want_bits);
    EXPECT_EQ(got_bits, want_bits) << "accumulator " << i << ": " << sums[i] << " vs " << want;
  }
}

/// Values over 16 orders of magnitude, both signs: any other order of the adds changes the low
/// bits of most sums.
std::vector<float> wide_values(int count, std::mt19937& rng) {
  std::vector<float> v(ix(count));
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f), sign(-1.0f, 1.0f);
  for (float& x : v) x = std::copysign(std::pow(10.0f, exponent(rng)), sign(rng));
  return v;
}

TEST(SumLanes, MatchesPreduxBitForBitFor4And8And16Accumulators) {
  std::mt19937 rng(7);
  constexpr int W = kLanes<float>;
  for (int trial = 0; trial < 200; ++trial) {
    expect_sums_match_predux<4>(wide_values(4 * W, rng));
    expect_sums_match_predux<8>(wide_values(8 * W, rng));
    expect_sums_match_predux<16>(wide_values(16 * W, rng));
    expect_sums_match_predux<3>(wide_values(3 * W, rng));  // no transposing form: predux each
  }
}

TEST(SumLanes, CarriesInfinityAndNaNLikePredux) {
  std::mt19937 rng(11);
  constexpr int W = kLanes<float>;
  std::vector<float> v = wide_values(8 * W, rng);
  v[ix(0)] = std::numeric_limits<float>::infinity();  // accumulator 0: +inf
  v[ix(W + 1)] = std::numeric_limits<float>::infinity();
  v[ix(W + 2)] = -std::numeric_limits<float>::infinity();          // accumulator 1: inf - inf = NaN
  v[ix(2 * W + W - 1)] = std::numeric_limits<float>::quiet_NaN();  // accumulator 2: NaN
  using Packet = PacketOf<float>;
  Packet acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = Eigen::internal::ploadu<Packet>(v.data() + i * W);
  float sums[8];
  attnref::detail::sum_lanes(acc, sums);
  EXPECT_EQ(sums[0], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(sums[1]));
  EXPECT_TRUE(std::isnan(sums[2]));
  expect_sums_match_predux<8>(v);
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
TEST(SumLanes, PairedSetsOf8MatchPreduxBitForBitAndCarryInfinityAndNaN) {
  std::mt19937 rng(13);
  constexpr int W = kLanes<float>;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> v = wide_values(16 * W, rng);
    if (trial == 0) {
      v[ix(3 * W)] = std::numeric_limits<float>::infinity();        // first set, 3: +inf
      v[ix(9 * W + 5)] = std::numeric_limits<float>::quiet_NaN();   // second set, 1: NaN
      v[ix(14 * W + 1)] = std::numeric_limits<float>::infinity();   // second set, 6:
      v[ix(14 * W + 2)] = -std::numeric_limits<float>::infinity();  //   inf - inf = NaN
    }
    __m512 first[8], second[8];
    for (int i = 0; i < 8; ++i) {
      first[i] = _mm512_loadu_ps(v.data() + i * W);
      second[i] = _mm512_loadu_ps(v.data() + (8 + i) * W);
    }
    attnref::detail::PairedLaneSums pair;
    pair.first(first);
    pair.second(second);
    float sums[16];
    pair.finish(sums);
    for (int i = 0; i < 16; ++i) {
      const float want = Eigen::internal::predux(i < 8 ? first[i] : second[i - 8]);
      std::uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &sums[i], sizeof got_bits);
      std::memcpy(&want_bits, &want, sizeof want_bits);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(sums[i])) << "trial " << trial << ", sum " << i;
      else
        EXPECT_EQ(got_bits, want_bits)
            << "trial " << trial << ", sum " << i << ": " << sums[i] << " vs " << want;
    }
    if (trial == 0) {
      EXPECT_EQ(sums[3], std::numeric_limits<float>::infinity());
      EXPECT_TRUE(std::isnan(sums[9]));
      EXPECT_TRUE(std::isnan(sums[14]));
    }
  }
}
#endif

/// A [Hkv=2, pages=6, page=4, D=3] pool read by 2 sequences of 3 pages each, in a shuffled
/// page order.
struct SmallPool {
  static constexpr std::int64_t kHkv = 2, kPages = 6, kPage = 4, kDim = 3, kPps = 3;
  std::vector<float> q = std::vector<float>(ix(2 * 2 * kDim), 0.5f);
  std::vector<float> k = std::vector<float>(ix(kHkv * kPages * kPage * kDim), 1.0f);
  std::vector<std::int32_t> lengths{10, 12};
  std::vector<std::int32_t> table{4, 0, 5, 2, 3, 1};
  attnref::PagedAttentionArgs<float, float> args() const {
    attnref::PagedAttentionArgs<float, float> a;
    a.q = {q.data(), {2, 2, kDim}};
    a.k_pages = {k.data(), {kHkv, kPages, kPage, kDim}};
    a.v_pages = a.k_pages;
    a.lengths = {lengths.data(), {2}};
    a.page_indices = {table.data(), {2, kPps}};
    return a;
  }
};

TEST(RowsAhead, PointsAtTheRowsOfThePageTheTableNamesCutAtThePageAndTheSequenceEnd) {
  SmallPool pool;
  const auto a = pool.args();
  ASSERT_TRUE(attnref::check_paged(a, attnref::Profile::kReference).ok());
  // f32 rows of 12 bytes, asked into L2: kAheadBytesL2 / 12 tokens ahead.
  const std::int64_t ahead = attnref::detail::tokens_ahead(SmallPool::kDim * 4, 4);
  ASSERT_EQ(ahead, attnref::detail::kAheadBytesL2 / 12);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < SmallPool::kHkv; ++h)
      for (std::int64_t t = -ahead; t < -ahead + 12; ++t) {
        const std::int64_t u = t + ahead, n = 3;
        const std::int64_t end = a.lengths(b);
        const RowsAhead r = attnref::detail::paged_rows_ahead(a, a.k_pages, b, h, t, n, end);
        SCOPED_TRACE("b " + std::to_string(b) + " h " + std::to_string(h) + " u " +
                     std::to_string(u));
        if (u >= end) {
          EXPECT_EQ(r.rows, 0);
          continue;
        }
        const std::int64_t page = pool.table[ix(b * SmallPool::kPps + u / SmallPool::kPage)];
        const std::int64_t slot = u % SmallPool::kPage;
        EXPECT_EQ(r.base, reinterpret_cast<const char*>(&a.k_pages(h, page, slot, 0)));
        EXPECT_EQ(r.ld_bytes, SmallPool::kDim * 4);
        EXPECT_EQ(r.row_bytes, SmallPool::kDim * 4);
        EXPECT_EQ(r.rows, std::min(std::min(n, SmallPool::kPage - slot), end - u));
        // The ragged kernel shifts head 0's rows by h head strides instead of a lookup per head.
        const RowsAhead r0 = attnref::detail::paged_rows_ahead(a, a.k_pages, b, 0, t, n, end);
        const RowsAhead moved = r0.shifted(h * a.k_pages.strides[0] * 4);
        EXPECT_EQ(moved.base, r.base);
        EXPECT_EQ(moved.rows, r.rows);
      }
}

TEST(RowsAhead, AsksForEveryRowOfLongPagesAndCrossesToTheNextPageTheTableNames) {
  using attnref::detail::sequence_rows_ahead;
  constexpr std::int64_t kPage = 1024, kDim = 128;  // f32 rows of 512 bytes
  std::vector<float> f(ix(2 * kPage * kDim));
  const TensorView<const float, 4> f32(f.data(), {1, 2, kPage, kDim});
  const auto page_of = [](std::int64_t j) { return 1 - j; };  // the pool's pages in reverse
  const std::int64_t end = 2 * kPage, n = 4;
  const std::int64_t ahead = attnref::detail::tokens_ahead(kDim * 4, 4);
  ASSERT_LT(ahead, kPage / 2);
  // Anywhere in the page, however far the stream has run: the rows `ahead` on, same page.
  for (std::int64_t t : {std::int64_t{0}, std::int64_t{kPage / 2}, kPage - ahead - n}) {
    SCOPED_TRACE("t " + std::to_string(t));
    const RowsAhead r = sequence_rows_ahead(f32, 0, t, n, end, page_of);
    EXPECT_EQ(r.rows, n);
    EXPECT_EQ(r.base, reinterpret_cast<const char*>(&f32(0, 1, t + ahead, 0)));
  }
  // Cut at the page's end, then the next page of the table.
  EXPECT_EQ(sequence_rows_ahead(f32, 0, kPage - ahead - 1, n, end, page_of).rows, 1);
  const RowsAhead next = sequence_rows_ahead(f32, 0, kPage - ahead, n, end, page_of);
  EXPECT_EQ(next.rows, n);
  EXPECT_EQ(next.base, reinterpret_cast<const char*>(&f32(0, 0, 0, 0)));
  // Nothing at or past the sequence's end.
  EXPECT_EQ(sequence_rows_ahead(f32, 0, end - ahead, n, end, page_of).rows, 0);
  EXPECT_EQ(sequence_rows_ahead(f32, 0, end - ahead - 2, n, end, page_of).rows, 2);
}

TEST(RowsAhead, AKernelReadingEveryHeadOfAPageInTurnAsksForTheNextPageWhateverTheRowSize) {
  using attnref::detail::kTokensAheadHeadsInTurn;
  using attnref::detail::sequence_rows_ahead;
  constexpr std::int64_t kPage = 16, kDim = 128, kPages = 3;
  std::vector<std::int8_t> codes(ix(kPages * kPage * kDim));
  const TensorView<const std::int8_t, 4> int8(codes.data(), {1, kPages, kPage, kDim});
  const auto page_of = [](std::int64_t j) { return kPages - 1 - j; };
  const std::int64_t end = kPages * kPage, n = 4;
  ASSERT_EQ(kTokensAheadHeadsInTurn, 16);
  // int8 rows of 128 bytes: 64 tokens ahead by bytes (past this sequence), 16 in turn.
  EXPECT_EQ(sequence_rows_ahead(int8, 0, 0, n, end, page_of).rows, 0);
  const RowsAhead first = sequence_rows_ahead(int8, 0, 0, n, end, page_of, true);
  EXPECT_EQ(first.rows, n);
  EXPECT_EQ(first.base, reinterpret_cast<const char*>(&int8(0, page_of(1), 0, 0)));
  const RowsAhead mid = sequence_rows_ahead(int8, 0, kPage + 14, n, end, page_of, true);
  EXPECT_EQ(mid.rows, 2);  // cut at the page's end
  EXPECT_EQ(mid.base, reinterpret_cast<const char*>(&int8(0, page_of(2), 14, 0)));
  EXPECT_EQ(sequence_rows_ahead(int8, 0, 2 * kPage, n, end, page_of, true).rows, 0);
}

TEST(RowsAhead, AsksFor8BitRowsIntoL1AndWiderRowsIntoL2FurtherAhead) {
  std::vector<std::int8_t> codes(64 * 128);
  std::vector<float> f(codes.size());
  std::vector<Eigen::bfloat16> h(codes.size());
  const auto int8_ahead = attnref::detail::page_rows_ahead(
      TensorView<const std::int8_t, 4>(codes.data(), {1, 4, 16, 128}), 0, 1, 0, 4);
  const auto f32_ahead = attnref::detail::page_rows_ahead(
      TensorView<const float, 4>(f.data(), {1, 4, 16, 128}), 0, 1, 0, 4);
  const auto bf16_ahead = attnref::detail::page_rows_ahead(
      TensorView<const Eigen::bfloat16, 4>(h.data(), {1, 4, 16, 128}), 0, 1, 0, 4);
  EXPECT_TRUE(int8_ahead.into_l1);
  EXPECT_FALSE(f32_ahead.into_l1);
  EXPECT_FALSE(bf16_ahead.into_l1);
  EXPECT_EQ(int8_ahead.rows, 4);
  EXPECT_EQ(f32_ahead.rows, 4);
  // Rows into L2 are asked for further ahead than rows into L1.
  EXPECT_EQ(attnref::detail::tokens_ahead(128, 1), attnref::detail::kAheadBytes / 128);
  EXPECT_EQ(attnref::detail::tokens_ahead(256, 2), attnref::detail::kAheadBytesL2 / 256);
  EXPECT_EQ(attnref::detail::tokens_ahead(512, 4), attnref::detail::kAheadBytesL2 / 512);
  EXPECT_EQ(attnref::detail::tokens_ahead(1 << 20, 4), 1);  // at least one token
}

TEST(RowsAhead, AsksForNothingWhenTheHeadDimIsStrided) {
  std::vector<float> k(ix(2 * 6 * 4 * 3 * 2), 1.0f);
  const TensorView<const float, 4> strided(k.data(), {2, 6, 4, 3}, {6 * 4 * 6, 4 * 6, 6, 2});
  EXPECT_EQ(attnref::detail::page_rows_ahead(strided, 1, 2, 0, 4).rows, 0);
  const TensorView<const float, 4> dense(k.data(), {2, 6, 4, 3});
  const RowsAhead r = attnref::detail::page_rows_ahead(dense, 1, 2, 1, 8);
  EXPECT_EQ(r.rows, 3);  // cut at the page's end
  EXPECT_EQ(r.base, reinterpret_cast<const char*>(&dense(1, 2, 1, 0)));
}

/// exp_shifted<kMayMask> over a row of `n` logits at `offset` floats into a buffer (so rows
/// start unaligned too), against exp computed in float64: within about 3 ulp for finite logits,
/// exactly 0 for -inf (masked), NaN for NaN.
template <bool kMayMask>
void expect_exp_shifted_matches_float64(Eigen::Index n, Eigen::Index offset, std::mt19937& rng) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::uniform_real_distribution<float> logit(-30.0f, 5.0f);
  Eigen::Matrix<float, 1, Eigen::Dynamic> buf(offset + n);
  for (Eigen::Index i = 0; i < buf.size(); ++i) buf[i] = logit(rng);
  if (kMayMask)
    for (Eigen::Index i = offset; i < offset + n; i += 3) buf[i] = neg_inf;  // every third key
  if (n > 5) buf[offset + 5] = std::numeric_limits<float>::quiet_NaN();
  const Eigen::Matrix<float, 1, Eigen::Dynamic> before = buf;
  const float shift = 2.5f;
  auto row = buf.segment(offset, n);
  attnref::detail::exp_shifted<kMayMask>(row, shift);
  for (Eigen::Index i = 0; i < offset; ++i) EXPECT_EQ(buf[i], before[i]) << "outside the row";
  for (Eigen::Index c = 0; c < n; ++c) {
    const float x = before[offset + c], got = buf[offset + c];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(got)) << "n " << n << " column " << c;
    } else if (x == neg_inf) {
      EXPECT_EQ(got, 0.0f) << "n " << n << " column " << c;
    } else {
      // The argument as f32 computes it (its rounding is the formula's), exp in float64.
      const float arg = x - shift;
      const double want = std::exp(static_cast<double>(arg));
      EXPECT_NEAR(got, want, 4e-7 * want) << "n " << n << " column " << c << " x " << x;
    }
  }
}

TEST(ExpShifted, MatchesFloat64AndZeroesMaskedLogitsInPacketsAndTails) {
  std::mt19937 rng(11);
  // Lengths below, at and past one packet and several packets, each at two start offsets.
  for (Eigen::Index n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 128, 131})
    for (Eigen::Index offset : {0, 3}) {
      expect_exp_shifted_matches_float64<true>(n, offset, rng);
      expect_exp_shifted_matches_float64<false>(n, offset, rng);
    }
}

/// The plain max of a row: NaN when a value is NaN, -inf when the row is empty.
template <class T>
T plain_max_or_nan(const std::vector<T>& v) {
  T m = -std::numeric_limits<T>::infinity();
  for (const T x : v) {
    if (std::isnan(x)) return std::numeric_limits<T>::quiet_NaN();
    if (x > m) m = x;
  }
  return m;
}

/// `max_logit` of rows of every length up to 3 packets and a few more, with one special value
/// (NaN, +inf, -inf, the largest finite) at each place in turn, as a contiguous row and as a
/// strided column (Eigen's own max).
template <class T>
void expect_max_logit_matches_plain_max() {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  std::mt19937 rng(5);
  std::uniform_real_distribution<T> value(T(-30), T(30));
  const Eigen::Index lanes = kLanes<T>;
  for (Eigen::Index n = 0; n <= 3 * lanes + 5; ++n)
    for (const T special : {nan, inf, -inf, std::numeric_limits<T>::max()})
      for (Eigen::Index at = -1; at < n; ++at) {  // -1: no special value
        std::vector<T> v(ix(n));
        for (T& x : v) x = value(rng);
        if (at >= 0) v[ix(at)] = special;
        const T want = plain_max_or_nan(v);
        // Row 1 holds the values, after a row that must not count; the buffers are never empty
        // (Eigen's blocks of an empty matrix offset a null pointer).
        std::vector<T> rows(ix(2 * n + 1), T(1e6)), columns(ix(2 * n + 1), T(1e6));
        Eigen::Map<Matrix> m(rows.data(), 2, n), t(columns.data(), n, 2);
        for (Eigen::Index c = 0; c < n; ++c) m(1, c) = t(c, 1) = v[ix(c)];
        const T row_max = attnref::detail::max_logit<T>(m.row(1));
        const T column_max = attnref::detail::max_logit<T>(t.col(1));
        for (const T got : {row_max, column_max}) {
          if (std::isnan(want))
            EXPECT_TRUE(std::isnan(got)) << "n " << n << " special at " << at;
          else
            EXPECT_EQ(got, want) << "n " << n << " special " << special << " at " << at;
        }
      }
}

TEST(MaxLogit, MatchesAPlainMaxWithNaNAndInfinitiesAtEveryPlaceInRowsAndColumns) {
  expect_max_logit_matches_plain_max<float>();
  expect_max_logit_matches_plain_max<double>();
}

TEST(RowScales, FiniteFindsOneNaNOrInfiniteScaleAtAnyPlaceAndStrideAndNothingPastN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t ld : {1, 3}) {
    for (std::int64_t n : {1, 5, 16, 17, 64, 130}) {
      std::vector<float> scales(ix(n * ld + 2 * ld), 0.01f);
      scales[ix(n * ld)] = nan;  // one past the last scale asked about: not looked at
      const attnref::detail::RowScales r{scales.data(), ld};
      EXPECT_TRUE(r.finite(n)) << "ld " << ld << " n " << n;
      EXPECT_TRUE(r.finite(0));
      for (std::int64_t bad_at : {std::int64_t{0}, n / 2, n - 1})
        for (float bad : {nan, inf, -inf}) {
          std::vector<float> s = scales;
          s[ix(bad_at * ld)] = bad;
          const attnref::detail::RowScales b{s.data(), ld};
          EXPECT_FALSE(b.finite(n)) << "ld " << ld << " n " << n << " at " << bad_at;
          // Large finite scales are finite: their product with 0 is 0, not NaN.
          s[ix(bad_at * ld)] = std::numeric_limits<float>::max();
          EXPECT_TRUE(b.finite(n)) << "ld " << ld << " n " << n << " at " << bad_at;
        }
    }
  }
  // One scale for all rows (ld 0, vLLM's per-tensor scale).
  float one = 2.0f;
  EXPECT_TRUE((attnref::detail::RowScales{&one, 0}.finite(1000)));
  one = inf;
  EXPECT_FALSE((attnref::detail::RowScales{&one, 0}.finite(1000)));
  EXPECT_TRUE((attnref::detail::RowScales{&one, 0}.finite(0)));
}

}  // namespace
