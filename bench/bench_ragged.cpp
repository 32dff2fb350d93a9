// Ragged paged attention over JAX's sequence sets (spec §5.5: decode-only, prefill-only, mixed;
// heads (32, 8), head_dim 128, pages of 16): the grouped-head kernel against the same kernel
// called one query head at a time (`per_head`), beside a read-bandwidth probe over the KV page
// pool itself, measured in the same benchmark. Also the cost of the validation tiers.
// Counters:
//   GBps       unique KV bytes read per second, in GB/s (each live K/V byte counted once)
//   probe_GBps the probe's read bandwidth over the whole KV pool (median of 5 passes), run by
//              the same executor as the kernel (one thread, or grouped_pool's pool)
//   frac_probe GBps / probe_GBps
//   GFLOPs     useful multiply-adds x 2 per second (unmasked q.k and p.v only)
//   tokens_per_s query rows per second
//   KV_MiB     the KV pages of one call's batch; cycle_MiB: the pool its iterations cycle through
// The decode-only set cycles through copies of its batch, each with its own pages and page table
// (one copy per iteration), at least 256 MiB of them, as bench_paged's reference rows do: its
// batch alone (49 MiB in f32, 12 MiB in int8) stays in the last-level cache between iterations,
// where an engine's KV cache is read from memory.
// Names: BM_Ragged/<set>/<variant>/<dtype>, set decode_only, prefill_only, mixed or decode_one
// (one sequence of 8192 keys: one item, whose KV heads the pool splits); variant
// grouped, per_head or grouped_pool (grouped on a ThreadPoolExecutor of hardware_concurrency
// threads, at least 2); dtype f32 or bf16 (q and pages alike), or for the decode-only set f32
// queries over half, int8 or e4m3 pages (`q_f32/kv_int8`; 8-bit with JAX's per-tensor scale).
#include <benchmark/benchmark.h>
#include <attnref/kernels/ragged_paged_attention.hpp>

#include "kv_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include "isa_context.hpp"

