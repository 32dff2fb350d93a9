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

#include "attnref/compare/paged.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/paged.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The parsed inputs and options of one `paged` invocation.
struct PagedInputs {
  Input q, k, v, lengths, page_indices, k_scales, v_scales, expect, expect_lse;
  KvLayout layout = KvLayout::kJax;
  CommonOptions common;
  std::int64_t pages_per_compute_block = 1;
  MegacoreMode megacore_mode = MegacoreMode::kNone;
  bool round_kv_to_bf16 = false;
  std::optional<std::int64_t> sliding_window;
  HeadValues sinks, alibi_slopes;
};

/// Index views the shape tier may read extents from but never data: for lengths or a page
/// table whose file holds another dtype or rank.
template <class Index>
struct StandIn {
  Index value = 0;
  std::int64_t lengths_extent = 0;
};

/// The descriptor over the loaded arrays, with lengths/page_indices read as `Index`; with a
/// `stand_in`, their data and the lengths extent come from it instead (shape tier only).
template <class Q, class KV, class Index>
PagedAttentionArgs<Q, KV, Index> make_args(const PagedInputs& in,
                                           const StandIn<Index>* stand_in = nullptr) {
  PagedAttentionArgs<Q, KV, Index> a;
  a.q = view_of<Q, 3>(in.q);
  a.k_pages = layout_pages_view<KV>(in.k, in.layout);
  a.v_pages = layout_pages_view<KV>(in.v, in.layout);
  if (stand_in != nullptr) {
    a.lengths = TensorView<const Index, 1>(&stand_in->value, {stand_in->lengths_extent});
    a.page_indices = TensorView<const Index, 2>(
        &stand_in->value, {in.page_indices.array.shape[0], in.page_indices.array.shape[1]});
  } else {
    a.lengths = view_of<Index, 1>(in.lengths);
    a.page_indices = view_of<Index, 2>(in.page_indices);
  }
  if (in.k_scales.present()) a.k_scales = layout_pages_view<float>(in.k_scales, in.layout);
  if (in.v_scales.present()) a.v_scales = layout_pages_view<float>(in.v_scales, in.layout);
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.sm_scale = in.common.sm_scale;
  a.pages_per_compute_block = in.pages_per_compute_block;
  a.megacore_mode = in.megacore_mode;
  a.round_kv_to_bf16 = in.round_kv_to_bf16;
  a.sliding_window = in.sliding_window;
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
  return a;
}

/// The shape tier over stand-in index views (lengths of `lengths_extent` entries).
template <class Q, class KV, class Index>
Status stand_in_shapes(const PagedInputs& in, std::int64_t lengths_extent) {
  StandIn<Index> stand_in;
  stand_in.lengths_extent = lengths_extent;
  return check_paged_shapes(make_args<Q, KV, Index>(in, &stand_in), in.common.profile);
}

/// lengths `[batch, n]`: JAX compares `lengths.shape` with `(batch,)`, so after P1..P4 this is
/// its P5, whose text names no shape (the hint does).
template <class Q, class KV>
[[noreturn]] void fail_lengths_rank(const PagedInputs& in) {
  const std::vector<std::int64_t>& s = in.lengths.array.shape;
  // A batch extent other than q's makes the shape tier stop at P5 unless it stops earlier.
  const Status shapes = stand_in_shapes<Q, KV, std::int32_t>(in, s[0] == 0 ? 1 : s[0] - 1);
  if (std::string(shapes.jax_check()) != "P5") fail_status(shapes);
  fail_status(paged_lengths_rank_error(s[0], s[1]));
}

