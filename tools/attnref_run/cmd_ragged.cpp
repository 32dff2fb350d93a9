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

#include "attnref/compare/ragged.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The parsed inputs and options of one `ragged` invocation.
struct RaggedInputs {
  Input q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, expect, expect_lse;
  Input k, v;                        ///< --k-pages, --v-pages (instead of the combined kv)
  KvLayout layout = KvLayout::kJax;  ///< axis order of k and v
  bool separate() const noexcept { return k.present(); }
  CommonOptions common;
  std::optional<std::int64_t> sliding_window;
  std::optional<std::int64_t> num_kv_pages_per_block, num_queries_per_block, vmem_limit_bytes;
  std::optional<float> k_scale, v_scale;
  HeadValues sinks, alibi_slopes;
};

/// Metadata views the shape tier may read extents from but never data: for metadata whose file
/// holds another dtype or rank.
template <class Index>
struct StandIn {
  Index value = 0;
  std::int64_t kv_lens_extent = 0;
  std::int64_t cu_q_lens_extent = 0;
  std::vector<Index> num_seqs;  ///< zeros, as many as the [n] view has
};

/// The stand-in for the arrays as loaded (rank 1).
template <class Index>
StandIn<Index> stand_in_of(const RaggedInputs& in) {
  StandIn<Index> s;
  s.kv_lens_extent = in.kv_lens.array.shape[0];
  s.cu_q_lens_extent = in.cu_q_lens.array.shape[0];
  s.num_seqs.assign(static_cast<std::size_t>(in.num_seqs.array.shape[0]), 0);
  return s;
}

/// The descriptor over the loaded arrays into `*out`, with the metadata read as `Index`
/// (`num_seqs` holds the num_seqs array converted to `Index`); with a `stand_in`, the metadata's
/// data and extents come from it instead (shape tier only). K and V are the two views of JAX's
/// combined pool file; the error is JAX's R12 (checked first, as JAX does) when the pool's
/// combined head count is odd.
template <class Q, class KV, class Index>
Status make_args(const RaggedInputs& in, const std::vector<Index>& num_seqs,
                 RaggedPagedAttentionArgs<Q, KV, Index>* out,
                 const StandIn<Index>* stand_in = nullptr) {
  RaggedPagedAttentionArgs<Q, KV, Index>& a = *out;
  a.q = view_of<Q, 3>(in.q);
  if (in.separate()) {
    a.k_pages = layout_pages_view<KV>(in.k, in.layout);
    a.v_pages = layout_pages_view<KV>(in.v, in.layout);
  } else {
    ATTNREF_RETURN_IF_ERROR(ragged_kv_views(view_of<KV, 4>(in.kv), &a.k_pages, &a.v_pages));
  }
  const std::vector<Index>& seqs = stand_in != nullptr ? stand_in->num_seqs : num_seqs;
  if (stand_in != nullptr) {
    a.kv_lens = TensorView<const Index, 1>(&stand_in->value, {stand_in->kv_lens_extent});
    a.page_indices = TensorView<const Index, 2>(
        &stand_in->value, {in.page_indices.array.shape[0], in.page_indices.array.shape[1]});
    a.cu_q_lens = TensorView<const Index, 1>(&stand_in->value, {stand_in->cu_q_lens_extent});
  } else {
    a.kv_lens = view_of<Index, 1>(in.kv_lens);
    a.page_indices = view_of<Index, 2>(in.page_indices);
    a.cu_q_lens = view_of<Index, 1>(in.cu_q_lens);
  }
  a.num_seqs = TensorView<const Index, 1>(seqs.data(), {static_cast<std::int64_t>(seqs.size())},
                                          static_cast<std::int64_t>(seqs.size()));
  a.sm_scale = in.common.sm_scale;
  a.sliding_window = in.sliding_window;
  a.num_kv_pages_per_block = in.num_kv_pages_per_block;
  a.num_queries_per_block = in.num_queries_per_block;
  a.vmem_limit_bytes = in.vmem_limit_bytes;
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.k_scale = in.k_scale;
  a.v_scale = in.v_scale;
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
  return Status();
}

