// Paged decode: the grouped-head kernel against the same math one query head at a time
// (`per_head`) and a textbook gather-then-softmax (`naive`), beside a read-bandwidth probe over
// the same KV buffers measured in the same benchmark. Counters:
//   GBps       unique KV bytes read per second, in GB/s (each live K/V byte counted once)
//   probe_GBps the probe's read bandwidth over the whole KV allocation (median of 5 passes)
//   frac_probe GBps / probe_GBps
//   pages_GBps read bandwidth of the same K/V pages in the kernel's order (per sequence and KV
//              head, through the page table), summed with no other arithmetic: what the access
//              pattern itself allows; small scattered pages read slower than one long stream
//   frac_pages GBps / pages_GBps
//   GFLOPs     q.k and p.v multiply-adds x 2 per second; fma_GFLOPs: a register-only FMA loop on
//              the same threads in the same run (median of 5), the compute ceiling
//   of_probe_at_fma_peak  the fraction of the probe a kernel could reach if its arithmetic ran
//              at fma_GFLOPs: min(1, read time at probe speed / arithmetic time at FMA speed)
//   KV_MiB     K/V bytes one call reads; cycle_MiB: the pool its iterations cycle through
// The reference-shape rows of every K/V dtype cycle through copies of the batch, each with its
// own pages and page table (one copy per iteration), so that every dtype's iterations and probes
// read at least 256 MiB, the f32 batch's size. The 16-bit and 8-bit batches alone (128 and 66
// MiB) are partly served from the last-level cache between iterations, so their probes read
// faster than memory (docs/benchmarks.md: 18-22 GB/s over the 8-bit pools, 14.4-14.8 over the
// f32 one, in one run on the Xeon), while an engine's KV cache is read from memory.
// The KV pool is one pre-touched allocation backed by transparent huge pages (kv_pool.hpp).
// Names: BM_PagedDecode/<variant>/<dtype>/B:/Hq:/Hkv:/D:/page:/ctx:/threads:, variant grouped,
// per_head or naive; dtype f32, bf16, half, int8 (per-token scales) or e4m3 (fp8 e4m3fn with a
// per-tensor scale, as vLLM's fp8 cache has); threads: the kernel and the probe use the same pool.
// A page of ctx tokens is one page per sequence (contiguous K/V). Variant mla (.../D:/Dv:/...) is
// the grouped kernel on an MLA latent cache: one KV head, K rows D wide, V the view of their
// first Dv columns (no V pool: GBps counts the latent cache once).
#include <benchmark/benchmark.h>
#include <attnref/kernels/paged_attention.hpp>

#include "kv_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "isa_context.hpp"

