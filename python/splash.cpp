// SPDX-License-Identifier: Apache-2.0
// attnref.check_splash, attnref.splash_attention and attnref.splash_attention_backward: splash
// attention (prefill and training), forward and backward.
// The front end's builder (tools/frontend/splash.hpp) makes the args and the mask; this file
// reads Python's arguments into its inputs.
#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tools/frontend/splash.hpp"
#include "attnref/compare/splash.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

using SplashCall = FamilyCall<frontend::SplashInputs>;

const char* const kMaskForms =
    "mask is None, 'causal', ('causal', offset), ('local', left, right[, offset]) with sides "
    "int or None, ('chunked', size), a bool array [1 or num_q_heads, q_seq_len, kv_seq_len] or "
    "[q_seq_len, kv_seq_len], or a list of those per query head";

const char* const kQueryDtypes =
    "q is float16, float32, float64 or bfloat16 (a torch.bfloat16 tensor, or view_as(q_uint16, "
    "'bfloat16'))";

std::optional<std::int64_t> window_side(py::handle side, const char* which) {
  if (side.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(side) || !py::isinstance<py::int_>(side))
    throw py::type_error(kMaskForms);
  const auto v = to_int64(side, "mask");
  if (v < 0) {
    raise_if_error(Status(ErrorCode::kInvalidMaskParameter, "",
                          "the local window's {f} side is {0}; it must not be negative",
                          "each side counts the keys allowed before (left) or after (right) the "
                          "diagonal: 0 or more, or None for no limit",
                          {v}, {}, which));
  }
  return v;
}

/// A mask from a string or a tuple.
frontend::MaskSpec named_mask(py::handle spec) {
  using Kind = frontend::MaskSpec::Kind;
  frontend::MaskSpec m;
  if (py::isinstance<py::str>(spec)) {
    const auto s = spec.cast<std::string>();
    if (s == "causal") m.kind = Kind::kCausal;
    if (s != "causal" && s != "full") throw py::value_error(kMaskForms);
    return m;
  }
  const auto t = spec.cast<py::tuple>();
  const std::string kind =
      t.size() > 0 && py::isinstance<py::str>(t[0]) ? t[0].cast<std::string>() : "";
  const auto int_at = [&](size_t i) {
    if (py::isinstance<py::bool_>(t[i]) || !py::isinstance<py::int_>(t[i]))
      throw py::type_error(kMaskForms);
    return to_int64(t[i], "mask");
  };
  if (kind == "causal" && t.size() == 2) {
    m.kind = Kind::kCausal;
    m.offset = int_at(1);
  } else if (kind == "local" && (t.size() == 3 || t.size() == 4)) {
    m.kind = Kind::kLocal;
    m.left = window_side(t[1], "left");
    m.right = window_side(t[2], "right");
    m.offset = t.size() == 4 ? int_at(3) : 0;
  } else if (kind == "chunked" && t.size() == 2) {
    m.kind = Kind::kChunked;
    m.chunk = int_at(1);
  } else {
    throw py::value_error(kMaskForms);
  }
  return m;
}

/// One mask spec: a string, a tuple or a bool array (one head's when `one_head`, or of rank 2).
frontend::MaskSpec mask_spec(py::handle spec, bool one_head) {
  if (py::isinstance<py::str>(spec) || py::isinstance<py::tuple>(spec)) return named_mask(spec);
  frontend::MaskSpec m;
  m.kind = frontend::MaskSpec::Kind::kArray;
  m.array = read_array(spec, "mask");
  m.one_head = one_head || m.array.rank() == 2;
  return m;
}

/// The `mask` argument: None (full), one spec for every head, or a list, one per head.
std::vector<frontend::MaskSpec> read_mask(py::handle spec) {
  if (spec.is_none()) return {frontend::MaskSpec{}};
  if (!py::isinstance<py::list>(spec)) return {mask_spec(spec, false)};
  std::vector<frontend::MaskSpec> heads;
  for (py::handle h : spec) heads.push_back(mask_spec(h, true));
  return heads;
}