/// The shape tier over stand-in metadata views.
template <class Q, class KV, class Index>
Status stand_in_shapes(const RaggedInputs& in, const StandIn<Index>& stand_in) {
  RaggedPagedAttentionArgs<Q, KV, Index> a;
  const Status split = make_args<Q, KV, Index>(in, {}, &a, &stand_in);
  if (!split.ok()) return split;
  return check_ragged_shapes(a, in.common.profile);
}

/// The extent JAX expects of num_seqs, kv_lens and cu_q_lens: (1,), (max_num_seqs,) and
/// (max_num_seqs + 1,). Precondition: page_indices has rank 2.
bool first_extent_expected(const RaggedInputs& in, const Input& x) {
  const std::int64_t first = x.array.shape[0];
  const std::int64_t max_seqs = in.page_indices.array.shape[0];
  if (&x == &in.num_seqs) return first == 1;
  if (&x == &in.kv_lens) return first == max_seqs;
  return first > 0 && first - 1 == max_seqs;
}

/// True for metadata JAX reports with its own shape text: rank 2 and the first extent JAX
/// expects (so only the rank is wrong).
bool jax_reports_rank(const RaggedInputs& in, const Input& x) {
  return x.array.rank() == 2 && in.page_indices.array.rank() == 2 && first_extent_expected(in, x);
}

/// num_seqs, kv_lens or cu_q_lens of shape [n, m] with the expected n: JAX's R1, R3 or R4, in
/// JAX's order, with the real shape in JAX's text.
template <class Q, class KV>
[[noreturn]] void fail_metadata_rank(const RaggedInputs& in) {
  StandIn<std::int32_t> stand_in;
  const std::int64_t max_seqs = in.page_indices.array.shape[0];
  // Each rank-2 array gets an extent JAX's check rejects, so the tier stops at the first one.
  stand_in.kv_lens_extent =
      in.kv_lens.array.rank() == 2 ? (max_seqs == 0 ? 1 : max_seqs - 1) : in.kv_lens.array.shape[0];
  stand_in.cu_q_lens_extent =
      in.cu_q_lens.array.rank() == 2 ? max_seqs : in.cu_q_lens.array.shape[0];
  stand_in.num_seqs.assign(
      in.num_seqs.array.rank() == 2 ? 2 : static_cast<std::size_t>(in.num_seqs.array.shape[0]), 0);
  const Status shapes = stand_in_shapes<Q, KV>(in, stand_in);
  const std::string check = shapes.jax_check();
  // JAX's text for such an array names its real (rank-2) shape.
  for (const Input* x : {&in.num_seqs, &in.kv_lens, &in.cu_q_lens}) {
    const char* id = x == &in.num_seqs ? "R1" : x == &in.kv_lens ? "R3" : "R4";
    if (check == id && x->array.rank() == 2)
      fail_status(ragged_metadata_rank_error(id, x->array.shape[0], x->array.shape[1], max_seqs));
  }
  fail_status(shapes);
}

