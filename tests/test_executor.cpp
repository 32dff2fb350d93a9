// Executors: every index runs exactly once, whatever the pool size; adapters forward. The
// kernels' work order: longest first, ties in index order.
#include <gtest/gtest.h>

#include <attnref/core/executor.hpp>
#include <attnref/kernels/detail/work_order.hpp>

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

TEST(WorkOrder, LongestFirstWithTiesInIndexOrderOnlyWhenThereIsAPoolToBalance) {
  const std::vector<double> costs = {1, 5, 3, 5, 0, 3};
  const auto cost = [&](std::int64_t i) { return costs[static_cast<size_t>(i)]; };
  using Order = std::vector<std::int64_t>;
  EXPECT_EQ(attnref::detail::longest_first(6, 2, cost), (Order{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(attnref::detail::longest_first(6, 8, cost), (Order{1, 3, 2, 5, 0, 4}));
  // One thread: nothing to balance, the items keep their order (and no cost is asked for).
  int asked = 0;
  const auto counted = [&](std::int64_t i) { return ++asked, cost(i); };
  EXPECT_EQ(attnref::detail::longest_first(6, 1, counted), (Order{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(attnref::detail::longest_first(0, 2, cost), Order{});
  EXPECT_EQ(attnref::detail::longest_first(1, 2, cost), Order{0});
}

}  // namespace
