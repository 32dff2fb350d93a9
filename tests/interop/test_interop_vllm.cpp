// vLLM caches and block tables: the logical K/V views each cache form yields (strides computed by
// hand), every invariant the adapter checks (code, JAX id and message), the padding policy, the
// page-stride checks, and a differential test: the same batch described the vLLM way (four cache
// forms, a stride-permuted HND order, -1-padded block tables) and the JAX way gives the same
// kernel output.
#include <gtest/gtest.h>

#include <attnref/interop/vllm.hpp>
#include <attnref/kernels/paged_attention.hpp>
#include <attnref/kernels/ragged_paged_attention.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/paged_batch.hpp"

namespace {

using attnref::ErrorCode;
using attnref::PaddingPolicy;
using attnref::Status;
using attnref::TensorView;
using attnref::VllmKvCache;
using attnref::VllmKvLayout;
using Strides = std::array<std::int64_t, 4>;

void expect_error(const Status& s, ErrorCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), message);
  EXPECT_FALSE(s.hint().empty());
}

// 10 blocks of 4 tokens, 2 KV heads, head_size 4: 320 elements per K (or V) pool.
constexpr std::int64_t kBlocks = 10, kBs = 4, kH = 2, kD = 4, kPool = kBlocks * kBs * kH * kD;

struct Cache {
  std::vector<float> k = std::vector<float>(kPool, 1.0f), v = std::vector<float>(kPool, 2.0f);
  std::vector<float> kv = std::vector<float>(2 * kPool, 3.0f);
  VllmKvCache<float> nhd() const {
    VllmKvCache<float> c;
    c.layout = VllmKvLayout::kNhd;
    c.key_cache = {k.data(), {kBlocks, kBs, kH, kD}, kPool};
    c.value_cache = {v.data(), {kBlocks, kBs, kH, kD}, kPool};
    c.block_size = kBs;
    c.num_kv_heads = kH;
    c.head_size = kD;
    return c;
  }
  VllmKvCache<float> hnd() const {
    VllmKvCache<float> c = nhd();
    c.layout = VllmKvLayout::kHnd;
    c.key_cache = {k.data(), {kBlocks, kH, kBs, kD}, kPool};
    c.value_cache = {v.data(), {kBlocks, kH, kBs, kD}, kPool};
    return c;
  }
  VllmKvCache<float> combined(VllmKvLayout layout) const {
    VllmKvCache<float> c = nhd();
    c.layout = layout;
    c.key_cache = {};
    c.value_cache = {};
    if (layout == VllmKvLayout::kKvFirst)
      c.kv_cache = {kv.data(), {2, kBlocks, kBs, kH, kD}, 2 * kPool};
    else
      c.kv_cache = {kv.data(), {kBlocks, 2, kBs, kH, kD}, 2 * kPool};
    return c;
  }
};

struct Views {
  Status status;
  TensorView<const float, 4> k, v;
};
Views views_of(const VllmKvCache<float>& c) {
  Views out;
  out.status = attnref::vllm_kv_views(c, &out.k, &out.v);
  return out;
}

TEST(VllmCache, NhdViewsAreStridesOnly) {
  Cache cache;
  const Views r = views_of(cache.nhd());
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.extents, (Strides{kH, kBlocks, kBs, kD}));
  EXPECT_EQ(r.k.strides, (Strides{4, 32, 8, 1}));  // [10, 4, 2, 4] row-major = 32, 8, 4, 1
  EXPECT_EQ(r.k.data, cache.k.data());
  EXPECT_EQ(r.v.data, cache.v.data());
  EXPECT_EQ(r.v.strides, (Strides{4, 32, 8, 1}));
}

TEST(VllmCache, HndViews) {
  Cache cache;
  const Views r = views_of(cache.hnd());
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.extents, (Strides{kH, kBlocks, kBs, kD}));
  EXPECT_EQ(r.k.strides, (Strides{16, 32, 4, 1}));  // [10, 2, 4, 4] row-major = 32, 16, 4, 1
}

