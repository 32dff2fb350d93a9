// SPDX-License-Identifier: Apache-2.0
// The tile products read 16/8-bit pages directly, widened in registers (kernels/detail/widen.hpp),
// when the pages have a unit dim stride; other pages go through the converted-scratch path. Both
// must give the same bits: each case runs the same values once with contiguous rows (the
// register path) and once with every element two apart (the scratch path), and compares output
// and logsumexp bit for bit. Head dims cover whole packets and a scalar tail; groups cover the
// 8/4/2/1 row blocks. Accuracy against the float64 oracle is tested in test_kv_dtypes_*.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <attnref/kernels/paged_attention.hpp>
#include <attnref/kernels/ragged_paged_attention.hpp>
#include <attnref/validate/ragged.hpp>

namespace {

using attnref::TensorView;

constexpr std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

template <class T>
T random_value(std::mt19937& rng) {
  if constexpr (attnref::is_fp8_dtype<T>) {
    for (;;) {  // any finite code, subnormals included
      const T x{static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0, 255)(rng))};
      if (std::isfinite(x.to_float())) return x;
    }
  } else if constexpr (std::is_same<T, std::int8_t>::value) {
    return static_cast<std::int8_t>(std::uniform_int_distribution<int>(-128, 127)(rng));
  } else {
    return static_cast<T>(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
  }
}

