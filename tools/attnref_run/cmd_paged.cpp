// SPDX-License-Identifier: Apache-2.0
// attnref-run paged: validates paged attention (decode) inputs given as .npy files, under the
// `reference` or `jax` profile, then runs attnref's reference kernel and writes or compares the
// result.
//
// Element types: the library's table (core/kv_dtypes.hpp: q float16, float32, float64 or
// bfloat16 via --q-dtype; 16 (q, pages) pairs, one kernel each). Lengths and page indices are
// validated with their own dtype (int32 or int64, so the `jax` profile's P7 sees the real one) and
// then widened to int64 for the run, which changes no value and no reference-profile check.
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../frontend/paged.hpp"
#include "attnref/compare/paged.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/paged.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The paged call and the result options of one `paged` invocation.
struct PagedRun {
  frontend::PagedInputs in;
  Input expect, expect_lse;
  bool check_only = false;
};

/// Runs the kernel over validated args and finishes the output.
template <class Q, class KV>
int run_kernel(const ParsedArgs& args, const PagedRun& run,
               const PagedAttentionArgs<Q, KV, std::int64_t>& a) {
  return run_and_finish<Q>(
      args, run.expect, run.expect_lse, run.in.q.dtype,
      {a.batch(), a.num_q_heads(), a.head_dim_v()},
      [&](TensorView<Q, 3> out, TensorView<float, 2> lse) {
        return try_paged_attention(a, out, lse);
      },
      [&](const auto& got, const auto& got_lse, const compare::Options& opt,
          compare::Report* report) {
        return compare::try_compare_paged(a, got, got_lse, opt, report);
      });
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
int validate_and_run(const ParsedArgs& args, const PagedRun& run) {
  if (run.check_only) {
    frontend::check_paged_call(run.in);
    std::cout << "ok\n";
    return kExitOk;
  }
  int status = kExitOk;
  frontend::with_paged_run_args(run.in, [&](const auto& a) { status = run_kernel(args, run, a); });
  return status;
}

const char* kv_shape_hint(KvLayout layout) {
  switch (layout) {
    case KvLayout::kNhd:
      return "with --kv-layout nhd the pages are [total_pages, page_size, "
             "num_kv_heads, head_dim]";
    case KvLayout::kHnd:
      return "with --kv-layout hnd the pages are [total_pages, num_kv_heads, "
             "page_size, head_dim]";
    default:
      return "with --kv-layout jax (the default) the pages are [num_kv_heads, "
             "total_pages, page_size, head_dim]";
  }
}

const char* scales_shape_hint(KvLayout layout) {
  switch (layout) {
    case KvLayout::kNhd:
      return "with --kv-layout nhd the scales are [total_pages, page_size, "
             "num_kv_heads, 1 or head_dim]";
    case KvLayout::kHnd:
      return "with --kv-layout hnd the scales are [total_pages, num_kv_heads, "
             "page_size, 1 or head_dim]";
    default:
      return "with --kv-layout jax the scales are [num_kv_heads, total_pages, page_size, "
             "1 or head_dim]";
  }
}

/// The subcommand's usage, help text and options.
const CommandSpec& paged_spec() {
  static const CommandSpec kSpec{
      "paged",
      "--q Q.npy --k-pages K.npy --v-pages V.npy --lengths L.npy --page-indices PI.npy\n"
      "       [--k-scales KS.npy --v-scales VS.npy] [--q-dtype bf16]\n"
      "       [--kv-dtype bf16|e4m3|e5m2] [--soft-cap C] [--mask-value M]\n"
      "       [--sm-scale S] [--pages-per-compute-block N] [--megacore-mode kv_head|batch]\n"
      "       [--round-kv-to-bf16] [--kv-layout jax|nhd|hnd]\n"
      "       [--sliding-window W] [--sinks S.npy] [--alibi-slopes A.npy]\n"
      "       [--profile jax|reference] [--check-only] [--check-data] [--out OUT.npy]\n"
      "       [--lse-out LSE.npy] [--expect EXP.npy [--atol A] [--rtol R]\n"
      "        [--expect-lse LSE.npy] [--ignore-padding]]",
      "Paged attention (decode): out[b, h] = softmax over t < lengths[b] of\n"
      "cap(sm_scale * q[b, h] . k_t) applied to v_t, with k_t on page page_indices[b, t / S].\n"
      "--sliding-window W keeps t > lengths[b] - 1 - W (FlashInfer's window_left is W - 1);\n"
      "--alibi-slopes adds slope[h] * (t - (lengths[b] - 1)) after the cap; --sinks adds one\n"
      "logit per head to the softmax's denominator.\n"
      "--lse-out writes the softmax's natural logsumexp [batch, num_q_heads] (-inf for a\n"
      "sequence of length 0): results over disjoint pages then merge (attnref-run merge).\n"
      "Validates the inputs under the chosen profile (jax: every check JAX's Pallas TPU kernel\n"
      "makes; reference: what the math and memory safety need), then runs attnref's kernel.\n"
      "q, K and V are float16/float32/float64 (K/V of q's dtype), or K/V int8 with float32\n"
      "scales; float32 and bfloat16 q also read float32, bfloat16, float16 and fp8 pages\n"
      "(fp8: w * scale, the scales optional: 1.0 without them). bf16 and fp8 dumps hold raw\n"
      "codes (uint16 or |V2, uint8 or |V1): name them with --q-dtype and --kv-dtype.\n"
      "Lengths and page indices are int32 or int64 (int32 under --profile jax).",
      with_common_options(
          {{"--q", "Q.npy", "queries [batch, num_q_heads, head_dim]"},
           {"--k-pages", "K.npy", "key pages, 4-d in the --kv-layout order"},
           {"--v-pages", "V.npy", "value pages, same shape as the key pages"},
           {"--lengths", "L.npy", "tokens of each sequence [batch]"},
           {"--page-indices", "PI.npy", "page table [batch, pages_per_sequence]"},
           {"--k-scales", "KS.npy",
            "float32 scales of int8 (required) or fp8 (optional) key pages, in the --kv-layout "
            "order, last dim 1 or head_dim"},
           {"--v-scales", "VS.npy", "float32 scales of int8 or fp8 value pages"},
           kQDtypeOption,
           kKvDtypeOption,
           {"--pages-per-compute-block", "N", "JAX's blocking (default 1; no numerical effect)"},
           {"--megacore-mode", "M",
            "JAX's megacore split, kv_head or batch (another value is JAX's P10; the split "
            "is checked by --profile jax; no numerical effect)"},
           {"--round-kv-to-bf16", nullptr,
            "round float K/V to bfloat16 before the products, as JAX's TPU kernel does"},
           {"--sliding-window", "W", "attend to the last W keys only (W > 0)"},
           {"--sinks", "S.npy", "attention-sink logits [num_q_heads] (float)"},
           {"--lse-out", "LSE.npy", "write logsumexp [batch, num_q_heads] as float32 .npy"},
           {"--kv-layout", "L",
            "physical page layout: jax [Hkv,P,S,D] (default), nhd [P,S,Hkv,D], "
            "hnd [P,Hkv,S,D]"},
           kExpectLseOption,
           kIgnorePaddingOption})};
  return kSpec;
}

}  // namespace

