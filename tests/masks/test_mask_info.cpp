// SPDX-License-Identifier: Apache-2.0
// Block classification (MaskInfo): the worked examples of spec §3.5, ragged blocks under the
// reference profile, head deduplication, reconstruction of random masks, and M3..M7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attnref/masks/mask_info.hpp"

namespace {

using attnref::BlockKind;
using attnref::CausalMask;
using attnref::DenseMask;
using attnref::ErrorCode;
using attnref::LocalMask;
using attnref::MaskInfo;
using attnref::Profile;
using attnref::Status;

std::vector<std::vector<int>> block_mask_of(const MaskInfo& info, std::int64_t h) {
  std::vector<std::vector<int>> out;
  for (std::int64_t i = 0; i < info.num_q_blocks; ++i) {
    out.emplace_back();
    for (std::int64_t j = 0; j < info.num_kv_blocks; ++j)
      out.back().push_back(static_cast<int>(info.kind(h, i, j)));
  }
  return out;
}

std::vector<std::uint8_t> pattern(const MaskInfo& info, std::int64_t n) {
  const auto tile = static_cast<size_t>(info.pattern_rows * info.pattern_cols);
  return {
      info.partial_blocks.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(n) * tile),
      info.partial_blocks.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(n + 1) * tile)};
}

// numpy's tri(n, m, k): 1 where c <= r + k.  triu(ones, k): 1 where c >= r + k.
std::vector<std::uint8_t> tri(int n, int k) {
  std::vector<std::uint8_t> t(static_cast<size_t>(n * n));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) t[static_cast<size_t>(r * n + c)] = c <= r + k ? 1 : 0;
  return t;
}
std::vector<std::uint8_t> triu(int n, int k) {
  std::vector<std::uint8_t> t(static_cast<size_t>(n * n));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) t[static_cast<size_t>(r * n + c)] = c >= r + k ? 1 : 0;
  return t;
}

TEST(MaskInfo, WorkedExampleCausal64Blocks16) {
  for (bool dense : {false, true}) {
    std::vector<char> data(64 * 64);
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < 64; ++c) data[static_cast<size_t>(r * 64 + c)] = c <= r;
    MaskInfo info;
    const Status s =
        dense ? attnref::build_mask_info(
                    DenseMask{{reinterpret_cast<const bool*>(data.data()), {64, 64}}}, 16, 16,
                    Profile::kJax, &info)
              : attnref::build_mask_info(CausalMask{{64, 64}}, 16, 16, Profile::kJax, &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(info.num_heads, 1);
    EXPECT_EQ(block_mask_of(info, 0), (std::vector<std::vector<int>>{
                                          {1, 0, 0, 0}, {2, 1, 0, 0}, {2, 2, 1, 0}, {2, 2, 2, 1}}));
    ASSERT_EQ(info.num_partial_blocks(), 1);
    EXPECT_EQ(pattern(info, 0), tri(16, 0));
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, i, i))], 0);
    // Forward data_next at non-empty tiles = j; dkv data_next = i.
    EXPECT_EQ(info.kv_blocks(0, 2), (std::vector<std::int64_t>{0, 1, 2}));
    EXPECT_EQ(info.q_blocks(0, 1), (std::vector<std::int64_t>{1, 2, 3}));
    const attnref::BlockCounts c = info.counts();
    EXPECT_EQ(c.empty, 6);
    EXPECT_EQ(c.partial, 4);
    EXPECT_EQ(c.full, 6);
  }
}

