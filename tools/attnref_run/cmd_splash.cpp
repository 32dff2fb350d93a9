// SPDX-License-Identifier: Apache-2.0
// attnref-run splash: validates splash attention inputs given as .npy files, under the
// `reference` or `jax` profile, then runs attnref's forward (and, with --dout, backward) kernel
// and writes or compares the results. Every output is float32.
//
// q, k and v share one dtype (float16, float32, float64, or bfloat16 read from raw codes with
// --q-dtype bf16 and --kv-dtype bf16: four kernel instantiations). A 2-dim
// k/v ([kv_seq_len, head_dim]) selects MQA, as JAX's make_splash_mqa. The mask is a bool
// `[1 or Hq, Sq, Skv]` array, or one of --causal / --local / --chunked; with none it is full.
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../frontend/splash.hpp"
#include "attnref/compare/splash.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// The splash call and the result options of one `splash` invocation.
struct SplashRun {
  frontend::SplashInputs in;
  Input expect, expect_lse;
  bool check_only = false;
};

/// Stages `values` as float32 for the file an option names, if given (written with --out).
template <class T>
void write_output(const ParsedArgs& args, OutputFiles* outputs, const char* option,
                  const std::vector<std::int64_t>& shape, const std::vector<T>& values) {
  const std::optional<std::string> path = args.value(option);
  if (!path) return;
  outputs->stage(*path, shape, to_doubles(values),
                 "wrote " + *path + " (float32, " + std::string(option + 2) + ")");
}

/// Runs the backward pass over `plan` and the forward's results and stages the gradients.
template <class T>
void run_backward(const ParsedArgs& args, const SplashRun& run, const SplashPlan<T>& plan,
                  const std::vector<T>& out, const std::vector<float>& lse, OutputFiles* outputs) {
  const SplashAttentionArgs<T>& a = plan.args;
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dv = a.head_dim_v();
  const std::int64_t dqk = a.head_dim_qk(), hkv = a.num_kv_heads(), skv = a.kv_seq_len();
  std::vector<T> dq(static_cast<std::size_t>(hq * sq * dqk)),
      dk(static_cast<std::size_t>(hkv * skv * dqk)), dvv(static_cast<std::size_t>(hkv * skv * dv));
  std::vector<float> dsinks(run.in.sinks.values.size());
  SplashGradients<T> g;
  g.dq = TensorView<T, 3>(dq.data(), {hq, sq, dqk});
  g.dk = TensorView<T, 3>(dk.data(), {hkv, skv, dqk});
  g.dv = TensorView<T, 3>(dvv.data(), {hkv, skv, dv});
  if (!dsinks.empty()) g.dsinks = TensorView<float, 1>(dsinks.data(), {hq});
  fail_if_error(try_splash_attention_backward(
      plan, TensorView<const T, 3>(out.data(), {hq, sq, dv}),
      TensorView<const float, 2>(lse.data(), {hq, sq}), frontend::view_of<T, 3>(run.in.dout), g));
  write_output(args, outputs, "--dq-out", {hq, sq, dqk}, dq);
  // MQA gradients keep k/v's 2-dim shape.
  write_output(args, outputs, "--dk-out", run.in.k.shape, dk);
  write_output(args, outputs, "--dv-out", run.in.v.shape, dvv);
  write_output(args, outputs, "--dsinks-out", {hq}, dsinks);
}

