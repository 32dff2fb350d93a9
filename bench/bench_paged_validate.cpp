// Cost of each tier of the paged validator: shapes (O(1)), metadata (O(batch + pages)) and data
// (O(live elements)), at the reference head shape Hq=32, Hkv=8, D=128, page 16, context 4096.
#include <benchmark/benchmark.h>
#include <attnref/validate/paged.hpp>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>
#include "isa_context.hpp"

namespace {

constexpr std::int64_t kQHeads = 32, kKvHeads = 8, kDim = 128, kPage = 16;

/// A batch whose K/V views point at a tiny dummy buffer: the shape and metadata tiers never
/// read K/V, so the benchmark needs no multi-GiB cache for large batches.
struct Batch {
  std::int64_t batch, context, pages_per_seq;
  std::vector<float> q, dummy_kv = std::vector<float>(1);
  std::vector<std::int32_t> lengths, table;
  attnref::PagedAttentionArgs<float> args;

  Batch(std::int64_t b, std::int64_t ctx) : batch(b), context(ctx), pages_per_seq(ctx / kPage) {
    q.assign(static_cast<std::size_t>(b * kQHeads * kDim), 0.5f);
    lengths.assign(static_cast<std::size_t>(b), static_cast<std::int32_t>(ctx));
    table.resize(static_cast<std::size_t>(b * pages_per_seq));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(1));
    const std::int64_t total_pages = b * pages_per_seq;
    args.q = {q.data(), {b, kQHeads, kDim}};
    // Zero strides: every logical element aliases the one dummy float (never read here).
    args.k_pages = {dummy_kv.data(), {kKvHeads, total_pages, kPage, kDim}, {0, 0, 0, 0}};
    args.v_pages = args.k_pages;
    args.lengths = {lengths.data(), {b}};
    args.page_indices = {table.data(), {b, pages_per_seq}};
  }
};

void BM_ShapeTier(benchmark::State& state) {
  Batch b(state.range(0), 4096);
  for (auto _ : state) {
    attnref::Status s = attnref::check_paged_shapes(b.args, attnref::Profile::kJax);
    benchmark::DoNotOptimize(s);
  }
  state.counters["pages"] = static_cast<double>(b.batch * b.pages_per_seq);
}

void BM_MetadataTier(benchmark::State& state) {
  Batch b(state.range(0), 4096);
  for (auto _ : state) {
    attnref::Status s = attnref::check_paged_metadata(b.args, attnref::Profile::kJax);
    benchmark::DoNotOptimize(s);
  }
  const double pages = static_cast<double>(b.batch * b.pages_per_seq);
  state.counters["pages"] = pages;
  state.counters["ns_per_page"] = benchmark::Counter(
      pages, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

/// The data tier reads every live K/V element, so it runs on real buffers at a small context.
void BM_DataTier(benchmark::State& state) {
  const std::int64_t batch = state.range(0), ctx = 512, pps = ctx / kPage;
  Batch b(batch, ctx);
  std::vector<float> k(static_cast<std::size_t>(kKvHeads * batch * pps * kPage * kDim), 1.0f),
      v(k.size(), 2.0f);
  b.args.k_pages = {k.data(), {kKvHeads, batch * pps, kPage, kDim}};
  b.args.v_pages = {v.data(), {kKvHeads, batch * pps, kPage, kDim}};
  for (auto _ : state) {
    attnref::Status s = attnref::check_paged_data(b.args);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(2 * k.size() * 4));
}

BENCHMARK(BM_ShapeTier)->ArgName("B")->Arg(8)->Arg(32)->Arg(128)->Arg(256);
BENCHMARK(BM_MetadataTier)->ArgName("B")->Arg(8)->Arg(32)->Arg(128)->Arg(256);
BENCHMARK(BM_DataTier)->ArgName("B")->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