TEST(MaskInfo, WorkedExampleLocalWindow8) {
  MaskInfo info;
  ASSERT_TRUE(
      attnref::build_mask_info(LocalMask({64, 64}, 8, 8, 0), 16, 16, Profile::kJax, &info).ok());
  // Shrunk forward grid: data_next rows [[0,1],[0,1,2],[1,2,3],[2,3]], all tiles partial.
  const std::vector<std::vector<std::int64_t>> rows = {{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3}};
  const std::vector<std::vector<std::int32_t>> next = {{0, 1}, {2, 0, 1}, {2, 0, 1}, {2, 0}};
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(info.kv_blocks(0, i), rows[static_cast<size_t>(i)]);
    for (size_t n = 0; n < rows[static_cast<size_t>(i)].size(); ++n) {
      const std::int64_t j = rows[static_cast<size_t>(i)][n];
      EXPECT_EQ(info.kind(0, i, j), BlockKind::kPartial);
      EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, i, j))],
                next[static_cast<size_t>(i)][n]);
    }
  }
  ASSERT_EQ(info.num_partial_blocks(), 3);
  std::vector<std::uint8_t> band(16 * 16);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) band[static_cast<size_t>(r * 16 + c)] = (c >= r - 8 && c <= r + 8);
  EXPECT_EQ(pattern(info, 0), band);
  EXPECT_EQ(pattern(info, 1), tri(16, -8));
  EXPECT_EQ(pattern(info, 2), triu(16, 8));
  // Shrunk dkv grid (front-padded in JAX): columns [[0,1],[0,1,2],[1,2,3],[2,3]].
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(info.q_blocks(0, j), rows[static_cast<size_t>(j)]);
}

TEST(MaskInfo, WorkedExampleDynamicCausal8Blocks2x4) {
  bool data[64];
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) data[r * 8 + c] = c <= r;
  MaskInfo info;
  ASSERT_TRUE(attnref::build_mask_info(DenseMask{{data, {8, 8}}}, 2, 4, Profile::kJax, &info).ok());
  EXPECT_EQ(block_mask_of(info, 0),
            (std::vector<std::vector<int>>{{1, 0}, {1, 0}, {2, 1}, {2, 1}}));
  // Forward data_next at non-empty tiles [[0,·],[0,·],[0,1],[0,1]]; dkv [[0,·],[1,·],[2,2],[3,3]].
  EXPECT_EQ(info.kv_blocks(0, 0), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(info.kv_blocks(0, 3), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(info.q_blocks(0, 0), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(info.q_blocks(0, 1), (std::vector<std::int64_t>{2, 3}));
  // JAX's dynamic path stores one pattern per tile (mask_next [[0,0],[2,0],[0,5],[0,7]]); the
  // patterns repeat, and attnref deduplicates them to two.
  ASSERT_EQ(info.num_partial_blocks(), 2);
  EXPECT_EQ(pattern(info, 0), (std::vector<std::uint8_t>{1, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(pattern(info, 1), (std::vector<std::uint8_t>{1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, 0, 0))], 0);
  EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, 1, 0))], 1);
  EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, 2, 1))], 0);
  EXPECT_EQ(info.mask_next[static_cast<size_t>(info.flat(0, 3, 1))], 1);
}

// Rebuilds the dense mask of head h from a MaskInfo.
bool from_info(const MaskInfo& info, std::int64_t h, std::int64_t q, std::int64_t kv) {
  const std::int64_t i = q / info.block_q, j = kv / info.block_kv;
  switch (info.kind(h, i, j)) {
    case BlockKind::kEmpty:
      return false;
    case BlockKind::kFull:
      return true;
    default:
      return info.partial_block(
                 h, i, j)[(q % info.block_q) * info.pattern_cols + kv % info.block_kv] != 0;
  }
}

