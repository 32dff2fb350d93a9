// SPDX-License-Identifier: Apache-2.0
/// @file kv_pool.hpp
/// A pre-touched, zero-filled KV pool for the benchmarks, backed by transparent huge pages
/// where the OS offers them (Linux, THP in "madvise" or "always" mode), as an engine would
/// allocate its cache. Random page tables touch a new 4 KiB OS page for almost every KV page;
/// with 2 MiB pages those TLB misses mostly go away (spec/perf-anchors.md measured 10-25%).
/// Both the kernel and the bandwidth probe read this same memory.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>

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
    madvise(p, bytes_, MADV_HUGEPAGE);  // a hint: failure only costs speed (huge_page_fraction)
#endif
    std::memset(p, 0, bytes_);  // pre-touch: page faults happen here, not in the benchmark
    data_ = static_cast<T*>(p);
    size_ = count;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }

  /// The fraction of the pool's bytes the OS backs with transparent huge pages, from the
  /// AnonHugePages lines of /proc/self/smaps (each mapping's counted only for the bytes it shares
  /// with the pool, at most those); 0 where there is no such file. THP in "madvise" mode may
  /// grant none, some or all of the pool, depending on how fragmented memory is, and a random
  /// page table touches a new 4 KiB page for almost every KV page without them: on a Zen 5 VM
  /// ragged bf16 decode-only took 2.55-2.62 ms on 4 KiB pages, 1.63-1.84 on huge pages.
  double huge_page_fraction() const {
    std::ifstream smaps("/proc/self/smaps");
    if (!smaps || data_ == nullptr) return 0;
    const auto lo = reinterpret_cast<std::uintptr_t>(data_), hi = lo + bytes_;
    std::uintptr_t begin = 0, end = 0;
    double huge_bytes = 0;
    for (std::string line; std::getline(smaps, line);) {
      unsigned long long a = 0, b = 0, kib = 0;
      char dash = 0;
      std::istringstream in(line);
      if (line.rfind("AnonHugePages:", 0) == 0) {
        std::string key;
        if (!(in >> key >> kib) || end <= lo || begin >= hi) continue;
        const std::uintptr_t shared = std::min(end, hi) - std::max(begin, lo);
        huge_bytes += std::min(static_cast<double>(kib) * 1024, static_cast<double>(shared));
      } else if (std::isxdigit(static_cast<unsigned char>(line[0])) &&
                 (in >> std::hex >> a >> dash >> b) && dash == '-') {
        begin = static_cast<std::uintptr_t>(a);
        end = static_cast<std::uintptr_t>(b);
      }
    }
    return huge_bytes / static_cast<double>(bytes_);
  }

 private:
  void release() {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0, bytes_ = 0;
};

}  // namespace attnref_bench