SplashCall read_splash(py::handle q, py::handle k, py::handle v, py::handle dout, py::kwargs kwargs,
                       bool for_kernel, const char* function) {
  Kwargs kw(std::move(kwargs), function);
  SplashCall call = start_call<frontend::SplashInputs>(kw, for_kernel);
  frontend::SplashInputs& in = call.in;
  py::object mask = kw.take_object("mask");
  const std::int64_t bq = kw.take_int("block_q").value_or(128);
  const std::int64_t bkv = kw.take_int("block_kv").value_or(128);
  in.blocks.block_q = bq;
  in.blocks.block_kv = bkv;
  in.blocks.block_kv_compute = kw.take_int("block_kv_compute").value_or(bkv);
  // The backward blocks follow the forward ones (as attnref-run's).
  in.blocks.block_q_dkv = in.blocks.block_q_dq = bq;
  in.blocks.block_kv_dkv = in.blocks.block_kv_dq = bkv;
  in.blocks.block_kv_dkv_compute = in.blocks.block_kv_compute;
  if (!for_kernel) in.backward = kw.take_bool("backward").value_or(false);
  py::object q_seg = kw.take_object("q_segment_ids");
  py::object kv_seg = kw.take_object("kv_segment_ids");
  py::object sinks = kw.take_object("sinks");
  py::object alibi_slopes = kw.take_object("alibi_slopes");
  in.sliding_window = kw.take_int("sliding_window");
  kw.finish();

  in.q = read_array(q, "q");
  in.k = read_array(k, "k");
  in.v = read_array(v, "v");
  in.mask = read_mask(mask);
  in.q_segment_ids = read_array(q_seg, "q_segment_ids", true);
  in.kv_segment_ids = read_array(kv_seg, "kv_segment_ids", true);
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  in.dout = read_array(dout, "dout", true);
  frontend::check_splash_ranks(in);
  frontend::check_splash_dtypes(in, kQueryDtypes);
  return call;
}

void check_splash_py(py::handle q, py::handle k, py::handle v, py::kwargs kwargs) {
  const SplashCall call =
      read_splash(q, k, v, py::none(), std::move(kwargs), false, "check_splash");
  frontend::check_splash_call(call.in);
}

/// `[num_heads, seq_len, d]` view of an output of k's shape (2-D under MQA).
template <class T>
TensorView<T, 3> kv_output_view(QueryOutput<T>& out, const std::vector<std::int64_t>& shape) {
  if (shape.size() == 3) return out.template view<3>();
  return out.view(std::array<std::int64_t, 3>{1, shape[0], shape[1]});
}

py::object splash_forward_py(py::handle q, py::handle k, py::handle v, py::kwargs kwargs) {
  const SplashCall call =
      read_splash(q, k, v, py::none(), std::move(kwargs), true, "splash_attention");
  py::object result;
  frontend::with_splash_args(call.in, [&](const auto& a, const MultiHeadMask& mask) {
    using T = std::remove_const_t<typename decltype(a.q)::element_type>;
    SplashPlan<T> plan;
    // The plan validates before the outputs are sized: a q of head_dim 0 holds nothing,
    // whatever its heads and rows claim, and is refused by a shape check.
    raise_if_error(make_splash_plan(a, mask, &plan));
    result = run_kernel_call<T>({a.num_q_heads(), a.q_seq_len(), a.head_dim_v()}, call.num_threads,
                                call.return_lse, [&](auto out, auto lse, auto& executor) {
                                  return try_splash_attention(plan, out, lse, executor);
                                });
  });
  return result;
}

