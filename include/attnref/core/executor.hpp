// SPDX-License-Identifier: Apache-2.0
/// @file executor.hpp
/// How kernels run work items in parallel without owning the engine's threads. An executor has
/// `concurrency()` (how many items may run at once) and `parallel_for(n, fn)`, which calls
/// `fn(i)` once for every i in [0, n), possibly concurrently, and returns when all are done.
///  - `SerialExecutor`: the default; runs everything on the calling thread.
///  - `ThreadPoolExecutor`: a small built-in pool of std::threads (the caller helps). One pool
///    may be shared by several caller threads (their calls take turns; see the class).
///  - `make_executor(concurrency, parallel_for)`: adapts any `parallel_for(n, fn)` the engine
///    already has (OpenMP, Eigen's ThreadPool, TBB, a job system).
///
/// Kernels hand items out longest first (kernels/detail/work_order.hpp), so an executor that
/// gives each free thread the next item balances uneven batches best; with OpenMP, ask for
/// schedule(dynamic): a static schedule gives the first thread the longest items together.
///
/// Example:
/// @code
///   attnref::ThreadPoolExecutor pool(2);
///   attnref::paged_attention(args, out, pool);
///   // or, with OpenMP:
///   auto omp = attnref::make_executor(omp_get_max_threads(), [](std::int64_t n, const auto& fn) {
///     #pragma omp parallel for schedule(dynamic)
///     for (std::int64_t i = 0; i < n; ++i) fn(i);
///   });
/// @endcode
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace attnref {

/// Runs every item on the calling thread, in order.
struct SerialExecutor {
  int concurrency() const noexcept { return 1; }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) const {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
  }
};

namespace detail {

/// One pool whose `parallel_for` the current thread is inside (as its caller or as a worker);
/// frames link outwards, so nesting across pools is seen too.
struct PoolFrame {
  const void* pool;
  const PoolFrame* outer;
};

/// Innermost PoolFrame of the current thread (null outside every pool).
inline const PoolFrame*& innermost_pool_frame() noexcept {
  static thread_local const PoolFrame* top = nullptr;
  return top;
}

/// Marks the current thread as inside `pool` for the guard's lifetime.
class PoolFrameGuard {
 public:
  explicit PoolFrameGuard(const void* pool) : frame_{pool, innermost_pool_frame()} {
    innermost_pool_frame() = &frame_;
  }
  PoolFrameGuard(const PoolFrameGuard&) = delete;
  PoolFrameGuard& operator=(const PoolFrameGuard&) = delete;
  ~PoolFrameGuard() { innermost_pool_frame() = frame_.outer; }

 private:
  PoolFrame frame_;
};

/// True when the current thread is running an item of `pool` (or is its caller).
inline bool inside_pool(const void* pool) noexcept {
  for (const PoolFrame* f = innermost_pool_frame(); f != nullptr; f = f->outer)
    if (f->pool == pool) return true;
  return false;
}

}  // namespace detail

/// A fixed pool of `threads - 1` workers plus the calling thread. Items are handed out one at a
/// time from a shared counter, so uneven items balance.
///
/// Sharing: the pool may be shared by several threads (engines share pools). Concurrent
/// `parallel_for` calls take turns, each running on the whole pool (a mutex serializes whole
/// calls; waiting callers block). A `parallel_for` called from inside an item of the same pool
/// (or from the caller's own items) runs inline on that thread, so nesting cannot deadlock.
/// Do not nest two pools both ways (an item of A calls B whose item calls A): like any two
/// blocking pools, that can deadlock.
///
/// Exceptions: the first exception thrown by `fn` stops handing out items; `parallel_for`
/// rethrows it once the items already running have finished. When the system refuses a worker
/// thread (a process or memory limit), the constructor joins the workers it started (they wait
/// on the pool's members, so none may outlive it) and throws std::system_error saying how many
/// it got.
class ThreadPoolExecutor {
 public:
  explicit ThreadPoolExecutor(int threads) : threads_(threads > 1 ? threads : 1) {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
    try {
      start_workers();
    } catch (const std::system_error& e) {
      const std::size_t started = workers_.size();
      stop_workers();
      throw std::system_error(e.code(), "attnref::ThreadPoolExecutor(" + std::to_string(threads_) +
                                            "): the system started " + std::to_string(started) +
                                            " of its " + std::to_string(threads_ - 1) +
                                            " worker threads; ask for fewer threads");
    } catch (...) {
      stop_workers();
      throw;
    }
#else
    start_workers();
#endif
  }
  ThreadPoolExecutor(const ThreadPoolExecutor&) = delete;
  ThreadPoolExecutor& operator=(const ThreadPoolExecutor&) = delete;
  /// Joins the workers. No `parallel_for` may be running or start.
  ~ThreadPoolExecutor() { stop_workers(); }

  int concurrency() const noexcept { return threads_; }