namespace {

using attnref::TensorView;

/// Median read bandwidth (GB/s) of five full passes over `buffers`, vectorised by Eigen, split
/// into chunks over the same executor the kernel uses (so a 2-thread run has a 2-thread probe).
template <class T, class Executor>
double probe_read_bandwidth(const std::vector<const attnref_bench::KvPool<T>*>& buffers,
                            Executor& executor) {
  constexpr std::int64_t kChunk = 1 << 20;  // floats per task
  std::vector<std::pair<const float*, std::int64_t>> chunks;
  double bytes = 0;
  for (const auto* buf : buffers) {
    const auto* p = reinterpret_cast<const float*>(buf->data());
    const auto n = static_cast<std::int64_t>(buf->size() * sizeof(T) / sizeof(float));
    for (std::int64_t i = 0; i < n; i += kChunk)
      chunks.emplace_back(p + i, std::min(kChunk, n - i));
    bytes += static_cast<double>(buf->size() * sizeof(T));
  }
  std::vector<float> sinks(chunks.size());
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    executor.parallel_for(static_cast<std::int64_t>(chunks.size()), [&](std::int64_t c) {
      const auto& chunk = chunks[static_cast<size_t>(c)];
      sinks[static_cast<size_t>(c)] =
          Eigen::Map<const Eigen::ArrayXf>(chunk.first, chunk.second).sum();
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sinks.data());
    rates.push_back(bytes / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

/// Median FMA throughput (GFLOP/s) of five passes of a register-only loop on every thread of
/// `executor` at once: 12 independent chains of Eigen packet multiply-adds (enough to cover the
/// FMA latency), the compute ceiling the tile products are written against.
template <class Executor>
double probe_fma_gflops(Executor& executor) {
  using Packet = Eigen::internal::packet_traits<float>::type;
  constexpr int kLanes = Eigen::internal::packet_traits<float>::size;
  constexpr int kChains = 12;
  constexpr std::int64_t kSteps = 1 << 22;
  const std::int64_t threads = executor.concurrency();
  std::vector<float> sinks(static_cast<size_t>(threads));
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    executor.parallel_for(threads, [&](std::int64_t t) {
      using namespace Eigen::internal;
      Packet acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = pset1<Packet>(static_cast<float>(c + t));
      const Packet a = pset1<Packet>(0.999999f), b = pset1<Packet>(1e-7f);
      for (std::int64_t i = 0; i < kSteps; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = pmadd(acc[c], a, b);
      float sum = 0;
      for (int c = 0; c < kChains; ++c) sum += predux(acc[c]);
      sinks[static_cast<size_t>(t)] = sum;
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sinks.data());
    rates.push_back(2.0 * kLanes * kChains * static_cast<double>(kSteps * threads) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

struct Shape {
  std::int64_t batch, hq, hkv, dim, page, context;
  /// The least K/V bytes the iterations cycle through (copies of the batch); 0: one copy.
  std::int64_t cycle_bytes = 0;
  /// MLA: V is the view of the first dim_v columns of K's rows (no V pool); 0: V of its own.
  std::int64_t dim_v = 0;
  bool latent() const { return dim_v != 0; }
  std::int64_t value_dim() const { return latent() ? dim_v : dim; }
};

/// K and V of the f32 reference shape (B = 8, Hkv = 8, D = 128, context 4096): what every
/// dtype's reference rows cycle through at least.
constexpr std::int64_t kReferenceCycleBytes = std::int64_t{256} << 20;

template <class KV>
struct Fixture {
  Shape sh;
  std::int64_t pps, total_pages, copies, copy = 0;
  std::vector<float> q, out, k_scales, v_scales;
  attnref_bench::KvPool<KV> k, v;
  std::vector<std::int32_t> lengths;
  // Copy c's page table is entries [c * B * pps, (c + 1) * B * pps); `table` the current copy's.
  std::vector<std::int32_t> tables;
  const std::int32_t* table = nullptr;
  attnref::PagedAttentionArgs<float, KV> args;

  explicit Fixture(const Shape& s) : sh(s) {
    pps = sh.context / sh.page;
    const std::int64_t copy_bytes = (sh.latent() ? 1 : 2) * sh.hkv * sh.batch * pps * sh.page *
                                    sh.dim * static_cast<std::int64_t>(sizeof(KV));
    copies = std::max<std::int64_t>(1, (sh.cycle_bytes + copy_bytes - 1) / copy_bytes);
    total_pages = copies * sh.batch * pps;
    std::mt19937 rng(42);
    std::normal_distribution<float> normal;
    q.resize(static_cast<size_t>(sh.batch * sh.hq * sh.dim));
    for (float& x : q) x = normal(rng) * 0.1f;
    out.assign(static_cast<size_t>(sh.batch * sh.hq * sh.value_dim()), 0.0f);
    k.resize(
        static_cast<size_t>(sh.hkv * total_pages * sh.page * sh.dim));  // zero-filled: pre-touched
    v.resize(sh.latent() ? 0 : k.size());
    std::uniform_int_distribution<int> small(-100, 100);
    for (size_t i = 0; i < k.size(); i += 7) {
      if constexpr (attnref::is_fp8_dtype<KV>) {
        // Codes of finite values (0x7f and 0xff are e4m3fn's NaN): |v| <= 448.
        k[i] = KV{static_cast<std::uint8_t>(small(rng) & 0x7E)};
        if (!sh.latent()) v[i] = KV{static_cast<std::uint8_t>(small(rng) & 0xFE)};
      } else {
        k[i] = static_cast<KV>(small(rng));
        if (!sh.latent()) v[i] = static_cast<KV>(small(rng));
      }
    }
    lengths.assign(static_cast<size_t>(sh.batch), static_cast<std::int32_t>(sh.context));
    // Every copy's pages at random over the whole pool, no page in two copies.
    tables.resize(static_cast<size_t>(total_pages));
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);
    args.q = {q.data(), {sh.batch, sh.hq, sh.dim}};
    args.k_pages = {k.data(), {sh.hkv, total_pages, sh.page, sh.dim}};
    args.v_pages = {v.data(), {sh.hkv, total_pages, sh.page, sh.dim}};
    if (sh.latent())
      args.v_pages = {k.data(), {sh.hkv, total_pages, sh.page, sh.dim_v}, args.k_pages.strides};
    if constexpr (std::is_same<KV, std::int8_t>::value) {
      k_scales.assign(static_cast<size_t>(sh.hkv * total_pages * sh.page), 0.01f);
      v_scales.assign(k_scales.size(), 0.01f);
      args.k_scales = {k_scales.data(), {sh.hkv, total_pages, sh.page, 1}};
      args.v_scales = {v_scales.data(), {sh.hkv, total_pages, sh.page, 1}};
    }
    if constexpr (attnref::is_fp8_dtype<KV>) {  // one scale per tensor: zero strides
      k_scales.assign(1, 0.01f);
      v_scales.assign(1, 0.01f);
      args.k_scales = {k_scales.data(), {sh.hkv, total_pages, sh.page, 1}, {0, 0, 0, 0}};
      args.v_scales = {v_scales.data(), {sh.hkv, total_pages, sh.page, 1}, {0, 0, 0, 0}};
    }
    args.lengths = {lengths.data(), {sh.batch}};
    args.sm_scale = 0.088f;
    use_copy(0);
  }

  /// Points the call at copy c's page table.
  void use_copy(std::int64_t c) {
    copy = c;
    table = tables.data() + c * sh.batch * pps;
    args.page_indices = {table, {sh.batch, pps}};
  }
  void next_copy() { use_copy((copy + 1) % copies); }

  /// K/V bytes of one copy's pages.
  double page_bytes() const {
    return static_cast<double>((k.size() + v.size()) * sizeof(KV)) / static_cast<double>(copies);
  }

  /// K/V bytes one call reads: its copy's pages and their scales.
  double kv_bytes() const {
    double bytes = page_bytes();
    if constexpr (std::is_same<KV, std::int8_t>::value)
      bytes += 2.0 * static_cast<double>(k_scales.size() * 4) / static_cast<double>(copies);
    if constexpr (attnref::is_fp8_dtype<KV>) bytes += 2.0 * 4;
    return bytes;
  }

  TensorView<float, 3> out_view() { return {out.data(), {sh.batch, sh.hq, sh.value_dim()}}; }

  /// Median of five passes (GB/s) reading every live K and V page, for each (sequence, KV head)
  /// in page-table order, K page then V page, over the kernel's executor; pass r reads copy
  /// r mod copies, as the kernel's iterations cycle through them.
  template <class Executor>
  double probe_page_order(Executor& executor) {
    const std::int64_t page_floats = sh.page * sh.dim * static_cast<std::int64_t>(sizeof(KV)) /
                                     static_cast<std::int64_t>(sizeof(float));
    std::vector<float> sinks(static_cast<size_t>(sh.batch * sh.hkv));
    std::vector<double> rates;
    for (int rep = 0; rep < 5; ++rep) {
      const std::int32_t* pass_table = tables.data() + rep % copies * sh.batch * pps;
      const auto start = std::chrono::steady_clock::now();
      executor.parallel_for(sh.batch * sh.hkv, [&](std::int64_t item) {
        const std::int64_t b = item / sh.hkv, h = item % sh.hkv;
        float sum = 0;
        for (std::int64_t j = 0; j < pps; ++j) {
          const std::int64_t first = (h * total_pages + pass_table[b * pps + j]) * sh.page * sh.dim;
          const auto page_sum = [&](const KV* base) {
            return Eigen::Map<const Eigen::ArrayXf>(reinterpret_cast<const float*>(base),
                                                    page_floats)
                .sum();
          };
          sum += page_sum(k.data() + first);
          if (!sh.latent()) sum += page_sum(v.data() + first);  // MLA: V is K's memory
        }
        sinks[static_cast<size_t>(item)] = sum;
      });
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      benchmark::DoNotOptimize(sinks.data());
      rates.push_back(page_bytes() / s / 1e9);
    }
    std::sort(rates.begin(), rates.end());
    return rates[2];
  }

  template <class Executor>
  void grouped(Executor& executor) {
    attnref::paged_attention_unchecked(args, out_view(), executor);
  }

  /// The same kernel called with one query head (G = 1) at a time: every query head re-reads
  /// its KV head's pages.
  void per_head() {
    for (std::int64_t qh = 0; qh < sh.hq; ++qh) {
      const std::int64_t h = attnref::kv_head_of(qh, sh.hq, sh.hkv);
      attnref::PagedAttentionArgs<float, KV> one = args;
      one.q = {q.data() + qh * sh.dim, {sh.batch, 1, sh.dim}, {sh.hq * sh.dim, sh.dim, 1}};
      one.k_pages.data = k.data() + h * args.k_pages.strides[0];
      one.v_pages.data = v.data() + h * args.v_pages.strides[0];
      one.k_pages.extents[0] = one.v_pages.extents[0] = 1;
      if constexpr (std::is_same<KV, std::int8_t>::value || attnref::is_fp8_dtype<KV>) {
        one.k_scales.data = k_scales.data() + h * args.k_scales.strides[0];
        one.v_scales.data = v_scales.data() + h * args.v_scales.strides[0];
        one.k_scales.extents[0] = one.v_scales.extents[0] = 1;
      }
      attnref::paged_attention_unchecked(
          one, TensorView<float, 3>(out.data() + qh * sh.dim, {sh.batch, 1, sh.dim},
                                    {sh.hq * sh.dim, sh.dim, 1}));
    }
  }

  /// Textbook: gather each sequence's K/V into contiguous f32 matrices, then per query head a
  /// matrix-vector product, a softmax and a weighted sum.
  void naive(Eigen::MatrixXf& k_dense, Eigen::MatrixXf& v_dense) {
    const std::int64_t group = sh.hq / sh.hkv;
    for (std::int64_t b = 0; b < sh.batch; ++b) {
      const std::int64_t len = lengths[static_cast<size_t>(b)];
      for (std::int64_t h = 0; h < sh.hkv; ++h) {
        for (std::int64_t t = 0; t < len; ++t) {
          const std::int64_t page = table[b * pps + t / sh.page];
          for (std::int64_t d = 0; d < sh.dim; ++d) {
            float kx = static_cast<float>(args.k_pages(h, page, t % sh.page, d));
            float vx = static_cast<float>(args.v_pages(h, page, t % sh.page, d));
            if constexpr (std::is_same<KV, std::int8_t>::value) {
              kx = kx * args.k_scales(h, page, t % sh.page, 0) / 127.5f;
              vx = vx * args.v_scales(h, page, t % sh.page, 0) / 127.5f;
            } else if constexpr (attnref::is_fp8_dtype<KV>) {
              kx *= args.k_scales(h, page, t % sh.page, 0);
              vx *= args.v_scales(h, page, t % sh.page, 0);
            }
            k_dense(t, d) = kx;
            v_dense(t, d) = vx;
          }
        }
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t qh = h * group + g;
          Eigen::Map<const Eigen::VectorXf> qv(q.data() + (b * sh.hq + qh) * sh.dim, sh.dim);
          Eigen::VectorXf logits = (k_dense.topRows(len) * qv) * args.sm_scale;
          logits = (logits.array() - logits.maxCoeff()).exp();
          logits /= logits.sum();
          Eigen::Map<Eigen::VectorXf>(out.data() + (b * sh.hq + qh) * sh.dim, sh.dim) =
              v_dense.topRows(len).transpose() * logits;
        }
      }
    }
  }
};

template <class KV>
void run(benchmark::State& state, const Shape& sh, int variant, int threads) {
  Fixture<KV> f(sh);
  attnref::ThreadPoolExecutor pool(threads);
  const double probe = probe_read_bandwidth<KV>({&f.k, &f.v}, pool);
  const double pages = f.probe_page_order(pool);
  const double fma = probe_fma_gflops(pool);
  Eigen::MatrixXf k_dense(sh.context, sh.dim), v_dense(sh.context, sh.dim);
  k_dense.setZero();
  v_dense.setZero();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    f.next_copy();
    if (variant == 0)
      f.grouped(pool);
    else if (variant == 1)
      f.per_head();
    else
      f.naive(k_dense, v_dense);
    benchmark::DoNotOptimize(f.out.data());
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = f.kv_bytes();
  const double gbps = bytes / 1e9 / (seconds / static_cast<double>(state.iterations()));
  state.counters["GBps"] = gbps;
  state.counters["probe_GBps"] = probe;
  state.counters["frac_probe"] = gbps / probe;
  state.counters["pages_GBps"] = pages;
  state.counters["frac_pages"] = gbps / pages;
  state.counters["KV_MiB"] = bytes / (1 << 20);
  state.counters["cycle_MiB"] = bytes * static_cast<double>(f.copies) / (1 << 20);
  // How much of the K and V pools the OS gave huge pages: without them decode runs slower, so
  // two runs' times compare only where this is alike.
  state.counters["huge_frac"] = (f.k.huge_page_fraction() + f.v.huge_page_fraction()) / 2;
  // q.k and p.v: a multiply-add per (query head, key, dim of K and of V), x 2 flops.
  const double flops =
      2.0 * static_cast<double>(sh.batch * sh.hq * sh.context * (sh.dim + sh.value_dim()));
  state.counters["GFLOPs"] = flops / 1e9 / (seconds / static_cast<double>(state.iterations()));
  state.counters["fma_GFLOPs"] = fma;
  // The best fraction of the probe a kernel doing this arithmetic at the FMA probe's rate could
  // reach: 1 when reading the bytes takes longer than the multiply-adds.
  state.counters["of_probe_at_fma_peak"] =
      std::min(1.0, (bytes / 1e9 / probe) / (flops / 1e9 / fma));
  state.SetLabel(sh.latent()    ? "mla"
                 : variant == 0 ? "grouped"
                 : variant == 1 ? "per_head"
                                : "naive");
}

const char* const kVariantNames[] = {"grouped", "per_head", "naive"};

/// BM_PagedDecode/<variant>/<dtype>/B:../Hq:../Hkv:../D:../page:../ctx:../threads:.., once; an
/// MLA shape is variant mla (the grouped kernel) with /Dv:.. after D.
template <class KV>
void register_paged(int variant, const char* dtype, const Shape& sh, int threads) {
  static std::set<std::string> registered;
  const std::string name =
      std::string("BM_PagedDecode/") + (sh.latent() ? "mla" : kVariantNames[variant]) + "/" +
      dtype + "/B:" + std::to_string(sh.batch) + "/Hq:" + std::to_string(sh.hq) +
      "/Hkv:" + std::to_string(sh.hkv) + "/D:" + std::to_string(sh.dim) +
      (sh.latent() ? "/Dv:" + std::to_string(sh.dim_v) : std::string()) +
      "/page:" + std::to_string(sh.page) + "/ctx:" + std::to_string(sh.context) +
      "/threads:" + std::to_string(threads);
  if (!registered.insert(name).second) return;
  benchmark::RegisterBenchmark(
      name.c_str(),
      [variant, sh, threads](benchmark::State& state) { run<KV>(state, sh, variant, threads); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const bool kRegistered = [] {
  // K/V dtypes at the reference shape, grouped: pages of 16 tokens and one page per sequence
  // (pages of 4096), 1 and 2 threads, every dtype in the same process with its own probes,
  // cycling through at least the f32 batch's bytes (bench/targets.py reads these for the
  // 16/8-bit targets).
  for (std::int64_t page : {16, 4096})
    for (int threads : {1, 2}) {
      const Shape ref{8, 32, 8, 128, page, 4096, kReferenceCycleBytes};
      register_paged<float>(0, "f32", ref, threads);
      register_paged<Eigen::bfloat16>(0, "bf16", ref, threads);
      register_paged<Eigen::half>(0, "half", ref, threads);
      register_paged<std::int8_t>(0, "int8", ref, threads);
      register_paged<attnref::float8_e4m3fn>(0, "e4m3", ref, threads);
    }
  // f32: the reference shape, every variant, pages of 16 and 64, 1 thread; grouped on 2.
  for (std::int64_t page : {16, 64}) {
    for (int variant : {0, 1, 2})
      register_paged<float>(variant, "f32", {8, 32, 8, 128, page, 4096}, 1);
    register_paged<float>(0, "f32", {8, 32, 8, 128, page, 4096}, 2);
  }
  // Group sizes (grouped vs per_head) and head dims.
  for (std::int64_t g : {1, 2, 4, 8})
    for (int variant : {0, 1})
      register_paged<float>(variant, "f32", {4, 8 * g, 8, 128, 16, 4096}, 1);
  for (std::int64_t d : {64, 256}) register_paged<float>(0, "f32", {8, 32, 8, d, 16, 4096}, 1);
  // Context sweep (the chart): B=2, every variant; at 32768 a per-(seq, KV head) slice is
  // 32 MiB, past the cache, so per_head pays DRAM for its re-reads.
  for (std::int64_t ctx : {512, 2048, 8192, 32768})
    for (int variant : {0, 1, 2})
      register_paged<float>(variant, "f32", {2, 32, 8, 128, 16, ctx}, 1);
  // The kernel's arithmetic alone: one KV head, 4 query heads, 1024 tokens in one page, so K and
  // V (1 MiB in f32) stay in L2 between iterations; times 256 it is the reference shape's work
  // (64 sequence-KV-head items of 4096 tokens) with memory for free (docs/benchmarks.md). The
  // same tokens in 64 random pages of 16: what small pages cost the arithmetic.
  for (std::int64_t page : {1024, 16}) {
    const Shape in_l2{1, 4, 1, 128, page, 1024};
    register_paged<float>(0, "f32", in_l2, 1);
    register_paged<Eigen::bfloat16>(0, "bf16", in_l2, 1);
    register_paged<Eigen::half>(0, "half", in_l2, 1);
    register_paged<std::int8_t>(0, "int8", in_l2, 1);
    register_paged<attnref::float8_e4m3fn>(0, "e4m3", in_l2, 1);
  }
  // Split-KV: one sequence, one KV head, long context, 1 vs 2 threads.
  for (int threads : {1, 2}) register_paged<float>(0, "f32", {1, 4, 1, 128, 16, 32768}, threads);
  // MLA decode (FlashMLA's shape): 128 query heads on one latent KV head, K rows 576 wide and V
  // the view of their first 512, pages of 64; beside it the same call with a V of its own, 576
  // wide (twice the bytes, 576 + 576 multiply-adds per key and head).
  for (std::int64_t dim_v : {512, 0})
    register_paged<Eigen::bfloat16>(0, "bf16", {4, 128, 1, 576, 64, 4096, 0, dim_v}, 1);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
