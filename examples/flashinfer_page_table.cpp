// FlashInfer's way of describing a decode batch, validated and run through attnref:
//  - K/V caches in FlashInfer's NHD layout [total_pages, page_size, num_kv_heads, head_dim];
//  - a CSR page table: kv_indptr [B+1], kv_indices [nnz], kv_last_page_len [B].
// The same batch is also written the JAX way ([num_kv_heads, total_pages, page_size, head_dim]
// pages and a dense page table, built by hand here); both go through attnref::paged_attention
// and must agree. Then a broken table (last_page_len > page_size, flashinfer #320) is rejected.
#include <attnref/attnref.hpp>
#include <attnref/interop/flashinfer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

int main() {
  constexpr std::int64_t kBatch = 4, kHq = 8, kHkv = 2, kDim = 64, kPageSize = 16, kPages = 24;
  const std::vector<std::int64_t> seq_lens{37, 16, 1, 50};

  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(kBatch * kHq * kDim);
  for (float& x : q) x = normal(rng);
  // The cache, FlashInfer NHD: element (page p, slot s, head h, dim d).
  const std::int64_t pool = kPages * kPageSize * kHkv * kDim;
  std::vector<float> k_nhd(pool), v_nhd(pool);
  for (float& x : k_nhd) x = normal(rng);
  for (float& x : v_nhd) x = normal(rng);

  // Pages handed out in a shuffled order, as an allocator would after some churn.
  std::vector<std::int32_t> free_pages(kPages);
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);

  // FlashInfer's CSR description.
  std::vector<std::int32_t> kv_indptr{0}, kv_indices, kv_last_page_len;
  for (std::int64_t len : seq_lens) {
    const std::int64_t pages = (len + kPageSize - 1) / kPageSize;
    for (std::int64_t j = 0; j < pages; ++j) kv_indices.push_back(free_pages[kv_indices.size()]);
    kv_indptr.push_back(static_cast<std::int32_t>(kv_indices.size()));
    kv_last_page_len.push_back(static_cast<std::int32_t>(len - (pages - 1) * kPageSize));
  }
  std::vector<std::int32_t> lens32(seq_lens.begin(), seq_lens.end());
  attnref::FlashInferPageTable<std::int32_t> csr;
  csr.kv_indptr = {kv_indptr.data(), {kBatch + 1}};
  csr.kv_indices = {kv_indices.data(), {static_cast<std::int64_t>(kv_indices.size())}};
  csr.kv_last_page_len = {kv_last_page_len.data(), {kBatch}};
  csr.seq_lens = {lens32.data(), {kBatch}};  // cross-check against the engine's own lengths

  const attnref::TensorView<const float, 3> q_view(q.data(), {kBatch, kHq, kDim});
  const auto k_pages = attnref::kv_pages_view<const float>(k_nhd.data(), attnref::KvLayout::kNhd,
                                                           kHkv, kPages, kPageSize, kDim, pool);
  const auto v_pages = attnref::kv_pages_view<const float>(v_nhd.data(), attnref::KvLayout::kNhd,
                                                           kHkv, kPages, kPageSize, kDim, pool);
  attnref::DensePageTable<std::int32_t> table;
  attnref::PagedAttentionArgs<float> args;
  attnref::Status s = attnref::flashinfer_paged_args(csr, q_view, k_pages, v_pages, &table, &args);
  std::printf("flashinfer CSR -> dense table [%lld, %lld]: %s\n",
              static_cast<long long>(table.batch), static_cast<long long>(table.pages_per_sequence),
              s.to_string().c_str());
  if (!s.ok()) return 1;
  std::vector<float> out_fi(q.size());
  s = attnref::try_paged_attention(
      args, attnref::TensorView<float, 3>(out_fi.data(), {kBatch, kHq, kDim}));
  if (!s.ok()) {
    std::printf("paged_attention: %s\n", s.to_string().c_str());
    return 1;
  }

  // The same batch the JAX way, by hand: pages [Hkv, P, S, D], a dense table padded with 0.
  std::vector<float> k_jax(pool), v_jax(pool);
  for (std::int64_t p = 0; p < kPages; ++p)
    for (std::int64_t t = 0; t < kPageSize; ++t)
      for (std::int64_t h = 0; h < kHkv; ++h)
        for (std::int64_t d = 0; d < kDim; ++d) {
          const auto nhd = static_cast<std::size_t>(((p * kPageSize + t) * kHkv + h) * kDim + d);
          const auto jax = static_cast<std::size_t>(((h * kPages + p) * kPageSize + t) * kDim + d);
          k_jax[jax] = k_nhd[nhd];
          v_jax[jax] = v_nhd[nhd];
        }
  const std::int64_t pps = 4;  // ceil(50 / 16)
  std::vector<std::int32_t> page_indices(kBatch * pps, 0);
  for (std::int64_t b = 0; b < kBatch; ++b) {
    const auto row = static_cast<std::size_t>(b);
    for (std::int32_t i = kv_indptr[row]; i < kv_indptr[row + 1]; ++i)
      page_indices[static_cast<std::size_t>(b * pps + (i - kv_indptr[row]))] =
          kv_indices[static_cast<std::size_t>(i)];
  }
  attnref::PagedAttentionArgs<float> jax;
  jax.q = q_view;
  jax.k_pages = {k_jax.data(), {kHkv, kPages, kPageSize, kDim}};
  jax.v_pages = {v_jax.data(), {kHkv, kPages, kPageSize, kDim}};
  jax.lengths = {lens32.data(), {kBatch}};
  jax.page_indices = {page_indices.data(), {kBatch, pps}};
  s = attnref::check_paged(jax, attnref::Profile::kJax);
  std::printf("JAX-layout batch, jax profile: %s\n", s.to_string().c_str());
  std::vector<float> out_jax(q.size());
  attnref::paged_attention(jax, attnref::TensorView<float, 3>(out_jax.data(), {kBatch, kHq, kDim}));

  double max_diff = 0;
  for (size_t i = 0; i < q.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(out_fi[i] - out_jax[i])));
  std::printf("max |flashinfer - jax| = %.3g\n", max_diff);

  // A broken table: the last page of sequence 0 claims 17 tokens in a 16-token page.
  kv_last_page_len[0] = 17;
  s = attnref::check_flashinfer_page_table(csr, kPageSize, kPages);
  std::printf("broken table: %s\n", s.to_string().c_str());

  const bool ok = max_diff <= 1e-6 && s.code() == attnref::ErrorCode::kInvalidLastPageLen;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
