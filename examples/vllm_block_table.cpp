// vLLM's way of describing a decode batch, validated and run through attnref:
//  - one KV tensor per layer in the v1 FlashInfer backend's form
//    [num_blocks, 2, block_size, num_kv_heads, head_size] (K and V adjacent in each block);
//  - block_table [num_seqs, max_blocks] whose rows end in -1, and seq_lens [num_seqs].
// attnref describes it with strides only (no copies). The same batch written the JAX way
// ([num_kv_heads, total_pages, page_size, head_dim] pages, built by hand here) must give the
// same output. Then the two mistakes this form invites are shown: -1 padding without saying so,
// and assuming dense blocks (block stride = block_size x token stride, ROCm/aiter #3498).
#include <attnref/attnref.hpp>
#include <attnref/interop/vllm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

int main() {
  constexpr std::int64_t kSeqs = 4, kHq = 8, kHkv = 2, kDim = 64, kBlockSize = 16, kBlocks = 24;
  constexpr std::int64_t kMaxBlocks = 5;
  const std::vector<std::int32_t> seq_lens{37, 16, 1, 50};

  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(kSeqs * kHq * kDim);
  for (float& x : q) x = normal(rng);
  // [num_blocks, 2, block_size, num_kv_heads, head_size]: element (block n, kv, slot s, head h, d).
  const std::int64_t block_elems = kBlockSize * kHkv * kDim;
  std::vector<float> kv_cache(kBlocks * 2 * block_elems);
  for (float& x : kv_cache) x = normal(rng);

  std::vector<std::int32_t> free_blocks(kBlocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<std::int32_t> block_table(kSeqs * kMaxBlocks, -1);  // vLLM pads rows with -1
  std::size_t next = 0;
  for (std::int64_t b = 0; b < kSeqs; ++b)
    for (std::int64_t j = 0; j * kBlockSize < seq_lens[static_cast<std::size_t>(b)]; ++j)
      block_table[static_cast<std::size_t>(b * kMaxBlocks + j)] = free_blocks[next++];

  attnref::VllmKvCache<float> cache;
  cache.layout = attnref::VllmKvLayout::kBlockFirst;
  cache.kv_cache = {kv_cache.data(),
                    {kBlocks, 2, kBlockSize, kHkv, kDim},
                    static_cast<std::int64_t>(kv_cache.size())};
  cache.block_size = kBlockSize;  // the engine's config: catches a cache in the wrong layout
  cache.num_kv_heads = kHkv;
  cache.head_size = kDim;
  attnref::VllmBlockTable<std::int32_t> table;
  table.block_table = {block_table.data(), {kSeqs, kMaxBlocks}};
  table.seq_lens = {seq_lens.data(), {kSeqs}};
  const attnref::TensorView<const float, 3> q_view(q.data(), {kSeqs, kHq, kDim});

  // Mistake 1: -1 padding under the default policy.
  attnref::PagedAttentionArgs<float> args;
  attnref::Status s = attnref::vllm_paged_args(cache, table, q_view, &args);
  std::printf("padding not declared: %s\n", s.to_string().c_str());
  const bool caught_padding = s.code() == attnref::ErrorCode::kPageIndexOutOfRange;
  // Mistake 2: declaring dense blocks for a cache that interleaves K and V per block.
  table.padding = attnref::PaddingPolicy::kSkip;
  cache.dense_blocks = true;
  s = attnref::vllm_paged_args(cache, table, q_view, &args);
  std::printf("dense blocks declared: %s\n", s.to_string().c_str());
  const bool caught_dense = s.code() == attnref::ErrorCode::kInvalidPageStride;
  cache.dense_blocks = false;

  s = attnref::vllm_paged_args(cache, table, q_view, &args);
  std::printf("vllm block_first cache + block table (padding: skip): %s\n", s.to_string().c_str());
  if (!s.ok()) return 1;
  std::printf("  K view strides (head, block, slot, dim) = (%lld, %lld, %lld, %lld)\n",
              static_cast<long long>(args.k_pages.strides[0]),
              static_cast<long long>(args.k_pages.strides[1]),
              static_cast<long long>(args.k_pages.strides[2]),
              static_cast<long long>(args.k_pages.strides[3]));
  std::vector<float> out_vllm(q.size());
  s = attnref::try_paged_attention(
      args, attnref::TensorView<float, 3>(out_vllm.data(), {kSeqs, kHq, kDim}));
  if (!s.ok()) {
    std::printf("paged_attention: %s\n", s.to_string().c_str());
    return 1;
  }

  // The same batch the JAX way, by hand. JAX's table may not hold -1 where its kernel DMAs, so
  // padding becomes page 0.
  const std::int64_t pool = kBlocks * block_elems;
  std::vector<float> k_jax(pool), v_jax(pool);
  for (std::int64_t n = 0; n < kBlocks; ++n)
    for (std::int64_t t = 0; t < kBlockSize; ++t)
      for (std::int64_t h = 0; h < kHkv; ++h)
        for (std::int64_t d = 0; d < kDim; ++d) {
          const auto k_at =
              static_cast<std::size_t>(((n * 2 + 0) * kBlockSize + t) * kHkv * kDim + h * kDim + d);
          const auto v_at =
              static_cast<std::size_t>(((n * 2 + 1) * kBlockSize + t) * kHkv * kDim + h * kDim + d);
          const auto jax =
              static_cast<std::size_t>(((h * kBlocks + n) * kBlockSize + t) * kDim + d);
          k_jax[jax] = kv_cache[k_at];
          v_jax[jax] = kv_cache[v_at];
        }
  std::vector<std::int32_t> page_indices(block_table);
  for (std::int32_t& p : page_indices) p = p < 0 ? 0 : p;
  attnref::PagedAttentionArgs<float> jax;
  jax.q = q_view;
  jax.k_pages = {k_jax.data(), {kHkv, kBlocks, kBlockSize, kDim}};
  jax.v_pages = {v_jax.data(), {kHkv, kBlocks, kBlockSize, kDim}};
  jax.lengths = {seq_lens.data(), {kSeqs}};
  jax.page_indices = {page_indices.data(), {kSeqs, kMaxBlocks}};
  s = attnref::check_paged(jax, attnref::Profile::kJax);
  std::printf("JAX-layout batch, jax profile: %s\n", s.to_string().c_str());
  std::vector<float> out_jax(q.size());
  attnref::paged_attention(jax, attnref::TensorView<float, 3>(out_jax.data(), {kSeqs, kHq, kDim}));

  double max_diff = 0;
  for (size_t i = 0; i < q.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(out_vllm[i] - out_jax[i])));
  std::printf("max |vllm - jax| = %.3g\n", max_diff);

  const bool ok = max_diff <= 1e-6 && caught_padding && caught_dense;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