TEST(VllmCache, KvFirstViews) {
  Cache cache;
  const Views r = views_of(cache.combined(VllmKvLayout::kKvFirst));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.strides, (Strides{4, 32, 8, 1}));  // [2, 10, 4, 2, 4]: 320, 32, 8, 4, 1
  EXPECT_EQ(r.k.data, cache.kv.data());
  EXPECT_EQ(r.v.data, cache.kv.data() + 320);
  EXPECT_EQ(r.v.buffer_size, 320);
}

TEST(VllmCache, BlockFirstViewsHaveTwiceTheDenseBlockStride) {
  Cache cache;
  const Views r = views_of(cache.combined(VllmKvLayout::kBlockFirst));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.strides, (Strides{4, 64, 8, 1}));  // [10, 2, 4, 2, 4]: 64, 32, 8, 4, 1
  EXPECT_EQ(r.v.data, cache.kv.data() + 32);
  EXPECT_EQ(r.v.buffer_size, 640 - 32);
}

// An empty combined cache (no blocks) may carry any K/V stride, 2^62 too: its V view starts
// where K does, not 2^62 elements past the buffer (that address overflowed: UBSan's
// pointer-overflow report), and keeps the cache's buffer size.
TEST(VllmCache, EmptyCombinedCacheWithAHugeKvStride) {
  Cache cache;
  VllmKvCache<float> c = cache.combined(VllmKvLayout::kKvFirst);
  c.num_kv_heads = c.block_size = c.head_size = -1;
  c.kv_cache = TensorView<const float, 5>(
      cache.kv.data(), std::array<std::int64_t, 5>{2, 0, kBs, kH, kD},
      std::array<std::int64_t, 5>{std::int64_t{1} << 62, 32, 8, 4, 1}, 2 * kPool);
  const Views r = views_of(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.extents, (Strides{kH, 0, kBs, kD}));
  EXPECT_EQ(r.v.data, cache.kv.data());
  EXPECT_EQ(r.v.buffer_size, 2 * kPool);
}

TEST(VllmCache, HndStrideOrderKeepsTheLogicalShape) {
  // vLLM's FlashAttention backend with an HND stride order: logical [2, nb, bs, H, D] over
  // physical [2, nb, H, bs, D].
  Cache cache;
  VllmKvCache<float> c = cache.combined(VllmKvLayout::kKvFirst);
  c.kv_cache.strides = {320, 32, 4, 16, 1};
  const Views r = views_of(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.k.strides, (Strides{16, 32, 4, 1}));
}

TEST(VllmCache, DenseBlocksDeclarationHoldsForDenseForms) {
  Cache cache;
  for (VllmKvCache<float> c : {cache.nhd(), cache.hnd(), cache.combined(VllmKvLayout::kKvFirst)}) {
    c.dense_blocks = true;
    EXPECT_TRUE(views_of(c).status.ok()) << attnref::to_string(c.layout);
  }
}

TEST(VllmCache, UndeclaredConfigIsReadFromTheTensor) {
  Cache cache;
  VllmKvCache<float> c = cache.hnd();
  c.block_size = c.num_kv_heads = c.head_size = -1;
  EXPECT_TRUE(views_of(c).status.ok());
}

// --- one failing case per invariant ---

TEST(VllmCache, CombinedTensorGivenForASeparateLayout) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.kv_cache = cache.combined(VllmKvLayout::kKvFirst).kv_cache;
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "kv_cache was given but layouts nhd and hnd take key_cache and value_cache");
}

TEST(VllmCache, SeparateTensorsGivenForACombinedLayout) {
  Cache cache;
  VllmKvCache<float> c = cache.combined(VllmKvLayout::kBlockFirst);
  c.key_cache = cache.nhd().key_cache;
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "key_cache/value_cache were given but layouts kv_first and block_first take one "
               "kv_cache");
}