/// The forward pass and then the backward over `plan` into `g`, on `num_threads` threads.
template <class T>
void run_forward_and_backward(const SplashPlan<T>& plan, const TensorView<const T, 3>& dout,
                              const SplashGradients<T>& g, int num_threads) {
  const SplashAttentionArgs<T>& a = plan.args;
  const std::int64_t hq = a.num_q_heads(), sq = a.q_seq_len(), dv = a.head_dim_v();
  std::vector<T> out(static_cast<size_t>(hq * sq * dv));
  std::vector<float> lse(static_cast<size_t>(hq * sq));
  Status status;
  run_released(num_threads, [&](auto& executor) {
    const TensorView<T, 3> out_view(out.data(), {hq, sq, dv});
    const TensorView<float, 2> lse_view(lse.data(), {hq, sq});
    status = try_splash_attention(plan, out_view, lse_view, executor);
    if (!status.ok()) return;
    status = try_splash_attention_backward(plan, TensorView<const T, 3>(out_view),
                                           TensorView<const float, 2>(lse_view), dout, g, executor);
  });
  raise_if_error(status);
}

py::tuple splash_backward_py(py::handle q, py::handle k, py::handle v, py::handle dout,
                             py::kwargs kwargs) {
  // The backward returns gradients only: a logsumexp asked for would be dropped.
  if (kwargs.contains("return_lse")) {
    throw py::type_error(
        "splash_attention_backward() got an unexpected keyword argument 'return_lse'");
  }
  const SplashCall call =
      read_splash(q, k, v, dout, std::move(kwargs), true, "splash_attention_backward");
  const frontend::SplashInputs& in = call.in;
  frontend::check_splash_dout(in);
  py::object dq, dk, dvv;
  py::object dsinks = py::none();
  py::array dsinks_array =
      new_array(DType::kFloat32, {static_cast<std::int64_t>(in.sinks.values.size())});
  if (in.sinks.present()) dsinks = dsinks_array;
  frontend::with_splash_args(in, [&](const auto& a, const MultiHeadMask& mask) {
    using T = std::remove_const_t<typename decltype(a.q)::element_type>;
    SplashPlan<T> plan;
    raise_if_error(make_splash_plan(a, mask, &plan));
    raise_if_error(plan.backward_status);
    QueryOutput<T> dq_out(in.q.shape), dk_out(in.k.shape), dv_out(in.v.shape);
    SplashGradients<T> g;
    g.dq = dq_out.template view<3>();
    g.dk = kv_output_view(dk_out, in.k.shape);
    g.dv = kv_output_view(dv_out, in.v.shape);
    if (in.sinks.present()) g.dsinks = output_view<float, 1>(dsinks_array);
    run_forward_and_backward(plan, view_of<T, 3>(in.dout), g, call.num_threads);
    dq = dq_out.finish();
    dk = dk_out.finish();
    dvv = dv_out.finish();
  });
  return py::make_tuple(dq, dk, dvv, dsinks);
}

py::dict compare_splash_py(py::handle got, py::handle q, py::handle k, py::handle v,
                           py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_splash");
  const SplashCall call =
      read_splash(q, k, v, py::none(), std::move(kwargs), true, "compare_splash");
  const frontend::SplashInputs& in = call.in;
  const std::int64_t hq = in.q.shape[0], sq = in.q.shape[1], dv = in.v.shape.back();
  raise_if_error(check_compare_shapes(c, {hq, sq, dv}, {hq, sq}));
  compare::Report report;
  frontend::with_splash_args(in, [&](const auto& a, const MultiHeadMask& mask) {
    run_compare([&] {
      return compare::try_compare_splash(a, mask, frontend::splash_mask_params(in), c.got,
                                         c.got_lse, c.options, &report);
    });
  });
  return report_dict(report);
}

}  // namespace