/// Metadata of a dtype other than int32/int64, or of mixed dtypes (`dtypes`, the library's
/// verdict). The shape tier runs first on stand-in views, so what JAX reports earlier (R12, R13,
/// R1..R4) still comes first; its own R5 would name the stand-in's dtype.
template <class Q, class KV>
[[noreturn]] void fail_index_dtypes(const RaggedInputs& in, const Status& dtypes) {
  const Status shapes = stand_in_shapes<Q, KV>(in, stand_in_of<std::int64_t>(in));
  fail_index_dtypes_after(shapes, "R5", dtypes);
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
/// num_seqs may have another index dtype than the rest: a one-element array is read in its
/// own dtype and passed as `num_seqs_value` (int64), so the metadata tier judges the value
/// saved, never one narrowed to `Index` (int64 4294967297 read as int32 would be 1).
template <class Q, class KV, class Index>
int run_typed(const ParsedArgs& args, const RaggedInputs& in) {
  const NpyArray& n = in.num_seqs.array;
  // Any other extent fails JAX's R1 on a view of zeros of that extent.
  const std::vector<Index> num_seqs(n.numel() == 1 ? 0 : static_cast<std::size_t>(n.shape[0]),
                                    Index{0});
  RaggedPagedAttentionArgs<Q, KV, Index> a;
  fail_if_error(make_args<Q, KV, Index>(in, num_seqs, &a));
  if (n.numel() == 1) {
    a.num_seqs = {};
    a.num_seqs_value = ints_as<std::int64_t>(n)[0];
  }
  fail_if_error(check_ragged(a, in.common.profile));
  if (in.common.check_data) fail_if_error(check_ragged_data(a));
  if (in.common.check_only) {
    std::cout << "ok\n";
    return kExitOk;
  }
  // Run with int64 metadata: one kernel instantiation per (Q, KV).
  const std::vector<std::int64_t> kv_lens = ints_as<std::int64_t>(in.kv_lens.array);
  const std::vector<std::int64_t> page_indices = ints_as<std::int64_t>(in.page_indices.array);
  const std::vector<std::int64_t> cu_q_lens = ints_as<std::int64_t>(in.cu_q_lens.array);
  RaggedPagedAttentionArgs<Q, KV, std::int64_t> run_args;
  run_args.q = a.q;
  run_args.k_pages = a.k_pages;
  run_args.v_pages = a.v_pages;
  run_args.kv_lens = TensorView<const std::int64_t, 1>(kv_lens.data(), a.kv_lens.extents,
                                                       static_cast<std::int64_t>(kv_lens.size()));
  run_args.page_indices = TensorView<const std::int64_t, 2>(
      page_indices.data(), a.page_indices.extents, static_cast<std::int64_t>(page_indices.size()));
  run_args.cu_q_lens = TensorView<const std::int64_t, 1>(
      cu_q_lens.data(), a.cu_q_lens.extents, static_cast<std::int64_t>(cu_q_lens.size()));
  run_args.num_seqs_value = a.num_seqs_count();
  run_args.sm_scale = a.sm_scale;
  run_args.sliding_window = a.sliding_window;
  run_args.soft_cap = a.soft_cap;
  run_args.mask_value = a.mask_value;
  run_args.k_scale = a.k_scale;
  run_args.v_scale = a.v_scale;
  run_args.sinks = a.sinks;
  run_args.alibi_slopes = a.alibi_slopes;
  const std::int64_t numel = in.q.array.numel();
  std::vector<Q> out(static_cast<std::size_t>(numel));
  const std::int64_t tokens = a.max_num_batched_tokens(), heads = a.num_q_heads();
  std::vector<float> lse(static_cast<std::size_t>(tokens * heads));
  fail_if_error(try_ragged_paged_attention(run_args,
                                           TensorView<Q, 3>(out.data(), a.q.extents, numel),
                                           TensorView<float, 2>(lse.data(), {tokens, heads})));
  OutputFiles outputs;  // all written, or none
  stage_option_output(args, &outputs, "--lse-out", {tokens, heads}, to_doubles(lse));
  const auto explain = [&](Tolerance tol) {
    compare::Report report;
    fail_if_error(compare::try_compare_ragged(
        run_args, to_doubles(in.expect.array),
        in.expect_lse.present() ? to_doubles(in.expect_lse.array) : std::vector<double>{},
        compare_options(args, tol), &report));
    return report;
  };
  return finish_output(args, in.q.array.shape, to_doubles(out), in.expect,
                       default_tolerance(in.q.array.dtype), &outputs, explain);
}

template <class Q, class KV>
int run_with_kv(const ParsedArgs& args, const RaggedInputs& in) {
  if (jax_reports_rank(in, in.num_seqs) || jax_reports_rank(in, in.kv_lens) ||
      jax_reports_rank(in, in.cu_q_lens)) {
    fail_metadata_rank<Q, KV>(in);
  }
  const DType lt = in.kv_lens.array.dtype;
  const Status dtypes =
      check_ragged_index_dtypes(lt, in.page_indices.array.dtype, in.cu_q_lens.array.dtype,
                                in.num_seqs.array.dtype, in.common.profile);
  if (!dtypes.ok()) fail_index_dtypes<Q, KV>(in, dtypes);
  return dispatch_index(
      lt, [&](auto index) { return run_typed<Q, KV, typename decltype(index)::type>(args, in); });
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

  RaggedInputs in;
  // Options first: a usage error costs no file reading.
  in.common = parse_common_options(args);
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

  in.q = load_input(args, "--q", true);
  if (separate) {
    in.k = load_input(args, "--k-pages", true);
    in.v = load_input(args, "--v-pages", true);
  } else {
    in.kv = load_input(args, "--kv-pages", true);
  }
  in.kv_lens = load_input(args, "--kv-lens", true);
  in.page_indices = load_input(args, "--page-indices", true);
  in.cu_q_lens = load_input(args, "--cu-q-lens", true);
  in.num_seqs = load_input(args, "--num-seqs", true);
  in.sinks = load_head_values(args, "--sinks", "sinks", "sinks are [num_q_heads]",
                              ErrorCode::kNonFiniteData);
  in.alibi_slopes =
      load_head_values(args, "--alibi-slopes", "alibi_slopes", "ALiBi slopes are [num_q_heads]",
                       ErrorCode::kInvalidAlibiSlope);

  // Ranks (JAX's shape unpacking comes before its checks too).
  fail_if_error(check_rank(in.q, 3, "q", "q is [max_num_batched_tokens, num_q_heads, head_dim]"));
  if (separate) {
    fail_if_error(check_rank(in.k, 4, "k_pages", "k_pages is 4-d in the --kv-layout order"));
    fail_if_error(check_rank(in.v, 4, "v_pages", "v_pages is 4-d in the --kv-layout order"));
  } else {
    fail_if_error(check_rank(in.kv, 4, "kv_pages",
                             "kv_pages is [total_pages, page_size, 2 * num_kv_heads, head_dim]"));
  }
  // num_seqs, kv_lens or cu_q_lens [n, m] with the n JAX expects is JAX's R1, R3 or R4,
  // reported in JAX's order (fail_metadata_rank) once page_indices' rank is known good.
  if (!jax_reports_rank(in, in.kv_lens)) {
    fail_if_error(check_rank(in.kv_lens, 1, "kv_lens", "kv_lens is [max_num_seqs]"));
  }
  fail_if_error(check_rank(in.page_indices, 2, "page_indices",
                           "page_indices is [max_num_seqs, pages_per_seq]"));
  if (!jax_reports_rank(in, in.cu_q_lens)) {
    fail_if_error(check_rank(in.cu_q_lens, 1, "cu_q_lens", "cu_q_lens is [max_num_seqs + 1]"));
  }
  if (!jax_reports_rank(in, in.num_seqs)) {
    fail_if_error(
        check_rank(in.num_seqs, 1, "num_seqs",
                   "num_seqs is a one-element array: numpy.array([n], dtype=numpy.int32)"));
  }
  in.expect = load_expect(args, in.q.array.shape);
  in.expect_lse = load_expect_lse(args, {in.q.array.shape[0], in.q.array.shape[1]});

  // Element types: raw bf16/fp8 codes become their type (--q-dtype, --kv-dtype) first.
  fail_if_error(apply_dtype_option(&in.q, q_as, "q", "--q-dtype"));
  if (separate) {
    fail_if_error(apply_dtype_option(&in.k, kv_as, "k_pages", "--kv-dtype"));
    fail_if_error(apply_dtype_option(&in.v, kv_as, "v_pages", "--kv-dtype"));
  } else {
    fail_if_error(apply_dtype_option(&in.kv, kv_as, "kv_pages", "--kv-dtype"));
  }
  const DType qt = in.q.array.dtype;
  if (qt != DType::kBFloat16) fail_if_error(check_q_dtype(in.q));
  fail_if_error(separate ? check_kv_dtypes(qt, in.k.array.dtype, in.v.array.dtype)
                         : check_kv_dtype(qt, in.kv.array.dtype, "kv_pages"));
  const DType kvt = separate ? in.k.array.dtype : in.kv.array.dtype;
  return dispatch_query_and_kv(qt, kvt, [&](auto q, auto kv) {
    return run_with_kv<typename decltype(q)::type, typename decltype(kv)::type>(args, in);
  });
}

}  // namespace cli
}  // namespace attnref
