// SPDX-License-Identifier: Apache-2.0
// One ThreadPoolExecutor shared by several caller threads: concurrent
// parallel_for calls take turns, a nested call from an item runs inline, exceptions come back to
// the caller, and paged and ragged kernels run concurrently on one pool give the same output as
// alone. Run under ThreadSanitizer by the `tsan` preset.
#include <gtest/gtest.h>

#include <attnref/attnref.hpp>

#include <atomic>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using attnref::Status;
using attnref::TensorView;
using attnref::ThreadPoolExecutor;

constexpr int kCallers = 4;
constexpr int kIterations = 50;

std::vector<float> random_floats(size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// A decode batch: 4 sequences, 8 query heads over 2 KV heads, head_dim 16, 16 pages of 4
/// tokens, 4 pages per sequence.
struct PagedCase {
  static constexpr std::int64_t B = 4, Hq = 8, Hkv = 2, D = 16, P = 16, S = 4, PPS = 4;
  std::vector<float> q = random_floats(B * Hq * D, 1);
  std::vector<float> k = random_floats(Hkv * P * S * D, 2);
  std::vector<float> v = random_floats(Hkv * P * S * D, 3);
  std::vector<std::int32_t> lengths = {16, 5, 1, 11};
  std::vector<std::int32_t> table = {3, 0, 7, 9, 1, 2, 15, 15, 4, 4, 4, 4, 8, 12, 6, 5};
  attnref::PagedAttentionArgs<float> args;

  PagedCase() {
    args.q = {q.data(), {B, Hq, D}, static_cast<std::int64_t>(q.size())};
    args.k_pages = attnref::kv_pages_view<const float>(k.data(), attnref::KvLayout::kJax, Hkv, P, S,
                                                       D, static_cast<std::int64_t>(k.size()));
    args.v_pages = attnref::kv_pages_view<const float>(v.data(), attnref::KvLayout::kJax, Hkv, P, S,
                                                       D, static_cast<std::int64_t>(v.size()));
    args.lengths = {lengths.data(), {B}, B};
    args.page_indices = {table.data(), {B, PPS}, B * PPS};
  }
  template <class Executor>
  std::vector<float> run(Executor& executor) const {
    std::vector<float> out(q.size(), -7.0f);
    const Status s = attnref::try_paged_attention(
        args, TensorView<float, 3>(out.data(), {B, Hq, D}, static_cast<std::int64_t>(out.size())),
        executor);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
};

/// A mixed batch: 3 live sequences (prefill rows 5 and 3, one decode row) over 16 pages of 4
/// tokens, 4 query heads over 2 KV heads, head_dim 8.
struct RaggedCase {
  static constexpr std::int64_t T = 12, Hq = 4, Hkv = 2, D = 8, P = 16, S = 4, PPS = 4;
  std::vector<float> q = random_floats(T * Hq * D, 4);
  std::vector<float> kv = random_floats(P * S * 2 * Hkv * D, 5);
  std::vector<std::int32_t> kv_lens = {9, 16, 3, 0};
  std::vector<std::int32_t> table = {2, 5, 11, 0, 1, 3, 4, 6, 14, 0, 0, 0, 0, 0, 0, 0};
  std::vector<std::int32_t> cu_q_lens = {0, 5, 8, 9, 9};
  std::vector<std::int32_t> num_seqs = {3};
  attnref::RaggedPagedAttentionArgs<float> args;

  RaggedCase() {
    args.q = {q.data(), {T, Hq, D}, static_cast<std::int64_t>(q.size())};
    const TensorView<const float, 4> pool(kv.data(), {P, S, 2 * Hkv, D},
                                          static_cast<std::int64_t>(kv.size()));
    EXPECT_TRUE(attnref::ragged_kv_views(pool, &args.k_pages, &args.v_pages).ok());
    args.kv_lens = {kv_lens.data(), {4}, 4};
    args.page_indices = {table.data(), {4, PPS}, 4 * PPS};
    args.cu_q_lens = {cu_q_lens.data(), {5}, 5};
    args.num_seqs = {num_seqs.data(), {1}, 1};
    args.sm_scale = 0.25f;
  }
  template <class Executor>
  std::vector<float> run(Executor& executor) const {
    std::vector<float> out(q.size(), -7.0f);
    const Status s = attnref::try_ragged_paged_attention(
        args, TensorView<float, 3>(out.data(), {T, Hq, D}, static_cast<std::int64_t>(out.size())),
        executor);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
};

TEST(SharedPool, ConcurrentCallsRunEveryIndexOnce) {
  ThreadPoolExecutor pool(4);
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&pool, &wrong, c] {
      for (int it = 0; it < 200; ++it) {
        const std::int64_t n = 1 + (c * 7 + it) % 40;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (auto& h : hits) h = 0;
        pool.parallel_for(n, [&](std::int64_t i) { hits[static_cast<size_t>(i)]++; });
        for (auto& h : hits)
          if (h.load() != 1) ++wrong;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(SharedPool, NestedCallOnTheSamePoolRunsInline) {
  ThreadPoolExecutor pool(3);
  constexpr std::int64_t kOuter = 16, kInner = 9;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(kOuter * kInner));
  for (auto& h : hits) h = 0;
  // Outer items run on the caller and on the workers; each calls the same pool again.
  pool.parallel_for(kOuter, [&](std::int64_t i) {
    const std::thread::id self = std::this_thread::get_id();
    pool.parallel_for(kInner, [&](std::int64_t j) {
      EXPECT_EQ(std::this_thread::get_id(), self);  // inline: no other thread
      hits[static_cast<size_t>(i * kInner + j)]++;
    });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  // The pool is still usable afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(100, [&](std::int64_t) { ++count; });
  EXPECT_EQ(count.load(), 100);
}

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
TEST(SharedPool, ExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadPoolExecutor pool(3);
  for (int round = 0; round < 20; ++round) {
    EXPECT_THROW(pool.parallel_for(64,
                                   [&](std::int64_t i) {
                                     if (i == round) throw std::runtime_error("item failed");
                                   }),
                 std::runtime_error);
    std::atomic<int> count{0};
    pool.parallel_for(10, [&](std::int64_t) { ++count; });
    EXPECT_EQ(count.load(), 10);
  }
}
#endif

// N caller threads x M iterations of paged and ragged kernels on one pool: every result equals
// the one-caller result (bit for bit), which equals the serial result (ragged: bit for bit).
TEST(SharedPool, PagedAndRaggedKernelsFromManyThreadsMatchOneCaller) {
  const PagedCase paged;
  const RaggedCase ragged;
  attnref::SerialExecutor serial;
  ThreadPoolExecutor pool(4);
  const std::vector<float> paged_alone = paged.run(pool);
  const std::vector<float> ragged_alone = ragged.run(pool);
  const std::vector<float> paged_serial = paged.run(serial);
  ASSERT_EQ(paged_alone.size(), paged_serial.size());
  for (size_t i = 0; i < paged_alone.size(); ++i)
    ASSERT_NEAR(paged_alone[i], paged_serial[i], 1e-5f) << i;
  EXPECT_EQ(ragged_alone, ragged.run(serial));

  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int it = 0; it < kIterations; ++it) {
        if ((c + it) % 2 == 0) {
          if (paged.run(pool) != paged_alone) ++mismatches;
        } else {
          if (ragged.run(pool) != ragged_alone) ++mismatches;
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
