// FlashInfer CSR page tables: every invariant the adapter checks (one failing case each, code,
// JAX id and message), the conversion into caller-provided and adapter-owned storage, and a
// differential test: the same batch described the FlashInfer way (NHD and HND caches, CSR table)
// and the JAX way gives the same kernel output.
#include <gtest/gtest.h>

#include <attnref/interop/flashinfer.hpp>
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
using attnref::FlashInferPageTable;
using attnref::Status;
using attnref::TensorView;

void expect_error(const Status& s, ErrorCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(std::string(s.jax_check()), "");
  EXPECT_EQ(s.message(), message);
  EXPECT_FALSE(s.hint().empty());
}

/// page_size 4, 10 pages, 3 sequences: pages {3, 7} + 2 tokens (length 6); no pages (length 0);
/// pages {0, 9, 5}, last page full (length 12).
struct Csr {
  std::int64_t page_size = 4, total_pages = 10;
  std::vector<std::int32_t> indptr{0, 2, 2, 5};
  std::vector<std::int32_t> indices{3, 7, 0, 9, 5};
  std::vector<std::int32_t> last{2, 0, 4};
  std::vector<std::int32_t> seq_lens{6, 0, 12};
  bool with_seq_lens = false;

  FlashInferPageTable<std::int32_t> table() const {
    FlashInferPageTable<std::int32_t> t;
    t.kv_indptr = {indptr.data(), {static_cast<std::int64_t>(indptr.size())}};
    t.kv_indices = {indices.data(), {static_cast<std::int64_t>(indices.size())}};
    t.kv_last_page_len = {last.data(), {static_cast<std::int64_t>(last.size())}};
    if (with_seq_lens) t.seq_lens = {seq_lens.data(), {static_cast<std::int64_t>(seq_lens.size())}};
    return t;
  }
  Status check() const {
    return attnref::check_flashinfer_page_table(table(), page_size, total_pages);
  }
};

TEST(FlashInferCsr, ValidTableConvertsIntoOwnedStorage) {
  Csr csr;
  std::int64_t widest = -1;
  ASSERT_TRUE(attnref::check_flashinfer_page_table(csr.table(), 4, 10, &widest).ok());
  EXPECT_EQ(widest, 3);
  attnref::DensePageTable<std::int32_t> dense;
  ASSERT_TRUE(attnref::flashinfer_to_dense(csr.table(), 4, 10, &dense).ok());
  EXPECT_EQ(dense.batch, 3);
  EXPECT_EQ(dense.pages_per_sequence, 3);
  EXPECT_EQ(dense.lengths_storage, (std::vector<std::int32_t>{6, 0, 12}));
  EXPECT_EQ(dense.page_indices_storage, (std::vector<std::int32_t>{3, 7, 0, 0, 0, 0, 0, 9, 5}));
  const auto lengths = dense.lengths();
  const auto table = dense.page_indices();
  EXPECT_EQ(lengths.extents[0], 3);
  EXPECT_EQ(table.extents[1], 3);
  EXPECT_EQ(table(2, 1), 9);
  EXPECT_TRUE(attnref::check_view(table, "t").ok());
}

TEST(FlashInferCsr, OwnedStorageHonoursWidthAndPadValue) {
  Csr csr;
  attnref::DensePageTable<std::int32_t> dense;
  attnref::DenseTableOptions options;
  options.pages_per_sequence = 4;
  options.pad_value = -1;
  ASSERT_TRUE(attnref::flashinfer_to_dense(csr.table(), 4, 10, &dense, options).ok());
  EXPECT_EQ(dense.page_indices_storage,
            (std::vector<std::int32_t>{3, 7, -1, -1, -1, -1, -1, -1, 0, 9, 5, -1}));
  // The -1 padding is past every length: fine under kSkip, an error under kReject.
  EXPECT_TRUE(attnref::check_dense_page_table(dense.page_indices(), dense.lengths(), 4, 10,
                                              attnref::PaddingPolicy::kSkip)
                  .ok());
  EXPECT_EQ(attnref::check_dense_page_table(dense.page_indices(), dense.lengths(), 4, 10,
                                            attnref::PaddingPolicy::kReject)
                .code(),
            ErrorCode::kPageIndexOutOfRange);
}

