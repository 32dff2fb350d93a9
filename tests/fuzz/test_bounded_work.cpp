// SPDX-License-Identifier: Apache-2.0
// Work bounded by the bytes of the inputs and outputs: an extent with no data
// behind it (2^40 query heads of 0 rows, a batch of 0 over 2^40 heads, a mask of 2^20 heads over
// empty sequences) must size neither memory nor loops. Each case runs an entry point with the
// global operator new replaced by a counting one and asserts the status, that the peak of the
// bytes live during the call stays under 1 MiB plus a small multiple of the caller's own buffers,
// and (through ctest's TIMEOUT) that it returns: a loop of 2^40 iterations fails by timing out.
//
// Eigen allocates through malloc, not operator new: EIGEN_RUNTIME_NO_MALLOC makes any Eigen heap
// allocation during a measured call an assertion failure instead (Debug builds; no case here
// reaches Eigen code). The rows of docs/hostile-inputs.md that name (test_bounded_work) are
// these cases.
#define EIGEN_RUNTIME_NO_MALLOC
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include <attnref/attnref.hpp>

#ifdef ATTNREF_RUN_PATH
#include "cli/cli_harness.hpp"
#endif

// --- counting global allocator -------------------------------------------------------------------
namespace {

std::atomic<std::int64_t> g_live{0};     // bytes live now (usable sizes)
std::atomic<std::int64_t> g_peak{0};     // highest g_live since the last reset
std::atomic<std::int64_t> g_largest{0};  // largest single request since the last reset
// A request above this while measuring fails at once (std::bad_alloc), so a hostile size shows
// up as a test failure instead of swapping the machine.
std::atomic<std::int64_t> g_refuse_above{std::numeric_limits<std::int64_t>::max()};

void note_request(std::size_t n) {
  const auto size = static_cast<std::int64_t>(
      std::min<std::size_t>(n, static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())));
  std::int64_t seen = g_largest.load(std::memory_order_relaxed);
  while (size > seen && !g_largest.compare_exchange_weak(seen, size)) {
  }
}