/// Validates with the chosen profile, then (unless --check-only) runs and finishes the output.
template <class T>
int run_typed(const ParsedArgs& args, const SplashRun& run, const SplashAttentionArgs<T>& a,
              const MultiHeadMask& mask) {
  frontend::check_splash_tiers(run.in, a, mask);
  if (run.check_only) {
    std::cout << "ok\n";
    return kExitOk;
  }
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dv = a.head_dim_v();
  std::vector<T> out(static_cast<std::size_t>(hq * sq * dv));
  std::vector<float> lse(static_cast<std::size_t>(hq * sq));
  // One plan (the mask classified once) for forward and backward.
  SplashPlan<T> plan;
  fail_if_error(make_splash_plan(a, mask, &plan));
  fail_if_error(try_splash_attention(plan, TensorView<T, 3>(out.data(), {hq, sq, dv}),
                                     TensorView<float, 2>(lse.data(), {hq, sq})));
  OutputFiles outputs;  // all written, or none
  write_output(args, &outputs, "--lse-out", {hq, sq}, lse);
  if (run.in.backward) run_backward(args, run, plan, out, lse, &outputs);
  const auto explain = [&](Tolerance tol) {
    compare::Report report;
    fail_if_error(compare::try_compare_splash(
        a, mask, frontend::splash_mask_params(run.in), to_doubles(run.expect.array),
        run.expect_lse.present() ? to_doubles(run.expect_lse.array) : std::vector<double>{},
        compare_options(args, tol), &report));
    return report;
  };
  return finish_output(args, {hq, sq, dv}, to_doubles(out), run.expect,
                       default_tolerance(run.in.q.dtype), &outputs, explain);
}

/// "none" or a non-negative integer, for --local LEFT,RIGHT.
std::optional<std::int64_t> window_side(const ParsedArgs& args, const std::string& text) {
  if (text == "none") return std::nullopt;
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || text.empty()) {
    args.usage_error("--local takes LEFT,RIGHT, each an integer or 'none'; got '" + text + "'");
  }
  return static_cast<std::int64_t>(v);
}

/// The mask options (--mask, --causal, --local, --chunked, --offset): at most one mask.
void parse_mask_options(const ParsedArgs& args, frontend::MaskSpec* m) {
  using Kind = frontend::MaskSpec::Kind;
  int mask_options = 0;
  if (args.has("--mask")) {
    m->kind = Kind::kArray;
    ++mask_options;
  }
  if (args.has("--causal")) {
    m->kind = Kind::kCausal;
    ++mask_options;
  }
  if (std::optional<std::string> local = args.value("--local")) {
    m->kind = Kind::kLocal;
    ++mask_options;
    const std::size_t comma = local->find(',');
    if (comma == std::string::npos)
      args.usage_error("--local takes LEFT,RIGHT; got '" + *local + "'");
    m->left = window_side(args, local->substr(0, comma));
    m->right = window_side(args, local->substr(comma + 1));
  }
  if (std::optional<std::int64_t> c = args.int64("--chunked")) {
    m->kind = Kind::kChunked;
    m->chunk = *c;
    ++mask_options;
  }
  if (mask_options > 1)
    args.usage_error("give at most one of --mask, --causal, --local, --chunked");
  if (std::optional<std::int64_t> o = args.int64("--offset")) {
    if (m->kind != Kind::kCausal && m->kind != Kind::kLocal)
      args.usage_error("--offset applies to --causal and --local only");
    m->offset = *o;
  }
}

