// SPDX-License-Identifier: Apache-2.0
// attnref-run merge: merges two attention results over disjoint key sets of the same rows (each
// an out [N, H, D] and its logsumexp [N, H], as `paged --lse-out` or `ragged --lse-out` write
// them) into the result over the union, with attnref's merge_attention_states.
//
// The states are float16, float32, float64 or bfloat16 (raw codes with --state-dtype bf16),
// both of one dtype, merged by the library in it (16-bit states: weights and sums in f32, the
// result rounded to the states' dtype; written as float32, as every result); the logsumexps
// float32 (attnref's logsumexp dtype). Shapes and overlapping views are checked by
// the library (exit 2); dtypes and ranks here.
#include <cstdint>
#include <string>
#include <vector>

#include "attnref/kernels/merge_attention_states.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The inputs of one `merge` invocation.
struct MergeInputs {
  Input out_a, lse_a, out_b, lse_b, expect, expect_lse;
};

template <class T>
int run_typed(const ParsedArgs& args, const MergeInputs& in) {
  MergeStatesArgs<T> m;
  m.out_a = view_of<T, 3>(in.out_a);
  m.lse_a = view_of<float, 2>(in.lse_a);
  m.out_b = view_of<T, 3>(in.out_b);
  m.lse_b = view_of<float, 2>(in.lse_b);
  // The outputs take out_a's shape, checked against the other inputs before anything is
  // allocated: a state of head_dim 0 holds nothing, whatever its rows and heads claim.
  fail_if_error(check_merge_inputs(m));
  const std::int64_t rows = m.rows(), heads = m.heads(), dim = m.head_dim();
  std::vector<T> out(static_cast<std::size_t>(rows * heads * dim));
  std::vector<float> lse(static_cast<std::size_t>(rows * heads));
  fail_if_error(try_merge_attention_states(
      m, TensorView<T, 3>(out.data(), {rows, heads, dim}, rows * heads * dim),
      TensorView<float, 2>(lse.data(), {rows, heads}, rows * heads)));
  OutputFiles outputs;  // all written, or none
  stage_option_output(args, &outputs, "--lse-out", {rows, heads}, to_doubles(lse));
  // The report: where the states differ, and a log2 logsumexp; nothing to re-run.
  const auto explain = [&](Tolerance tol) {
    compare::OutputShape shape;
    for (std::int64_t r = 0; r < rows; ++r) shape.rows.push_back({r, -1, compare::RowKind::kPlain});
    shape.heads = heads;
    shape.dim = dim;
    const bool with_lse = in.expect_lse.present();
    return compare::compare_values(
        shape, to_doubles(in.expect.array), to_doubles(out),
        with_lse ? to_doubles(in.expect_lse.array) : std::vector<double>{},
        with_lse ? to_doubles(lse) : std::vector<double>{}, compare_options(args, tol));
  };
  return finish_output(args, in.out_a.array.shape, to_doubles(out), in.expect,
                       default_tolerance(in.out_a.array.dtype), &outputs, explain);
}

}  // namespace

int run_merge(int argc, char** argv) {
  static const CommandSpec kSpec{
      "merge",
      "--out-a A.npy --lse-a LA.npy --out-b B.npy --lse-b LB.npy\n"
      "       [--out OUT.npy] [--lse-out LSE.npy] [--expect EXP.npy [--atol A] [--rtol R]\n"
      "        [--expect-lse LSE.npy]]",
      "Merges two attention results of the same query rows over disjoint key sets A and B\n"
      "(e.g. paged --lse-out over two page ranges) into the result over A and B:\n"
      "m = max(lse_a, lse_b), w = exp(lse - m), out = (w_a out_a + w_b out_b) / (w_a + w_b),\n"
      "lse = m + log(w_a + w_b). A row with lse -inf saw no key and adds nothing; NaN gives NaN.\n"
      "The states are [rows, heads, head_dim] float16/float32/float64, or bfloat16 codes with\n"
      "--state-dtype bf16 (both one dtype; a 16-bit result is rounded to it), the logsumexps\n"
      "[rows, heads] float32.",
      {{"--out-a", "A.npy", "first result [rows, heads, head_dim]"},
       {"--lse-a", "LA.npy", "its logsumexp [rows, heads], float32"},
       {"--out-b", "B.npy", "second result, over keys disjoint from the first's"},
       {"--lse-b", "LB.npy", "its logsumexp [rows, heads], float32"},
       kStateDtypeOption,
       kOutOption,
       {"--lse-out", "LSE.npy", "write the merged logsumexp [rows, heads] as float32 .npy"},
       kExpectOption,
       kAtolOption,
       kRtolOption,
       kExpectLseOption}};
  const ParsedArgs args(kSpec, argc, argv);
  if (args.help_requested()) return print_help(kSpec);

  // Options first: a usage error costs no file reading.
  check_result_options(args);
  check_output_paths(args);
  for (const char* required : {"--out-a", "--lse-a", "--out-b", "--lse-b"}) args.required(required);
  const DType state_as = dtype_option(args, "--state-dtype");

  MergeInputs in;
  in.out_a = load_input(args, "--out-a", true);
  in.lse_a = load_input(args, "--lse-a", true);
  in.out_b = load_input(args, "--out-b", true);
  in.lse_b = load_input(args, "--lse-b", true);

  fail_if_error(apply_dtype_option(&in.out_a, state_as, "out_a", "--state-dtype"));
  fail_if_error(apply_dtype_option(&in.out_b, state_as, "out_b", "--state-dtype"));
  fail_if_error(check_rank(in.out_a, 3, "out_a", "a state is [rows, heads, head_dim]"));
  fail_if_error(check_rank(in.lse_a, 2, "lse_a", "a logsumexp is [rows, heads]"));
  fail_if_error(check_rank(in.out_b, 3, "out_b", "a state is [rows, heads, head_dim]"));
  fail_if_error(check_rank(in.lse_b, 2, "lse_b", "a logsumexp is [rows, heads]"));
  in.expect = load_expect(args, in.out_a.array.shape);
  in.expect_lse = load_expect_lse(args, {in.out_a.array.shape[0], in.out_a.array.shape[1]});

  const DType t = in.out_a.array.dtype;
  if (t != DType::kFloat16 && t != DType::kFloat32 && t != DType::kFloat64 &&
      t != DType::kBFloat16) {
    fail_status(dtype_error(in.out_a, "out_a",
                            "a state must be float16, float32, float64 or bfloat16 (raw codes "
                            "with --state-dtype bf16)"));
  }
  if (in.out_b.array.dtype != t) {
    fail_status(
        Status(ErrorCode::kDtypeNotSupported, "",
               "{f} has dtype {d0}; attnref-run merges states of one dtype (out_a is {d1})",
               "save both states with one dtype",
               {static_cast<std::int64_t>(in.out_b.array.dtype), static_cast<std::int64_t>(t)}, {},
               "out_b"));
  }
  for (const Input* lse : {&in.lse_a, &in.lse_b}) {
    if (lse->array.dtype != DType::kFloat32) {
      fail_status(dtype_error(*lse, lse == &in.lse_a ? "lse_a" : "lse_b",
                              "a logsumexp is float32, as --lse-out writes it"));
    }
  }
  return dispatch_float(
      t, [&](auto tag) { return run_typed<typename decltype(tag)::type>(args, in); });
}

}  // namespace cli
}  // namespace attnref