TEST(FlashInferCsr, ConvertsIntoCallerStorage) {
  Csr csr;
  std::vector<std::int32_t> lengths(3, 99), table(3 * 4, 99);
  ASSERT_TRUE(attnref::flashinfer_to_dense<std::int32_t>(csr.table(), 4, 10, {lengths.data(), {3}},
                                                         {table.data(), {3, 4}}, 8)
                  .ok());
  EXPECT_EQ(lengths, (std::vector<std::int32_t>{6, 0, 12}));
  EXPECT_EQ(table, (std::vector<std::int32_t>{3, 7, 8, 8, 8, 8, 8, 8, 0, 9, 5, 8}));
}

TEST(FlashInferCsr, EmptySequenceMayCarryAnyFillUpToPageSize) {
  // vLLM's FlashInfer backend writes last_page_len = page_size for a sequence with no pages.
  Csr csr;
  csr.last[1] = 4;
  EXPECT_TRUE(csr.check().ok());
  attnref::DensePageTable<std::int32_t> dense;
  ASSERT_TRUE(attnref::flashinfer_to_dense(csr.table(), 4, 10, &dense).ok());
  EXPECT_EQ(dense.lengths_storage[1], 0);
}

TEST(FlashInferCsr, SeqLensThatAgreePass) {
  Csr csr;
  csr.with_seq_lens = true;
  EXPECT_TRUE(csr.check().ok());
}

// --- one failing case per invariant ---

TEST(FlashInferCsr, IndptrSizeMustBeBatchPlusOne) {
  Csr csr;
  csr.indptr = {0, 2, 5};
  expect_error(csr.check(), ErrorCode::kBatchMismatch,
               "kv_indptr has 3 entries; expected batch + 1 = 4 (kv_last_page_len has 3)");
}

// A stride-0 kv_last_page_len view may claim INT64_MAX sequences (a valid view: every entry is
// the same element); batch + 1 then does not fit int64 (UBSan reported the overflow).
TEST(FlashInferCsr, BatchOfInt64MaxHasNoIndptrSize) {
  Csr csr;
  auto t = csr.table();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::array<std::int64_t, 1> huge{kMax}, repeat{0};
  t.kv_last_page_len = TensorView<const std::int32_t, 1>(csr.last.data(), huge, repeat);
  t.kv_indptr = TensorView<const std::int32_t, 1>(csr.indptr.data(), huge, repeat);
  expect_error(attnref::check_flashinfer_page_table(t, 4, 10), ErrorCode::kBatchMismatch,
               "kv_last_page_len has 9223372036854775807 entries, so kv_indptr would need one "
               "more than int64 holds");
}

TEST(FlashInferCsr, SeqLensSizeMustBeBatch) {
  Csr csr;
  csr.with_seq_lens = true;
  csr.seq_lens = {6, 0};
  expect_error(csr.check(), ErrorCode::kBatchMismatch,
               "seq_lens has 2 entries but kv_last_page_len has 3");
}

TEST(FlashInferCsr, PageSizeMustBePositive) {
  Csr csr;
  csr.page_size = 0;
  expect_error(csr.check(), ErrorCode::kInvalidPageSize, "page_size must be positive. Got 0.");
}

TEST(FlashInferCsr, TotalPagesMustNotBeNegative) {
  Csr csr;
  csr.total_pages = -1;
  expect_error(csr.check(), ErrorCode::kNegativeExtent, "total_pages must be >= 0. Got -1.");
}

TEST(FlashInferCsr, IndptrStartsAtZero) {
  Csr csr;
  csr.indptr = {1, 2, 2, 5};
  expect_error(csr.check(), ErrorCode::kInvalidIndptr,
               "kv_indptr[0]=1; a CSR row pointer starts at 0");
}

