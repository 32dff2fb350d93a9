// SPDX-License-Identifier: Apache-2.0
/// @file kv_pool.hpp
/// A pre-touched, zero-filled KV pool for the benchmarks, backed by transparent huge pages
/// where the OS offers them (Linux, THP in "madvise" or "always" mode), as an engine would
/// allocate its cache. Random page tables touch a new 4 KiB OS page for almost every KV page;
/// with 2 MiB pages those TLB misses mostly go away (spec/perf-anchors.md measured 10-25%).
/// Both the kernel and the bandwidth probe read this same memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace attnref_bench {

template <class T>
class KvPool {
 public:
  KvPool() = default;
  explicit KvPool(std::size_t count) { resize(count); }
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;
  ~KvPool() { release(); }

  void resize(std::size_t count) {
    release();
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    bytes_ = (count * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    if (bytes_ == 0) bytes_ = kHuge;
    void* p = std::aligned_alloc(kHuge, bytes_);
    if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    huge_ = madvise(p, bytes_, MADV_HUGEPAGE) == 0;  // a hint: failure only costs speed
#endif
    std::memset(p, 0, bytes_);  // pre-touch: page faults happen here, not in the benchmark
    data_ = static_cast<T*>(p);
    size_ = count;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  bool huge_pages_requested() const { return huge_; }

 private:
  void release() {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0, bytes_ = 0;
  bool huge_ = false;
};

}  // namespace attnref_bench
