// SPDX-License-Identifier: Apache-2.0
// One serving step of continuous batching, as vLLM's TPU backend runs it: three sequences
// decoding one token each and two prompts being prefilled in chunks, all in one ragged batch over
// one shared page pool. Two of the decode sequences were forked from the same system prompt, so
// their first page is the same physical page.
//
// The engine owns every buffer; attnref only gets views. The step is validated once against
// JAX's rules (what the TPU kernel would accept) and against the reference profile, then run.
#include <attnref/attnref.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr std::int64_t kNumQHeads = 8, kNumKvHeads = 2, kHeadDim = 64;
constexpr std::int64_t kPageSize = 16, kTotalPages = 64;
constexpr std::int64_t kMaxSeqs = 8, kPagesPerSeq = 12, kMaxTokens = 96;

// Deterministic pseudo-random numbers in [-1, 1), so the checksum is reproducible.
struct Lcg {
  std::uint64_t state;
  float next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(state >> 40) / double(1 << 23)) - 1.0f;
  }
};

struct Sequence {
  const char* what;
  std::int32_t q_len;   // tokens computed this step
  std::int32_t kv_len;  // tokens in the cache after this step's K/V were written
  std::vector<std::int32_t> pages;
};

// A non-negative int64 index or size as a vector subscript.
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