TEST(FlashInferCsr, IndptrIsNonDecreasing) {
  Csr csr;
  csr.indptr = {0, 2, 1, 5};
  expect_error(csr.check(), ErrorCode::kInvalidIndptr,
               "kv_indptr decreases at sequence 1: kv_indptr[1]=2 > kv_indptr[2]=1");
}

TEST(FlashInferCsr, IndptrEndsAtNnz) {
  Csr csr;
  csr.indptr = {0, 2, 2, 4};
  expect_error(csr.check(), ErrorCode::kInvalidIndptr,
               "kv_indptr[3]=4 but kv_indices has 5 entries; the last row pointer is the number "
               "of pages");
}

TEST(FlashInferCsr, IndicesWithinThePool) {
  Csr csr;
  csr.indices[3] = 10;
  expect_error(csr.check(), ErrorCode::kPageIndexOutOfRange,
               "kv_indices[3]=10 is outside [0, 10) (total_pages)");
  const Status s = csr.check();
  EXPECT_EQ(s.hint(),
            "entry 3 is page 1 of sequence 2; every CSR entry is live, so a padding value such "
            "as -1 has no place in kv_indices");
}

TEST(FlashInferCsr, PaddingSentinelIsAlwaysRejectedInCsr) {
  Csr csr;
  csr.indices[1] = -1;
  expect_error(csr.check(), ErrorCode::kPageIndexOutOfRange,
               "kv_indices[1]=-1 is outside [0, 10) (total_pages)");
}

// ecosystem.md (c) row 2, flashinfer #320: last_page_len > page_size was silently accepted.
TEST(FlashInferCsr, LastPageLenAbovePageSize) {
  Csr csr;
  csr.last[0] = 5;
  expect_error(csr.check(), ErrorCode::kInvalidLastPageLen,
               "kv_last_page_len[0]=5 is outside [1, 4] (page_size) for a sequence with 2 pages");
}

TEST(FlashInferCsr, LastPageLenZeroForASequenceWithPages) {
  Csr csr;
  csr.last[2] = 0;
  expect_error(csr.check(), ErrorCode::kInvalidLastPageLen,
               "kv_last_page_len[2]=0 is outside [1, 4] (page_size) for a sequence with 3 pages");
}

TEST(FlashInferCsr, LastPageLenOfAnEmptySequenceStaysAPageFill) {
  Csr csr;
  csr.last[1] = 5;
  expect_error(csr.check(), ErrorCode::kInvalidLastPageLen,
               "kv_last_page_len[1]=5 is outside [0, 4] (page_size) for a sequence with no pages");
  csr.last[1] = -1;
  expect_error(csr.check(), ErrorCode::kInvalidLastPageLen,
               "kv_last_page_len[1]=-1 is outside [0, 4] (page_size) for a sequence with no "
               "pages");
}

TEST(FlashInferCsr, LengthMustFitTheIndexType) {
  Csr csr;
  csr.page_size = std::int64_t{1} << 30;  // sequence 2: 2 * 2^30 + 4 > INT32_MAX
  expect_error(csr.check(), ErrorCode::kSizeOverflow,
               "sequence 2: (3 pages - 1) x page_size 1073741824 + kv_last_page_len 4 overflows "
               "the index type (max 2147483647)");
}

TEST(FlashInferCsr, SeqLensMustNotBeNegative) {
  Csr csr;
  csr.with_seq_lens = true;
  csr.seq_lens = {6, -1, 12};
  expect_error(csr.check(), ErrorCode::kLengthOutOfRange, "seq_lens[1]=-1 is negative");
}