/// The same values twice: contiguous [n, D] rows, and rows whose elements are two apart.
template <class T>
struct TwoLayouts {
  std::vector<T> dense, spread;
  void fill(std::int64_t elements, std::mt19937& rng) {
    dense.resize(ix(elements));
    spread.assign(ix(2 * elements), random_value<T>(rng));
    for (std::int64_t i = 0; i < elements; ++i)
      dense[ix(i)] = spread[ix(2 * i)] = random_value<T>(rng);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

enum class ScaleKind { kNone, kPerToken, kPerTensor };

template <class KV>
void run_both_layouts(std::int64_t hq, std::int64_t hkv, std::int64_t dim, ScaleKind scales,
                      std::uint32_t seed) {
  SCOPED_TRACE("Hq " + std::to_string(hq) + " Hkv " + std::to_string(hkv) + " D " +
               std::to_string(dim) + " scales " + std::to_string(static_cast<int>(scales)));
  std::mt19937 rng(seed);
  const std::int64_t batch = 3, page = 8, pps = 5, total = batch * pps;
  std::vector<float> q(ix(batch * hq * dim));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  TwoLayouts<KV> k, v;
  k.fill(hkv * total * page * dim, rng);
  v.fill(hkv * total * page * dim, rng);
  std::vector<float> k_scales(ix(hkv * total * page)), v_scales(k_scales.size());
  for (float& s : k_scales) s = std::uniform_real_distribution<float>(0.01f, 2.0f)(rng);
  for (float& s : v_scales) s = std::uniform_real_distribution<float>(0.01f, 2.0f)(rng);
  std::vector<std::int32_t> lengths{37, 1, 40}, table(ix(total));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);

  std::vector<float> out[2], lse[2];
  for (int layout = 0; layout < 2; ++layout) {
    attnref::PagedAttentionArgs<float, KV> a;
    a.q = {q.data(), {batch, hq, dim}};
    const std::int64_t e = layout == 0 ? 1 : 2;
    const std::array<std::int64_t, 4> strides{total * page * dim * e, page * dim * e, dim * e, e};
    a.k_pages = {layout == 0 ? k.dense.data() : k.spread.data(), {hkv, total, page, dim}, strides};
    a.v_pages = {layout == 0 ? v.dense.data() : v.spread.data(), {hkv, total, page, dim}, strides};
    if (scales == ScaleKind::kPerToken) {
      a.k_scales = {k_scales.data(), {hkv, total, page, 1}};
      a.v_scales = {v_scales.data(), {hkv, total, page, 1}};
    } else if (scales == ScaleKind::kPerTensor) {
      a.k_scales = {k_scales.data(), {hkv, total, page, 1}, {0, 0, 0, 0}};
      a.v_scales = {v_scales.data(), {hkv, total, page, 1}, {0, 0, 0, 0}};
    }
    a.lengths = {lengths.data(), {batch}};
    a.page_indices = {table.data(), {batch, pps}};
    a.sm_scale = 0.3f;
    ASSERT_TRUE(attnref::check_paged(a, attnref::Profile::kReference).ok());
    out[layout].assign(ix(batch * hq * dim), -1.0f);
    lse[layout].assign(ix(batch * hq), -1.0f);
    attnref::paged_attention_unchecked(a,
                                       TensorView<float, 3>(out[layout].data(), {batch, hq, dim}),
                                       TensorView<float, 2>(lse[layout].data(), {batch, hq}));
  }
  EXPECT_TRUE(same_bits(out[0], out[1])) << "output differs between the two paths";
  EXPECT_TRUE(same_bits(lse[0], lse[1])) << "logsumexp differs between the two paths";
  for (float x : out[0]) ASSERT_TRUE(std::isfinite(x));
}

template <class KV>
void check_paged_grid(std::initializer_list<ScaleKind> scale_kinds) {
  std::uint32_t seed = 1;
  for (ScaleKind s : scale_kinds)
    for (std::int64_t dim : {128, 20, 3})
      for (auto [hq, hkv] : {std::pair<std::int64_t, std::int64_t>{4, 4}, {8, 2}, {30, 2}})
        run_both_layouts<KV>(hq, hkv, dim, s, seed++);
}

TEST(WidenedTiles, PagedBf16MatchesScratchPathBitForBit) {
  check_paged_grid<Eigen::bfloat16>({ScaleKind::kNone});
}
TEST(WidenedTiles, PagedHalfMatchesScratchPathBitForBit) {
  check_paged_grid<Eigen::half>({ScaleKind::kNone});
}
TEST(WidenedTiles, PagedInt8MatchesScratchPathBitForBit) {
  check_paged_grid<std::int8_t>({ScaleKind::kPerToken, ScaleKind::kPerTensor});
}
TEST(WidenedTiles, PagedE4m3MatchesScratchPathBitForBit) {
  check_paged_grid<attnref::float8_e4m3fn>(
      {ScaleKind::kNone, ScaleKind::kPerToken, ScaleKind::kPerTensor});
}
TEST(WidenedTiles, PagedE5m2MatchesScratchPathBitForBit) {
  check_paged_grid<attnref::float8_e5m2>({ScaleKind::kNone, ScaleKind::kPerTensor});
}

/// Ragged: decode rows (one token), a short chunk (few rows: the decode path, with a causal edge
/// inside a block) and a prefill sequence, optionally with a sliding window and per-tensor
/// scales, run on both layouts.
template <class KV>
void run_both_layouts_ragged(std::int64_t hq, std::int64_t hkv, std::int64_t dim, bool scaled,
                             std::optional<std::int64_t> window, std::uint32_t seed) {
  SCOPED_TRACE("ragged Hq " + std::to_string(hq) + " Hkv " + std::to_string(hkv) + " D " +
               std::to_string(dim) + (scaled ? " scaled" : "") + (window ? " window" : ""));
  std::mt19937 rng(seed);
  const std::int64_t seqs = 4, page = 8, pps = 6, total = seqs * pps;
  std::vector<std::int32_t> kv_lens{37, 1, 48, 20}, cu{0, 1, 2, 5, 25}, table(ix(total));
  const std::int64_t tokens = cu.back();
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> q(ix(tokens * hq * dim));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  TwoLayouts<KV> k, v;
  k.fill(hkv * total * page * dim, rng);
  v.fill(hkv * total * page * dim, rng);

  std::vector<float> out[2], lse[2];
  for (int layout = 0; layout < 2; ++layout) {
    attnref::RaggedPagedAttentionArgs<float, KV> a;
    a.q = {q.data(), {tokens, hq, dim}};
    const std::int64_t e = layout == 0 ? 1 : 2;
    const std::array<std::int64_t, 4> strides{total * page * dim * e, page * dim * e, dim * e, e};
    a.k_pages = {layout == 0 ? k.dense.data() : k.spread.data(), {hkv, total, page, dim}, strides};
    a.v_pages = {layout == 0 ? v.dense.data() : v.spread.data(), {hkv, total, page, dim}, strides};
    a.kv_lens = {kv_lens.data(), {seqs}};
    a.page_indices = {table.data(), {seqs, pps}};
    a.cu_q_lens = {cu.data(), {seqs + 1}};
    a.num_seqs_value = seqs;
    a.sm_scale = 0.3f;
    a.sliding_window = window;
    if (scaled) {
      a.k_scale = 0.37f;
      a.v_scale = 1.9f;
    }
    ASSERT_TRUE(attnref::check_ragged(a, attnref::Profile::kReference).ok());
    out[layout].assign(ix(tokens * hq * dim), -1.0f);
    lse[layout].assign(ix(tokens * hq), -1.0f);
    attnref::ragged_paged_attention_unchecked(
        a, TensorView<float, 3>(out[layout].data(), {tokens, hq, dim}),
        TensorView<float, 2>(lse[layout].data(), {tokens, hq}));
  }
  EXPECT_TRUE(same_bits(out[0], out[1])) << "output differs between the two paths";
  EXPECT_TRUE(same_bits(lse[0], lse[1])) << "logsumexp differs between the two paths";
  for (float x : out[0]) ASSERT_TRUE(std::isfinite(x));
}

template <class KV>
void check_ragged_grid(std::initializer_list<bool> scalings) {
  std::uint32_t seed = 100;
  for (bool scaled : scalings)
    for (std::int64_t dim : {128, 20})
      for (auto [hq, hkv] : {std::pair<std::int64_t, std::int64_t>{4, 4}, {8, 2}})
        for (std::optional<std::int64_t> window : {std::optional<std::int64_t>{}, {5}})
          run_both_layouts_ragged<KV>(hq, hkv, dim, scaled, window, seed++);
}

TEST(WidenedTiles, RaggedBf16MatchesScratchPathBitForBit) {
  check_ragged_grid<Eigen::bfloat16>({false});
}
TEST(WidenedTiles, RaggedHalfMatchesScratchPathBitForBit) {
  check_ragged_grid<Eigen::half>({false});
}
TEST(WidenedTiles, RaggedInt8MatchesScratchPathBitForBit) {
  check_ragged_grid<std::int8_t>({false, true});
}
TEST(WidenedTiles, RaggedE4m3MatchesScratchPathBitForBit) {
  check_ragged_grid<attnref::float8_e4m3fn>({false, true});
}

/// Every code of each 16/8-bit type widens to the value of its scalar conversion, through the
/// packet path this build compiles (SSE2, AVX2, AVX-512 or the portable one).
template <class E>
void check_every_code() {
  using Packet = attnref::detail::PacketOf<float>;
  constexpr int W = attnref::detail::kLanes<float>;
  constexpr std::size_t kW = ix(W);
  const int codes = sizeof(E) == 1 ? 256 : 65536;
  std::vector<E> all(ix(codes + W));
  for (int c = 0; c < codes; ++c) {
    if constexpr (sizeof(E) == 1) {
      const auto byte = static_cast<std::uint8_t>(c);
      std::memcpy(static_cast<void*>(&all[ix(c)]), &byte, 1);
    } else {
      const auto bits = static_cast<std::uint16_t>(c);
      std::memcpy(static_cast<void*>(&all[ix(c)]), &bits, 2);
    }
  }
  const auto expect_widened = [&](const float* got, int first, const char* path) {
    for (std::size_t i = 0; i < kW; ++i) {
      const float want = attnref::detail::widen_scalar(all[ix(first) + i]);
      bool same = std::memcmp(&got[i], &want, sizeof(float)) == 0 ||
                  (std::isnan(got[i]) && std::isnan(want));
      // e4m3fn's NaN codes: NaN, or +-480 from the F16C paths (which the kernels never use on
      // them: widens_exactly, tested below).
      if (std::is_same<E, attnref::float8_e4m3fn>::value && std::isnan(want) &&
          !attnref::detail::kWidensE4m3NanCodes)
        same = same || std::fabs(got[i]) == 480.0f;
      ASSERT_TRUE(same) << path << ", code " << (ix(first) + i) << ": " << got[i] << " vs " << want;
    }
  };
  for (int c = 0; c < codes; c += W) {
    alignas(64) float got[kW];
    Eigen::internal::pstore(got, attnref::detail::widen_packet<Packet>(all.data() + c));
    expect_widened(got, c, "one packet");
  }
  // Several packets at once (the VBMI table lookup for fp8; packet by packet elsewhere), from
  // every packet offset so each code lands in each packet of the group.
  const auto groups = [&](auto group) {
    constexpr int G = decltype(group)::value;
    for (int c = 0; c + G * W <= codes; c += W) {
      Packet p[static_cast<std::size_t>(G)];
      attnref::detail::widen_packets<Packet, G>(all.data() + c, p);
      for (int g = 0; g < G; ++g) {
        alignas(64) float got[kW];
        Eigen::internal::pstore(got, p[g]);
        expect_widened(got, c + g * W, G == 4 ? "4 packets" : G == 2 ? "2 packets" : "1 packet");
      }
    }
  };
  if constexpr (sizeof(E) == 1) {
    groups(std::integral_constant<int, 1>{});
    groups(std::integral_constant<int, 2>{});
    groups(std::integral_constant<int, 4>{});
  }
}

TEST(WidenedTiles, EveryCodeWidensToItsScalarValue) {
  check_every_code<Eigen::bfloat16>();
  check_every_code<Eigen::half>();
  check_every_code<std::int8_t>();
  check_every_code<attnref::float8_e4m3fn>();
  check_every_code<attnref::float8_e5m2>();
}

TEST(WidenedTiles, HasNanCodeFindsEachE4m3NanCode) {
  using attnref::float8_e4m3fn;
  for (std::int64_t dim : {3, 32, 40, 128}) {
    const std::int64_t rows = 3, ld = dim + 5;
    std::vector<float8_e4m3fn> x(ix(rows * ld), float8_e4m3fn{0x7e});  // 448: finite
    EXPECT_FALSE(attnref::detail::has_nan_code(x.data(), ld, rows, dim)) << dim;
    for (std::uint8_t code : {std::uint8_t{0x7f}, std::uint8_t{0xff}})
      for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t d = 0; d < dim; ++d) {
          x[ix(t * ld + d)] = float8_e4m3fn{code};
          ASSERT_TRUE(attnref::detail::has_nan_code(x.data(), ld, rows, dim))
              << dim << " " << t << " " << d;
          x[ix(t * ld + d)] = float8_e4m3fn{0xfe};  // -448
        }
    // Past each row's dim (the gap up to ld) and past the last row: not looked at.
    for (std::int64_t t = 0; t < rows; ++t) x[ix(t * ld + dim)] = float8_e4m3fn{0x7f};
    EXPECT_FALSE(attnref::detail::has_nan_code(x.data(), ld, rows - 1, dim)) << dim;
  }
  std::vector<attnref::float8_e5m2> e5(8, attnref::float8_e5m2{0x7f});  // NaN: widened exactly
  EXPECT_FALSE(attnref::detail::has_nan_code(e5.data(), 8, 1, 8));
  EXPECT_TRUE(attnref::detail::widens_exactly(e5.data(), 8, 1, 8));
  // A row with a NaN code goes through the registers only where they widen it to NaN.
  std::vector<float8_e4m3fn> e4(8, float8_e4m3fn{0x38});
  EXPECT_TRUE(attnref::detail::widens_exactly(e4.data(), 8, 1, 8));
  e4[5] = float8_e4m3fn{0xff};
  EXPECT_EQ(attnref::detail::widens_exactly(e4.data(), 8, 1, 8),
            attnref::detail::kWidensE4m3NanCodes);
}