void bind_splash(py::module_& m) {
  m.def("check_splash", &check_splash_py, py::arg("q"), py::arg("k"), py::arg("v"),
        R"(check_splash(q, k, v, *, mask=None, q_segment_ids=None, kv_segment_ids=None,
             sinks=None, sliding_window=None, alibi_slopes=None, soft_cap=None,
             sm_scale=1.0, mask_value=None, block_q=128, block_kv=128,
             block_kv_compute=None, backward=False, profile="reference",
             tiers=("shape", "metadata")) -> None

Validates splash attention inputs; raises ShapeError on the first failed check.
  q     [num_q_heads, q_seq_len, head_dim_qk]: float16, float32, float64 or bfloat16 (a
        torch.bfloat16 tensor or view_as(uint16, 'bfloat16'))
  k     [num_kv_heads, kv_seq_len, head_dim_qk], or MQA [kv_seq_len, head_dim_qk]; q's dtype
  v     [num_kv_heads, kv_seq_len, head_dim_v], or MQA [kv_seq_len, head_dim_v]; q's dtype
  mask  None (full), "causal", ("causal", offset), ("local", left, right[, offset]) (each side
        an int or None), ("chunked", size), a bool array [1 or num_q_heads, q_seq_len,
        kv_seq_len] or [q_seq_len, kv_seq_len], or a list of those, one per query head
  q_segment_ids [q_seq_len], kv_segment_ids [kv_seq_len]: int32, both or neither
  sinks [num_q_heads]: attention-sink logits (any float dtype, used as float32)
  sliding_window  w > 0: row i sees key j only if i - w < j <= i, on top of the mask
  alibi_slopes [num_q_heads]: slope[h] * (j - i) added after the soft cap (float, as float32)
  alibi_convention "signed" (slope * (key_pos - query_pos)) or "absolute" (-slope * |...|,
                FlashAttention-2 non-causal); soft_cap_order "cap_then_alibi" or "alibi_then_cap"
                (c * tanh((s + bias) / c), FlashInfer)
backward=True also runs the backward pass's checks.)");
  m.def("splash_attention", &splash_forward_py, py::arg("q"), py::arg("k"), py::arg("v"),
        R"(splash_attention(q, k, v, *, mask=None, q_segment_ids=None, kv_segment_ids=None,
                 sinks=None, sliding_window=None, alibi_slopes=None, soft_cap=None,
                 sm_scale=1.0, mask_value=None, block_q=128, block_kv=128,
                 block_kv_compute=None, return_lse=False, num_threads=1)
    -> out or (out, lse)

Validates (reference profile), then runs the forward kernel with the GIL released. Arguments
as check_splash.
  out  [num_q_heads, q_seq_len, head_dim_v], q's dtype (bfloat16 q: float32 of bf16 values); a
       zero row where no key is visible
  lse  [num_q_heads, q_seq_len] float32 natural logsumexp (-inf where no key is visible and
       there is no sink))");
  m.def("splash_attention_backward", &splash_backward_py, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("dout"),
        R"(splash_attention_backward(q, k, v, dout, *, <the options of splash_attention but
                          return_lse>) -> (dq, dk, dv, dsinks)

Runs the forward, then the backward pass, given dout [num_q_heads, q_seq_len, head_dim_v].
  dq  [num_q_heads, q_seq_len, head_dim_qk]; dk, dv: k's and v's shapes (2-D under MQA); q's
      dtype (bfloat16: float32 of bf16 values)
  dsinks  [num_q_heads] float32 with sinks, else None)");
  m.def("compare_splash", &compare_splash_py, py::arg("got"), py::arg("q"), py::arg("k"),
        py::arg("v"),
        R"(compare_splash(got, q, k, v, *, atol=1e-5, rtol=1e-5, got_lse=None,
               <the options of splash_attention but return_lse and num_threads>) -> dict

Compares another kernel's output `got` [num_q_heads, q_seq_len, head_dim_v] (and `got_lse`
[num_q_heads, q_seq_len] when given) with attnref's reference; as compare_paged. A mask given
as "causal", ("causal", offset) or ("local", left, right[, offset]) also tries a shifted
diagonal and window. Returns compare_paged's dict.)");
}

}  // namespace python
}  // namespace attnref
