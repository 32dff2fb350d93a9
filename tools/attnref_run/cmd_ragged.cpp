// SPDX-License-Identifier: Apache-2.0
// attnref-run ragged: validates ragged paged attention inputs (continuous batching: prefill and
// decode sequences in one ragged batch) given as .npy files, under the `reference` or `jax`
// profile, then runs attnref's reference kernel and writes or compares the result.
//
// K and V come as JAX's combined pool (--kv-pages, made into two views by ragged_kv_views) or
// as two files in any --kv-layout (--k-pages, --v-pages: a vLLM or FlashInfer cache as saved).
// Element types: the library's table (core/kv_dtypes.hpp: q float16, float32, float64 or
// bfloat16 via --q-dtype; int8 pages dequantized with --k-scale/--v-scale; one kernel per pair).
// kv_lens, page_indices and cu_q_lens are validated with their own dtype (int32 or int64, so the
// `jax` profile's R5 sees the real one), then widened to int64 for the run, which changes no value
// and no reference-profile check. num_seqs is a one-element integer array (JAX's R1).
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../frontend/ragged.hpp"
#include "attnref/compare/ragged.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The ragged call and the result options of one `ragged` invocation.
struct RaggedRun {
  frontend::RaggedInputs in;
  Input expect, expect_lse;
  bool check_only = false;
};

