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

#include "../frontend/merge.hpp"
#include "attnref/kernels/merge_attention_states.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The merge and the result options of one `merge` invocation.
struct MergeRun {
  frontend::MergeInputs in;
  Input expect, expect_lse;
};

template <class T>
int run_typed(const ParsedArgs& args, const MergeRun& run, const MergeStatesArgs<T>& m) {
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
    const bool with_lse = run.expect_lse.present();
    return compare::compare_values(
        shape, to_doubles(run.expect.array), to_doubles(out),
        with_lse ? to_doubles(run.expect_lse.array) : std::vector<double>{},
        with_lse ? to_doubles(lse) : std::vector<double>{}, compare_options(args, tol));
  };
  return finish_output(args, {rows, heads, dim}, to_doubles(out), run.expect,
                       default_tolerance(run.in.out_a.dtype), &outputs, explain);
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

  const Input out_a = load_input(args, "--out-a", true), lse_a = load_input(args, "--lse-a", true),
              out_b = load_input(args, "--out-b", true), lse_b = load_input(args, "--lse-b", true);
  MergeRun run;
  frontend::MergeInputs& in = run.in;
  in.out_a = to_array(out_a, "out_a");
  in.lse_a = to_array(lse_a, "lse_a");
  in.out_b = to_array(out_b, "out_b");
  in.lse_b = to_array(lse_b, "lse_b");
  fail_if_error(apply_dtype_option(&in.out_a, state_as, "--state-dtype"));
  fail_if_error(apply_dtype_option(&in.out_b, state_as, "--state-dtype"));
  frontend::check_merge_arrays(in,
                               "a state must be float16, float32, float64 or bfloat16 (raw codes "
                               "with --state-dtype bf16)");
  run.expect = load_expect(args, out_a.array.shape);
  run.expect_lse = load_expect_lse(args, {out_a.array.shape[0], out_a.array.shape[1]});
  int status = kExitOk;
  frontend::with_merge_args(in, [&](const auto& m) { status = run_typed(args, run, m); });
  return status;
}

}  // namespace cli
}  // namespace attnref