TEST(MaskInfo, RandomMasksRoundTripIncludingRaggedBlocks) {
  std::mt19937 rng(7);
  struct Case {
    std::int64_t sq, skv, bq, bkv;
  };
  for (const Case& c :
       {Case{10, 13, 4, 5}, Case{7, 7, 8, 8}, Case{16, 9, 4, 3}, Case{33, 17, 16, 16}}) {
    std::vector<char> data(static_cast<size_t>(c.sq * c.skv));
    std::bernoulli_distribution coin(0.6);
    for (auto& x : data) x = coin(rng);
    // Make a few full and empty regions so all three kinds appear.
    for (std::int64_t q = 0; q < c.sq; ++q)
      for (std::int64_t kv = 0; kv < c.skv; ++kv) {
        if (q < c.bq && kv < c.bkv) data[static_cast<size_t>(q * c.skv + kv)] = 1;
        if (q >= c.sq - c.bq / 2 - 1 && kv >= c.skv - c.bkv / 2 - 1)
          data[static_cast<size_t>(q * c.skv + kv)] = 0;
      }
    const DenseMask mask{{reinterpret_cast<const bool*>(data.data()), {c.sq, c.skv}}};
    MaskInfo info;
    ASSERT_TRUE(attnref::build_mask_info(mask, c.bq, c.bkv, Profile::kReference, &info).ok());
    EXPECT_EQ(info.num_q_blocks, (c.sq + c.bq - 1) / c.bq);
    EXPECT_EQ(info.num_kv_blocks, (c.skv + c.bkv - 1) / c.bkv);
    for (std::int64_t q = 0; q < c.sq; ++q)
      for (std::int64_t kv = 0; kv < c.skv; ++kv)
        ASSERT_EQ(from_info(info, 0, q, kv), data[static_cast<size_t>(q * c.skv + kv)] != 0)
            << q << "," << kv;
    if (info.num_q_blocks > 1 && info.num_kv_blocks > 1) {
      EXPECT_EQ(info.kind(0, 0, 0), BlockKind::kFull);
    }
    // Patterns are unique.
    for (std::int64_t a = 0; a < info.num_partial_blocks(); ++a)
      for (std::int64_t b = a + 1; b < info.num_partial_blocks(); ++b)
        EXPECT_NE(pattern(info, a), pattern(info, b));
  }
}

TEST(MaskInfo, RaggedLastTileIsFullWhenItsValidRegionIs) {
  // Sq = Skv = 10, blocks 4: the last block has 2 rows/cols; causal diagonal tiles are partial,
  // tiles below the diagonal full, including ragged ones.
  MaskInfo info;
  ASSERT_TRUE(
      attnref::build_mask_info(CausalMask{{10, 10}}, 4, 4, Profile::kReference, &info).ok());
  EXPECT_EQ(block_mask_of(info, 0),
            (std::vector<std::vector<int>>{{1, 0, 0}, {2, 1, 0}, {2, 2, 1}}));
  EXPECT_EQ(info.q_rows(2), 2);
  EXPECT_EQ(info.kv_cols(2), 2);
  // The full 4x4 diagonal pattern and the ragged 2x2 one (padded with zeros) differ.
  EXPECT_EQ(info.num_partial_blocks(), 2);
}

TEST(MaskInfo, HeadsDeduplicated) {
  CausalMask causal{{32, 32}};
  LocalMask local({32, 32}, 4, 0, 0);
  MaskInfo shared;
  ASSERT_TRUE(attnref::build_mask_info(attnref::MultiHeadMask{causal, causal, causal}, 8, 8,
                                       Profile::kJax, &shared)
                  .ok());
  EXPECT_EQ(shared.num_heads, 1);
  MaskInfo mixed;
  ASSERT_TRUE(attnref::build_mask_info(attnref::MultiHeadMask{causal, local, causal}, 8, 8,
                                       Profile::kJax, &mixed)
                  .ok());
  EXPECT_EQ(mixed.num_heads, 3);
  EXPECT_EQ(block_mask_of(mixed, 0), block_mask_of(mixed, 2));
  EXPECT_EQ(mixed.kind(1, 3, 0), BlockKind::kEmpty);  // local: rows 24..31 see keys >= 20
  EXPECT_EQ(mixed.kind(0, 3, 0), BlockKind::kFull);
  // causal's diagonal pattern is shared by local's diagonal tiles? No: local (4, 0) differs.
  for (std::int64_t h = 0; h < 3; ++h)
    for (std::int64_t q = 0; q < 32; ++q)
      for (std::int64_t kv = 0; kv < 32; ++kv)
        ASSERT_EQ(from_info(mixed, h, q, kv), h == 1 ? local(q, kv) : causal(q, kv));
}