/// Runs the kernel over validated args and finishes the output.
template <class Q, class KV>
int run_kernel(const ParsedArgs& args, const RaggedRun& run,
               const RaggedPagedAttentionArgs<Q, KV, std::int64_t>& a) {
  return run_and_finish<Q>(
      args, run.expect, run.expect_lse, run.in.q.dtype,
      {a.max_num_batched_tokens(), a.num_q_heads(), a.q.extents[2]},
      [&](TensorView<Q, 3> out, TensorView<float, 2> lse) {
        return try_ragged_paged_attention(a, out, lse);
      },
      [&](const auto& got, const auto& got_lse, const compare::Options& opt,
          compare::Report* report) {
        return compare::try_compare_ragged(a, got, got_lse, opt, report);
      });
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
int validate_and_run(const ParsedArgs& args, const RaggedRun& run) {
  if (run.check_only) {
    frontend::check_ragged_call(run.in);
    std::cout << "ok\n";
    return kExitOk;
  }
  int status = kExitOk;
  frontend::with_ragged_run_args(run.in, [&](const auto& a) { status = run_kernel(args, run, a); });
  return status;
}

/// The subcommand's usage, help text and options.
const CommandSpec& ragged_spec() {
  static const CommandSpec kSpec{
      "ragged",
      "--q Q.npy --kv-pages KV.npy --kv-lens L.npy --page-indices PI.npy\n"
      "       --cu-q-lens C.npy --num-seqs N.npy [--sm-scale S] [--sliding-window W]\n"
      "       [--soft-cap C] [--mask-value M] [--k-scale S] [--v-scale S]\n"
      "       [--sinks S.npy] [--alibi-slopes A.npy]\n"
      "       [--num-kv-pages-per-block N] [--num-queries-per-block N] [--vmem-limit-bytes N]\n"
      "       [--q-dtype bf16] [--kv-dtype bf16|e4m3|e5m2]\n"
      "       [--profile jax|reference] [--check-only] [--check-data] [--out OUT.npy]\n"
      "       [--lse-out LSE.npy] [--expect EXP.npy [--atol A] [--rtol R]\n"
      "        [--expect-lse LSE.npy] [--ignore-padding]]\n"
      "   or: --k-pages K.npy --v-pages V.npy [--kv-layout jax|nhd|hnd] in place of --kv-pages",
      "Ragged paged attention (continuous batching): sequence i owns query rows\n"
      "[cu_q_lens[i], cu_q_lens[i+1]) and kv_lens[i] cached tokens; row r of a sequence with\n"
      "q_len rows sits at position kv_len - q_len + r and attends causally (and within the\n"
      "sliding window) to its sequence's keys, the logits cap(sm_scale * q . k) + slope[h] *\n"
      "(key - position) with --alibi-slopes, one sink logit per head with --sinks. K and V share "
      "one pool [P, S, 2 * Hkv, D]: K of\n"
      "KV head h at combined head 2h, V at 2h + 1 (JAX's form); or, with --k-pages and\n"
      "--v-pages instead of --kv-pages, two pools in the --kv-layout order (an engine's cache).\n"
      "Output rows past cu_q_lens[num_seqs] are 0. --lse-out writes each row's natural\n"
      "logsumexp [max_num_batched_tokens, num_q_heads], -inf on those padding rows.\n"
      "Validates the inputs under the chosen profile (jax: every check JAX's Pallas TPU kernel\n"
      "makes; reference: what the math and memory safety need), then runs attnref's kernel.\n"
      "q and the pages are float16/float32/float64 (pages of q's dtype) or the pages int8;\n"
      "float32 and bfloat16 q also read float32, bfloat16, float16 and fp8 pages. bf16 and fp8\n"
      "dumps hold raw codes (uint16 or |V2, uint8 or |V1): name them with --q-dtype and\n"
      "--kv-dtype.\n"
      "kv_lens, page_indices and cu_q_lens int32 or int64 (int32 under --profile jax).",
      with_common_options(
          {{"--q", "Q.npy", "queries [max_num_batched_tokens, num_q_heads, head_dim]"},
           {"--kv-pages", "KV.npy",
            "combined K/V pages [total_pages, page_size, 2 * Hkv, head_dim]"},
           {"--k-pages", "K.npy", "key pages, 4-d in the --kv-layout order (not with --kv-pages)"},
           {"--v-pages", "V.npy", "value pages, same shape as the key pages"},
           {"--kv-layout", "L",
            "layout of --k-pages/--v-pages: jax [Hkv,P,S,D] (default), nhd [P,S,Hkv,D], "
            "hnd [P,Hkv,S,D]"},
           {"--kv-lens", "L.npy", "cached tokens of each sequence [max_num_seqs]"},
           {"--page-indices", "PI.npy", "page table [max_num_seqs, pages_per_seq]"},
           {"--cu-q-lens", "C.npy", "cumulative query lengths [max_num_seqs + 1]"},
           {"--num-seqs", "N.npy", "live sequence count, a one-element integer array [1]"},
           {"--sliding-window", "W", "attend to the last W positions only (W > 0)"},
           {"--k-scale", "S", "K dequantization: k = q_dtype(float(k) * S)"},
           {"--v-scale", "S", "V dequantization: v = q_dtype(float(v) * S)"},
           {"--sinks", "S.npy", "attention-sink logits [num_q_heads] (float)"},
           {"--num-kv-pages-per-block", "N",
            "JAX's KV blocking, in (0, pages_per_seq] (no numerical effect)"},
           {"--num-queries-per-block", "N", "JAX's query blocking, > 0 (no numerical effect)"},
           {"--vmem-limit-bytes", "N", "JAX's VMEM limit, > 0 (no numerical effect)"},
           kQDtypeOption,
           kKvDtypeOption,
           {"--lse-out", "LSE.npy",
            "write logsumexp [max_num_batched_tokens, num_q_heads] as float32 .npy"},
           kExpectLseOption,
           kIgnorePaddingOption})};
  return kSpec;
}

}  // namespace