/// The pages of the e4m3fn NaN-code tests: Hkv = 2 heads of `total` pages of 8 tokens, random
/// finite codes in both layouts, and one NaN code (`code`) in K or V: the token in slot 5 of
/// page table entry 1 (sequence 0's token 13 with pages in table order), KV head 1, element
/// dim - 1.
struct NanCodePages {
  using E = attnref::float8_e4m3fn;
  static constexpr std::int64_t kHkv = 2, kPage = 8, kHead = 1;
  std::int64_t total, dim, d;
  TwoLayouts<E> k, v;

  NanCodePages(bool in_k, std::uint8_t code, std::int64_t total_pages, std::int64_t head_dim,
               std::mt19937& rng)
      : total(total_pages), dim(head_dim), d(head_dim - 1) {
    k.fill(kHkv * total * kPage * dim, rng);
    v.fill(kHkv * total * kPage * dim, rng);
    const std::int64_t at = ((kHead * total + 1) * kPage + 5) * dim + d;
    TwoLayouts<E>& poisoned = in_k ? k : v;
    poisoned.dense[ix(at)] = poisoned.spread[ix(2 * at)] = E{code};
  }
  /// K or V in layout 0 (contiguous: the register path) or 1 (elements two apart: scratch).
  TensorView<const E, 4> view(const TwoLayouts<E>& x, int layout) const {
    const std::int64_t e = layout == 0 ? 1 : 2;
    return {layout == 0 ? x.dense.data() : x.spread.data(),
            {kHkv, total, kPage, dim},
            {total * kPage * dim * e, kPage * dim * e, dim * e, e}};
  }
  /// Every output row [rows, hq, dim] is finite except, in row `row0`, the query heads of the
  /// poisoned KV head: all of each such row (a K code) or its element d (a V code).
  void expect_nan_only_there(const std::vector<float>& out, std::int64_t rows, std::int64_t hq,
                             std::int64_t row0, bool in_k, int layout) const {
    const attnref::detail::HeadGroups heads{hq, kHkv};
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t qh = 0; qh < hq; ++qh)
        for (std::int64_t x = 0; x < dim; ++x) {
          const bool hit = r == row0 && heads.kv_head(qh) == kHead && (in_k || x == d);
          EXPECT_EQ(std::isnan(out[ix((r * hq + qh) * dim + x)]), hit)
              << "layout " << layout << " row " << r << " qh " << qh << " d " << x;
        }
  }
};