TEST(VllmCache, KeyAndValueShapesDiffer) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.value_cache = {cache.v.data(), {kBlocks - 1, kBs, kH, kD}};
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "key_cache has shape (10, 4, 2, 4) but value_cache (9, 4, 2, 4)");
}

// ecosystem.md (c) row 4 (vllm #3585, #17023): a cache handed over in another layout.
TEST(VllmCache, HndCacheDeclaredAsNhd) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.key_cache = cache.hnd().key_cache;
  c.value_cache = cache.hnd().value_cache;
  const Status s = views_of(c).status;
  expect_error(s, ErrorCode::kShapeMismatch,
               "key_cache has shape (10, 2, 4, 4) but layout nhd [num_blocks, block_size, "
               "num_kv_heads, head_size] expects (10, 4, 2, 4)");
  EXPECT_EQ(s.hint(),
            "the shape is the hnd layout [num_blocks, num_kv_heads, block_size, head_size]; pass "
            "VllmKvLayout::kHnd");
}

TEST(VllmCache, NhdCacheDeclaredAsHnd) {
  Cache cache;
  VllmKvCache<float> c = cache.hnd();
  c.key_cache = cache.nhd().key_cache;
  c.value_cache = cache.nhd().value_cache;
  const Status s = views_of(c).status;
  expect_error(s, ErrorCode::kShapeMismatch,
               "key_cache has shape (10, 4, 2, 4) but layout hnd [num_blocks, num_kv_heads, "
               "block_size, head_size] expects (10, 2, 4, 4)");
  EXPECT_EQ(s.hint(),
            "the shape is the nhd layout [num_blocks, block_size, num_kv_heads, head_size]; pass "
            "VllmKvLayout::kNhd");
}

TEST(VllmCache, HeadSizeDisagreesWithConfig) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.head_size = 8;
  const Status s = views_of(c).status;
  expect_error(s, ErrorCode::kShapeMismatch,
               "key_cache has shape (10, 4, 2, 4) but layout nhd [num_blocks, block_size, "
               "num_kv_heads, head_size] expects (10, 4, 2, 8)");
  EXPECT_EQ(s.hint(),
            "check block_size, num_kv_heads and head_size against the engine's config, and the "
            "cache's layout");
}

TEST(VllmCache, CombinedDimensionMustBeTwo) {
  std::vector<float> buf(3 * kPool);
  VllmKvCache<float> c;
  c.layout = VllmKvLayout::kKvFirst;
  c.kv_cache = {buf.data(), {3, kBlocks, kBs, kH, kD}};
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "kv_cache dimension 0 has extent 3; layout kv_first [2, num_blocks, block_size, "
               "num_kv_heads, head_size] needs 2 (K, V)");
  c.layout = VllmKvLayout::kBlockFirst;
  c.kv_cache = {buf.data(), {kBlocks, 1, kBs, kH, kD}};
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "kv_cache dimension 1 has extent 1; layout block_first [num_blocks, 2, block_size, "
               "num_kv_heads, head_size] needs 2 (K, V)");
}

TEST(VllmCache, CombinedShapeDisagreesWithConfig) {
  Cache cache;
  VllmKvCache<float> c = cache.combined(VllmKvLayout::kBlockFirst);
  c.block_size = 16;
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "kv_cache has shape (10, 2, 4, 2, 4) but layout block_first [num_blocks, 2, "
               "block_size, num_kv_heads, head_size] expects (10, 2, 16, 2, 4)");
  c = cache.combined(VllmKvLayout::kKvFirst);
  c.num_kv_heads = 4;
  expect_error(views_of(c).status, ErrorCode::kShapeMismatch,
               "kv_cache has shape (2, 10, 4, 2, 4) but layout kv_first [2, num_blocks, "
               "block_size, num_kv_heads, head_size] expects (2, 10, 4, 4, 4)");
}

