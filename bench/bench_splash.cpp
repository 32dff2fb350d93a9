// SPDX-License-Identifier: Apache-2.0
// Splash attention forward and backward, D = 128, Hq/Hkv in {8/8, 8/2}, masks full / causal /
// local(256) / chunked(512), f32 and bf16, blocks 128 (JAX's defaults), single thread.
//
// Counters:
//   useful_GFLOPs  matmul FLOPs of the allowed (non-empty) tiles only, per second:
//                  forward 2*r*c*(Dqk + Dv) per tile and query head; backward 2*r*c*(3*Dqk + 2*Dv)
//   tiles_run      fraction of the (head, q block, kv block) tiles that are not skipped
//   probe_GFLOPs   an Eigen float GEMM [Sq, 128] x [128, 1024] run in the same benchmark (median
//                  of 3), the machine's single-thread matmul throughput
//   frac_probe     useful_GFLOPs / probe_GFLOPs
//
// The default run covers Sq = Skv = 1024, and f32 causal at 2048 and 4096 (the prefill targets
// of bench/targets.py, repeated as the command line asks). Set ATTNREF_BENCH_SPLASH_LONG=1 to
// add every case at 2048 and 4096 (slow on a small machine: a full-mask f32 forward at 4096 is
// ~69 GFLOP).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <Eigen/Core>

#include <attnref/attnref.hpp>
#include "isa_context.hpp"

namespace {

constexpr std::int64_t kHeadDim = 128, kNumQHeads = 8, kBlock = 128;

/// Single-thread float GEMM throughput of Eigen at [rows, 128] x [128, 1024], median of 3.
double probe_sgemm_gflops(std::int64_t rows) {
  static std::map<std::int64_t, double> cache;
  if (auto it = cache.find(rows); it != cache.end()) return it->second;
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Mat a = Mat::Random(rows, kHeadDim), b = Mat::Random(kHeadDim, 1024);
  Mat c(rows, 1024);
  std::vector<double> rates;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * static_cast<double>(rows) * kHeadDim * 1024 / s * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  return cache[rows] = rates[1];
}

attnref::MultiHeadMask make_mask(int kind, std::int64_t s) {
  const attnref::MaskShape shape{s, s};
  attnref::AnyMask m;
  switch (kind) {
    case 0:
      m = attnref::FullMask{shape};
      break;
    case 1:
      m = attnref::CausalMask{shape};
      break;
    case 2:
      m = attnref::LocalMask{shape, 256, 0, 0};
      break;
    default:
      m = attnref::ChunkedCausalMask{shape, 512};
      break;
  }
  return attnref::MultiHeadMask{m};
}

template <class T>
struct Inputs {
  std::int64_t s = 0, hkv = 0;
  std::vector<T> q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;
  attnref::MaskInfo info;

  attnref::SplashAttentionArgs<T> args() const {
    attnref::SplashAttentionArgs<T> a;
    a.q = {q.data(), {kNumQHeads, s, kHeadDim}};
    a.k = {k.data(), {hkv, s, kHeadDim}};
    a.v = {v.data(), {hkv, s, kHeadDim}};
    a.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    a.block_sizes = attnref::SplashBlockSizes::get_default();
    return a;
  }
};

template <class T>
Inputs<T>& inputs(std::int64_t s, std::int64_t hkv, int mask) {
  static std::map<std::tuple<std::int64_t, std::int64_t, int>, std::unique_ptr<Inputs<T>>> cache;
  auto& slot = cache[{s, hkv, mask}];
  if (slot) return *slot;
  cache.clear();  // keep one problem alive at a time
  auto& fresh = cache[{s, hkv, mask}];
  fresh = std::make_unique<Inputs<T>>();
  Inputs<T>& in = *fresh;
  in.s = s;
  in.hkv = hkv;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](std::vector<T>& x, std::int64_t n) {
    x.resize(static_cast<size_t>(n));
    for (auto& e : x) e = static_cast<T>(u(rng));
  };
  fill(in.q, kNumQHeads * s * kHeadDim);
  fill(in.k, hkv * s * kHeadDim);
  fill(in.v, hkv * s * kHeadDim);
  fill(in.dout, kNumQHeads * s * kHeadDim);
  in.out.resize(in.q.size());
  in.dq.resize(in.q.size());
  in.dk.resize(in.k.size());
  in.dv.resize(in.v.size());
  in.lse.resize(static_cast<size_t>(kNumQHeads * s));
  in.info = attnref::make_mask_info(make_mask(mask, s), kBlock, kBlock);
  return in;
}

