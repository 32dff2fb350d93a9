// SPDX-License-Identifier: Apache-2.0
// attnref-run ragged: validates ragged paged attention inputs (continuous batching: prefill and
// decode sequences in one ragged batch) given as .npy files, under the `reference` or `jax`
// profile, then runs attnref's reference kernel and writes or compares the result.
//
// Instantiations are kept few: q is float16, float32 or float64; the combined K/V pages have
// q's dtype or are int8 (dequantized with --k-scale/--v-scale). kv_lens, page_indices and
// cu_q_lens are validated with their own dtype (int32 or int64, so the `jax` profile's R5 sees
// the real one), then widened to int64 for the run, which changes no value and no
// reference-profile check. num_seqs is a one-element integer array (JAX's R1).
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "attnref/core/profile.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The parsed inputs and options of one `ragged` invocation.
struct RaggedInputs {
  Input q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, expect;
  Profile profile = Profile::kReference;
  float sm_scale = 1.0f;
  std::optional<std::int64_t> sliding_window;
  std::optional<float> soft_cap;
  float mask_value = kDefaultMaskValue;
  std::optional<float> k_scale, v_scale;
  bool check_only = false;
};

bool is_index(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

/// The elements of an int32 or int64 array as `Index` (empty for other dtypes).
template <class Index>
std::vector<Index> ints_as(const NpyArray& a) {
  std::vector<Index> out;
  if (const std::int32_t* p = a.data<std::int32_t>()) {
    out.assign(p, p + a.numel());
  } else if (const std::int64_t* p64 = a.data<std::int64_t>()) {
    for (std::int64_t i = 0; i < a.numel(); ++i) out.push_back(static_cast<Index>(p64[i]));
  }
  return out;
}

/// The descriptor over the loaded arrays, with the metadata read as `Index`. When the files
/// hold another dtype, `stand_in` (non-null) replaces their data: only the shape tier may then
/// be run on the result, which reads extents and never data. `num_seqs` holds the num_seqs
/// array converted to `Index` (its real extent is kept, so R1 sees it).
template <class Q, class KV, class Index>
RaggedPagedAttentionArgs<Q, KV, Index> make_args(const RaggedInputs& in,
                                                 const std::vector<Index>& num_seqs,
                                                 const Index* stand_in = nullptr) {
  RaggedPagedAttentionArgs<Q, KV, Index> a;
  a.q = view_of<Q, 3>(in.q);
  a.kv_pages = view_of<KV, 4>(in.kv);
  if (stand_in != nullptr) {
    a.kv_lens = TensorView<const Index, 1>(stand_in, {in.kv_lens.array.shape[0]});
    a.page_indices = TensorView<const Index, 2>(
        stand_in, {in.page_indices.array.shape[0], in.page_indices.array.shape[1]});
    a.cu_q_lens = TensorView<const Index, 1>(stand_in, {in.cu_q_lens.array.shape[0]});
  } else {
    a.kv_lens = view_of<Index, 1>(in.kv_lens);
    a.page_indices = view_of<Index, 2>(in.page_indices);
    a.cu_q_lens = view_of<Index, 1>(in.cu_q_lens);
  }
  a.num_seqs = TensorView<const Index, 1>(num_seqs.data(), {in.num_seqs.array.shape[0]},
                                          static_cast<std::int64_t>(num_seqs.size()));
  a.sm_scale = in.sm_scale;
  a.sliding_window = in.sliding_window;
  a.soft_cap = in.soft_cap;
  a.mask_value = in.mask_value;
  a.k_scale = in.k_scale;
  a.v_scale = in.v_scale;
  return a;
}

/// Metadata of a dtype other than int32/int64, or of mixed dtypes. Runs the shape tier first
/// with stand-in views, so errors JAX reports earlier (R12, R13, R1..R4) still come first; under
/// the `jax` profile this is JAX's R5, reported with the real dtypes.
template <class Q, class KV>
[[noreturn]] void fail_index_dtypes(const RaggedInputs& in) {
  const DType lt = in.kv_lens.array.dtype;
  const DType pt = in.page_indices.array.dtype;
  const DType ct = in.cu_q_lens.array.dtype;
  const std::int64_t stand_in = 0;
  const std::vector<std::int64_t> num_seqs(static_cast<std::size_t>(in.num_seqs.array.shape[0]), 0);
  const Status s =
      check_ragged_shapes(make_args<Q, KV, std::int64_t>(in, num_seqs, &stand_in), in.profile);
  if (!s.ok() && std::string(s.jax_check()) != "R5") fail_status(s);
  if (in.profile == Profile::kJax) {
    fail_status(Status(ErrorCode::kDtypeNotSupported, "R5",
                       "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be int32. "
                       "Got kv_lens.dtype=dtype('{d0}'), page_indices.dtype=dtype('{d1}'), "
                       "cu_q_lens.dtype=dtype('{d2}').",
                       "save all three as int32 (what JAX takes)",
                       {static_cast<std::int64_t>(lt), static_cast<std::int64_t>(pt),
                        static_cast<std::int64_t>(ct)}));
  }
  if (!is_index(lt)) {
    fail_status(dtype_error(in.kv_lens, "kv_lens", "kv_lens must be int32 or int64"));
  }
  if (!is_index(pt)) {
    fail_status(
        dtype_error(in.page_indices, "page_indices", "page_indices must be int32 or int64"));
  }
  if (!is_index(ct)) {
    fail_status(dtype_error(in.cu_q_lens, "cu_q_lens", "cu_q_lens must be int32 or int64"));
  }
  fail_status(Status(
      ErrorCode::kDtypeNotSupported, "",
      "kv_lens ({d0}), page_indices ({d1}) and cu_q_lens ({d2}) must have the "
      "same dtype",
      "save all three as int32 (what JAX takes) or all as int64",
      {static_cast<std::int64_t>(lt), static_cast<std::int64_t>(pt), static_cast<std::int64_t>(ct)},
      {}, "kv_lens"));
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
template <class Q, class KV, class Index>
int run_typed(const ParsedArgs& args, const RaggedInputs& in) {
  const std::vector<Index> num_seqs = ints_as<Index>(in.num_seqs.array);
  const RaggedPagedAttentionArgs<Q, KV, Index> a = make_args<Q, KV, Index>(in, num_seqs);
  fail_if_error(check_ragged(a, in.profile));
  if (in.check_only) {
    std::cout << "ok\n";
    return kExitOk;
  }
  // Run with int64 metadata: one kernel instantiation per (Q, KV).
  const std::vector<std::int64_t> kv_lens = ints_as<std::int64_t>(in.kv_lens.array);
  const std::vector<std::int64_t> page_indices = ints_as<std::int64_t>(in.page_indices.array);
  const std::vector<std::int64_t> cu_q_lens = ints_as<std::int64_t>(in.cu_q_lens.array);
  RaggedPagedAttentionArgs<Q, KV, std::int64_t> run_args;
  run_args.q = a.q;
  run_args.kv_pages = a.kv_pages;
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
  const std::int64_t numel = in.q.array.numel();
  std::vector<Q> out(static_cast<std::size_t>(numel));
  fail_if_error(
      try_ragged_paged_attention(run_args, TensorView<Q, 3>(out.data(), a.q.extents, numel)));
  return finish_output(args, in.q.array.shape, to_doubles(out), in.expect,
                       default_tolerance(in.q.array.dtype));
}

template <class Q, class KV>
int run_with_kv(const ParsedArgs& args, const RaggedInputs& in) {
  const DType lt = in.kv_lens.array.dtype;
  if (!is_index(lt) || lt != in.page_indices.array.dtype || lt != in.cu_q_lens.array.dtype) {
    fail_index_dtypes<Q, KV>(in);
  }
  if (lt == DType::kInt32) return run_typed<Q, KV, std::int32_t>(args, in);
  return run_typed<Q, KV, std::int64_t>(args, in);
}

template <class Q>
int run_with_q(const ParsedArgs& args, const RaggedInputs& in) {
  if (in.kv.array.dtype == DType::kInt8) return run_with_kv<Q, std::int8_t>(args, in);
  return run_with_kv<Q, Q>(args, in);
}

}  // namespace

int run_ragged(int argc, char** argv) {
  static const CommandSpec kSpec{
      "ragged",
      "--q Q.npy --kv-pages KV.npy --kv-lens L.npy --page-indices PI.npy\n"
      "       --cu-q-lens C.npy --num-seqs N.npy [--sm-scale S] [--sliding-window W]\n"
      "       [--soft-cap C] [--mask-value M] [--k-scale S] [--v-scale S]\n"
      "       [--profile jax|reference] [--check-only] [--out OUT.npy]\n"
      "       [--expect EXP.npy [--atol A] [--rtol R]]",
      "Ragged paged attention (continuous batching): sequence i owns query rows\n"
      "[cu_q_lens[i], cu_q_lens[i+1]) and kv_lens[i] cached tokens; row r of a sequence with\n"
      "q_len rows sits at position kv_len - q_len + r and attends causally (and within the\n"
      "sliding window) to its sequence's keys. K and V share one pool [P, S, 2 * Hkv, D]: K of\n"
      "KV head h at combined head 2h, V at 2h + 1. Output rows past cu_q_lens[num_seqs] are 0.\n"
      "Validates the inputs under the chosen profile (jax: every check JAX's Pallas TPU kernel\n"
      "makes; reference: what the math and memory safety need), then runs attnref's kernel.\n"
      "q and the pages are float16/float32/float64 (pages of q's dtype) or the pages int8;\n"
      "kv_lens, page_indices and cu_q_lens int32 or int64 (int32 under --profile jax).",
      {{"--q", "Q.npy", "queries [max_num_batched_tokens, num_q_heads, head_dim]"},
       {"--kv-pages", "KV.npy", "combined K/V pages [total_pages, page_size, 2 * Hkv, head_dim]"},
       {"--kv-lens", "L.npy", "cached tokens of each sequence [max_num_seqs]"},
       {"--page-indices", "PI.npy", "page table [max_num_seqs, pages_per_seq]"},
       {"--cu-q-lens", "C.npy", "cumulative query lengths [max_num_seqs + 1]"},
       {"--num-seqs", "N.npy", "live sequence count, a one-element integer array [1]"},
       {"--sm-scale", "S", "scale of q.k (default 1.0, as JAX)"},
       {"--sliding-window", "W", "attend to the last W positions only (W > 0)"},
       {"--soft-cap", "C", "soft cap c: logits become c * tanh(x / c)"},
       {"--mask-value", "M", "JAX's additive mask value (default -2.3819763e+38)"},
       {"--k-scale", "S", "K dequantization: k = q_dtype(float(k) * S)"},
       {"--v-scale", "S", "V dequantization: v = q_dtype(float(v) * S)"},
       {"--profile", "P", "jax or reference (default reference)"},
       {"--check-only", nullptr, "validate only and print ok"},
       kOutOption,
       kExpectOption,
       kAtolOption,
       kRtolOption}};
  const ParsedArgs args(kSpec, argc, argv);
  if (args.help_requested()) return print_help(kSpec);

  RaggedInputs in;
  // Options first: a usage error costs no file reading.
  in.profile = args.choice("--profile", {"jax", "reference"}, "reference") == "jax"
                   ? Profile::kJax
                   : Profile::kReference;
  if (std::optional<double> s = args.real("--sm-scale")) in.sm_scale = static_cast<float>(*s);
  in.sliding_window = args.int64("--sliding-window");
  if (std::optional<double> c = args.real("--soft-cap")) in.soft_cap = static_cast<float>(*c);
  if (std::optional<double> m = args.real("--mask-value")) in.mask_value = static_cast<float>(*m);
  if (std::optional<double> k = args.real("--k-scale")) in.k_scale = static_cast<float>(*k);
  if (std::optional<double> v = args.real("--v-scale")) in.v_scale = static_cast<float>(*v);
  in.check_only = args.has("--check-only");
  if (in.check_only && (args.has("--out") || args.has("--expect"))) {
    args.usage_error("--check-only runs nothing, so it takes neither --out nor --expect");
  }
  check_result_options(args);
  for (const char* required :
       {"--q", "--kv-pages", "--kv-lens", "--page-indices", "--cu-q-lens", "--num-seqs"}) {
    args.required(required);
  }

  in.q = load_input(args, "--q", true);
  in.kv = load_input(args, "--kv-pages", true);
  in.kv_lens = load_input(args, "--kv-lens", true);
  in.page_indices = load_input(args, "--page-indices", true);
  in.cu_q_lens = load_input(args, "--cu-q-lens", true);
  in.num_seqs = load_input(args, "--num-seqs", true);

  // Ranks (JAX's shape unpacking comes before its checks too).
  fail_if_error(check_rank(in.q, 3, "q", "q is [max_num_batched_tokens, num_q_heads, head_dim]"));
  fail_if_error(check_rank(in.kv, 4, "kv_pages",
                           "kv_pages is [total_pages, page_size, 2 * num_kv_heads, head_dim]"));
  fail_if_error(check_rank(in.kv_lens, 1, "kv_lens", "kv_lens is [max_num_seqs]"));
  fail_if_error(check_rank(in.page_indices, 2, "page_indices",
                           "page_indices is [max_num_seqs, pages_per_seq]"));
  fail_if_error(check_rank(in.cu_q_lens, 1, "cu_q_lens", "cu_q_lens is [max_num_seqs + 1]"));
  fail_if_error(check_rank(in.num_seqs, 1, "num_seqs",
                           "num_seqs is a one-element array: numpy.array([n], dtype=numpy.int32)"));
  in.expect = load_expect(args, in.q.array.shape);

  // Element types.
  const DType qt = in.q.array.dtype;
  if (qt != DType::kFloat16 && qt != DType::kFloat32 && qt != DType::kFloat64) {
    fail_status(dtype_error(in.q, "q", "q must be float16, float32 or float64"));
  }
  const DType kvt = in.kv.array.dtype;
  if (kvt != qt && kvt != DType::kInt8) {
    fail_status(Status(ErrorCode::kDtypeNotSupported, "",
                       "kv_pages has dtype {d0}; attnref-run takes pages of q's dtype ({d1}) or "
                       "int8 (with --k-scale/--v-scale)",
                       "save the pages with q's dtype, or quantize them to int8",
                       {static_cast<std::int64_t>(kvt), static_cast<std::int64_t>(qt)}, {},
                       "kv_pages"));
  }
  if (!is_index(in.num_seqs.array.dtype)) {
    fail_status(dtype_error(in.num_seqs, "num_seqs", "num_seqs must be int32 or int64"));
  }

  switch (qt) {
    case DType::kFloat16:
      return run_with_q<Eigen::half>(args, in);
    case DType::kFloat64:
      return run_with_q<double>(args, in);
    default:
      return run_with_q<float>(args, in);
  }
}

}  // namespace cli
}  // namespace attnref