TEST(MaskInfo, WideAndTallCausal) {
  for (auto shape : {attnref::MaskShape{32, 64}, attnref::MaskShape{64, 32}}) {
    CausalMask m{shape};
    MaskInfo info;
    ASSERT_TRUE(attnref::build_mask_info(m, 16, 8, Profile::kJax, &info).ok());
    for (std::int64_t q = 0; q < shape[0]; ++q)
      for (std::int64_t kv = 0; kv < shape[1]; ++kv) ASSERT_EQ(from_info(info, 0, q, kv), m(q, kv));
  }
}

TEST(MaskInfo, M3QBlockMustDivideUnderJax) {
  MaskInfo info;
  const Status s = attnref::build_mask_info(CausalMask{{200, 256}}, 128, 128, Profile::kJax, &info);
  EXPECT_EQ(s.code(), ErrorCode::kBlockNotDivisible);
  EXPECT_EQ(std::string(s.jax_check()), "M3");
  EXPECT_EQ(s.message(), "q_block_size=128 should divide q_seq_len=200.");
  EXPECT_EQ(s.hint(),
            "pick block_q among the divisors of 200: 1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 200 "
            "(the reference profile allows a ragged last block)");
  EXPECT_TRUE(
      attnref::build_mask_info(CausalMask{{200, 256}}, 128, 128, Profile::kReference, &info).ok());
}

TEST(MaskInfo, M4KvBlockMustDivideUnderJax) {
  const Status s = attnref::check_mask_blocks(256, 200, 1, 128, 128, Profile::kJax);
  EXPECT_EQ(s.code(), ErrorCode::kBlockNotDivisible);
  EXPECT_EQ(std::string(s.jax_check()), "M4");
  EXPECT_EQ(s.message(), "kv_block_size=128 should divide kv_seq_len=200.");
}

TEST(MaskInfo, M5M6M7Sharding) {
  Status s = attnref::check_mask_blocks(256, 256, 4, 64, 64, Profile::kJax, {1, 3});
  EXPECT_EQ(s.code(), ErrorCode::kBlockNotDivisible);
  EXPECT_EQ(std::string(s.jax_check()), "M5");
  EXPECT_EQ(s.message(), "q_seq_shards=3 should divide q_seq_len=256.");
  s = attnref::check_mask_blocks(256, 256, 4, 64, 64, Profile::kJax, {1, 8});
  EXPECT_EQ(std::string(s.jax_check()), "M6");
  EXPECT_EQ(s.message(), "q_block_size=64 should divide q_seq_len_per_shard=32.");
  s = attnref::check_mask_blocks(256, 256, 4, 64, 64, Profile::kJax, {3, 1});
  EXPECT_EQ(s.code(), ErrorCode::kBlockNotDivisible);
  EXPECT_EQ(std::string(s.jax_check()), "M7");
  EXPECT_EQ(s.message(), "head_shards=3 should divide head_count=4.");
  EXPECT_TRUE(attnref::check_mask_blocks(256, 256, 4, 64, 64, Profile::kReference, {3, 3}).ok());
  s = attnref::check_mask_blocks(256, 256, 4, 64, 64, Profile::kReference, {0, 1});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidMaskParameter);
  EXPECT_EQ(s.message(), "head_shards=0 and q_seq_shards=1 must be positive.");
}

TEST(MaskInfo, BlockSizesPositive) {
  MaskInfo info;
  Status s = attnref::build_mask_info(CausalMask{{8, 8}}, 0, 4, Profile::kReference, &info);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidBlockSize);
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), "q_block_size=0 must be positive.");
  s = attnref::build_mask_info(CausalMask{{8, 8}}, 4, -2, Profile::kReference, &info);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidBlockSize);
  EXPECT_EQ(s.message(), "kv_block_size=-2 must be positive.");
}

