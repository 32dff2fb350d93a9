// Executors: every index runs exactly once, whatever the pool size; adapters forward. The
// kernels' work order: longest first, ties in index order.
#include <gtest/gtest.h>

#include <attnref/core/executor.hpp>
#include <attnref/kernels/detail/work_order.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

// Sanitizer runtimes reserve terabytes of address space, so a limit on it cannot be tested there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNREF_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ATTNREF_UNDER_SANITIZER 1
#endif
#endif
#ifndef ATTNREF_UNDER_SANITIZER
#define ATTNREF_UNDER_SANITIZER 0
#endif

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

TEST(Executor, StoppableSkipsEveryItemAfterStopAnswersTrue) {
  attnref::SerialExecutor serial;
  int asked = 0;
  attnref::StoppableExecutor<attnref::SerialExecutor, std::function<bool()>> serial_stop(
      serial, [&] { return ++asked > 3; });
  std::vector<std::int64_t> ran;
  serial_stop.parallel_for(10, [&](std::int64_t i) { ran.push_back(i); });
  EXPECT_EQ(ran, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_TRUE(serial_stop.stopped());
  EXPECT_EQ(asked, 4);  // asked no more once it answered true
  serial_stop.parallel_for(5, [&](std::int64_t i) { ran.push_back(i); });
  EXPECT_EQ(ran.size(), 3u);  // a later loop of the same call runs nothing

  attnref::ThreadPoolExecutor pool(4);
  attnref::StoppableExecutor<attnref::ThreadPoolExecutor, std::function<bool()>> never(
      pool, [] { return false; });
  EXPECT_EQ(never.concurrency(), 4);
  expect_each_index_once(never, 1000);
  EXPECT_FALSE(never.stopped());
  std::atomic<int> runs{0};
  attnref::StoppableExecutor<attnref::ThreadPoolExecutor, std::function<bool()>> at_once(
      pool, [] { return true; });
  at_once.parallel_for(1000, [&](std::int64_t) { ++runs; });
  EXPECT_EQ(runs.load(), 0);
  EXPECT_TRUE(at_once.stopped());
}

#if defined(__cpp_exceptions) && !ATTNREF_UNDER_SANITIZER  // also built with -fno-exceptions
// The process's virtual memory, in bytes (VmSize), or -1.
long long virtual_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmSize: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

// A pool the system cannot start: a child process limits its address space to 64 MiB more
// than it uses, so only a few of 1023 thread stacks fit. The constructor must throw, join the
// workers it started, and leave the process able to start a pool again; a half-built pool
// used to hang destroying its condition variable (the child then never exits and is killed).
TEST(Executor, ThreadPoolTheSystemCannotStartThrowsAndLeavesNoThreadBehind) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const long long used = virtual_memory_bytes();
    rlimit limit{};
    if (used < 0 || getrlimit(RLIMIT_AS, &limit) != 0) _exit(10);
    const rlimit old = limit;
    limit.rlim_cur = static_cast<rlim_t>(used + (64ll << 20));
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(11);
    int code = 12;  // no exception
    try {
      attnref::ThreadPoolExecutor pool(1024);
    } catch (const std::system_error& e) {
      const std::string what = e.what();
      code = what.find("attnref::ThreadPoolExecutor(1024): the system started ") == 0 &&
                     what.find(" of its 1023 worker threads; ask for fewer threads") !=
                         std::string::npos &&
                     e.code().value() != 0
                 ? 0
                 : 13;
    }
    if (setrlimit(RLIMIT_AS, &old) != 0) _exit(14);
    attnref::ThreadPoolExecutor again(2);
    std::atomic<int> ran{0};
    again.parallel_for(8, [&](std::int64_t) { ++ran; });
    _exit(code == 0 && ran.load() == 8 ? 0 : code == 0 ? 15 : code);
  }
  int status = 0;
  pid_t done = 0;
  for (int waited_ms = 0; waited_ms < 60000 && done == 0; waited_ms += 10) {
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) usleep(10000);
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the child hung for 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10-11: could not set the limit; 12: no exception; 13: wrong message or code; "
         "14: could not lift the limit; 15: the next pool did not run every item";
}
#endif

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

TEST(StoppableExecutor, AnItemAsksBetweenItsStepsAndEndsThere) {
  // Each item would take a million steps; stop answers true from its 100th question on.
  std::atomic<int> asked{0};
  const std::function<bool()> stop = [&] { return ++asked >= 100; };
  attnref::ThreadPoolExecutor pool(2);
  attnref::StoppableExecutor<attnref::ThreadPoolExecutor, std::function<bool()>> executor(pool,
                                                                                          stop);
  std::atomic<std::int64_t> steps{0};
  executor.parallel_for(4, [&](std::int64_t) {
    for (int step = 0; step < 1000000 && !attnref::detail::stop_requested(); ++step) ++steps;
  });
  EXPECT_TRUE(executor.stopped());
  EXPECT_LT(steps.load(), 1000);  // far from 4 million
  // Outside a StoppableExecutor's item, nothing asks to stop.
  EXPECT_FALSE(attnref::detail::stop_requested());
  attnref::SerialExecutor serial;
  serial.parallel_for(1, [&](std::int64_t) { EXPECT_FALSE(attnref::detail::stop_requested()); });
}

}  // namespace
