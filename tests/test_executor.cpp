// Executors: every index runs exactly once, whatever the pool size; adapters forward.
#include <gtest/gtest.h>

#include <attnref/core/executor.hpp>

#include <atomic>
#include <vector>

namespace {

template <class Executor>
void expect_each_index_once(Executor& executor, std::int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h = 0;
  executor.parallel_for(n, [&](std::int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
}

TEST(Executor, SerialRunsEveryIndexInOrder) {
  attnref::SerialExecutor serial;
  EXPECT_EQ(serial.concurrency(), 1);
  std::vector<std::int64_t> order;
  serial.parallel_for(5, [&](std::int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(Executor, ThreadPoolRunsEveryIndexOnceAcrossManyCalls) {
  for (int threads : {1, 2, 4}) {
    attnref::ThreadPoolExecutor pool(threads);
    EXPECT_EQ(pool.concurrency(), threads);
    for (std::int64_t n : {0, 1, 2, 7, 1000}) expect_each_index_once(pool, n);
    for (int round = 0; round < 200; ++round) expect_each_index_once(pool, 3);
  }
  attnref::ThreadPoolExecutor clamped(0);
  EXPECT_EQ(clamped.concurrency(), 1);
}

TEST(Executor, ExternalAdapterForwardsToTheEnginesParallelFor) {
  int calls = 0;
  auto external = attnref::make_executor(3, [&](std::int64_t n, const auto& fn) {
    ++calls;
    for (std::int64_t i = 0; i < n; ++i) fn(i);
  });
  EXPECT_EQ(external.concurrency(), 3);
  expect_each_index_once(external, 10);
  EXPECT_EQ(calls, 1);
}

}  // namespace