/// Tiles run and allowed-tile matmul FLOPs (per unit of `per_elem` FLOPs per score).
std::pair<double, double> useful(const attnref::MaskInfo& info, double per_score) {
  double flops = 0, run = 0, total = 0;
  for (std::int64_t h = 0; h < kNumQHeads; ++h)
    for (std::int64_t i = 0; i < info.num_q_blocks; ++i)
      for (std::int64_t j = 0; j < info.num_kv_blocks; ++j) {
        ++total;
        if (info.kind(h, i, j) == attnref::BlockKind::kEmpty) continue;
        ++run;
        flops += per_score * static_cast<double>(info.q_rows(i) * info.kv_cols(j));
      }
  return {run / total, flops};
}

const char* const kMaskNames[] = {"full", "causal", "local256", "chunked512"};

template <class T>
void run(benchmark::State& state, bool backward, std::int64_t s, std::int64_t hkv, int mask) {
  Inputs<T>& in = inputs<T>(s, hkv, mask);
  const auto a = in.args();
  const attnref::TensorView<T, 3> out(in.out.data(), {kNumQHeads, s, kHeadDim});
  const attnref::TensorView<float, 2> lse(in.lse.data(), {kNumQHeads, s});
  attnref::SplashPlan<T> plan;  // over the cached MaskInfo: classification is not timed
  attnref::throw_if_error(attnref::make_splash_plan(a, in.info, &plan));
  attnref::splash_attention(plan, out, lse);  // residuals for the backward
  attnref::SplashGradients<T> g;
  g.dq = {in.dq.data(), {kNumQHeads, s, kHeadDim}};
  g.dk = {in.dk.data(), {hkv, s, kHeadDim}};
  g.dv = {in.dv.data(), {hkv, s, kHeadDim}};
  for (auto _ : state) {
    if (backward) {
      attnref::splash_attention_backward(
          plan, attnref::TensorView<const T, 3>(out), attnref::TensorView<const float, 2>(lse),
          attnref::TensorView<const T, 3>(in.dout.data(), {kNumQHeads, s, kHeadDim}), g);
      benchmark::DoNotOptimize(in.dq.data());
    } else {
      attnref::splash_attention(plan, out, lse);
      benchmark::DoNotOptimize(in.out.data());
    }
  }
  const double per_score = backward ? 2.0 * (3 * kHeadDim + 2 * kHeadDim) : 2.0 * (2 * kHeadDim);
  const auto [run_frac, flops] = useful(in.info, per_score);
  state.counters["useful_GFLOPs"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tiles_run"] = run_frac;
  const double probe = probe_sgemm_gflops(s);
  state.counters["probe_GFLOPs"] = probe;
  state.counters["frac_probe"] =
      benchmark::Counter(flops * 1e-9 / probe, benchmark::Counter::kIsIterationInvariantRate);
}

/// BM_Splash<Forward|Backward>/<dtype>/S:<length>/Hkv:<8|2>/<mask>, one iteration each, once
/// (`repeated`: as many repetitions as the command line asks for, for medians).
template <class T>
void register_case(const char* dtype, bool backward, std::int64_t s, std::int64_t hkv, int mask,
                   bool repeated) {
  const std::string name = std::string(backward ? "BM_SplashBackward/" : "BM_SplashForward/") +
                           dtype + "/S:" + std::to_string(s) + "/Hkv:" + std::to_string(hkv) + "/" +
                           kMaskNames[mask];
  auto* b = benchmark::RegisterBenchmark(name.c_str(),
                                         [backward, s, hkv, mask](benchmark::State& state) {
                                           run<T>(state, backward, s, hkv, mask);
                                         })
                ->Unit(benchmark::kMillisecond)
                ->Iterations(1)
                ->UseRealTime();
  if (!repeated) b->Repetitions(1);
}

/// Every mask and both KV head counts at each length.
template <class T>
void register_splash(const char* dtype, const std::vector<std::int64_t>& lengths) {
  for (bool backward : {false, true})
    for (std::int64_t s : lengths)
      for (std::int64_t hkv : {8, 2})
        for (int mask = 0; mask < 4; ++mask) register_case<T>(dtype, backward, s, hkv, mask, false);
}

constexpr int kCausal = 1;

const bool kSplashRegistered = [] {
  const char* env = std::getenv("ATTNREF_BENCH_SPLASH_LONG");
  const bool long_run = env && env[0] == '1';
  std::vector<std::int64_t> lengths = {1024};
  if (long_run) lengths.insert(lengths.end(), {2048, 4096});
  register_splash<float>("f32", lengths);
  register_splash<Eigen::bfloat16>("bf16", lengths);
  // The prefill targets (bench/targets.py): f32, causal, S = 2048 and 4096, in every run,
  // repeated for medians.
  if (!long_run)
    for (bool backward : {false, true})
      for (std::int64_t s : {2048, 4096})
        for (std::int64_t hkv : {8, 2})
          register_case<float>("f32", backward, s, hkv, kCausal, true);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