/// e4m3fn NaN codes in live K and V rows give the float64 formula's NaNs in both layouts: a K
/// code makes every output row of its KV head's query heads NaN in that sequence, a V code its
/// element in those rows; everything else stays finite.
void check_e4m3_nan_code(bool in_k, std::uint8_t code, std::int64_t dim) {
  SCOPED_TRACE(std::string(in_k ? "K" : "V") + " code " + std::to_string(code) + " D " +
               std::to_string(dim));
  std::mt19937 rng(7);
  const std::int64_t batch = 2, hq = 8, pps = 5;
  std::vector<float> q(ix(batch * hq * dim));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const NanCodePages pages(in_k, code, batch * pps, dim, rng);
  std::vector<std::int32_t> lengths{37, 20}, table(ix(batch * pps));
  std::iota(table.begin(), table.end(), 0);
  for (int layout = 0; layout < 2; ++layout) {
    attnref::PagedAttentionArgs<float, NanCodePages::E> a;
    a.q = {q.data(), {batch, hq, dim}};
    a.k_pages = pages.view(pages.k, layout);
    a.v_pages = pages.view(pages.v, layout);
    a.lengths = {lengths.data(), {batch}};
    a.page_indices = {table.data(), {batch, pps}};
    ASSERT_TRUE(attnref::check_paged(a, attnref::Profile::kReference).ok());
    std::vector<float> out(ix(batch * hq * dim));
    attnref::paged_attention_unchecked(a, TensorView<float, 3>(out.data(), {batch, hq, dim}));
    pages.expect_nan_only_there(out, batch, hq, 0, in_k, layout);
  }
}

