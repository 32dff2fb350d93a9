// SPDX-License-Identifier: Apache-2.0
// attnref.check_splash, attnref.splash_attention and attnref.splash_attention_backward: splash
// attention (prefill and training), forward and backward.
// Options: one SplashInputs, filled by read_splash, applied by make_args; masks by make_mask.
#include <optional>
#include <string>
#include <vector>

#include "attnref/compare/splash.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask.hpp"
#include "attnref/validate/splash.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

struct SplashInputs {
  Array q, k, v, dout, q_seg, kv_seg;
  Float32Vector sinks, alibi_slopes;
  std::optional<std::int64_t> sliding_window;
  bool is_mqa = false;
  CommonOptions common;
  SplashBlockSizes blocks = SplashBlockSizes::get_default();
  py::object mask_spec;
  std::vector<Array> mask_arrays;  // dense masks, kept alive while their views are used
  bool backward = false;           // check_splash(..., backward=True)
};

const char* const kMaskForms =
    "mask is None, 'causal', ('causal', offset), ('local', left, right[, offset]) with sides "
    "int or None, ('chunked', size), a bool array [1 or num_q_heads, q_seq_len, kv_seq_len] or "
    "[q_seq_len, kv_seq_len], or a list of those per query head";

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

/// One head's mask from a string, tuple or 2-D bool array (`arrays` keeps arrays alive).
AnyMask head_mask(py::handle spec, MaskShape shape, std::vector<Array>* arrays) {
  if (py::isinstance<py::str>(spec)) {
    const auto s = spec.cast<std::string>();
    if (s == "causal") return CausalMask{shape, 0};
    if (s == "full") return FullMask{shape};
    throw py::value_error(kMaskForms);
  }
  if (py::isinstance<py::tuple>(spec)) {
    const auto t = spec.cast<py::tuple>();
    const std::string kind =
        t.size() > 0 && py::isinstance<py::str>(t[0]) ? t[0].cast<std::string>() : "";
    const auto int_at = [&](size_t i) {
      if (py::isinstance<py::bool_>(t[i]) || !py::isinstance<py::int_>(t[i]))
        throw py::type_error(kMaskForms);
      return to_int64(t[i], "mask");
    };
    if (kind == "causal" && t.size() == 2) return CausalMask{shape, int_at(1)};
    if (kind == "local" && (t.size() == 3 || t.size() == 4)) {
      return LocalMask{shape, window_side(t[1], "left"), window_side(t[2], "right"),
                       t.size() == 4 ? int_at(3) : 0};
    }
    if (kind == "chunked" && t.size() == 2) return ChunkedCausalMask{shape, int_at(1)};
    throw py::value_error(kMaskForms);
  }
  arrays->push_back(read_array(spec, "mask"));
  const Array& a = arrays->back();
  raise_if_error(check_rank(a, 2, "a per-head mask is [q_seq_len, kv_seq_len]"));
  raise_if_error(check_mask_dtype(a.dtype));
  return DenseMask{view_of<bool, 2>(a)};
}