TEST(MaskInfo, MaskErrorsComeFirst) {
  MaskInfo info;
  const Status s =
      attnref::build_mask_info(attnref::ChunkedCausalMask{{8, 8}, 0}, 3, 3, Profile::kJax, &info);
  EXPECT_EQ(std::string(s.jax_check()), "K12");
  EXPECT_THROW(attnref::make_mask_info(attnref::ChunkedCausalMask{{8, 8}, 0}, 4, 4),
               attnref::ShapeError);
}

TEST(MaskInfo, ChunkedBlocksMatchPredicate) {
  for (std::int64_t chunk : {64, 100, 256, 1024}) {
    attnref::ChunkedCausalMask m{{512, 512}, chunk};
    MaskInfo info = attnref::make_mask_info(m, 128, 128, Profile::kReference);
    for (std::int64_t q = 0; q < 512; q += 7)
      for (std::int64_t kv = 0; kv < 512; kv += 3) ASSERT_EQ(from_info(info, 0, q, kv), m(q, kv));
  }
}

TEST(MaskInfo, BlocksLargerThanTheMaskStoreOnlyTheMask) {
  // Regression (fuzz_splash): a 2^40 x 2^40 block over a 10 x 13 mask, valid under the
  // reference profile, sized each stored pattern as bq * bkv bytes (std::length_error / out of
  // memory). Patterns are now min(bq, Sq) x min(bkv, Skv).
  const std::int64_t huge = std::int64_t{1} << 40;
  MaskInfo info;
  ASSERT_TRUE(
      attnref::build_mask_info(CausalMask{{10, 13}}, huge, huge, Profile::kReference, &info).ok());
  EXPECT_EQ(info.block_q, huge);
  EXPECT_EQ(info.num_q_blocks, 1);
  EXPECT_EQ(info.num_kv_blocks, 1);
  EXPECT_EQ(info.pattern_rows, 10);
  EXPECT_EQ(info.pattern_cols, 13);
  ASSERT_EQ(info.num_partial_blocks(), 1);
  EXPECT_EQ(info.partial_blocks.size(), 130u);
  for (std::int64_t q = 0; q < 10; ++q)
    for (std::int64_t kv = 0; kv < 13; ++kv) ASSERT_EQ(from_info(info, 0, q, kv), q >= kv);
  // Blocks up to the sequence keep JAX's [bq, bkv] patterns.
  ASSERT_TRUE(
      attnref::build_mask_info(CausalMask{{10, 10}}, 4, 4, Profile::kReference, &info).ok());
  EXPECT_EQ(info.pattern_rows, 4);
  EXPECT_EQ(info.pattern_cols, 4);
}

// The MaskInfo today's rules give, built the slow, obvious way: every head classified on its own,
// patterns numbered by first appearance (heads in order, tiles row-major), one shared row when
// every head is `same_as` head 0.
MaskInfo naive_mask_info(const std::vector<attnref::AnyMask>& heads, std::int64_t bq,
                         std::int64_t bkv) {
  MaskInfo info;
  const attnref::MaskShape shape = heads[0].shape();
  info.q_seq_len = shape[0];
  info.kv_seq_len = shape[1];
  info.block_q = bq;
  info.block_kv = bkv;
  info.pattern_rows = std::min(bq, shape[0]);
  info.pattern_cols = std::min(bkv, shape[1]);
  info.num_q_blocks = (shape[0] + bq - 1) / bq;
  info.num_kv_blocks = (shape[1] + bkv - 1) / bkv;
  bool shared = true;
  for (const attnref::AnyMask& m : heads) shared = shared && heads[0].same_as(m);
  info.num_heads = shared ? 1 : static_cast<std::int64_t>(heads.size());
  std::map<std::vector<std::uint8_t>, std::int32_t> numbers;
  for (std::int64_t h = 0; h < info.num_heads; ++h) {
    const attnref::AnyMask& m = heads[static_cast<size_t>(h)];
    for (std::int64_t i = 0; i < info.num_q_blocks; ++i)
      for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
        std::vector<std::uint8_t> tile(static_cast<size_t>(info.pattern_rows * info.pattern_cols));
        std::int64_t allowed = 0;
        for (std::int64_t r = 0; r < info.q_rows(i); ++r)
          for (std::int64_t c = 0; c < info.kv_cols(j); ++c) {
            const bool on = m(i * bq + r, j * bkv + c);
            tile[static_cast<size_t>(r * info.pattern_cols + c)] = on ? 1 : 0;
            allowed += on ? 1 : 0;
          }
        std::int32_t next = 0;
        BlockKind kind = BlockKind::kPartial;
        if (allowed == 0) {
          kind = BlockKind::kEmpty;
        } else if (allowed == info.q_rows(i) * info.kv_cols(j)) {
          kind = BlockKind::kFull;
        } else {
          auto found = numbers.find(tile);
          if (found == numbers.end()) {
            found = numbers.emplace(tile, static_cast<std::int32_t>(numbers.size())).first;
            info.partial_blocks.insert(info.partial_blocks.end(), tile.begin(), tile.end());
          }
          next = found->second;
        }
        info.block_mask.push_back(static_cast<std::uint8_t>(kind));
        info.mask_next.push_back(next);
      }
  }
  return info;
}