  /// Calls `fn(i)` for every i in [0, n) on the pool and returns when all are done. Thread-safe.
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) {
    if (n <= 0) return;
    if (threads_ == 1 || n == 1 || detail::inside_pool(this)) {
      for (std::int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::function<void(std::int64_t)> job = [&fn](std::int64_t i) { fn(i); };
    std::lock_guard<std::mutex> turn(call_mutex_);  // one call on the workers at a time
    const detail::PoolFrameGuard frame(this);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      job_size_ = n;
      next_.store(0);
      busy_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    drain(job, n);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    job_ = nullptr;
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
    if (error_) {
      std::exception_ptr error = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(error);
    }
#endif
  }

 private:
  void start_workers() {
    workers_.reserve(static_cast<std::size_t>(threads_ - 1));
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void drain(const std::function<void(std::int64_t)>& job, std::int64_t n) {
    for (std::int64_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        next_.store(n);  // hand out no more items
      }
#else
      job(i);
#endif
    }
  }

  void worker_loop() {
    const detail::PoolFrameGuard frame(this);
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(std::int64_t)>* job = nullptr;
      std::int64_t n = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        n = job_size_;
      }
      drain(*job, n);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_;
      }
      done_.notify_one();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // held for a whole parallel_for on the workers
  std::mutex mutex_;       // guards the fields below (next_ is atomic)
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* job_ = nullptr;
  std::int64_t job_size_ = 0;
  std::atomic<std::int64_t> next_{0};
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
  std::exception_ptr error_;
#endif
};

/// Wraps an engine's own `parallel_for(n, fn)` (fn called with std::int64_t indices).
template <class ParallelFor>
class ExternalExecutor {
 public:
  ExternalExecutor(int concurrency, ParallelFor parallel_for)
      : concurrency_(concurrency > 1 ? concurrency : 1), parallel_for_(std::move(parallel_for)) {}
  int concurrency() const noexcept { return concurrency_; }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) const {
    parallel_for_(n, fn);
  }

 private:
  int concurrency_;
  ParallelFor parallel_for_;
};

/// Adapts `parallel_for(n, fn)` with the given concurrency into an executor.
template <class ParallelFor>
ExternalExecutor<ParallelFor> make_executor(int concurrency, ParallelFor parallel_for) {
  return ExternalExecutor<ParallelFor>(concurrency, std::move(parallel_for));
}

namespace detail {

/// The stop check of the `StoppableExecutor` whose item runs on this thread (null: none).
inline thread_local const std::function<bool()>* item_stop = nullptr;

/// Whether the `StoppableExecutor` running this thread's item was asked to stop (false under any
/// other executor): a kernel asks between the steps of a long item, so that one item of hours
/// (a single sequence of 2^40 keys) does not hold a stop until its end.
inline bool stop_requested() { return item_stop != nullptr && (*item_stop)(); }

}  // namespace detail

/// Runs another executor's items until `stop()` answers true; `stop` is asked before each item
/// and between the steps of a long one (from any thread), and once it answers true every item
/// not yet begun is skipped and the running ones end at their next step. For a
/// caller that must abandon a long call (an interactive interrupt): after `stopped()`, the
/// call's outputs are incomplete and must be discarded.
template <class Executor, class Stop>
class StoppableExecutor {
 public:
  StoppableExecutor(Executor& inner, Stop stop) : inner_(inner), stop_(std::move(stop)) {}
  int concurrency() const noexcept { return inner_.concurrency(); }
  template <class Fn>
  void parallel_for(std::int64_t n, const Fn& fn) {
    const std::function<bool()> poll = [this] {
      if (stopped_.load(std::memory_order_relaxed)) return true;
      if (!stop_()) return false;
      stopped_.store(true, std::memory_order_relaxed);
      return true;
    };
    inner_.parallel_for(n, [&](std::int64_t i) {
      if (poll()) return;
      struct Restore {  // the outer executor's check again, also when the item throws
        const std::function<bool()>* outer;
        ~Restore() { detail::item_stop = outer; }
      } restore{detail::item_stop};
      detail::item_stop = &poll;  // the item's steps ask it (`detail::stop_requested`)
      fn(i);
    });
  }
  /// Whether `stop` answered true (so some items were skipped).
  bool stopped() const noexcept { return stopped_.load(); }

 private:
  Executor& inner_;
  Stop stop_;
  std::atomic<bool> stopped_{false};
};

namespace detail {

/// Whether `E` is an executor (has `concurrency()`). The kernels' `(args, out, executor)`
/// overloads take only executors, so they never compete with `(args, out, logsumexp)`.
template <class E, class = void>
struct IsExecutor : std::false_type {};
template <class E>
struct IsExecutor<E, std::void_t<decltype(std::declval<std::decay_t<E>&>().concurrency())>>
    : std::true_type {};
template <class E>
using EnableIfExecutor = std::enable_if_t<IsExecutor<E>::value, int>;

}  // namespace detail

}  // namespace attnref