TEST(WidenedTiles, PagedE4m3NanCodesStayNan) {
  for (bool in_k : {true, false})
    for (std::uint8_t code : {std::uint8_t{0x7f}, std::uint8_t{0xff}})
      for (std::int64_t dim : {128, 20}) check_e4m3_nan_code(in_k, code, dim);
}

/// The same for ragged decode rows (the few-rows path, which widens a chunk of every KV head at
/// once): sequence 0 decodes one row, sequence 1 three rows.
void check_e4m3_nan_code_ragged(bool in_k, std::uint8_t code, std::int64_t dim) {
  SCOPED_TRACE(std::string("ragged ") + (in_k ? "K" : "V") + " code " + std::to_string(code) +
               " D " + std::to_string(dim));
  std::mt19937 rng(8);
  const std::int64_t seqs = 2, hq = 8, pps = 5;
  std::vector<std::int32_t> kv_lens{37, 20}, cu{0, 1, 4}, table(ix(seqs * pps));
  std::iota(table.begin(), table.end(), 0);
  const std::int64_t tokens = cu.back();
  std::vector<float> q(ix(tokens * hq * dim));
  for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const NanCodePages pages(in_k, code, seqs * pps, dim, rng);
  for (int layout = 0; layout < 2; ++layout) {
    attnref::RaggedPagedAttentionArgs<float, NanCodePages::E> a;
    a.q = {q.data(), {tokens, hq, dim}};
    a.k_pages = pages.view(pages.k, layout);
    a.v_pages = pages.view(pages.v, layout);
    a.kv_lens = {kv_lens.data(), {seqs}};
    a.page_indices = {table.data(), {seqs, pps}};
    a.cu_q_lens = {cu.data(), {seqs + 1}};
    a.num_seqs_value = seqs;
    a.sm_scale = 0.3f;
    ASSERT_TRUE(attnref::check_ragged(a, attnref::Profile::kReference).ok());
    std::vector<float> out(ix(tokens * hq * dim));
    attnref::ragged_paged_attention_unchecked(a,
                                              TensorView<float, 3>(out.data(), {tokens, hq, dim}));
    pages.expect_nan_only_there(out, tokens, hq, 0, in_k, layout);
  }
}

TEST(WidenedTiles, RaggedE4m3NanCodesStayNan) {
  for (bool in_k : {true, false})
    for (std::uint8_t code : {std::uint8_t{0x7f}, std::uint8_t{0xff}})
      for (std::int64_t dim : {128, 20}) check_e4m3_nan_code_ragged(in_k, code, dim);
}

TEST(WidenedTiles, ScalarWideningIsExact) {
  EXPECT_EQ(attnref::detail::widen_scalar(Eigen::bfloat16(1.5f)), 1.5f);
  EXPECT_EQ(attnref::detail::widen_scalar(Eigen::half(-0.099975586f)), -0.099975586f);
  EXPECT_EQ(attnref::detail::widen_scalar(std::int8_t{-128}), -128.0f);
  EXPECT_EQ(attnref::detail::widen_scalar(attnref::float8_e4m3fn{0x7E}), 448.0f);
  EXPECT_EQ(attnref::detail::widen_scalar(attnref::float8_e5m2{0x7B}), 57344.0f);
}

}  // namespace