void expect_same_info(const MaskInfo& a, const MaskInfo& b) {
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.q_seq_len, b.q_seq_len);
  EXPECT_EQ(a.kv_seq_len, b.kv_seq_len);
  EXPECT_EQ(a.block_q, b.block_q);
  EXPECT_EQ(a.block_kv, b.block_kv);
  EXPECT_EQ(a.num_q_blocks, b.num_q_blocks);
  EXPECT_EQ(a.num_kv_blocks, b.num_kv_blocks);
  EXPECT_EQ(a.pattern_rows, b.pattern_rows);
  EXPECT_EQ(a.pattern_cols, b.pattern_cols);
  EXPECT_TRUE(a.block_mask == b.block_mask);
  EXPECT_TRUE(a.mask_next == b.mask_next);
  EXPECT_TRUE(a.partial_blocks == b.partial_blocks);
}

// Head deduplication: heads that are one object, equal built-in masks, equal content
// in different buffers, or distinct, in runs and interleaved, give exactly the MaskInfo of the
// obvious per-head classification.
TEST(MaskInfo, DeduplicatedHeadsMatchPerHeadClassification) {
  std::mt19937 rng(16);
  for (int round = 0; round < 300; ++round) {
    const std::int64_t sq = 1 + static_cast<std::int64_t>(rng() % 12);
    const std::int64_t skv = 1 + static_cast<std::int64_t>(rng() % 12);
    const std::int64_t bq = 1 + static_cast<std::int64_t>(rng() % 5);
    const std::int64_t bkv = 1 + static_cast<std::int64_t>(rng() % 5);
    const auto num_heads = static_cast<size_t>(1 + rng() % (round % 10 == 0 ? 200 : 12));
    std::vector<std::vector<char>> buffers;  // dense masks' data; reserved so it never moves
    buffers.reserve(num_heads + 8);
    auto random_dense = [&] {
      buffers.emplace_back(static_cast<size_t>(sq * skv));
      for (char& x : buffers.back()) x = static_cast<char>(rng() % 3 != 0);
      return DenseMask{{reinterpret_cast<const bool*>(buffers.back().data()), {sq, skv}}};
    };
    std::vector<attnref::AnyMask> pool;
    const auto kinds = 1 + rng() % 5;
    for (size_t k = 0; k < kinds; ++k) {
      switch (rng() % 4) {
        case 0:
          pool.push_back(CausalMask{{sq, skv}, static_cast<std::int64_t>(rng() % 3)});
          break;
        case 1:
          pool.push_back(LocalMask({sq, skv}, static_cast<std::int64_t>(rng() % 4),
                                   static_cast<std::int64_t>(rng() % 4), 0));
          break;
        default:
          pool.push_back(random_dense());
      }
    }
    std::vector<attnref::AnyMask> heads;
    for (size_t h = 0; h < num_heads; ++h) {
      const attnref::AnyMask& m = pool[rng() % pool.size()];
      switch (rng() % 4) {
        case 0:  // the same object as the previous head (runs)
          heads.push_back(h > 0 ? heads.back() : m);
          break;
        case 1: {  // equal content, another buffer: not same_as, same row
          buffers.emplace_back(static_cast<size_t>(sq * skv));
          for (std::int64_t q = 0; q < sq; ++q)
            for (std::int64_t kv = 0; kv < skv; ++kv)
              buffers.back()[static_cast<size_t>(q * skv + kv)] = m(q, kv) ? 1 : 0;
          heads.push_back(
              DenseMask{{reinterpret_cast<const bool*>(buffers.back().data()), {sq, skv}}});
          break;
        }
        default:
          heads.push_back(m);
      }
    }
    MaskInfo info;
    const Status s = attnref::build_mask_info(attnref::MultiHeadMask(heads), bq, bkv,
                                              Profile::kReference, &info);
    ASSERT_TRUE(s.ok()) << s.to_string();
    SCOPED_TRACE("round " + std::to_string(round));
    expect_same_info(info, naive_mask_info(heads, bq, bkv));
    // A single mask (not a MultiHeadMask) too.
    ASSERT_TRUE(attnref::build_mask_info(heads[0], bq, bkv, Profile::kReference, &info).ok());
    expect_same_info(info, naive_mask_info({heads[0]}, bq, bkv));
  }
}