void note_live(void* p) {
  const auto size = static_cast<std::int64_t>(malloc_usable_size(p));
  const std::int64_t now = g_live.fetch_add(size) + size;
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

void* counted_alloc(std::size_t n, std::size_t align) noexcept {
  note_request(n);
  if (n > static_cast<std::size_t>(g_refuse_above.load())) return nullptr;
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (::posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  if (p != nullptr) note_live(p);
  return p;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}

void* counted_alloc_or_throw(std::size_t n, std::size_t align) {
  void* p = counted_alloc(n, align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

constexpr std::size_t kPlain = alignof(std::max_align_t);

}  // namespace

void* operator new(std::size_t n) { return counted_alloc_or_throw(n, kPlain); }
void* operator new[](std::size_t n) { return counted_alloc_or_throw(n, kPlain); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n, kPlain);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n, kPlain);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  counted_free(p);
}

namespace {

using attnref::ErrorCode;
using attnref::Status;
using attnref::TensorView;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kP24 = std::int64_t{1} << 24;
constexpr std::int64_t kP34 = std::int64_t{1} << 34;
constexpr std::int64_t kP40 = std::int64_t{1} << 40;

/// What one measured call allocated: the peak of the bytes live above the level at its start,
/// and its largest single request.
struct Usage {
  std::int64_t peak = 0;
  std::int64_t largest = 0;
};

/// Runs `fn` with the counters reset (requests over 1 GiB refused) and Eigen's heap forbidden.
template <class Fn>
Usage measure(Fn&& fn) {
  const std::int64_t base = g_live.load();
  g_peak.store(base);
  g_largest.store(0);
  g_refuse_above.store(std::int64_t{1} << 30);
  Eigen::internal::set_is_malloc_allowed(false);
  fn();
  Eigen::internal::set_is_malloc_allowed(true);
  g_refuse_above.store(std::numeric_limits<std::int64_t>::max());
  return Usage{g_peak.load() - base, g_largest.load()};
}

/// The bound every case asserts: 1 MiB of scratch plus 4x the bytes of the caller's buffers.
void expect_bounded(const Usage& u, std::int64_t caller_bytes, const std::string& what) {
  const std::int64_t bound = kMiB + 4 * caller_bytes;
  EXPECT_LE(u.peak, bound) << what << ": peak " << u.peak << " bytes live during the call";
  EXPECT_LE(u.largest, bound) << what << ": largest request " << u.largest << " bytes";
}

// The counter itself: a test that could not fail would prove nothing.
TEST(BoundedWork, CounterSeesOperatorNew) {
  const Usage u = measure([] {
    std::vector<char> big(static_cast<std::size_t>(8 * kMiB));
    big[0] = 1;
  });
  EXPECT_GE(u.peak, 8 * kMiB);
  EXPECT_GE(u.largest, 8 * kMiB);
  bool refused = false;
  measure([&] {
    try {
      std::vector<char> huge(static_cast<std::size_t>(4) << 30);
    } catch (const std::bad_alloc&) {
      refused = true;
    }
  });
  EXPECT_TRUE(refused);
}

// --- splash
// ---------------------------------------------------------------------------------------

/// q [hq, 0, 8] (or [hq, sq, 8] over `rows`), k/v [hkv, skv, 8]; every buffer is the caller's,
/// a few floats at most. `sq` rows of q point into `q_rows` (sized by the caller).
struct EmptySplash {
  std::int64_t hq, hkv, skv;
  std::vector<float> kv;  // [hkv * skv * 8], small: hkv * skv stays tiny in these cases
  std::vector<float> sinks;
  float dummy[8] = {};
  attnref::SplashAttentionArgs<float> args;

  EmptySplash(std::int64_t hq_, std::int64_t hkv_, std::int64_t skv_ = 0)
      : hq(hq_), hkv(hkv_), skv(skv_), kv(static_cast<std::size_t>(hkv_ * skv_ * 8), 0.5f) {
    args.q = {dummy, {hq, 0, 8}, 0};
    const float* kvp = kv.empty() ? dummy : kv.data();
    args.k = {kvp, {hkv, skv, 8}, static_cast<std::int64_t>(kv.size())};
    args.v = args.k;
  }
  /// Bytes of every buffer the caller holds for the call.
  std::int64_t bytes() const {
    return static_cast<std::int64_t>((kv.size() + sinks.size()) * sizeof(float));
  }
  TensorView<float, 3> out() { return {dummy, {hq, 0, 8}, 0}; }
  TensorView<float, 2> lse() { return {dummy, {hq, 0}, 0}; }
  TensorView<const float, 3> cout() const { return {dummy, {hq, 0, 8}, 0}; }
  TensorView<const float, 2> clse() const { return {dummy, {hq, 0}, 0}; }
};

struct SplashShape {
  std::int64_t hq, hkv;
};

class BoundedSplash : public ::testing::TestWithParam<SplashShape> {};

// Shapes that attnref-run splash once mishandled: q (2^24, 0, 8) over k/v (1, 0, 8) took
// 1.25 GiB (through the mask file, below); (2^34, 0, 8) asked for 1.3 TB; (2^40, 0, 8)
// everywhere looped 2^40 times over KV heads in the backward.
TEST_P(BoundedSplash, ForwardPlanDataTierAndBackwardRunInConstantWork) {
  const SplashShape shape = GetParam();
  EmptySplash c(shape.hq, shape.hkv);
  const attnref::FullMask mask{{0, 0}};
  Status fwd, plan_status, planned, data, bwd, planned_bwd, info_status;
  const Usage u = measure([&] {
    fwd = attnref::try_splash_attention(c.args, mask, c.out(), c.lse());
    attnref::SplashPlan<float> plan;
    plan_status = attnref::make_splash_plan(c.args, mask, &plan);
    if (plan_status.ok()) planned = attnref::try_splash_attention(plan, c.out(), c.lse());
    data = attnref::check_splash_data(c.args);
    attnref::SplashGradients<float> g;
    g.dq = c.out();
    g.dk = {c.dummy, {c.hkv, 0, 8}, 0};
    g.dv = g.dk;
    bwd = attnref::try_splash_attention_backward(c.args, mask, c.cout(), c.clse(), c.cout(), g);
    if (plan_status.ok())
      planned_bwd = attnref::try_splash_attention_backward(plan, c.cout(), c.clse(), c.cout(), g);
    attnref::MaskInfo info;
    info_status = attnref::build_mask_info(mask, 128, 128, attnref::Profile::kReference, &info);
  });
  EXPECT_TRUE(fwd.ok()) << fwd.message();
  EXPECT_TRUE(plan_status.ok()) << plan_status.message();
  EXPECT_TRUE(planned.ok()) << planned.message();
  EXPECT_TRUE(data.ok()) << data.message();
  EXPECT_TRUE(bwd.ok()) << bwd.message();
  EXPECT_TRUE(planned_bwd.ok()) << planned_bwd.message();
  EXPECT_TRUE(info_status.ok()) << info_status.message();
  expect_bounded(u, c.bytes(), "splash q [" + std::to_string(shape.hq) + ", 0, 8]");
}

INSTANTIATE_TEST_SUITE_P(IssueShapes, BoundedSplash,
                         ::testing::Values(SplashShape{kP24, 1}, SplashShape{kP34, 1},
                                           SplashShape{kP40, kP40}));

// No query row but real keys: the backward's dk and dv are 0 (no row sends gradient), written
// element by element over their own 2 x 3 x 8 floats; dsinks is 0 for each of 2^20 heads (a sum
// over no row), written over the caller's 2^20 floats. The 2^30 query heads add nothing.
TEST(BoundedWork, SplashBackwardWithoutQueryRowsZeroesTheGradientsOnly) {
  EmptySplash c(std::int64_t{1} << 30, 2, 3);
  Status s;
  std::vector<float> dk(2 * 3 * 8, -1.0f), dv(2 * 3 * 8, -1.0f);
  const Usage u = measure([&] {
    attnref::SplashGradients<float> g;
    g.dq = c.out();
    g.dk = {dk.data(), {2, 3, 8}, 48};
    g.dv = {dv.data(), {2, 3, 8}, 48};
    s = attnref::try_splash_attention_backward(c.args, attnref::CausalMask{{0, 3}}, c.cout(),
                                               c.clse(), c.cout(), g);
  });
  ASSERT_TRUE(s.ok()) << s.message();
  for (float x : dk) EXPECT_EQ(x, 0.0f);
  for (float x : dv) EXPECT_EQ(x, 0.0f);
  expect_bounded(u, c.bytes() + 2 * 48 * 4, "splash backward, 2^30 heads of 0 rows");

  const std::int64_t hq = std::int64_t{1} << 20;
  EmptySplash d(hq, 1);
  d.sinks.assign(static_cast<std::size_t>(hq), 1.5f);
  d.args.sinks = {d.sinks.data(), {hq}, hq};
  std::vector<float> dsinks(static_cast<std::size_t>(hq), -1.0f);
  const Usage w = measure([&] {
    attnref::SplashGradients<float> g;
    g.dq = d.out();
    g.dk = {d.dummy, {1, 0, 8}, 0};
    g.dv = g.dk;
    g.dsinks = {dsinks.data(), {hq}, hq};
    s = attnref::try_splash_attention_backward(d.args, attnref::FullMask{{0, 0}}, d.cout(),
                                               d.clse(), d.cout(), g);
  });
  ASSERT_TRUE(s.ok()) << s.message();
  for (float x : dsinks) ASSERT_EQ(x, 0.0f);
  expect_bounded(w, d.bytes() + hq * 4, "splash backward, dsinks of 2^20 heads");
}

// A per-head mask of 2^20 heads over (0, 0): its classification is linear in the mask object
// (16 bytes a head here, one shared AnyMask), never in the tiles of a sequence it lacks.
TEST(BoundedWork, MultiHeadMaskOverEmptySequences) {
  const std::int64_t heads = std::int64_t{1} << 20;
  const attnref::AnyMask causal(attnref::CausalMask{{0, 0}});
  const attnref::AnyMask full(attnref::FullMask{{0, 0}});
  std::vector<attnref::AnyMask> per_head;
  per_head.reserve(static_cast<std::size_t>(heads));
  for (std::int64_t h = 0; h < heads; ++h) per_head.push_back(h % 2 ? causal : full);
  const attnref::MultiHeadMask mask(std::move(per_head));
  const std::int64_t mask_bytes = heads * static_cast<std::int64_t>(sizeof(attnref::AnyMask));
  EmptySplash c(heads, 1);
  Status info_status, fwd;
  attnref::MaskInfo info;
  const Usage u = measure([&] {
    info_status = attnref::build_mask_info(mask, 128, 128, attnref::Profile::kReference, &info);
    fwd = attnref::try_splash_attention(c.args, mask, c.out(), c.lse());
  });
  ASSERT_TRUE(info_status.ok()) << info_status.message();
  EXPECT_TRUE(fwd.ok()) << fwd.message();
  EXPECT_EQ(info.num_q_blocks, 0);
  EXPECT_TRUE(info.block_mask.empty());
  expect_bounded(u, mask_bytes + c.bytes(), "2^20-head mask over (0, 0)");
}

// --- paged
// ----------------------------------------------------------------------------------------

// Batch 0 under 2^40 query heads (and 2^40 KV heads of 0 pages): no row, no loop.
TEST(BoundedWork, PagedEmptyBatchWithHugeHeadCounts) {
  float dummy[8] = {};
  std::int32_t meta[1] = {0};
  for (const std::int64_t hkv : {std::int64_t{1}, kP40}) {
    attnref::PagedAttentionArgs<float> a;
    a.q = {dummy, {0, kP40, 8}, 0};
    a.k_pages = {dummy, {hkv, 0, 16, 8}, 0};
    a.v_pages = a.k_pages;
    a.lengths = {meta, {0}, 0};
    a.page_indices = {meta, {0, 4}, 0};
    Status run, data;
    const Usage u = measure([&] {
      run = attnref::try_paged_attention(a, TensorView<float, 3>(dummy, {0, kP40, 8}, 0));
      if (run.ok()) data = attnref::check_paged_data(a);
    });
    EXPECT_TRUE(run.ok()) << run.message();
    EXPECT_TRUE(data.ok()) << data.message();
    expect_bounded(u, 0, "paged batch 0, 2^40 heads");
  }
}

// head_dim 0 is refused by the shape tier before anything reads lengths or sizes a buffer, with
// 2^40 sequences or 2^40 query heads (lengths is never read: its view claims 2^40 entries).
TEST(BoundedWork, PagedHeadDimZeroWithHugeBatchOrHeads) {
  float dummy[8] = {};
  std::int32_t meta[1] = {0};
  for (const bool huge_batch : {true, false}) {
    const std::int64_t batch = huge_batch ? kP40 : 1, hq = huge_batch ? 8 : kP40;
    attnref::PagedAttentionArgs<float> a;
    a.q = {dummy, {batch, hq, 0}, 0};
    a.k_pages = {dummy, {1, 1, 16, 0}, 0};
    a.v_pages = a.k_pages;
    a.lengths = {meta, {batch}};
    a.page_indices = {meta, {batch, 1}};
    Status run;
    const Usage u = measure([&] {
      run = attnref::try_paged_attention(a, TensorView<float, 3>(dummy, {batch, hq, 0}));
    });
    EXPECT_EQ(run.code(), ErrorCode::kInvalidHeadDim) << run.message();
    expect_bounded(u, 0, "paged head_dim 0");
  }
}

// --- ragged
// ---------------------------------------------------------------------------------------

// No token row (max_num_batched_tokens 0) under 2^40 query and KV heads, pools of 0 pages: the
// kernel and both tiers are O(metadata).
TEST(BoundedWork, RaggedNoTokensWithHugeHeadCounts) {
  float dummy[8] = {};
  std::int32_t kv_lens[1] = {0}, table[1] = {0}, cu_q_lens[2] = {0, 0}, num_seqs[1] = {1};
  attnref::RaggedPagedAttentionArgs<float> a;
  a.q = {dummy, {0, kP40, 8}, 0};
  a.k_pages = {dummy, {kP40, 0, 16, 8}, 0};
  a.v_pages = a.k_pages;
  a.kv_lens = {kv_lens, {1}, 1};
  a.page_indices = {table, {1, 1}, 1};
  a.cu_q_lens = {cu_q_lens, {2}, 2};
  a.num_seqs = {num_seqs, {1}, 1};
  Status run, data;
  const Usage u = measure([&] {
    run = attnref::try_ragged_paged_attention(a, TensorView<float, 3>(dummy, {0, kP40, 8}, 0));
    if (run.ok()) data = attnref::check_ragged_data(a);
  });
  EXPECT_TRUE(run.ok()) << run.message();
  EXPECT_TRUE(data.ok()) << data.message();
  expect_bounded(u, 0, "ragged 0 tokens, 2^40 heads");
}

// head_dim 0 with 2^40 token rows or 2^40 heads: refused by the shape tier.
TEST(BoundedWork, RaggedHeadDimZeroWithHugeTokensOrHeads) {
  float dummy[8] = {};
  std::int32_t kv_lens[1] = {0}, table[1] = {0}, cu_q_lens[2] = {0, 0}, num_seqs[1] = {1};
  for (const bool huge_tokens : {true, false}) {
    const std::int64_t tokens = huge_tokens ? kP40 : 4, hq = huge_tokens ? 2 : kP40;
    attnref::RaggedPagedAttentionArgs<float> a;
    a.q = {dummy, {tokens, hq, 0}};
    a.k_pages = {dummy, {1, 1, 16, 0}};
    a.v_pages = a.k_pages;
    a.kv_lens = {kv_lens, {1}, 1};
    a.page_indices = {table, {1, 1}, 1};
    a.cu_q_lens = {cu_q_lens, {2}, 2};
    a.num_seqs = {num_seqs, {1}, 1};
    Status run;
    const Usage u = measure([&] {
      run = attnref::try_ragged_paged_attention(a, TensorView<float, 3>(dummy, {tokens, hq, 0}));
    });
    EXPECT_EQ(run.code(), ErrorCode::kInvalidHeadDim) << run.message();
    expect_bounded(u, 0, "ragged head_dim 0");
  }
}

#if defined(__SANITIZE_ADDRESS__)
#define ATTNREF_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNREF_TEST_ASAN 1
#endif
#endif

#ifndef ATTNREF_TEST_ASAN  // (the one test using these skips under ASan)
/// Bytes malloc holds now (glibc's arenas and mmapped chunks): Eigen's scratch included.
std::int64_t malloc_held() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<std::int64_t>(m.uordblks + m.hblkhd);
}

/// One sequence of `q_len` rows and `q_len` keys (pages of 16), `hq` query heads over one KV
/// head of `dim`, run serially on this thread (so its thread_local scratch is this thread's).
void run_ragged_once(std::int64_t q_len, std::int64_t hq, std::int64_t dim) {
  const std::int64_t pages = (q_len + 15) / 16;
  std::vector<float> q(static_cast<std::size_t>(q_len * hq * dim), 0.5f), out(q.size());
  std::vector<float> kv(static_cast<std::size_t>(pages * 16 * dim), 0.25f);
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages));
  for (std::int64_t p = 0; p < pages; ++p) table[static_cast<std::size_t>(p)] = std::int32_t(p);
  std::int32_t kv_lens[1] = {std::int32_t(q_len)}, cu_q_lens[2] = {0, std::int32_t(q_len)},
               num_seqs[1] = {1};
  attnref::RaggedPagedAttentionArgs<float> a;
  a.q = {q.data(), {q_len, hq, dim}};
  a.k_pages = {kv.data(), {1, pages, 16, dim}};
  a.v_pages = a.k_pages;
  a.kv_lens = {kv_lens, {1}, 1};
  a.page_indices = {table.data(), {1, pages}, pages};
  a.cu_q_lens = {cu_q_lens, {2}, 2};
  a.num_seqs = {num_seqs, {1}, 1};
  const Status st =
      attnref::try_ragged_paged_attention(a, TensorView<float, 3>(out.data(), {q_len, hq, dim}));
  EXPECT_TRUE(st.ok()) << st.message();
}
#endif