// ecosystem.md (c) row 3, pegainfer #291: an eagerly allocated page at a 16-token boundary made
// FlashInfer attend over seq_len + page_size tokens.
TEST(FlashInferCsr, ExtraEagerPageAgainstSeqLens) {
  Csr csr;
  csr.with_seq_lens = true;
  csr.seq_lens = {6, 0, 8};  // sequence 2 is 8 tokens: 2 pages, but the CSR gives it 3
  expect_error(csr.check(), ErrorCode::kPageCountMismatch,
               "sequence 2 holds 3 pages in kv_indptr but seq_lens[2]=8 needs ceil(8 / 4) = 2");
  // Without seq_lens the same table is self-consistent (length 12): only the cross-check sees it.
  csr.with_seq_lens = false;
  EXPECT_TRUE(csr.check().ok());
}

TEST(FlashInferCsr, MissingPageAgainstSeqLens) {
  Csr csr;
  csr.with_seq_lens = true;
  csr.seq_lens = {9, 0, 12};
  expect_error(csr.check(), ErrorCode::kPageCountMismatch,
               "sequence 0 holds 2 pages in kv_indptr but seq_lens[0]=9 needs ceil(9 / 4) = 3");
}

TEST(FlashInferCsr, LastPageLenDisagreesWithSeqLens) {
  Csr csr;
  csr.with_seq_lens = true;
  csr.seq_lens = {5, 0, 12};
  const Status s = csr.check();
  expect_error(s, ErrorCode::kInvalidLastPageLen,
               "kv_last_page_len[0]=2 gives length 6 but seq_lens[0]=5 (page_size 4)");
  EXPECT_EQ(s.hint(), "kv_last_page_len[b] = seq_lens[b] - (pages - 1) * page_size = 1");
}

TEST(FlashInferCsr, ViewsAreChecked) {
  Csr csr;
  auto t = csr.table();
  t.kv_indices.buffer_size = 4;  // 5 entries claimed over a 4-element buffer
  expect_error(attnref::check_flashinfer_page_table(t, 4, 10), ErrorCode::kOutOfBuffer,
               "kv_indices: extents and strides reach element offset 4, past the buffer of 4 "
               "elements");
}

// ecosystem.md (c) row 6: a page table narrower than the longest sequence.
TEST(FlashInferCsr, CallerTableTooNarrowAndNothingWritten) {
  Csr csr;
  std::vector<std::int32_t> lengths(3, 99), table(3 * 2, 99);
  expect_error(attnref::flashinfer_to_dense<std::int32_t>(csr.table(), 4, 10, {lengths.data(), {3}},
                                                          {table.data(), {3, 2}}),
               ErrorCode::kPageTableTooNarrow,
               "page_indices is too narrow: sequence 2 holds 3 pages but a row has 2 entries");
  EXPECT_EQ(lengths, std::vector<std::int32_t>(3, 99));
  EXPECT_EQ(table, std::vector<std::int32_t>(6, 99));
}

TEST(FlashInferCsr, OwnedTableTooNarrow) {
  Csr csr;
  attnref::DensePageTable<std::int32_t> dense;
  attnref::DenseTableOptions options;
  options.pages_per_sequence = 2;
  expect_error(attnref::flashinfer_to_dense(csr.table(), 4, 10, &dense, options),
               ErrorCode::kPageTableTooNarrow,
               "page_indices is too narrow: sequence 2 holds 3 pages but a row has 2 entries");
  EXPECT_EQ(dense.batch, 0);
}

TEST(FlashInferCsr, CallerOutputsMustHaveOneRowPerSequence) {
  Csr csr;
  std::vector<std::int32_t> lengths(2), table(2 * 3);
  expect_error(attnref::flashinfer_to_dense<std::int32_t>(csr.table(), 4, 10, {lengths.data(), {2}},
                                                          {table.data(), {2, 3}}),
               ErrorCode::kBatchMismatch,
               "output lengths has 2 entries and page_indices 2 rows; the CSR table has 3 "
               "sequences");
}