// Regression: 131,072 distinct 1x1 head masks (attnref-run splash --mask) took about
// a minute, each head compared with every other; heads are now classified once each and
// deduplicated by a hash of their rows. No timing assertion: a quadratic build would time out.
TEST(MaskInfo, ManyDistinctHeadMasksBuildInLinearTime) {
  constexpr size_t kHeads = 131072;
  std::vector<char> data(kHeads);
  for (size_t h = 0; h < kHeads; ++h) data[h] = static_cast<char>(h % 3 != 0);
  std::vector<attnref::AnyMask> heads;
  heads.reserve(kHeads);
  for (size_t h = 0; h < kHeads; ++h)
    heads.push_back(DenseMask{{reinterpret_cast<const bool*>(&data[h]), {1, 1}}});
  MaskInfo info;
  ASSERT_TRUE(
      attnref::build_mask_info(attnref::MultiHeadMask(heads), 1, 1, Profile::kJax, &info).ok());
  EXPECT_EQ(info.num_heads, static_cast<std::int64_t>(kHeads));
  ASSERT_EQ(info.block_mask.size(), kHeads);
  for (size_t h = 0; h < kHeads; ++h)
    ASSERT_EQ(info.kind(static_cast<std::int64_t>(h), 0, 0),
              data[h] != 0 ? BlockKind::kFull : BlockKind::kEmpty)
        << h;
  EXPECT_EQ(info.num_partial_blocks(), 0);

  // 4,096 distinct 8x8 heads of random content, blocks 4x4: partial patterns shared across heads.
  constexpr std::int64_t kDenseHeads = 4096;
  std::mt19937 rng(3);
  std::vector<char> bits(static_cast<size_t>(kDenseHeads * 64));
  for (char& b : bits) b = static_cast<char>(rng() % 8 != 0);
  std::vector<attnref::AnyMask> dense;
  for (std::int64_t h = 0; h < kDenseHeads; ++h)
    dense.push_back(
        DenseMask{{reinterpret_cast<const bool*>(&bits[static_cast<size_t>(h * 64)]), {8, 8}}});
  ASSERT_TRUE(
      attnref::build_mask_info(attnref::MultiHeadMask(dense), 4, 4, Profile::kJax, &info).ok());
  expect_same_info(info, naive_mask_info(dense, 4, 4));
}

}  // namespace
