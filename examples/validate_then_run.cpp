// validate_then_run: the attnref workflow on a Llama-3-8B-shaped decode batch.
//   1. check the model configuration once (compile time when the numbers are constants);
//   2. describe the batch with views over the engine's own buffers and validate it;
//   3. see what a broken configuration reports;
//   4. run the paged kernel and compare it with a plain implementation.
#include <attnref/attnref.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace {

constexpr std::int64_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageSize = 16;
constexpr std::int64_t kBatch = 8, kPagesPerSeq = 64;  // up to 1024 tokens per sequence
constexpr attnref::AttentionConfig kLlama3_8b{kQHeads, kKvHeads, kHeadDim, {}, kPageSize};
static_assert(attnref::check_config(kLlama3_8b).ok(), "checked at compile time");

/// One query head, one sequence, the textbook way: gather, softmax, weighted sum.
void plain_attention(const attnref::PagedAttentionArgs<float>& a, std::int64_t b, std::int64_t qh,
                     float* out) {
  const std::int64_t h = attnref::kv_head_of(qh, kQHeads, kKvHeads), len = a.lengths(b);
  std::vector<double> w(static_cast<std::size_t>(len));
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t page = a.page_indices(b, t / kPageSize);
    double dot = 0;
    for (std::int64_t d = 0; d < kHeadDim; ++d)
      dot += double(a.q(b, qh, d)) * a.k_pages(h, page, t % kPageSize, d);
    w[static_cast<std::size_t>(t)] = dot * a.sm_scale;
  }
  const double m = len ? *std::max_element(w.begin(), w.end()) : 0.0;
  double sum = 0;
  for (double& x : w) sum += (x = std::exp(x - m));
  for (std::int64_t d = 0; d < kHeadDim; ++d) {
    double acc = 0;
    for (std::int64_t t = 0; t < len; ++t)
      acc += w[static_cast<std::size_t>(t)] / sum *
             a.v_pages(h, a.page_indices(b, t / kPageSize), t % kPageSize, d);
    out[d] = static_cast<float>(acc);
  }
}

}  // namespace

int main() {
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal;
  const std::int64_t total_pages = kBatch * kPagesPerSeq;

  // The engine's buffers: q [B, Hq, D], a page pool [Hkv, P, S, D] for K and for V.
  std::vector<float> q(kBatch * kQHeads * kHeadDim),
      k(kKvHeads * total_pages * kPageSize * kHeadDim), v(k.size());
  for (auto* buf : {&q, &k, &v})
    for (float& x : *buf) x = normal(rng);
  std::vector<std::int32_t> lengths{1, 17, 100, 256, 511, 700, 1000, 1024};
  std::vector<std::int32_t> table(kBatch * kPagesPerSeq);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);  // pages anywhere in the pool

  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {kBatch, kQHeads, kHeadDim}};
  args.k_pages = attnref::kv_pages_view<const float>(k.data(), attnref::KvLayout::kJax, kKvHeads,
                                                     total_pages, kPageSize, kHeadDim);
  args.v_pages = attnref::kv_pages_view<const float>(v.data(), attnref::KvLayout::kJax, kKvHeads,
                                                     total_pages, kPageSize, kHeadDim);
  args.lengths = {lengths.data(), {kBatch}};
  args.page_indices = {table.data(), {kBatch, kPagesPerSeq}};
  args.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  args.pages_per_compute_block = 8;

  // Would JAX's TPU kernel accept this batch? (Shape + metadata tiers.)
  const attnref::Status jax = attnref::check_paged(args, attnref::Profile::kJax);
  std::printf("validate (jax profile): %s\n", jax.to_string().c_str());

  // A broken configuration: 8 query heads cannot share 6 KV heads.
  const attnref::Status broken = attnref::check_heads(8, 6);
  std::printf("broken config: error[%s] %s\n  hint: %s\n", attnref::error_code_name(broken.code()),
              broken.message().c_str(), broken.hint().c_str());

  // Run (validates with the reference profile first) and time it.
  std::vector<float> out(q.size());
  attnref::TensorView<float, 3> out_view(out.data(), {kBatch, kQHeads, kHeadDim});
  const auto start = std::chrono::steady_clock::now();
  attnref::paged_attention(args, out_view);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  // Check against the plain implementation.
  double max_err = 0, checksum = 0;
  std::vector<float> row(kHeadDim);
  for (std::int64_t b = 0; b < kBatch; ++b)
    for (std::int64_t qh = 0; qh < kQHeads; ++qh) {
      plain_attention(args, b, qh, row.data());
      for (std::int64_t d = 0; d < kHeadDim; ++d) {
        const float got = out_view(b, qh, d);
        max_err = std::max(max_err, double(std::fabs(got - row[static_cast<std::size_t>(d)])));
        checksum += got;
      }
    }
  std::printf("paged_attention: B=%lld Hq=%lld Hkv=%lld D=%lld page=%lld in %.2f ms\n",
              static_cast<long long>(kBatch), static_cast<long long>(kQHeads),
              static_cast<long long>(kKvHeads), static_cast<long long>(kHeadDim),
              static_cast<long long>(kPageSize), ms);
  std::printf("max |kernel - plain| = %.3g, checksum = %.6f\n", max_err, checksum);
  return jax.ok() && !broken.ok() && max_err < 1e-4 ? 0 : 1;
}