// ecosystem.md (c) row 4, the stride side: strides that do not fit the buffer the caller gave.
TEST(VllmCache, StridesMustFitTheBuffer) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.key_cache.buffer_size = 300;
  expect_error(views_of(c).status, ErrorCode::kOutOfBuffer,
               "key_cache: extents and strides reach element offset 319, past the buffer of 300 "
               "elements");
}

// ecosystem.md (c) row 7: a block stride that cannot hold a block.
TEST(VllmCache, PageStrideTooSmallToHoldAPage) {
  Cache cache;
  VllmKvCache<float> c = cache.nhd();
  c.key_cache.strides = {4, 8, 4, 1};  // the block stride set to the head stride by mistake
  expect_error(views_of(c).status, ErrorCode::kInvalidPageStride,
               "key_cache: page stride 4 is smaller than one page of one head, which spans 28 "
               "elements (4 tokens at token stride 8)");
}

// ecosystem.md (c) row 7 (ROCm/aiter #3498): K and V adjacent per block make the block stride
// twice block_size x token stride; a caller that declares dense blocks is told so.
TEST(VllmCache, BlockFirstIsNotDense) {
  Cache cache;
  VllmKvCache<float> c = cache.combined(VllmKvLayout::kBlockFirst);
  c.dense_blocks = true;
  expect_error(views_of(c).status, ErrorCode::kInvalidPageStride,
               "kv_cache (K): page stride 64 differs from a dense page's 32 elements (page_size 4 "
               "x num_kv_heads 2 x head_dim 4), and dense pages were declared");
}

TEST(VllmCache, PaddedBlocksAreNotDense) {
  std::vector<float> k(kBlocks * 40), v(kBlocks * 40);  // blocks padded to 40 elements
  VllmKvCache<float> c;
  c.key_cache = {k.data(), {kBlocks, kBs, kH, kD}, {40, 8, 4, 1}, 400};
  c.value_cache = {v.data(), {kBlocks, kBs, kH, kD}, {40, 8, 4, 1}, 400};
  EXPECT_TRUE(views_of(c).status.ok());
  c.dense_blocks = true;
  expect_error(views_of(c).status, ErrorCode::kInvalidPageStride,
               "key_cache: page stride 40 differs from a dense page's 32 elements (page_size 4 x "
               "num_kv_heads 2 x head_dim 4), and dense pages were declared");
}

// --- block tables and the padding policy ---

struct Table {
  // Sequence 0: 5 tokens (2 live blocks), sequence 1: 12 tokens (3), sequence 2: empty.
  std::vector<std::int32_t> table{7, 2, 0, 1, 9, 4, 0, 0, 0};
  std::vector<std::int32_t> seq_lens{5, 12, 0};
  PaddingPolicy padding = PaddingPolicy::kReject;
  attnref::VllmBlockTable<std::int32_t> get(std::int64_t width = 3) const {
    attnref::VllmBlockTable<std::int32_t> t;
    t.block_table = {table.data(), {static_cast<std::int64_t>(seq_lens.size()), width}};
    t.seq_lens = {seq_lens.data(), {static_cast<std::int64_t>(seq_lens.size())}};
    t.padding = padding;
    return t;
  }
  Status check(std::int64_t block_size = kBs) const {
    return attnref::check_vllm_block_table(get(), block_size, kBlocks);
  }
};

TEST(VllmBlockTable, ValidTablePassesBothPolicies) {
  Table t;
  EXPECT_TRUE(t.check().ok());
  t.padding = PaddingPolicy::kSkip;
  EXPECT_TRUE(t.check().ok());
}

TEST(VllmBlockTable, MinusOnePaddingNeedsSkip) {
  Table t;
  t.table = {7, 2, -1, 1, 9, 4, -1, -1, -1};
  const Status s = t.check();
  expect_error(s, ErrorCode::kPageIndexOutOfRange,
               "block_table[0, 2]=-1 is outside [0, 10) (total_pages); PaddingPolicy::kReject "
               "checks every entry");
  EXPECT_EQ(s.hint(),
            "entry 2 lies past the 2 live pages of sequence 0 (length 5); if the engine pads rows "
            "with a sentinel, say so with PaddingPolicy::kSkip");
  t.padding = PaddingPolicy::kSkip;
  EXPECT_TRUE(t.check().ok());
}