int run_paged(int argc, char** argv) {
  const CommandSpec& spec = paged_spec();
  const ParsedArgs args(spec, argc, argv);
  if (args.help_requested()) return print_help(spec);

  PagedRun run;
  frontend::PagedInputs& in = run.in;
  // Options first: a usage error costs no file reading.
  in.layout = kv_layout_option(args);
  const CommonOptions common = parse_common_options(args);
  in.common = frontend_options(common);
  run.check_only = common.check_only;
  const DType q_as = dtype_option(args, "--q-dtype");
  const DType kv_as = dtype_option(args, "--kv-dtype");
  if (std::optional<std::int64_t> n = args.int64("--pages-per-compute-block")) {
    in.pages_per_compute_block = *n;
  }
  // A value JAX rejects is JAX's P10 (exit 2), as in the Python module.
  if (const std::optional<std::string> mode = args.value("--megacore-mode")) {
    in.megacore_mode = frontend::megacore_mode_from_name(
        *mode, "use --megacore-mode kv_head or batch, or leave it out for none");
  }
  in.round_kv_to_bf16 = args.has("--round-kv-to-bf16");
  in.sliding_window = args.int64("--sliding-window");
  for (const char* required : {"--q", "--k-pages", "--v-pages", "--lengths", "--page-indices"}) {
    args.required(required);
  }
  // One-sided --k-scales/--v-scales is not a usage error: the validator reports it.

  const Input q = load_input(args, "--q", true), k = load_input(args, "--k-pages", true),
              v = load_input(args, "--v-pages", true),
              lengths = load_input(args, "--lengths", true),
              page_indices = load_input(args, "--page-indices", true),
              k_scales = load_input(args, "--k-scales", false),
              v_scales = load_input(args, "--v-scales", false),
              sinks = load_input(args, "--sinks", false),
              alibi_slopes = load_input(args, "--alibi-slopes", false);
  in.q = to_array(q, "q");
  in.k_pages = to_array(k, "k_pages");
  in.v_pages = to_array(v, "v_pages");
  in.lengths = to_array(lengths, "lengths");
  in.page_indices = to_array(page_indices, "page_indices");
  in.k_scales = to_array(k_scales, "k_scales");
  in.v_scales = to_array(v_scales, "v_scales");
  in.sinks = frontend::read_sinks(to_array(sinks, "sinks"));
  in.alibi_slopes = frontend::read_alibi_slopes(to_array(alibi_slopes, "alibi_slopes"));

  const frontend::PagedHints hints{kv_shape_hint(in.layout), scales_shape_hint(in.layout),
                                   "q must be float16, float32 or float64"};
  frontend::check_paged_ranks(in, hints);
  // The output is [batch, num_q_heads, head_dim_v]: V's last dim (MLA's V is narrower than K).
  run.expect = load_expect(args, {q.array.shape[0], q.array.shape[1], v.array.shape[3]});
  run.expect_lse = load_expect_lse(args, {q.array.shape[0], q.array.shape[1]});

  // Element types: raw bf16/fp8 codes become their type (--q-dtype, --kv-dtype) first.
  fail_if_error(apply_dtype_option(&in.q, q_as, "--q-dtype"));
  fail_if_error(apply_dtype_option(&in.k_pages, kv_as, "--kv-dtype"));
  fail_if_error(apply_dtype_option(&in.v_pages, kv_as, "--kv-dtype"));
  frontend::check_paged_dtypes(in, hints);
  return validate_and_run(args, run);
}

}  // namespace cli
}  // namespace attnref
