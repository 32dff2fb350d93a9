// SPDX-License-Identifier: Apache-2.0
// A prefill step of a model that mixes global (causal) and sliding-window (local) heads, as
// Gemma-style models do, over a packed batch of two documents. Segment ids keep the documents
// apart, and the mask says the same thing so that the tiles that cross a document boundary are
// classified as empty and skipped (segment ids alone never skip a tile, in JAX or here).
//
// The step is validated against JAX's rules (what the TPU kernel would accept), then run with
// block skipping and once more as one dense tile, to show the work skipped and the time saved.
#include <attnref/attnref.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr std::int64_t kNumQHeads = 8, kNumKvHeads = 2, kHeadDim = 64;
constexpr std::int64_t kSeqLen = 2048;       // two packed documents
constexpr std::int64_t kFirstDocLen = 1280;  // tokens [0, 1280) are document 0
constexpr std::int64_t kWindow = 256;        // local heads see 256 tokens back

struct Lcg {
  std::uint64_t state;
  float next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(state >> 40) / double(1 << 23)) - 1.0f;
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  Lcg rng{7};
  std::vector<float> q(kNumQHeads * kSeqLen * kHeadDim), k(kNumKvHeads * kSeqLen * kHeadDim),
      v(kNumKvHeads * kSeqLen * kHeadDim);
  for (auto* buf : {&q, &k, &v})
    for (float& x : *buf) x = rng.next();
  std::vector<std::int32_t> segment_ids(kSeqLen);
  for (std::int64_t t = 0; t < kSeqLen; ++t)
    segment_ids[static_cast<std::size_t>(t)] = t < kFirstDocLen ? 0 : 1;

  attnref::SplashAttentionArgs<float> args;
  args.q = {q.data(), {kNumQHeads, kSeqLen, kHeadDim}};
  args.k = {k.data(), {kNumKvHeads, kSeqLen, kHeadDim}};
  args.v = {v.data(), {kNumKvHeads, kSeqLen, kHeadDim}};
  args.q_segment_ids = {segment_ids.data(), {kSeqLen}};
  args.kv_segment_ids = {segment_ids.data(), {kSeqLen}};
  args.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  args.soft_cap = 50.0f;
  args.block_sizes = attnref::SplashBlockSizes::get_default();  // 128 everywhere

  // Even heads global (causal), odd heads local; all heads stay inside their document.
  const attnref::MaskShape shape{kSeqLen, kSeqLen};
  auto same_doc = attnref::make_predicate_mask(shape, [](std::int64_t qi, std::int64_t kv) {
    return (qi < kFirstDocLen) == (kv < kFirstDocLen);
  });
  const attnref::AnyMask global = attnref::CausalMask{shape} & same_doc;
  const attnref::AnyMask local = attnref::LocalMask{shape, kWindow, 0, 0} & same_doc;
  std::vector<attnref::AnyMask> heads;
  for (std::int64_t h = 0; h < kNumQHeads; ++h) heads.push_back(h % 2 == 0 ? global : local);
  const attnref::MultiHeadMask mask(heads);

  // Would JAX's TPU kernel accept this call? (It checks block divisibility, lane widths, ...)
  if (attnref::Status s = attnref::check_splash(args, mask, attnref::Profile::kJax); !s.ok()) {
    std::printf("JAX would reject this call: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("check_splash(jax profile): ok\n");

  // Classify once; reuse the MaskInfo for every layer of the step.
  auto t0 = std::chrono::steady_clock::now();
  const attnref::MaskInfo info =
      attnref::make_mask_info(mask, args.block_sizes.block_q, args.block_sizes.block_kv);
  const double classify_s = seconds_since(t0);
  const attnref::BlockCounts counts = info.counts();
  const std::int64_t total = counts.empty + counts.partial + counts.full;
  std::printf(
      "tiles of %lldx%lld over %lld mask rows: %lld empty (skipped), %lld partial, %lld full "
      "(%.1f%% skipped; %lld distinct partial patterns; classified in %.1f ms)\n",
      static_cast<long long>(info.block_q), static_cast<long long>(info.block_kv),
      static_cast<long long>(info.num_heads), static_cast<long long>(counts.empty),
      static_cast<long long>(counts.partial), static_cast<long long>(counts.full),
      100.0 * static_cast<double>(counts.empty) / static_cast<double>(total),
      static_cast<long long>(info.num_partial_blocks()), 1e3 * classify_s);

  std::vector<float> out(kNumQHeads * kSeqLen * kHeadDim), lse(kNumQHeads * kSeqLen);
  attnref::TensorView<float, 3> out_view(out.data(), {kNumQHeads, kSeqLen, kHeadDim});
  attnref::TensorView<float, 2> lse_view(lse.data(), {kNumQHeads, kSeqLen});
  attnref::SplashPlan<float> plan;  // checks the call against the MaskInfo, O(1)
  attnref::throw_if_error(attnref::make_splash_plan(args, info, &plan));
  t0 = std::chrono::steady_clock::now();
  attnref::splash_attention(plan, out_view, lse_view);
  const double sparse_s = seconds_since(t0);

  // The dense computation: one tile covering the whole sequence, so nothing is skipped and the
  // mask is evaluated everywhere.
  attnref::SplashAttentionArgs<float> dense_args = args;
  dense_args.block_sizes = attnref::SplashBlockSizes{};
  dense_args.block_sizes.block_q = kSeqLen;
  dense_args.block_sizes.block_kv = kSeqLen;
  std::vector<float> dense_out(out.size()), dense_lse(lse.size());
  t0 = std::chrono::steady_clock::now();
  attnref::splash_attention(
      dense_args, mask,
      attnref::TensorView<float, 3>(dense_out.data(), {kNumQHeads, kSeqLen, kHeadDim}),
      attnref::TensorView<float, 2>(dense_lse.data(), {kNumQHeads, kSeqLen}));
  const double dense_s = seconds_since(t0);

  double max_diff = 0, checksum = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    max_diff = std::fmax(max_diff, std::fabs(out[i] - dense_out[i]));
    checksum += out[i];
  }
  std::printf(
      "block-sparse forward: %.1f ms; dense (one tile, includes classification): %.1f ms; "
      "speed-up %.2fx\n",
      1e3 * sparse_s, 1e3 * dense_s, dense_s / sparse_s);
  std::printf("max |sparse - dense| = %.3g; checksum %.6f; lse[head 1, token 2047] = %.4f\n",
              max_diff, checksum, static_cast<double>(lse[1 * kSeqLen + 2047]));
  return max_diff < 1e-4 ? 0 : 2;
}