// The ragged kernel's per-thread scratch is sized by the call at hand: after a call of 2048 rows
// of dim 8, a call of 17 rows of dim 1024 used to resize its row blocks to 2048 x 1024 (16 MiB
// more for a 70 KiB call; found by the fuzzers' work budget, which sees Eigen's allocations).
TEST(BoundedWork, RaggedScratchIsSizedByTheCallAtHand) {
#ifdef ATTNREF_TEST_ASAN
  GTEST_SKIP() << "mallinfo2 does not see ASan's allocator";
#else
  run_ragged_once(1, 2048, 8);  // many rows of a narrow dim (the prefill path)
  const std::int64_t before = malloc_held();
  run_ragged_once(17, 1, 1024);  // few rows of a wide dim (the prefill path again)
  const std::int64_t grown = malloc_held() - before;
  // This call's own scratch: two 128 x 1024 K/V blocks and 17-row blocks, about 1.2 MiB.
  EXPECT_LE(grown, 4 * kMiB) << "malloc holds " << grown << " more bytes after the second call";
#endif
}

// The prefill path walks key blocks from the first visible key's block, not from its page's
// start: a window of 2 keys at the end of one page of INT64_MAX slots (aliasing one row: slot
// stride 0) used to walk 2^56 blocks, and now reads one or two. kv_len INT64_MAX also checks
// the block steps near it do not overflow. Every key is (k 2, v -1), so each of the 17 rows
// (the prefill path: more than 16) sees 2 logits of 0.5 * 2: out -1, lse 1 + ln 2.
TEST(BoundedWork, RaggedPrefillWindowAtTheEndOfAHugePage) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kRows = 17;
  std::vector<float> q(kRows, 0.5f), out(kRows, 0.0f), lse(kRows, 0.0f);
  const float k = 2.0f, v = -1.0f;
  const std::int64_t kv_lens[1] = {kMax}, cu_q_lens[2] = {0, kRows}, table[1] = {0};
  attnref::RaggedPagedAttentionArgs<float, float, std::int64_t> a;
  a.q = {q.data(), {kRows, 1, 1}};
  a.k_pages = TensorView<const float, 4>(&k, {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.v_pages = TensorView<const float, 4>(&v, {1, 1, kMax, 1}, {1, 1, 0, 1}, 1);
  a.kv_lens = {kv_lens, {1}, 1};
  a.page_indices = {table, {1, 1}, 1};
  a.cu_q_lens = {cu_q_lens, {2}, 2};
  a.num_seqs_value = 1;
  a.sliding_window = 2;
  const Status st =
      attnref::try_ragged_paged_attention(a, TensorView<float, 3>(out.data(), {kRows, 1, 1}),
                                          TensorView<float, 2>(lse.data(), {kRows, 1}));
  ASSERT_TRUE(st.ok()) << st.message();
  for (std::int64_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(out[static_cast<std::size_t>(r)], -1.0f) << "row " << r;
    EXPECT_NEAR(lse[static_cast<std::size_t>(r)], 1.0 + std::log(2.0), 1e-6) << "row " << r;
  }
}

// --- merging attention states
// ------------------------------------------------------------------

// Nothing to write, nothing sized or walked: no heads under a head_dim of 2^40 (the merge sized
// three rows of 2^40 floats as scratch; found by fuzz_interop), and 2^40 rows of broadcast
// (stride-0) logsumexps with head_dim 0 and no lse output (the merge walked every row).
TEST(BoundedWork, MergeWithNoHeadsOrNoHeadDim) {
  float dummy[8] = {};
  for (const bool no_heads : {true, false}) {
    const std::int64_t rows = no_heads ? 1 : kP40, heads = no_heads ? 0 : 1;
    const std::int64_t dim = no_heads ? kP40 : 0;
    attnref::MergeStatesArgs<float> m;
    m.out_a = {dummy, {rows, heads, dim}, 0};
    m.out_b = m.out_a;
    m.lse_a = TensorView<const float, 2>(dummy, {rows, heads}, {0, 0}, 1);
    m.lse_b = m.lse_a;
    Status run;
    const Usage u = measure([&] {
      run = attnref::try_merge_attention_states(
          m, TensorView<float, 3>(dummy + 4, {rows, heads, dim}, 0));
    });
    EXPECT_TRUE(run.ok()) << run.message();
    expect_bounded(u, 0, no_heads ? "merge without heads" : "merge of head_dim 0");
  }
}

// --- attnref-run
// ----------------------------------------------------------------------------------
#ifdef ATTNREF_RUN_PATH

/// The largest resident set of any child process so far (attnref-run runs as one), in bytes.
std::int64_t children_max_rss() {
  rusage r{};
  getrusage(RUSAGE_CHILDREN, &r);
  return static_cast<std::int64_t>(r.ru_maxrss) * 1024;
}

class BoundedCli : public attnref::cli_test::CliTest {};

// Files of 128 bytes: q (2^24 or 2^34, 0, 8), k/v (1, 0, 8), with a mask file of as many heads
// of (0, 0) (it became one mask object per head: 2 GiB for 2^24), forward and backward; and
// q/k/v (2^40, 0, 8) with --dout (2^40 iterations over KV heads). Each exits 0 quickly, and no
// run's resident set passes that of a one-head run by 64 MiB (the baseline absorbs a sanitizer's
// own memory: about 100 MiB under ASan).
TEST_F(BoundedCli, SplashWithHugeHeadCountsOfNoRows) {
  const std::vector<float> none;
  const std::vector<char> no_mask;
  save("kv1.npy", {1, 0, 8}, none);
  ASSERT_EQ(run_subcommand("splash", "--q kv1.npy --k kv1.npy --v kv1.npy --dout kv1.npy").code, 0);
  const std::int64_t baseline = children_max_rss();
  for (const std::int64_t hq : {kP24, kP34}) {
    const std::string q = "q" + std::to_string(hq) + ".npy";
    const std::string m = "m" + std::to_string(hq) + ".npy";
    save(q, {hq, 0, 8}, none);
    save_bool(m, {hq, 0, 0}, no_mask);
    const std::vector<std::string> extras = {"", " --mask " + m, " --mask " + m + " --dout " + q};
    for (const std::string& extra : extras) {
      const auto r = run_subcommand(
          "splash", "--q " + q + " --k kv1.npy --v kv1.npy --out o.npy --lse-out l.npy" + extra);
      EXPECT_EQ(r.code, 0) << hq << extra << ": " << r.err;
      EXPECT_EQ(load("o.npy").shape, (std::vector<std::int64_t>{hq, 0, 8}));
    }
  }
  save("q40.npy", {kP40, 0, 8}, none);
  const auto r = run_subcommand("splash",
                                "--q q40.npy --k q40.npy --v q40.npy --dout q40.npy "
                                "--dq-out dq.npy --dk-out dk.npy --dv-out dv.npy");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(load("dk.npy").shape, (std::vector<std::int64_t>{kP40, 0, 8}));
  EXPECT_LE(children_max_rss(), baseline + 64 * kMiB);
}

#endif  // ATTNREF_RUN_PATH

}  // namespace