int run_ragged(int argc, char** argv) {
  const CommandSpec& spec = ragged_spec();
  const ParsedArgs args(spec, argc, argv);
  if (args.help_requested()) return print_help(spec);

  RaggedRun run;
  frontend::RaggedInputs& in = run.in;
  // Options first: a usage error costs no file reading.
  const CommonOptions common = parse_common_options(args);
  in.common = frontend_options(common);
  run.check_only = common.check_only;
  const DType q_as = dtype_option(args, "--q-dtype");
  const DType kv_as = dtype_option(args, "--kv-dtype");
  in.sliding_window = args.int64("--sliding-window");
  in.num_kv_pages_per_block = args.int64("--num-kv-pages-per-block");
  in.num_queries_per_block = args.int64("--num-queries-per-block");
  in.vmem_limit_bytes = args.int64("--vmem-limit-bytes");
  (void)args.real("--k-scale");  // syntax errors (exit 1) before value errors (exit 2)
  (void)args.real("--v-scale");
  in.layout = kv_layout_option(args);
  const bool separate = args.has("--k-pages") || args.has("--v-pages");
  if (separate && args.has("--kv-pages"))
    args.usage_error("give --kv-pages (JAX's combined pool) or --k-pages and --v-pages, not both");
  if (!separate && args.has("--kv-layout"))
    args.usage_error("--kv-layout describes --k-pages and --v-pages; --kv-pages is JAX's pool");
  // Required options in the order the usage line gives them.
  args.required("--q");
  if (separate) {
    args.required("--k-pages");
    args.required("--v-pages");
  } else {
    args.required("--kv-pages");
  }
  for (const char* required : {"--kv-lens", "--page-indices", "--cu-q-lens", "--num-seqs"})
    args.required(required);
  in.k_scale = float_option(args, "--k-scale", ErrorCode::kInvalidScale);
  in.v_scale = float_option(args, "--v-scale", ErrorCode::kInvalidScale);

  const Input q = load_input(args, "--q", true), k = load_input(args, "--k-pages", separate),
              v = load_input(args, "--v-pages", separate),
              kv = load_input(args, "--kv-pages", !separate),
              kv_lens = load_input(args, "--kv-lens", true),
              page_indices = load_input(args, "--page-indices", true),
              cu_q_lens = load_input(args, "--cu-q-lens", true),
              num_seqs = load_input(args, "--num-seqs", true),
              sinks = load_input(args, "--sinks", false),
              alibi_slopes = load_input(args, "--alibi-slopes", false);
  in.q = to_array(q, "q");
  in.k_pages = to_array(k, "k_pages");
  in.v_pages = to_array(v, "v_pages");
  in.kv_pages = to_array(kv, "kv_pages");
  in.kv_lens = to_array(kv_lens, "kv_lens");
  in.page_indices = to_array(page_indices, "page_indices");
  in.cu_q_lens = to_array(cu_q_lens, "cu_q_lens");
  in.num_seqs = to_array(num_seqs, "num_seqs");
  in.sinks = frontend::read_sinks(to_array(sinks, "sinks"));
  in.alibi_slopes = frontend::read_alibi_slopes(to_array(alibi_slopes, "alibi_slopes"));

  const frontend::RaggedHints hints{
      "pages are 4-d in the --kv-layout order",
      "kv_pages is [total_pages, page_size, 2 * num_kv_heads, head_dim]",
      "num_seqs is a one-element array: numpy.array([n], dtype=numpy.int32)",
      "q must be float16, float32 or float64"};
  frontend::check_ragged_ranks(in, hints);
  run.expect = load_expect(args, q.array.shape);
  run.expect_lse = load_expect_lse(args, {q.array.shape[0], q.array.shape[1]});

  // Element types: raw bf16/fp8 codes become their type (--q-dtype, --kv-dtype) first.
  fail_if_error(apply_dtype_option(&in.q, q_as, "--q-dtype"));
  for (frontend::Array* pages : {&in.k_pages, &in.v_pages, &in.kv_pages})
    if (pages->present()) fail_if_error(apply_dtype_option(pages, kv_as, "--kv-dtype"));
  frontend::check_ragged_dtypes(in, hints);
  return validate_and_run(args, run);
}

}  // namespace cli
}  // namespace attnref