int main() {
  // The page pool: [total_pages, page_size, 2 * num_kv_heads, head_dim], K of KV head h at
  // combined head 2h and V at 2h + 1. Unwritten slots hold NaN, as a real cache may hold garbage;
  // the kernel never reads them.
  std::vector<float> kv_pool(kTotalPages * kPageSize * 2 * kNumKvHeads * kHeadDim, std::nanf(""));
  Lcg rng{42};

  // Page 3 holds a 16-token system prompt shared by the two forked decode sequences.
  const std::int32_t kSharedPrefixPage = 3;
  std::vector<Sequence> seqs = {
      {"decode (fork A of system prompt)", 1, 37, {kSharedPrefixPage, 10, 11}},
      {"decode (fork B of system prompt)", 1, 21, {kSharedPrefixPage, 20}},
      {"decode (long chat)", 1, 130, {30, 31, 32, 33, 34, 35, 36, 37, 38}},
      {"chunked prefill (chunk 2 of a 100-token prompt)", 32, 80, {40, 41, 42, 43, 44}},
      {"chunked prefill (chunk 1 of a new prompt)", 24, 24, {50, 51}},
  };

  // Write the cache: every token of every sequence (the shared page is written once).
  auto slot = [&](std::int64_t page, std::int64_t s, std::int64_t c) {
    return ((page * kPageSize + s) * 2 * kNumKvHeads + c) * kHeadDim;
  };
  for (std::int64_t s = 0; s < kPageSize; ++s)
    for (std::int64_t c = 0; c < 2 * kNumKvHeads; ++c)
      for (std::int64_t d = 0; d < kHeadDim; ++d)
        kv_pool[at(slot(kSharedPrefixPage, s, c) + d)] = rng.next();
  for (const Sequence& seq : seqs)
    for (std::int64_t t = 0; t < seq.kv_len; ++t) {
      const std::int64_t page = seq.pages[at(t / kPageSize)];
      if (page == kSharedPrefixPage) continue;
      for (std::int64_t c = 0; c < 2 * kNumKvHeads; ++c)
        for (std::int64_t d = 0; d < kHeadDim; ++d)
          kv_pool[at(slot(page, t % kPageSize, c) + d)] = rng.next();
    }

  // Step metadata, padded to the engine's fixed maxima (JAX's kernel takes fixed shapes).
  std::vector<std::int32_t> kv_lens(kMaxSeqs, 0);
  std::vector<std::int32_t> page_indices(kMaxSeqs * kPagesPerSeq, 0);
  std::vector<std::int32_t> cu_q_lens(kMaxSeqs + 1, 0);
  std::int32_t num_seqs = static_cast<std::int32_t>(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    kv_lens[i] = seqs[i].kv_len;
    for (std::size_t p = 0; p < seqs[i].pages.size(); ++p)
      page_indices[i * kPagesPerSeq + p] = seqs[i].pages[p];
    cu_q_lens[i + 1] = cu_q_lens[i] + seqs[i].q_len;
  }
  for (std::int64_t i = num_seqs; i < kMaxSeqs; ++i) cu_q_lens[at(i + 1)] = cu_q_lens[at(i)];

  // Queries of this step's tokens, concatenated; rows past the last token are padding.
  std::vector<float> q(kMaxTokens * kNumQHeads * kHeadDim, 0.0f);
  for (std::int64_t i = 0; i < cu_q_lens[at(num_seqs)] * kNumQHeads * kHeadDim; ++i)
    q[at(i)] = rng.next();

  attnref::RaggedPagedAttentionArgs<float> args;
  args.q = {q.data(), {kMaxTokens, kNumQHeads, kHeadDim}};
  // JAX's combined pool [P, S, 2*Hkv, D] as the K and V views [Hkv, P, S, D] the args take.
  const attnref::TensorView<const float, 4> pool(
      kv_pool.data(), {kTotalPages, kPageSize, 2 * kNumKvHeads, kHeadDim});
  if (const attnref::Status s = attnref::ragged_kv_views(pool, &args.k_pages, &args.v_pages);
      !s.ok()) {
    std::printf("ragged_kv_views: %s\n", s.to_string().c_str());
    return 1;
  }
  args.kv_lens = {kv_lens.data(), {kMaxSeqs}};
  args.page_indices = {page_indices.data(), {kMaxSeqs, kPagesPerSeq}};
  args.cu_q_lens = {cu_q_lens.data(), {kMaxSeqs + 1}};
  args.num_seqs = {&num_seqs, {1}};
  args.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  args.soft_cap = 50.0f;

  // Would JAX's TPU kernel accept this step? And is it safe for the reference kernel?
  for (attnref::Profile profile : {attnref::Profile::kJax, attnref::Profile::kReference}) {
    const attnref::Status s = attnref::check_ragged(args, profile);
    std::printf("check_ragged (%s profile): %s\n", attnref::to_string(profile),
                s.to_string().c_str());
    if (!s.ok()) return 1;
  }

  // A common engine bug, caught before it runs: the new prompt's K/V not yet written to the
  // cache, so its kv_len is still 0 while it asks for 24 query rows.
  kv_lens[4] = 0;
  std::printf("with a stale kv_len: %s\n",
              attnref::check_ragged(args, attnref::Profile::kReference).to_string().c_str());
  kv_lens[4] = seqs[4].kv_len;

  std::vector<float> out(q.size());
  attnref::ragged_paged_attention(args, {out.data(), {kMaxTokens, kNumQHeads, kHeadDim}});

  std::printf("\n%-50s %6s %6s %10s %10s\n", "sequence", "q_len", "kv_len", "out[0,0,0]",
              "sum|out|");
  double checksum = 0.0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    double sum = 0.0;
    for (std::int64_t t = cu_q_lens[i]; t < cu_q_lens[i + 1]; ++t)
      for (std::int64_t e = 0; e < kNumQHeads * kHeadDim; ++e)
        sum += std::fabs(out[at(t * kNumQHeads * kHeadDim + e)]);
    checksum += sum;
    std::printf("%-50s %6d %6d %10.6f %10.4f\n", seqs[i].what, seqs[i].q_len, seqs[i].kv_len,
                out[at(cu_q_lens[i] * kNumQHeads * kHeadDim)], sum);
  }
  double padding = 0.0;
  for (std::int64_t e = cu_q_lens[at(num_seqs)] * kNumQHeads * kHeadDim;
       e < static_cast<std::int64_t>(out.size()); ++e)
    padding += std::fabs(out[at(e)]);
  std::printf("padding rows %d..%lld: sum|out| = %g (defined as zero)\n", cu_q_lens[at(num_seqs)],
              static_cast<long long>(kMaxTokens - 1), padding);
  std::printf("checksum (sum of |out| over live rows): %.6f\n", checksum);
  return 0;
}