/// The subcommand's usage, help text and options.
const CommandSpec& splash_spec() {
  static const CommandSpec kSpec{
      "splash",
      "--q Q.npy --k K.npy --v V.npy\n"
      "       [--mask M.npy | --causal | --local LEFT,RIGHT | --chunked C] [--offset N]\n"
      "       [--q-segment-ids A.npy --kv-segment-ids B.npy] [--sinks S.npy] [--soft-cap C]\n"
      "       [--sliding-window W] [--alibi-slopes A.npy]\n"
      "       [--mask-value M] [--sm-scale S] [--block-q N] [--block-kv N]\n"
      "       [--block-kv-compute N] [--profile jax|reference] [--check-only] [--check-data]\n"
      "       [--out OUT.npy] [--lse-out LSE.npy] [--expect EXP.npy [--atol A] [--rtol R]\n"
      "        [--expect-lse LSE.npy]]\n"
      "       [--dout DO.npy --dq-out DQ.npy --dk-out DK.npy --dv-out DV.npy\n"
      "        [--dsinks-out DS.npy]] [--q-dtype bf16 --kv-dtype bf16]",
      "Splash attention (prefill/training): out[h, r] = softmax over the allowed t (mask AND\n"
      "q_segment_ids[r] == kv_segment_ids[t], and r - W < t <= r with --sliding-window W) of\n"
      "cap(sm_scale * q[h, r] . k_t) + slope[h] * (t - r) (with --alibi-slopes), plus an optional\n"
      "sink logit per head, applied to v_t. A row with no allowed key and no sink gives 0 and\n"
      "logsumexp -inf. k/v of rank 2 ([Skv, D]) select MQA. Validates under the chosen profile\n"
      "(jax: every check JAX's Pallas TPU kernel makes; reference: what the math needs; the\n"
      "sequence lengths need not divide by the blocks), then runs attnref's kernels. With --dout,\n"
      "also the backward pass (dq, dk, dv and, with sinks, dsinks). q, k, v (and dout) share\n"
      "one dtype: float16, float32, float64, or bfloat16 dumps (raw codes: uint16 or |V2, as\n"
      "np.save writes ml_dtypes.bfloat16) read with --q-dtype bf16 (q, dout) and --kv-dtype\n"
      "bf16 (k, v). Outputs are float32.",
      with_common_options(
          {{"--q", "Q.npy", "queries [num_q_heads, q_seq_len, head_dim_qk]"},
           {"--k", "K.npy",
            "keys [num_kv_heads, kv_seq_len, head_dim_qk] or MQA [kv_seq_len, head_dim_qk]"},
           {"--v", "V.npy",
            "values [num_kv_heads, kv_seq_len, head_dim_v] or MQA [kv_seq_len, head_dim_v]"},
           {"--mask", "M.npy", "bool mask [1 or num_q_heads, q_seq_len, kv_seq_len]"},
           {"--causal", nullptr, "causal mask: q + offset >= kv"},
           {"--local", "LEFT,RIGHT", "local window, each side an integer or 'none'"},
           {"--chunked", "C", "chunked causal mask with chunks of C tokens"},
           {"--offset", "N", "diagonal offset of --causal/--local (default 0)"},
           {"--q-segment-ids", "A.npy", "int32 [q_seq_len]"},
           {"--kv-segment-ids", "B.npy", "int32 [kv_seq_len]"},
           {"--sinks", "S.npy", "attention-sink logits [num_q_heads] (float)"},
           {"--sliding-window", "W",
            "query r sees keys r - W < t <= r only, on top of the mask (W > 0)"},
           {"--block-q", "N", "q block (default 128; no numerical effect beyond rounding)"},
           {"--block-kv", "N", "kv block (default 128)"},
           {"--block-kv-compute", "N", "kv compute sub-block (default --block-kv)"},
           {"--lse-out", "LSE.npy", "write logsumexp [num_q_heads, q_seq_len]"},
           {"--dout", "DO.npy",
            "output gradient [num_q_heads, q_seq_len, head_dim_v]: run backward"},
           {"--dq-out", "DQ.npy", "write dq (with --dout)"},
           {"--dk-out", "DK.npy", "write dk, k's shape (with --dout)"},
           {"--dv-out", "DV.npy", "write dv, v's shape (with --dout)"},
           {"--dsinks-out", "DS.npy", "write dsinks [num_q_heads] (with --dout and --sinks)"},
           {"--q-dtype", "T", "bf16: q (and dout) hold raw bfloat16 codes (uint16 or |V2)"},
           {"--kv-dtype", "T", "bf16: k and v hold raw bfloat16 codes (uint16 or |V2)"},
           kExpectLseOption})};
  return kSpec;
}

}  // namespace

