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

#include "attnref/compare/splash.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {
namespace {

/// Where the mask comes from: no option (full), --causal, --local, --chunked or --mask.
enum class MaskKind { kFull, kCausal, kLocal, kChunked, kFile };

/// The parsed inputs and options of one `splash` invocation.
struct SplashInputs {
  Input q, k, v, mask, q_seg, kv_seg, dout, expect, expect_lse;
  HeadValues sinks, alibi_slopes;
  std::optional<std::int64_t> sliding_window;
  bool is_mqa = false;
  CommonOptions common;
  SplashBlockSizes blocks = SplashBlockSizes::get_default();
  MaskKind mask_kind = MaskKind::kFull;
  std::int64_t offset = 0;
  std::optional<std::int64_t> left, right;
  std::int64_t chunk = 0;
  bool check_only = false;
};

/// `[Hkv, S, D]` view of k/v, or `[1, S, D]` for a 2-dim MQA array.
template <class T>
TensorView<const T, 3> kv_view(const Input& in) {
  const std::vector<std::int64_t>& s = in.array.shape;
  if (s.size() == 2) {
    return TensorView<const T, 3>(in.array.data<T>(), {1, s[0], s[1]}, in.array.numel());
  }
  return view_of<T, 3>(in);
}

/// The mask as a MultiHeadMask: a --mask file gives one DenseMask per head, the options one
/// lazy mask shared by all heads.
MultiHeadMask make_mask(const SplashInputs& in, std::int64_t sq, std::int64_t skv) {
  const MaskShape shape{sq, skv};
  switch (in.mask_kind) {
    case MaskKind::kCausal:
      return MultiHeadMask{CausalMask{shape, in.offset}};
    case MaskKind::kLocal:
      return MultiHeadMask{LocalMask{shape, in.left, in.right, in.offset}};
    case MaskKind::kChunked:
      return MultiHeadMask{ChunkedCausalMask{shape, in.chunk}};
    case MaskKind::kFile: {
      const std::vector<std::int64_t>& s = in.mask.array.shape;
      const bool* data = in.mask.array.data<bool>();
      // Heads of no element are all the same empty mask: one shared head, so a (2^34, 0, 0) file
      // of 128 bytes does not become 2^34 mask objects (the caller checked the head count).
      if (s[1] == 0 || s[2] == 0)
        return MultiHeadMask{DenseMask{TensorView<const bool, 2>(data, {s[1], s[2]})}};
      std::vector<AnyMask> heads;
      heads.reserve(static_cast<std::size_t>(s[0]));
      for (std::int64_t h = 0; h < s[0]; ++h) {
        heads.emplace_back(
            DenseMask{TensorView<const bool, 2>(data + h * s[1] * s[2], {s[1], s[2]})});
      }
      return MultiHeadMask(heads);
    }
    case MaskKind::kFull:
      break;
  }
  return MultiHeadMask{FullMask{shape}};
}

template <class T>
SplashAttentionArgs<T> make_args(const SplashInputs& in) {
  SplashAttentionArgs<T> a;
  a.q = view_of<T, 3>(in.q);
  a.k = kv_view<T>(in.k);
  a.v = kv_view<T>(in.v);
  a.is_mqa = in.is_mqa;
  if (in.q_seg.present()) a.q_segment_ids = view_of<std::int32_t, 1>(in.q_seg);
  if (in.kv_seg.present()) a.kv_segment_ids = view_of<std::int32_t, 1>(in.kv_seg);
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
  a.sliding_window = in.sliding_window;
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.sm_scale = in.common.sm_scale;
  a.block_sizes = in.blocks;
  return a;
}

/// Stages `values` as float32 for the file an option names, if given (written with --out).
template <class T>
void write_output(const ParsedArgs& args, OutputFiles* outputs, const char* option,
                  const std::vector<std::int64_t>& shape, const std::vector<T>& values) {
  const std::optional<std::string> path = args.value(option);
  if (!path) return;
  outputs->stage(*path, shape, to_doubles(values),
                 "wrote " + *path + " (float32, " + std::string(option + 2) + ")");
}

template <class T>
int run_typed(const ParsedArgs& args, const SplashInputs& in) {
  const SplashAttentionArgs<T> a = make_args<T>(in);
  const MultiHeadMask mask = make_mask(in, a.q_seq_len(), a.kv_seq_len());
  fail_if_error(check_splash(a, mask, in.common.profile));
  const bool backward = in.dout.present();
  if (backward) fail_if_error(check_splash_backward(a, mask, in.common.profile));
  if (in.common.check_data) fail_if_error(check_splash_data(a));
  if (in.common.check_only) {
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
  if (backward) {
    const std::int64_t dqk = a.head_dim_qk(), hkv = a.num_kv_heads(), skv = a.kv_seq_len();
    std::vector<T> dq(static_cast<std::size_t>(hq * sq * dqk)),
        dk(static_cast<std::size_t>(hkv * skv * dqk)),
        dvv(static_cast<std::size_t>(hkv * skv * dv));
    std::vector<float> dsinks(in.sinks.values.size());
    SplashGradients<T> g;
    g.dq = TensorView<T, 3>(dq.data(), {hq, sq, dqk});
    g.dk = TensorView<T, 3>(dk.data(), {hkv, skv, dqk});
    g.dv = TensorView<T, 3>(dvv.data(), {hkv, skv, dv});
    if (!dsinks.empty()) g.dsinks = TensorView<float, 1>(dsinks.data(), {hq});
    fail_if_error(try_splash_attention_backward(
        plan, TensorView<const T, 3>(out.data(), {hq, sq, dv}),
        TensorView<const float, 2>(lse.data(), {hq, sq}), view_of<T, 3>(in.dout), g));
    write_output(args, &outputs, "--dq-out", {hq, sq, dqk}, dq);
    // MQA gradients keep k/v's 2-dim shape.
    write_output(args, &outputs, "--dk-out", in.k.array.shape, dk);
    write_output(args, &outputs, "--dv-out", in.v.array.shape, dvv);
    write_output(args, &outputs, "--dsinks-out", {hq}, dsinks);
  }
  const auto explain = [&](Tolerance tol) {
    compare::SplashMaskParams params;
    if (in.mask_kind == MaskKind::kCausal || in.mask_kind == MaskKind::kLocal) {
      params.kind = in.mask_kind == MaskKind::kCausal ? compare::SplashMaskParams::Kind::kCausal
                                                      : compare::SplashMaskParams::Kind::kLocal;
      params.offset = in.offset;
      params.left = in.left;
      params.right = in.right;
    }
    compare::Report report;
    fail_if_error(compare::try_compare_splash(
        a, mask, params, to_doubles(in.expect.array),
        in.expect_lse.present() ? to_doubles(in.expect_lse.array) : std::vector<double>{},
        compare_options(args, tol), &report));
    return report;
  };
  return finish_output(args, {hq, sq, dv}, to_doubles(out), in.expect,
                       default_tolerance(in.q.array.dtype), &outputs, explain);
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
void parse_mask_options(const ParsedArgs& args, SplashInputs* in) {
  int mask_options = 0;
  if (args.has("--mask")) {
    in->mask_kind = MaskKind::kFile;
    ++mask_options;
  }
  if (args.has("--causal")) {
    in->mask_kind = MaskKind::kCausal;
    ++mask_options;
  }
  if (std::optional<std::string> local = args.value("--local")) {
    in->mask_kind = MaskKind::kLocal;
    ++mask_options;
    const std::size_t comma = local->find(',');
    if (comma == std::string::npos)
      args.usage_error("--local takes LEFT,RIGHT; got '" + *local + "'");
    in->left = window_side(args, local->substr(0, comma));
    in->right = window_side(args, local->substr(comma + 1));
  }
  if (std::optional<std::int64_t> c = args.int64("--chunked")) {
    in->mask_kind = MaskKind::kChunked;
    in->chunk = *c;
    ++mask_options;
  }
  if (mask_options > 1)
    args.usage_error("give at most one of --mask, --causal, --local, --chunked");
  if (std::optional<std::int64_t> o = args.int64("--offset")) {
    if (in->mask_kind != MaskKind::kCausal && in->mask_kind != MaskKind::kLocal)
      args.usage_error("--offset applies to --causal and --local only");
    in->offset = *o;
  }
}

/// Element types: q, k, v (and dout) share one float dtype; raw bf16 codes become bfloat16
/// (--q-dtype for q and dout, --kv-dtype for k and v) first. Returns q's dtype.
DType check_splash_dtypes(SplashInputs* in, DType q_as, DType kv_as) {
  fail_if_error(apply_dtype_option(&in->q, q_as, "q", "--q-dtype"));
  fail_if_error(apply_dtype_option(&in->k, kv_as, "k", "--kv-dtype"));
  fail_if_error(apply_dtype_option(&in->v, kv_as, "v", "--kv-dtype"));
  if (in->dout.present()) fail_if_error(apply_dtype_option(&in->dout, q_as, "dout", "--q-dtype"));
  if (in->q.array.dtype != DType::kBFloat16) fail_if_error(check_q_dtype(in->q));
  const DType qt = in->q.array.dtype;
  for (const Input* x : {&in->k, &in->v, &in->dout}) {
    if (!x->present() || x->array.dtype == qt) continue;
    fail_status(Status(ErrorCode::kDtypeNotSupported, "",
                       "{f} has dtype {d0}; attnref-run takes k, v and dout of q's dtype ({d1})",
                       "save q, k, v and dout with one dtype",
                       {static_cast<std::int64_t>(x->array.dtype), static_cast<std::int64_t>(qt)},
                       {}, x == &in->k ? "k" : (x == &in->v ? "v" : "dout")));
  }
  return qt;
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

  SplashInputs in;
  // Options first: a usage error costs no file reading.
  in.common = parse_common_options(args);
  const DType q_as = dtype_option(args, "--q-dtype");
  // Splash takes no fp8: k and v are q's float type.
  const DType kv_as =
      args.choice("--kv-dtype", {"bf16"}, "") == "bf16" ? DType::kBFloat16 : DType::kUnknown;
  parse_mask_options(args, &in);
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
  const std::pair<const char*, std::optional<std::int64_t>> sides[] = {{"left", in.left},
                                                                       {"right", in.right}};
  for (const auto& side : sides) {
    if (!side.second || *side.second >= 0) continue;
    fail_status(Status(ErrorCode::kInvalidMaskParameter, "",
                       "--local window {f}={0} must not be negative",
                       "each side of --local counts the keys allowed before (left) or after "
                       "(right) the diagonal: 0 or more, or 'none' for no limit",
                       {*side.second}, {}, side.first));
  }

  in.q = load_input(args, "--q", true);
  in.k = load_input(args, "--k", true);
  in.v = load_input(args, "--v", true);
  in.mask = load_input(args, "--mask", false);
  in.q_seg = load_input(args, "--q-segment-ids", false);
  in.kv_seg = load_input(args, "--kv-segment-ids", false);
  in.sinks = load_head_values(args, "--sinks", "sinks", "sinks are [num_q_heads]",
                              ErrorCode::kNonFiniteData);
  in.alibi_slopes =
      load_head_values(args, "--alibi-slopes", "alibi_slopes", "ALiBi slopes are [num_q_heads]",
                       ErrorCode::kInvalidAlibiSlope);
  in.dout = load_input(args, "--dout", false);

  // Ranks: q is 3-dim; k 3-dim (MHA/GQA) or 2-dim (MQA), v like k (JAX's S3).
  fail_if_error(check_rank(in.q, 3, "q", "q is [num_q_heads, q_seq_len, head_dim_qk]"));
  const auto k_rank = static_cast<std::int64_t>(in.k.array.rank());
  in.is_mqa = k_rank == 2;
  fail_if_error(check_key_rank(k_rank, in.is_mqa));
  fail_if_error(check_rank(in.v, in.k.array.rank(), "v",
                           "v has k's rank: [num_kv_heads, kv_seq_len, head_dim_v], or MQA "
                           "[kv_seq_len, head_dim_v]"));
  if (in.mask.present()) {
    const std::vector<std::int64_t>& s = in.mask.array.shape;
    fail_if_error(check_mask_rank(static_cast<std::int64_t>(s.size()), s.data()));
    fail_if_error(check_mask_dtype(in.mask.array.dtype));
    fail_if_error(check_mask_head_count(s[0], in.q.array.shape[0]));
  }
  for (const Input* seg : {&in.q_seg, &in.kv_seg}) {
    if (!seg->present()) continue;
    const char* name = seg == &in.q_seg ? "q_segment_ids" : "kv_segment_ids";
    fail_if_error(check_rank(*seg, 1, name, "segment ids are [sequence length]"));
    if (seg->array.dtype != DType::kInt32)
      fail_status(dtype_error(*seg, name, "segment ids must be int32"));
  }
  const std::vector<std::int64_t> out_shape = {in.q.array.shape[0], in.q.array.shape[1],
                                               in.v.array.shape.back()};
  if (in.dout.present()) {
    fail_if_error(check_rank(in.dout, 3, "dout", "dout is [num_q_heads, q_seq_len, head_dim_v]"));
    if (in.dout.array.shape != out_shape) {
      fail_status(Status(ErrorCode::kShapeMismatch, "",
                         "dout has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
                         "dout is the gradient of out [num_q_heads, q_seq_len, head_dim_v]",
                         {in.dout.array.shape[0], in.dout.array.shape[1], in.dout.array.shape[2],
                          out_shape[0], out_shape[1], out_shape[2]},
                         {}, "dout"));
    }
  }
  in.expect = load_expect(args, out_shape);
  in.expect_lse = load_expect_lse(args, {out_shape[0], out_shape[1]});

  const DType qt = check_splash_dtypes(&in, q_as, kv_as);

  // k and v have q's dtype: one instantiation per q dtype.
  return dispatch_float(qt,
                        [&](auto q) { return run_typed<typename decltype(q)::type>(args, in); });
}

}  // namespace cli
}  // namespace attnref