// Caller storage is an output: two entries at one address, or lengths inside the table, would
// make one write overwrite another. Nothing is written.
TEST(FlashInferCsr, CallerOutputsMustNotOverlap) {
  Csr csr;
  std::vector<std::int32_t> lengths(3, 99), table(3 * 3, 99);
  // Row b starts at entry b: rows overlap.
  const TensorView<std::int32_t, 2> rows_alias(table.data(), std::array<std::int64_t, 2>{3, 3},
                                               std::array<std::int64_t, 2>{1, 1});
  expect_error(attnref::flashinfer_to_dense<std::int32_t>(csr.table(), 4, 10, {lengths.data(), {3}},
                                                          rows_alias),
               ErrorCode::kOverlappingOutput,
               "page_indices: dimension 1 (stride 1) overlaps the elements of faster "
               "dimensions, which span 3 elements");
  expect_error(attnref::flashinfer_to_dense<std::int32_t>(csr.table(), 4, 10, {table.data(), {3}},
                                                          {table.data(), {3, 3}}),
               ErrorCode::kOverlappingOutput, "page_indices and lengths share memory");
  EXPECT_EQ(lengths, std::vector<std::int32_t>(3, 99));
  EXPECT_EQ(table, std::vector<std::int32_t>(9, 99));
}

// --- differential: FlashInfer description vs JAX description of one batch ---

/// The CSR table of a logical batch, built by hand from its lengths and dense table.
struct CsrOf {
  std::vector<std::int32_t> indptr{0}, indices, last;
  explicit CsrOf(const paged_test::LogicalBatch& lb) {
    const std::int64_t s = lb.shape.page_size;
    for (std::int64_t b = 0; b < lb.shape.batch; ++b) {
      const std::int64_t len = lb.lengths[static_cast<std::size_t>(b)];
      const std::int64_t pages = (len + s - 1) / s;
      for (std::int64_t j = 0; j < pages; ++j)
        indices.push_back(static_cast<std::int32_t>(
            lb.table[static_cast<std::size_t>(b * lb.shape.pages_per_seq + j)]));
      indptr.push_back(static_cast<std::int32_t>(indices.size()));
      last.push_back(static_cast<std::int32_t>(pages == 0 ? 0 : len - (pages - 1) * s));
    }
  }
  FlashInferPageTable<std::int32_t> table() const {
    FlashInferPageTable<std::int32_t> t;
    t.kv_indptr = {indptr.data(), {static_cast<std::int64_t>(indptr.size())}};
    t.kv_indices = {indices.data(), {static_cast<std::int64_t>(indices.size())}};
    t.kv_last_page_len = {last.data(), {static_cast<std::int64_t>(last.size())}};
    return t;
  }
};

/// Runs the kernel on the JAX description (head-major pages, the batch's own -1-padded table).
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

/// Runs the kernel on the FlashInfer description: an NHD or HND cache and a CSR table.
/// With `ragged`, also the ragged kernel's output on the same cache and CSR table as a
/// decode-only ragged step (`flashinfer_ragged_args`), in `paged_test::decode_as_ragged`'s row
/// order.
std::vector<float> run_flashinfer(const paged_test::LogicalBatch& lb, const std::vector<float>& q,
                                  attnref::KvLayout layout, std::vector<float>* ragged = nullptr) {
  const auto& sh = lb.shape;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto to_f = [](double x) { return static_cast<float>(x); };
  const std::vector<float> k = paged_test::to_physical(lb, lb.k, layout, nan, to_f);
  const std::vector<float> v = paged_test::to_physical(lb, lb.v, layout, nan, to_f);
  const CsrOf csr(lb);
  const auto kv = [&](const std::vector<float>& buf) {
    return attnref::kv_pages_view(buf.data(), layout, sh.hkv, lb.total_pages, sh.page_size, sh.dim,
                                  static_cast<std::int64_t>(buf.size()));
  };
  attnref::DensePageTable<std::int32_t> dense;
  attnref::PagedAttentionArgs<float> args;
  const Status s = attnref::flashinfer_paged_args(
      csr.table(), TensorView<const float, 3>(q.data(), {sh.batch, sh.hq, sh.dim}), kv(k), kv(v),
      &dense, &args);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<float> out(q.size(), nan);
  attnref::paged_attention(args, TensorView<float, 3>(out.data(), {sh.batch, sh.hq, sh.dim}));
  if (ragged != nullptr) {
    const paged_test::DecodeAsRagged step = paged_test::decode_as_ragged(lb, q);
    attnref::DensePageTable<std::int32_t> dense_r;
    attnref::RaggedPagedAttentionArgs<float> r;
    const Status sr = attnref::flashinfer_ragged_args(
        csr.table(), TensorView<const std::int32_t, 1>(step.cu_q_lens.data(), {sh.batch + 1}),
        TensorView<const float, 3>(step.q.data(), {sh.batch, sh.hq, sh.dim}), kv(k), kv(v),
        &dense_r, &r);
    EXPECT_TRUE(sr.ok()) << sr.to_string();
    ragged->assign(q.size(), nan);
    const Status run = attnref::try_ragged_paged_attention(
        r, TensorView<float, 3>(ragged->data(), {sh.batch, sh.hq, sh.dim}));
    EXPECT_TRUE(run.ok()) << run.to_string();
  }
  return out;
}