/// lengths or page_indices of a dtype other than int32/int64, or of two different dtypes
/// (`dtypes`, the library's verdict). The shape tier runs first on stand-in views, so what JAX
/// reports earlier (P1..P6) still comes first; its own P7 would name the stand-in's dtype.
template <class Q, class KV>
[[noreturn]] void fail_index_dtypes(const PagedInputs& in, const Status& dtypes) {
  const std::int64_t batch = in.lengths.array.shape[0];
  const Status shapes = in.lengths.array.dtype == DType::kInt32
                            ? stand_in_shapes<Q, KV, std::int32_t>(in, batch)
                            : stand_in_shapes<Q, KV, std::int64_t>(in, batch);
  fail_index_dtypes_after(shapes, "P7", dtypes);
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
template <class Q, class KV, class Index>
int run_typed(const ParsedArgs& args, const PagedInputs& in) {
  const PagedAttentionArgs<Q, KV, Index> a = make_args<Q, KV, Index>(in);
  fail_if_error(check_paged(a, in.common.profile));
  if (in.common.check_data) fail_if_error(check_paged_data(a));
  if (in.common.check_only) {
    std::cout << "ok\n";
    return kExitOk;
  }
  // Run with int64 indices: one kernel instantiation per (Q, KV).
  PagedAttentionArgs<Q, KV, std::int64_t> run_args = make_args<Q, KV, std::int64_t>(in, nullptr);
  const std::vector<std::int64_t> lengths = ints_as<std::int64_t>(in.lengths.array);
  const std::vector<std::int64_t> page_indices = ints_as<std::int64_t>(in.page_indices.array);
  run_args.lengths = TensorView<const std::int64_t, 1>(lengths.data(), a.lengths.extents,
                                                       static_cast<std::int64_t>(lengths.size()));
  run_args.page_indices = TensorView<const std::int64_t, 2>(
      page_indices.data(), a.page_indices.extents, static_cast<std::int64_t>(page_indices.size()));
  const std::int64_t numel = in.q.array.numel();
  std::vector<Q> out(static_cast<std::size_t>(numel));
  TensorView<Q, 3> out_view(out.data(), a.q.extents, numel);
  const std::int64_t batch = a.batch(), heads = a.num_q_heads();
  std::vector<float> lse(static_cast<std::size_t>(batch * heads));
  fail_if_error(
      try_paged_attention(run_args, out_view, TensorView<float, 2>(lse.data(), {batch, heads})));
  OutputFiles outputs;  // all written, or none
  stage_option_output(args, &outputs, "--lse-out", {batch, heads}, to_doubles(lse));
  const auto explain = [&](Tolerance tol) {
    compare::Report report;
    fail_if_error(compare::try_compare_paged(
        run_args, to_doubles(in.expect.array),
        in.expect_lse.present() ? to_doubles(in.expect_lse.array) : std::vector<double>{},
        compare_options(args, tol), &report));
    return report;
  };
  return finish_output(args, in.q.array.shape, to_doubles(out), in.expect,
                       default_tolerance(in.q.array.dtype), &outputs, explain);
}

template <class Q, class KV>
int run_with_kv(const ParsedArgs& args, const PagedInputs& in) {
  if (in.lengths.array.rank() != 1) fail_lengths_rank<Q, KV>(in);
  const DType lt = in.lengths.array.dtype;
  const Status dtypes =
      check_paged_index_dtypes(lt, in.page_indices.array.dtype, in.common.profile);
  if (!dtypes.ok()) fail_index_dtypes<Q, KV>(in, dtypes);
  return dispatch_index(
      lt, [&](auto index) { return run_typed<Q, KV, typename decltype(index)::type>(args, in); });
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
            "JAX's megacore split, kv_head or batch (checked by --profile jax; no numerical "
            "effect)"},
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

  PagedInputs in;
  // Options first: a usage error costs no file reading.
  in.layout = kv_layout_option(args);
  in.common = parse_common_options(args);
  const DType q_as = dtype_option(args, "--q-dtype");
  const DType kv_as = dtype_option(args, "--kv-dtype");
  if (std::optional<std::int64_t> n = args.int64("--pages-per-compute-block")) {
    in.pages_per_compute_block = *n;
  }
  const std::string megacore = args.choice("--megacore-mode", {"kv_head", "batch"}, "");
  if (megacore == "kv_head") in.megacore_mode = MegacoreMode::kKvHead;
  if (megacore == "batch") in.megacore_mode = MegacoreMode::kBatch;
  in.round_kv_to_bf16 = args.has("--round-kv-to-bf16");
  in.sliding_window = args.int64("--sliding-window");
  for (const char* required : {"--q", "--k-pages", "--v-pages", "--lengths", "--page-indices"}) {
    args.required(required);
  }
  // One-sided --k-scales/--v-scales is not a usage error: the validator reports it.

  in.q = load_input(args, "--q", true);
  in.k = load_input(args, "--k-pages", true);
  in.v = load_input(args, "--v-pages", true);
  in.lengths = load_input(args, "--lengths", true);
  in.page_indices = load_input(args, "--page-indices", true);
  in.k_scales = load_input(args, "--k-scales", false);
  in.v_scales = load_input(args, "--v-scales", false);
  in.sinks = load_head_values(args, "--sinks", "sinks", "sinks are [num_q_heads]",
                              ErrorCode::kNonFiniteData);
  in.alibi_slopes =
      load_head_values(args, "--alibi-slopes", "alibi_slopes", "ALiBi slopes are [num_q_heads]",
                       ErrorCode::kInvalidAlibiSlope);

  // Ranks (JAX's shape unpacking comes before its checks too).
  fail_if_error(check_rank(in.q, 3, "q", "q is [batch, num_q_heads, head_dim]"));
  fail_if_error(check_rank(in.k, 4, "k_pages", kv_shape_hint(in.layout)));
  fail_if_error(check_rank(in.v, 4, "v_pages", kv_shape_hint(in.layout)));
  // lengths [batch, n] is JAX's P5, reported in JAX's order (fail_lengths_rank).
  const std::vector<std::int64_t>& ls = in.lengths.array.shape;
  if (!(ls.size() == 2 && ls[0] == in.q.array.shape[0])) {
    fail_if_error(check_rank(in.lengths, 1, "lengths", "lengths is [batch]"));
  }
  fail_if_error(check_rank(in.page_indices, 2, "page_indices",
                           "page_indices is [batch, pages_per_sequence]"));
  if (in.k_scales.present()) {
    fail_if_error(check_rank(in.k_scales, 4, "k_scales", scales_shape_hint(in.layout)));
  }
  if (in.v_scales.present()) {
    fail_if_error(check_rank(in.v_scales, 4, "v_scales", scales_shape_hint(in.layout)));
  }
  in.expect = load_expect(args, in.q.array.shape);
  in.expect_lse = load_expect_lse(args, {in.q.array.shape[0], in.q.array.shape[1]});

  // Element types: raw bf16/fp8 codes become their type (--q-dtype, --kv-dtype) first.
  fail_if_error(apply_dtype_option(&in.q, q_as, "q", "--q-dtype"));
  fail_if_error(apply_dtype_option(&in.k, kv_as, "k_pages", "--kv-dtype"));
  fail_if_error(apply_dtype_option(&in.v, kv_as, "v_pages", "--kv-dtype"));
  const DType qt = in.q.array.dtype;
  if (qt != DType::kBFloat16) fail_if_error(check_q_dtype(in.q));
  fail_if_error(check_kv_dtypes(qt, in.k.array.dtype, in.v.array.dtype));
  for (const Input* scales : {&in.k_scales, &in.v_scales}) {
    if (scales->present() && scales->array.dtype != DType::kFloat32) {
      fail_status(dtype_error(*scales, scales == &in.k_scales ? "k_scales" : "v_scales",
                              "dequantization scales must be float32"));
    }
  }

  return dispatch_query_and_kv(qt, in.k.array.dtype, [&](auto q, auto kv) {
    return run_with_kv<typename decltype(q)::type, typename decltype(kv)::type>(args, in);
  });
}

}  // namespace cli
}  // namespace attnref