/// The MultiHeadMask a `mask` argument describes.
MultiHeadMask make_mask(SplashInputs& in, MaskShape shape) {
  py::handle spec = in.mask_spec;
  if (spec.is_none()) return MultiHeadMask{FullMask{shape}};
  if (py::isinstance<py::list>(spec)) {
    std::vector<AnyMask> heads;
    for (py::handle h : spec) heads.push_back(head_mask(h, shape, &in.mask_arrays));
    return MultiHeadMask(std::move(heads));
  }
  if (py::isinstance<py::str>(spec) || py::isinstance<py::tuple>(spec))
    return MultiHeadMask{head_mask(spec, shape, &in.mask_arrays)};
  in.mask_arrays.push_back(read_array(spec, "mask"));
  const Array& a = in.mask_arrays.back();
  if (a.rank() == 2) return MultiHeadMask{head_mask(spec, shape, &in.mask_arrays)};
  raise_if_error(check_mask_rank(a.rank(), a.shape.data()));
  raise_if_error(check_mask_dtype(a.dtype));
  const auto heads_extent = a.shape[0];
  raise_if_error(check_mask_head_count(heads_extent, in.q.shape[0]));
  const TensorView<const bool, 3> all = view_of<bool, 3>(a);
  // Heads of no element, or all at one address (stride 0), are one mask shared by every head,
  // so a (2^24, 0, 0) mask does not become 2^24 mask objects.
  if (all.extents[1] == 0 || all.extents[2] == 0 || all.strides[0] == 0) {
    return MultiHeadMask{DenseMask{TensorView<const bool, 2>(
        all.data, {all.extents[1], all.extents[2]}, {all.strides[1], all.strides[2]})}};
  }
  std::vector<AnyMask> heads;
  for (std::int64_t h = 0; h < heads_extent; ++h) {
    heads.emplace_back(DenseMask{TensorView<const bool, 2>(all.data + h * all.strides[0],
                                                           {all.extents[1], all.extents[2]},
                                                           {all.strides[1], all.strides[2]})});
  }
  return MultiHeadMask(std::move(heads));
}

SplashInputs read_splash(py::handle q, py::handle k, py::handle v, py::handle dout,
                         py::kwargs kwargs, bool for_kernel, const char* function) {
  SplashInputs in;
  Kwargs kw(std::move(kwargs), function);
  in.common = parse_common_options(kw, for_kernel);
  in.mask_spec = kw.take_object("mask");
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
  if (!dout.is_none()) in.dout = read_array(dout, "dout");
  in.q_seg = read_array(q_seg, "q_segment_ids", true);
  in.kv_seg = read_array(kv_seg, "kv_segment_ids", true);

  raise_if_error(check_rank(in.q, 3, "q is [num_q_heads, q_seq_len, head_dim_qk]"));
  in.is_mqa = in.k.rank() == 2;
  raise_if_error(check_key_rank(in.k.rank(), in.is_mqa));
  raise_if_error(check_rank(in.v, in.k.rank(),
                            "v has k's rank: [num_kv_heads, kv_seq_len, head_dim_v], or MQA "
                            "[kv_seq_len, head_dim_v]"));
  if (in.dout.present()) {
    raise_if_error(check_rank(in.dout, 3, "dout is [num_q_heads, q_seq_len, head_dim_v]"));
  }
  for (const Array* seg : {&in.q_seg, &in.kv_seg}) {
    if (!seg->present()) continue;
    raise_if_error(check_rank(*seg, 1, "segment ids are [sequence length]"));
    if (seg->dtype != DType::kInt32) raise_if_error(dtype_error(*seg, "segment ids are int32"));
  }
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  for (const Array* x : {&in.k, &in.v, &in.dout}) {
    if (x->present() && x->dtype != in.q.dtype)
      raise_if_error(dtype_mismatch(*x, in.q, "k, v and dout take q's dtype"));
  }
  return in;
}

/// `[num_kv_heads, kv_seq_len, d]` view of k or v, or `[1, kv_seq_len, d]` for MQA's 2-D arrays.
template <class T>
TensorView<const T, 3> kv_view(const Array& a) {
  if (a.rank() == 3) return view_of<T, 3>(a);
  const TensorView<const T, 2> v2 = view_of<T, 2>(a);
  return TensorView<const T, 3>(v2.data, {1, v2.extents[0], v2.extents[1]},
                                {0, v2.strides[0], v2.strides[1]});
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
  a.sm_scale = in.common.sm_scale;
  a.mask_value = in.common.mask_value;
  a.block_sizes = in.blocks;
  return a;
}

/// Calls fn(Tag<T>{}) for q's dtype.
template <class Fn>
void dispatch_q(const Array& q, Fn&& fn) {
  require_query(q);
  dispatch(AnyFloatTypes{}, q.dtype, fn);
}