int run_splash(int argc, char** argv) {
  const CommandSpec& spec = splash_spec();
  const ParsedArgs args(spec, argc, argv);
  if (args.help_requested()) return print_help(spec);

  SplashRun run;
  frontend::SplashInputs& in = run.in;
  // Options first: a usage error costs no file reading.
  const CommonOptions common = parse_common_options(args);
  in.common = frontend_options(common);
  run.check_only = common.check_only;
  const DType q_as = dtype_option(args, "--q-dtype");
  // Splash takes no fp8: k and v are q's float type.
  const DType kv_as =
      args.choice("--kv-dtype", {"bf16"}, "") == "bf16" ? DType::kBFloat16 : DType::kUnknown;
  frontend::MaskSpec& mask = in.mask.front();
  parse_mask_options(args, &mask);
  in.sliding_window = args.int64("--sliding-window");
  const std::int64_t bq = args.int64("--block-q").value_or(128);
  const std::int64_t bkv = args.int64("--block-kv").value_or(128);
  in.blocks.block_q = bq;
  in.blocks.block_kv = bkv;
  in.blocks.block_kv_compute = args.int64("--block-kv-compute").value_or(bkv);
  // Backward blocks follow the forward ones.
  in.blocks.block_q_dkv = in.blocks.block_q_dq = bq;
  in.blocks.block_kv_dkv = in.blocks.block_kv_dq = bkv;
  in.blocks.block_kv_dkv_compute = in.blocks.block_kv_compute;
  for (const char* grad : {"--dq-out", "--dk-out", "--dv-out", "--dsinks-out"}) {
    if (args.has(grad) && !args.has("--dout"))
      args.usage_error(std::string(grad) + " needs --dout");
  }
  if (args.has("--dsinks-out") && !args.has("--sinks"))
    args.usage_error("--dsinks-out needs --sinks");
  for (const char* required : {"--q", "--k", "--v"}) args.required(required);
  // After the usage errors. JAX's LocalMask does not check this; a negative side would
  // silently mask the diagonal itself.
  const std::pair<const char*, std::optional<std::int64_t>> sides[] = {{"left", mask.left},
                                                                       {"right", mask.right}};
  for (const auto& side : sides) {
    if (!side.second || *side.second >= 0) continue;
    fail_status(Status(ErrorCode::kInvalidMaskParameter, "",
                       "--local window {f}={0} must not be negative",
                       "each side of --local counts the keys allowed before (left) or after "
                       "(right) the diagonal: 0 or more, or 'none' for no limit",
                       {*side.second}, {}, side.first));
  }

  const Input q = load_input(args, "--q", true), k = load_input(args, "--k", true),
              v = load_input(args, "--v", true), mask_file = load_input(args, "--mask", false),
              q_seg = load_input(args, "--q-segment-ids", false),
              kv_seg = load_input(args, "--kv-segment-ids", false),
              sinks = load_input(args, "--sinks", false),
              alibi_slopes = load_input(args, "--alibi-slopes", false),
              dout = load_input(args, "--dout", false);
  in.q = to_array(q, "q");
  in.k = to_array(k, "k");
  in.v = to_array(v, "v");
  mask.array = to_array(mask_file, "mask");
  in.q_segment_ids = to_array(q_seg, "q_segment_ids");
  in.kv_segment_ids = to_array(kv_seg, "kv_segment_ids");
  in.sinks = frontend::read_sinks(to_array(sinks, "sinks"));
  in.alibi_slopes = frontend::read_alibi_slopes(to_array(alibi_slopes, "alibi_slopes"));
  in.dout = to_array(dout, "dout");
  in.backward = in.dout.present();

  frontend::check_splash_ranks(in);
  frontend::check_splash_dout(in);
  const std::vector<std::int64_t> out_shape = {q.array.shape[0], q.array.shape[1],
                                               v.array.shape.back()};
  run.expect = load_expect(args, out_shape);
  run.expect_lse = load_expect_lse(args, {out_shape[0], out_shape[1]});

  // Element types: raw bf16 codes become bfloat16 (--q-dtype for q and dout, --kv-dtype for k
  // and v) first; k, v and dout take q's dtype.
  fail_if_error(apply_dtype_option(&in.q, q_as, "--q-dtype"));
  fail_if_error(apply_dtype_option(&in.k, kv_as, "--kv-dtype"));
  fail_if_error(apply_dtype_option(&in.v, kv_as, "--kv-dtype"));
  if (in.dout.present()) fail_if_error(apply_dtype_option(&in.dout, q_as, "--q-dtype"));
  frontend::check_splash_dtypes(in, "q must be float16, float32 or float64");
  int status = kExitOk;
  frontend::with_splash_args(
      in, [&](const auto& a, const MultiHeadMask& m) { status = run_typed(args, run, a, m); });
  return status;
}

}  // namespace cli
}  // namespace attnref