TEST(FlashInferCsr, SameOutputAsTheJaxLayout) {
  std::mt19937 rng(8);
  const paged_test::Shape shapes[] = {
      {6, 8, 2, 16, 4, 3, 5},   // G=4, lengths 0, 1, 3, 4, 5, 12
      {6, 7, 7, 8, 16, 2, 3},   // G=1 (MHA)
      {7, 12, 2, 32, 8, 4, 0},  // G=6, no spare pages
      {3, 5, 1, 4, 1, 5, 2},    // page_size 1
  };
  for (const auto& shape : shapes) {
    const paged_test::LogicalBatch lb = paged_test::make_batch(shape, rng);
    std::vector<float> q(lb.q.begin(), lb.q.end());
    const std::vector<float> want = run_jax(lb, q);
    const std::vector<double> exact = attnref::reference::paged_attention(lb.args());
    for (attnref::KvLayout layout : {attnref::KvLayout::kNhd, attnref::KvLayout::kHnd}) {
      std::vector<float> ragged;
      const std::vector<float> got = run_flashinfer(lb, q, layout, &ragged);
      // The same cache as a ragged (chunked-prefill) step of decode rows: paged's numbers.
      EXPECT_LE(paged_test::worst_ragged_vs_paged(lb, paged_test::decode_as_ragged(lb, q), ragged,
                                                  got, 2e-6),
                1.0)
          << "ragged, layout " << attnref::to_string(layout) << " B=" << shape.batch;
      double max_diff = 0;
      for (size_t i = 0; i < want.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
      EXPECT_LE(max_diff, 1e-6) << "layout " << attnref::to_string(layout) << " B=" << shape.batch;
      EXPECT_LE(paged_test::worst_ratio(got, exact, 1e-5, 1e-5,
                                        [](float x) { return static_cast<double>(x); }),
                1.0);
    }
  }
}

TEST(FlashInferCsr, PagedArgsTakePageSizeAndPoolFromTheCache) {
  // The CSR table above against a pool of only 8 pages: page 9 is out of range.
  Csr csr;
  std::vector<float> q(3 * 2 * 4, 1.0f), k(8 * 4 * 1 * 4, 1.0f);
  const auto pages =
      attnref::kv_pages_view<const float>(k.data(), attnref::KvLayout::kNhd, 1, 8, 4, 4);
  attnref::DensePageTable<std::int32_t> dense;
  attnref::PagedAttentionArgs<float> args;
  expect_error(
      attnref::flashinfer_paged_args(csr.table(), TensorView<const float, 3>(q.data(), {3, 2, 4}),
                                     pages, pages, &dense, &args),
      ErrorCode::kPageIndexOutOfRange, "kv_indices[3]=9 is outside [0, 8) (total_pages)");
  EXPECT_EQ(args.q.data, nullptr);  // untouched on error
}

}  // namespace