namespace {

using attnref::TensorView;
using SeqLens = std::vector<std::pair<std::int32_t, std::int32_t>>;  // (q_len, kv_len)

const SeqLens kDecodeOnly = {{1, 18},   {1, 129}, {1, 597},  {1, 122}, {1, 64}, {1, 322},
                             {1, 463},  {1, 181}, {1, 1107}, {1, 123}, {1, 31}, {1, 18},
                             {1, 1229}, {1, 229}, {1, 87},   {1, 1328}};
const SeqLens kPrefillOnly = {{5, 18},    {15, 129},  {120, 597}, {100, 122}, {21, 64}, {32, 322},
                              {251, 463}, {40, 181},  {64, 1107}, {99, 123},  {10, 31}, {5, 18},
                              {3, 1229},  {120, 229}, {9, 87},    {2, 1328}};
const SeqLens kMixed = {{5, 18},    {1, 129},   {120, 597}, {1, 122},  {1, 64}, {32, 322},
                        {251, 463}, {1, 181},   {1, 1107},  {99, 123}, {1, 31}, {5, 18},
                        {3, 1229},  {117, 229}, {1, 87},    {1, 1328}};
// One long decode sequence: fewer items than threads, so the pool splits its KV heads.
const SeqLens kDecodeOne = {{1, 8192}};
const char* const kSetNames[] = {"decode_only", "prefill_only", "mixed", "decode_one"};

constexpr std::int64_t kHq = 32, kHkv = 8, kDim = 128, kPage = 16;

/// The least KV bytes the decode-only set's iterations cycle through: bench_paged's f32
/// reference batch.
constexpr std::int64_t kDecodeCycleBytes = std::int64_t{256} << 20;

// A non-negative int64 index or size as a vector subscript.
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

/// Median read bandwidth (GB/s) of five full passes over `buf`, vectorised by Eigen, split in
/// `executor.concurrency()` chunks run by the same executor as the kernel.
template <class T, class Executor>
double probe_read_bandwidth(const attnref_bench::KvPool<T>& buf, Executor& executor) {
  const auto* p = reinterpret_cast<const float*>(buf.data());
  const auto n = static_cast<std::int64_t>(buf.size() * sizeof(T) / sizeof(float));
  const std::int64_t chunks = executor.concurrency();
  std::vector<float> sinks(static_cast<std::size_t>(chunks));
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    executor.parallel_for(chunks, [&](std::int64_t c) {
      const std::int64_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      sinks[static_cast<std::size_t>(c)] =
          Eigen::Map<const Eigen::ArrayXf>(p + lo, static_cast<Eigen::Index>(hi - lo)).sum();
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sinks.data());
    rates.push_back(static_cast<double>(buf.size() * sizeof(T)) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

/// A K/V element from a normal sample: rounded for float types and int8; fp8 codes of finite
/// values (as bench_paged draws them).
template <class KV>
KV kv_element(float x, std::mt19937& rng) {
  if constexpr (attnref::is_fp8_dtype<KV>) {
    const int code = std::uniform_int_distribution<int>(0, 255)(rng) & 0xFE;  // not 0x7f, 0xff
    return KV::from_bits(static_cast<std::uint8_t>(code));
  } else if constexpr (std::is_same<KV, std::int8_t>::value) {
    return static_cast<std::int8_t>(std::max(-127.0f, std::min(127.0f, std::round(x * 40.0f))));
  } else {
    return static_cast<KV>(x);
  }
}

template <class T, class KV = T>
struct Fixture {
  std::int64_t tokens = 0, batch_pages = 0, total_pages = 0, pages_per_seq = 0, max_seqs = 0;
  std::int64_t copies = 1, copy = 0;
  std::vector<T> q, out;
  attnref_bench::KvPool<KV> kv;  // huge pages where offered, as bench_paged's
  std::vector<std::int32_t> kv_lens, tables, cu_q_lens;  // copy c's table at c * max_seqs * pps
  std::int32_t num_seqs = 0;
  double unique_kv_bytes = 0, flops = 0;
  attnref::RaggedPagedAttentionArgs<T, KV> args;

  /// The batch `seqs`, in copies enough to cycle through at least `cycle_bytes` of pages.
  explicit Fixture(const SeqLens& seqs, std::int64_t cycle_bytes = 0) {
    num_seqs = static_cast<std::int32_t>(seqs.size());
    max_seqs = num_seqs;
    std::int32_t max_kv = 0;
    for (const auto& s : seqs) {
      tokens += s.first;
      batch_pages += (s.second + kPage - 1) / kPage;
      max_kv = std::max(max_kv, s.second);
      unique_kv_bytes += static_cast<double>(s.second) * 2 * kHkv * kDim * sizeof(KV);
      // Causal: row r sees kv_len - q_len + r + 1 keys; q.k and p.v are 2 flops each per dim.
      const double seen = static_cast<double>(s.first) * (s.second - s.first) +
                          static_cast<double>(s.first) * (s.first + 1) / 2.0;
      flops += 4.0 * seen * kHq * kDim;
    }
    pages_per_seq = (max_kv + kPage - 1) / kPage;
    const auto page_bytes = static_cast<std::int64_t>(kPage * 2 * kHkv * kDim * sizeof(KV));
    copies = std::max<std::int64_t>(
        1, (cycle_bytes + batch_pages * page_bytes - 1) / (batch_pages * page_bytes));
    total_pages = copies * batch_pages;
    std::mt19937 rng(42);
    std::normal_distribution<float> normal;
    q.resize(at(tokens * kHq * kDim));
    for (T& x : q) x = static_cast<T>(normal(rng));
    out.assign(q.size(), T(0));  // preallocated and pre-touched
    // Pre-touched: one batch's pages drawn, the other copies' pages the same values.
    const std::int64_t batch_elements = batch_pages * kPage * 2 * kHkv * kDim;
    kv.resize(at(copies * batch_elements));
    for (std::int64_t i = 0; i < batch_elements; ++i) kv[at(i)] = kv_element<KV>(normal(rng), rng);
    for (std::int64_t c = 1; c < copies; ++c)
      std::copy_n(kv.data(), batch_elements, kv.data() + c * batch_elements);
    std::vector<std::int32_t> pages(at(total_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    kv_lens.assign(at(max_seqs), 0);
    tables.assign(at(copies * max_seqs * pages_per_seq), 0);
    cu_q_lens.assign(at(max_seqs + 1), 0);
    for (std::int64_t i = 0; i < num_seqs; ++i) {
      kv_lens[at(i)] = seqs[at(i)].second;
      cu_q_lens[at(i + 1)] = cu_q_lens[at(i)] + seqs[at(i)].first;
    }
    std::size_t next = 0;  // every copy's pages at random over the pool, none in two copies
    for (std::int64_t c = 0; c < copies; ++c)
      for (std::int64_t i = 0; i < num_seqs; ++i)
        for (std::int64_t p = 0; p * kPage < seqs[at(i)].second; ++p)
          tables[at((c * max_seqs + i) * pages_per_seq + p)] = pages[next++];
    args.q = {q.data(), {tokens, kHq, kDim}};
    const TensorView<const KV, 4> pool(kv.data(), {total_pages, kPage, 2 * kHkv, kDim});
    attnref::throw_if_error(attnref::ragged_kv_views(pool, &args.k_pages, &args.v_pages));
    args.kv_lens = {kv_lens.data(), {max_seqs}};
    use_copy(0);
    args.cu_q_lens = {cu_q_lens.data(), {max_seqs + 1}};
    args.num_seqs = {&num_seqs, {1}};
    args.sm_scale = 0.088f;
    if constexpr (std::is_same<KV, std::int8_t>::value || attnref::is_fp8_dtype<KV>) {
      args.k_scale = 0.025f;
      args.v_scale = 0.025f;
    }
  }

  /// Points the call at copy c's page table.
  void use_copy(std::int64_t c) {
    copy = c;
    args.page_indices = {tables.data() + c * max_seqs * pages_per_seq, {max_seqs, pages_per_seq}};
  }
  void next_copy() { use_copy((copy + 1) % copies); }

  template <class Executor>
  void grouped(Executor& executor) {
    attnref::ragged_paged_attention_unchecked(args, TensorView<T, 3>(out.data(), args.q.extents),
                                              executor);
  }

  /// The same kernel with one query head (G = 1) at a time: every query head re-reads its KV
  /// head's pages.
  void per_head() {
    for (std::int64_t qh = 0; qh < kHq; ++qh) {
      const std::int64_t h = attnref::kv_head_of(qh, kHq, kHkv);
      attnref::RaggedPagedAttentionArgs<T, KV> one = args;
      one.q = {q.data() + qh * kDim, {tokens, 1, kDim}, {kHq * kDim, kDim, 1}};
      one.k_pages.data = &args.k_pages(h, 0, 0, 0);  // KV head h alone
      one.v_pages.data = &args.v_pages(h, 0, 0, 0);
      one.k_pages.extents[0] = 1;
      one.v_pages.extents[0] = 1;
      attnref::ragged_paged_attention_unchecked(
          one, TensorView<T, 3>(out.data() + qh * kDim, {tokens, 1, kDim}, {kHq * kDim, kDim, 1}));
    }
  }
};

const SeqLens& set_of(std::int64_t s) {
  return s == 0 ? kDecodeOnly : s == 1 ? kPrefillOnly : s == 2 ? kMixed : kDecodeOne;
}

template <class T, class KV = T>
void run(benchmark::State& state, std::int64_t set, int variant) {
  Fixture<T, KV> f(set_of(set), set == 0 ? kDecodeCycleBytes : 0);
  for (std::int64_t c = 0; c < f.copies; ++c) {
    f.use_copy(c);
    if (!attnref::check_ragged(f.args, attnref::Profile::kJax).ok()) {
      state.SkipWithError("invalid fixture");
      return;
    }
  }
  const int threads =
      variant == 2 ? std::max(2, static_cast<int>(std::thread::hardware_concurrency())) : 1;
  attnref::ThreadPoolExecutor pool(threads);
  const double probe = probe_read_bandwidth(f.kv, pool);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    f.next_copy();
    if (variant == 1)
      f.per_head();
    else
      f.grouped(pool);
    benchmark::DoNotOptimize(f.out.data());
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double per_call = seconds / static_cast<double>(state.iterations());
  const double gbps = f.unique_kv_bytes / 1e9 / per_call;
  state.counters["GBps"] = gbps;
  state.counters["probe_GBps"] = probe;
  state.counters["frac_probe"] = gbps / probe;
  state.counters["GFLOPs"] = f.flops / 1e9 / per_call;
  state.counters["tokens_per_s"] = static_cast<double>(f.tokens) / per_call;
  const double pool_mib = static_cast<double>(f.kv.size() * sizeof(KV)) / (1 << 20);
  state.counters["KV_MiB"] = pool_mib / static_cast<double>(f.copies);
  state.counters["cycle_MiB"] = pool_mib;
  state.counters["huge_frac"] = f.kv.huge_page_fraction();  // as bench_paged's
  state.counters["threads"] = threads;
}

const char* const kVariantNames[] = {"grouped", "per_head", "grouped_pool"};

/// BM_Ragged/<set>/<variant>/<dtype>, run by `run<T, KV>(state, set, variant)`.
template <class T, class KV = T>
void register_ragged(std::int64_t set, int variant, const std::string& dtype) {
  const std::string name =
      std::string("BM_Ragged/") + kSetNames[set] + "/" + kVariantNames[variant] + "/" + dtype;
  benchmark::RegisterBenchmark(
      name.c_str(), [set, variant](benchmark::State& state) { run<T, KV>(state, set, variant); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const bool kRaggedRegistered = [] {
  for (std::int64_t set = 0; set < 3; ++set)
    for (int variant = 0; variant < 3; ++variant) {
      register_ragged<float>(set, variant, "f32");
      register_ragged<Eigen::bfloat16>(set, variant, "bf16");
    }
  for (int variant : {0, 2}) {
    register_ragged<float>(3, variant, "f32");
    register_ragged<Eigen::bfloat16>(3, variant, "bf16");
  }
  register_ragged<float, Eigen::half>(0, 0, "q_f32/kv_half");
  register_ragged<float, std::int8_t>(0, 0, "q_f32/kv_int8");
  register_ragged<float, attnref::float8_e4m3fn>(0, 0, "q_f32/kv_e4m3");
  return true;
}();

/// Validation tiers on the same batches: shapes (O(1)) and shapes + metadata.
const bool kChecksRegistered = [] {
  for (std::int64_t set = 0; set < 3; ++set)
    for (bool metadata : {false, true}) {
      const std::string name = std::string("BM_RaggedCheck/") + kSetNames[set] +
                               (metadata ? "/shapes+metadata" : "/shapes");
      benchmark::RegisterBenchmark(name.c_str(), [set, metadata](benchmark::State& state) {
        Fixture<float> f(set_of(set));
        for (auto _ : state) {
          const attnref::Status s =
              metadata ? attnref::check_ragged(f.args, attnref::Profile::kJax)
                       : attnref::check_ragged_shapes(f.args, attnref::Profile::kJax);
          benchmark::DoNotOptimize(s);
        }
      });
    }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