TEST(VllmBlockTable, MinusOneInsideTheLiveRegionIsAnErrorEvenWithSkip) {
  Table t;
  t.padding = PaddingPolicy::kSkip;
  t.table = {7, 2, -1, 1, -1, 4, -1, -1, -1};
  expect_error(t.check(), ErrorCode::kPageIndexOutOfRange,
               "block_table[1, 1]=-1 is outside [0, 10) (total_pages)");
}

TEST(VllmBlockTable, LiveBlockIdPastThePool) {
  Table t;
  t.table[3] = 10;
  expect_error(t.check(), ErrorCode::kPageIndexOutOfRange,
               "block_table[1, 0]=10 is outside [0, 10) (total_pages)");
}

// ecosystem.md (c) row 6 (vllm-project/flash-attention #42): a block table narrower than the
// longest sequence makes the kernel read past the end of the row.
TEST(VllmBlockTable, TableTooNarrowForSeqLen) {
  Table t;
  t.seq_lens[1] = 13;
  expect_error(t.check(), ErrorCode::kPageTableTooNarrow,
               "block_table is too narrow: sequence 1 of length 13 needs 4 pages of 4 tokens but "
               "a row has 3 entries");
}

TEST(VllmBlockTable, NegativeSeqLen) {
  Table t;
  t.seq_lens[2] = -1;
  expect_error(t.check(), ErrorCode::kLengthOutOfRange, "seq_lens[2]=-1 is negative");
}

TEST(VllmBlockTable, SeqLensCountMustMatchRows) {
  Table t;
  auto table = t.get();
  table.seq_lens.extents[0] = 2;
  expect_error(attnref::check_vllm_block_table(table, kBs, kBlocks), ErrorCode::kBatchMismatch,
               "seq_lens has 2 entries but the page table has 3 rows");
}

TEST(VllmBlockTable, BlockSizeMustBePositive) {
  Table t;
  expect_error(t.check(0), ErrorCode::kInvalidPageSize, "page_size must be positive. Got 0.");
}

TEST(VllmBlockTable, TableViewIsChecked) {
  Table t;
  auto table = t.get();
  table.block_table.buffer_size = 8;
  expect_error(attnref::check_vllm_block_table(table, kBs, kBlocks), ErrorCode::kOutOfBuffer,
               "block_table: extents and strides reach element offset 8, past the buffer of 8 "
               "elements");
}

TEST(VllmBlockTable, PagedArgsLeaveArgsUntouchedOnError) {
  Cache cache;
  Table t;
  t.table[0] = -1;
  std::vector<float> q(3 * 4 * kD);
  attnref::PagedAttentionArgs<float> args;
  expect_error(attnref::vllm_paged_args(cache.nhd(), t.get(),
                                        TensorView<const float, 3>(q.data(), {3, 4, kD}), &args),
               ErrorCode::kPageIndexOutOfRange,
               "block_table[0, 0]=-1 is outside [0, 10) (total_pages)");
  EXPECT_EQ(args.q.data, nullptr);
  EXPECT_EQ(args.k_pages.data, nullptr);
}

// --- differential: vLLM description vs JAX description of one batch ---

enum class Form { kNhd, kHnd, kKvFirst, kKvFirstHndOrder, kBlockFirst };