void check_splash_py(py::handle q, py::handle k, py::handle v, py::kwargs kwargs) {
  SplashInputs in = read_splash(q, k, v, py::none(), std::move(kwargs), false, "check_splash");
  dispatch_q(in.q, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SplashAttentionArgs<T> a = make_args<T>(in);
    const MultiHeadMask mask = make_mask(in, {a.q_seq_len(), a.kv_seq_len()});
    const Profile p = in.common.profile;
    raise_if_error(check_splash_shapes(a, mask, p));
    if (in.common.metadata) raise_if_error(check_splash_metadata(a, mask, p));
    if (in.backward) raise_if_error(check_splash_backward(a, mask, p));
    if (in.common.data) raise_if_error(check_splash_data(a));
  });
}

/// `[num_heads, seq_len, d]` view of an output of k's shape (2-D under MQA).
template <class T>
TensorView<T, 3> kv_output_view(QueryOutput<T>& out, const std::vector<std::int64_t>& shape) {
  if (shape.size() == 3) return out.template view<3>();
  return out.view(std::array<std::int64_t, 3>{1, shape[0], shape[1]});
}

py::object splash_forward_py(py::handle q, py::handle k, py::handle v, py::kwargs kwargs) {
  SplashInputs in = read_splash(q, k, v, py::none(), std::move(kwargs), true, "splash_attention");
  const std::int64_t hq = in.q.shape[0], sq = in.q.shape[1], dv = in.v.shape.back();
  py::object out;
  py::array lse;
  dispatch_q(in.q, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SplashAttentionArgs<T> a = make_args<T>(in);
    const MultiHeadMask mask = make_mask(in, {a.q_seq_len(), a.kv_seq_len()});
    SplashPlan<T> plan;
    // The plan validates before the outputs are sized: a q of head_dim 0 holds nothing,
    // whatever its heads and rows claim, and is refused by a shape check.
    raise_if_error(make_splash_plan(a, mask, &plan));
    lse = new_array(DType::kFloat32, {hq, sq});
    QueryOutput<T> q_out({hq, sq, dv});
    const auto out_view = q_out.template view<3>();
    const auto lse_view = output_view<float, 2>(lse);
    Status status;
    run_released(in.common.num_threads, [&](auto& executor) {
      status = try_splash_attention(plan, out_view, lse_view, executor);
    });
    raise_if_error(status);
    out = q_out.finish();
  });
  if (in.common.return_lse) return py::make_tuple(out, lse);
  return out;
}

py::tuple splash_backward_py(py::handle q, py::handle k, py::handle v, py::handle dout,
                             py::kwargs kwargs) {
  // The backward returns gradients only: a logsumexp asked for would be dropped.
  if (kwargs.contains("return_lse")) {
    throw py::type_error(
        "splash_attention_backward() got an unexpected keyword argument 'return_lse'");
  }
  SplashInputs in =
      read_splash(q, k, v, dout, std::move(kwargs), true, "splash_attention_backward");
  const std::int64_t hq = in.q.shape[0], sq = in.q.shape[1], dv = in.v.shape.back();
  if (in.dout.shape != std::vector<std::int64_t>{hq, sq, dv}) {
    raise_if_error(Status(
        ErrorCode::kShapeMismatch, "", "dout has shape ({0}, {1}, {2}); expected ({3}, {4}, {5})",
        "dout is the gradient of out [num_q_heads, q_seq_len, head_dim_v]",
        {in.dout.shape[0], in.dout.shape[1], in.dout.shape[2], hq, sq, dv}, {}, "dout"));
  }
  py::object dq, dk, dvv;
  py::object dsinks = py::none();
  py::array dsinks_array =
      new_array(DType::kFloat32, {static_cast<std::int64_t>(in.sinks.values.size())});
  if (in.sinks.present()) dsinks = dsinks_array;
  dispatch_q(in.q, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SplashAttentionArgs<T> a = make_args<T>(in);
    const MultiHeadMask mask = make_mask(in, {a.q_seq_len(), a.kv_seq_len()});
    SplashPlan<T> plan;
    raise_if_error(make_splash_plan(a, mask, &plan));
    raise_if_error(plan.backward_status);
    const TensorView<const T, 3> dout_view = view_of<T, 3>(in.dout);
    std::vector<T> out(static_cast<size_t>(hq * sq * dv));
    std::vector<float> lse(static_cast<size_t>(hq * sq));
    QueryOutput<T> dq_out(in.q.shape), dk_out(in.k.shape), dv_out(in.v.shape);
    SplashGradients<T> g;
    g.dq = dq_out.template view<3>();
    g.dk = kv_output_view(dk_out, in.k.shape);
    g.dv = kv_output_view(dv_out, in.v.shape);
    if (in.sinks.present()) g.dsinks = output_view<float, 1>(dsinks_array);
    Status status;
    run_released(in.common.num_threads, [&](auto& executor) {
      const TensorView<T, 3> out_view(out.data(), {hq, sq, dv});
      const TensorView<float, 2> lse_view(lse.data(), {hq, sq});
      status = try_splash_attention(plan, out_view, lse_view, executor);
      if (!status.ok()) return;
      status = try_splash_attention_backward(plan, TensorView<const T, 3>(out_view),
                                             TensorView<const float, 2>(lse_view), dout_view, g,
                                             executor);
    });
    raise_if_error(status);
    dq = dq_out.finish();
    dk = dk_out.finish();
    dvv = dv_out.finish();
  });
  return py::make_tuple(dq, dk, dvv, dsinks);
}

/// What compare_splash may change in the mask: a single causal or local mask's offset and left
/// side (any other mask is left as it is).
compare::SplashMaskParams mask_params(py::handle spec) {
  using Kind = compare::SplashMaskParams::Kind;
  compare::SplashMaskParams p;
  if (py::isinstance<py::str>(spec) && spec.cast<std::string>() == "causal") {
    p.kind = Kind::kCausal;
  } else if (py::isinstance<py::tuple>(spec)) {
    // make_mask has accepted the tuple, so its items have the types its form needs.
    const auto t = spec.cast<py::tuple>();
    const std::string kind = t[0].cast<std::string>();
    if (kind == "causal") {
      p.kind = Kind::kCausal;
      p.offset = t[1].cast<std::int64_t>();
    } else if (kind == "local") {
      p.kind = Kind::kLocal;
      if (!t[1].is_none()) p.left = t[1].cast<std::int64_t>();
      if (!t[2].is_none()) p.right = t[2].cast<std::int64_t>();
      if (t.size() == 4) p.offset = t[3].cast<std::int64_t>();
    }
  }
  return p;
}

py::dict compare_splash_py(py::handle got, py::handle q, py::handle k, py::handle v,
                           py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_splash");
  SplashInputs in = read_splash(q, k, v, py::none(), std::move(kwargs), true, "compare_splash");
  const std::int64_t hq = in.q.shape[0], sq = in.q.shape[1], dv = in.v.shape.back();
  require_query(in.q);  // q's dtype before got's shape
  raise_if_error(check_compare_shapes(c, {hq, sq, dv}, {hq, sq}));
  compare::Report report;
  dispatch_q(in.q, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SplashAttentionArgs<T> a = make_args<T>(in);
    const MultiHeadMask mask = make_mask(in, {a.q_seq_len(), a.kv_seq_len()});
    const compare::SplashMaskParams params = mask_params(in.mask_spec);
    Status status;
    {
      py::gil_scoped_release release;
      status = compare::try_compare_splash(a, mask, params, c.got, c.got_lse, c.options, &report);
    }
    raise_if_error(status);
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