/// Offset of (kv, block p, slot s, head h, dim d) in each physical form, by hand.
std::int64_t form_offset(Form f, const paged_test::LogicalBatch& lb, int kv, std::int64_t p,
                         std::int64_t s, std::int64_t h, std::int64_t d) {
  const std::int64_t P = lb.total_pages, S = lb.shape.page_size, H = lb.shape.hkv, D = lb.shape.dim,
                     pool = P * S * H * D;
  switch (f) {
    case Form::kNhd:
      return ((p * S + s) * H + h) * D + d;
    case Form::kHnd:
      return ((p * H + h) * S + s) * D + d;
    case Form::kKvFirst:
      return kv * pool + ((p * S + s) * H + h) * D + d;
    case Form::kKvFirstHndOrder:
      return kv * pool + ((p * H + h) * S + s) * D + d;
    case Form::kBlockFirst:
      return (((p * 2 + kv) * S + s) * H + h) * D + d;
  }
  return -1;
}

std::vector<float> run_jax(const paged_test::LogicalBatch& lb, const std::vector<float>& q) {
  const auto& sh = lb.shape;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto to_f = [](double x) { return static_cast<float>(x); };
  const std::vector<float> k =
      paged_test::to_physical(lb, lb.k, attnref::KvLayout::kJax, nan, to_f);
  const std::vector<float> v =
      paged_test::to_physical(lb, lb.v, attnref::KvLayout::kJax, nan, to_f);
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
  args.k_pages = {k.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
  args.v_pages = {v.data(), {sh.hkv, lb.total_pages, sh.page_size, sh.dim}};
  args.lengths = {lengths.data(), {sh.batch}};
  args.page_indices = {table.data(), {sh.batch, sh.pages_per_seq}};
  std::vector<float> out(q.size(), nan);
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  return out;
}

/// The paged kernel's output on the vLLM description; with `ragged`, also the ragged kernel's on
/// the same cache and block table as a decode-only ragged step (`vllm_ragged_args`), in
/// `paged_test::decode_as_ragged`'s row order.
std::vector<float> run_vllm(const paged_test::LogicalBatch& lb, const std::vector<float>& q,
                            Form form, std::vector<float>* ragged = nullptr) {
  const auto& sh = lb.shape;
  const std::int64_t P = lb.total_pages, S = sh.page_size, H = sh.hkv, D = sh.dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t pool = P * S * H * D;
  const bool separate = form == Form::kNhd || form == Form::kHnd;
  // Separate forms: K in [0, pool), V in [pool, 2 pool) of one allocation (two tensors).
  std::vector<float> buf(static_cast<std::size_t>(2 * pool), nan);
  const std::vector<char> live = paged_test::live_slots(lb);
  for (int kv = 0; kv < 2; ++kv)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t p = 0; p < P; ++p)
        for (std::int64_t s = 0; s < S; ++s) {
          if (!live[static_cast<std::size_t>(p * S + s)]) continue;
          for (std::int64_t d = 0; d < D; ++d) {
            const auto at = static_cast<std::size_t>((separate ? kv * pool : 0) +
                                                     form_offset(form, lb, kv, p, s, h, d));
            buf[at] = static_cast<float>(kv == 0 ? lb.k_at(h, p, s, d) : lb.v_at(h, p, s, d));
          }
        }
  VllmKvCache<float> c;
  c.block_size = S;
  c.num_kv_heads = H;
  c.head_size = D;
  switch (form) {
    case Form::kNhd:
    case Form::kHnd: {
      c.layout = form == Form::kNhd ? VllmKvLayout::kNhd : VllmKvLayout::kHnd;
      const std::array<std::int64_t, 4> e = form == Form::kNhd
                                                ? std::array<std::int64_t, 4>{P, S, H, D}
                                                : std::array<std::int64_t, 4>{P, H, S, D};
      c.key_cache = {buf.data(), e, pool};
      c.value_cache = {buf.data() + pool, e, pool};
      c.dense_blocks = true;
      break;
    }
    case Form::kKvFirst:
      c.layout = VllmKvLayout::kKvFirst;
      c.kv_cache = {buf.data(), {2, P, S, H, D}, 2 * pool};
      c.dense_blocks = true;
      break;
    case Form::kKvFirstHndOrder:
      c.layout = VllmKvLayout::kKvFirst;
      c.kv_cache = {buf.data(), {2, P, S, H, D}, {pool, H * S * D, D, S * D, 1}, 2 * pool};
      break;
    case Form::kBlockFirst:
      c.layout = VllmKvLayout::kBlockFirst;
      c.kv_cache = {buf.data(), {P, 2, S, H, D}, 2 * pool};
      break;
  }
  std::vector<std::int32_t> lengths(lb.lengths.begin(), lb.lengths.end());
  std::vector<std::int32_t> table(lb.table.begin(), lb.table.end());  // -1 past each length
  attnref::VllmBlockTable<std::int32_t> bt;
  bt.block_table = {table.data(), {sh.batch, sh.pages_per_seq}};
  bt.seq_lens = {lengths.data(), {sh.batch}};
  bt.padding = PaddingPolicy::kSkip;
  attnref::PagedAttentionArgs<float> args;
  const Status s = attnref::vllm_paged_args(
      c, bt, TensorView<const float, 3>(q.data(), {sh.batch, sh.hq, sh.dim}), &args);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<float> out(q.size(), nan);
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  if (ragged != nullptr) {
    const paged_test::DecodeAsRagged step = paged_test::decode_as_ragged(lb, q);
    attnref::VllmRaggedMetadata<std::int32_t> m;
    m.block_table = bt.block_table;
    m.seq_lens = bt.seq_lens;
    m.query_start_loc = {step.cu_q_lens.data(), {sh.batch + 1}};
    m.num_seqs = sh.batch;
    attnref::RaggedPagedAttentionArgs<float> r;
    const Status sr = attnref::vllm_ragged_args(
        c, m, TensorView<const float, 3>(step.q.data(), {sh.batch, sh.hq, sh.dim}), &r);
    EXPECT_TRUE(sr.ok()) << sr.to_string();
    ragged->assign(q.size(), nan);
    const Status run = attnref::try_ragged_paged_attention(
        r, TensorView<float, 3>(ragged->data(), {sh.batch, sh.hq, sh.dim}));
    EXPECT_TRUE(run.ok()) << run.to_string();
  }
  return out;
}

TEST(VllmBlockTable, SameOutputAsTheJaxLayout) {
  std::mt19937 rng(42);
  const paged_test::Shape shapes[] = {
      {6, 8, 2, 16, 4, 3, 5},   // G=4, lengths 0, 1, 3, 4, 5, 12
      {6, 6, 3, 8, 16, 2, 3},   // G=2
      {7, 14, 2, 32, 8, 4, 0},  // G=7, no spare blocks
      {3, 5, 1, 4, 1, 5, 2},    // block_size 1
  };
  for (const auto& shape : shapes) {
    const paged_test::LogicalBatch lb = paged_test::make_batch(shape, rng);
    std::vector<float> q(lb.q.begin(), lb.q.end());
    const std::vector<float> want = run_jax(lb, q);
    const std::vector<double> exact = attnref::reference::paged_attention(lb.args());
    for (Form form :
         {Form::kNhd, Form::kHnd, Form::kKvFirst, Form::kKvFirstHndOrder, Form::kBlockFirst}) {
      std::vector<float> ragged;
      const std::vector<float> got = run_vllm(lb, q, form, &ragged);
      // The same cache as a ragged (chunked-prefill) step of decode rows: paged's numbers.
      EXPECT_LE(paged_test::worst_ragged_vs_paged(lb, paged_test::decode_as_ragged(lb, q), ragged,
                                                  got, 2e-6),
                1.0)
          << "ragged, form " << static_cast<int>(form) << " B=" << shape.batch;
      double max_diff = 0;
      for (size_t i = 0; i < want.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
      EXPECT_LE(max_diff, 1e-6) << "form " << static_cast<int>(form) << " B=" << shape.batch;
      EXPECT_LE(paged_test::worst_ratio(got, exact, 1e-5, 1e-5,
                                        [](float x) { return static_cast<double>(x); }),
                1.0);
    }
  }
}

}  // namespace
