// SPDX-License-Identifier: Apache-2.0
// attnref.check_ragged and attnref.ragged_paged_attention: ragged paged attention (continuous
// batching), over JAX's combined K/V pool or an engine's separate K and V pools.
// Options: one RaggedInputs, filled by read_ragged, applied by make_args.
#include <optional>
#include <string>
#include <vector>

#include "attnref/compare/ragged.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

struct RaggedInputs {
  Array q, kv, k, v, kv_lens, page_indices, cu_q_lens, num_seqs;
  bool combined = true;  // kv_pages is JAX's [P, S, 2*Hkv, D] pool, not a (k, v) pair
  std::optional<std::int64_t> num_seqs_int;  // num_seqs given as a Python int
  std::array<int, 4> layout{0, 1, 2, 3};
  CommonOptions common;
  std::optional<std::int64_t> sliding_window, num_kv_pages_per_block, num_queries_per_block,
      vmem_limit_bytes;
  std::optional<float> k_scale, v_scale;
  Float32Vector sinks, alibi_slopes;

  const Array& pages() const { return combined ? kv : k; }
};

RaggedInputs read_ragged(py::handle q, py::handle kv_pages, py::handle kv_lens,
                         py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                         py::kwargs kwargs, bool for_kernel, const char* function) {
  RaggedInputs in;
  Kwargs kw(std::move(kwargs), function);
  in.common = parse_common_options(kw, for_kernel);
  in.layout = parse_kv_layout_option(kw);
  in.sliding_window = kw.take_int("sliding_window");
  in.num_kv_pages_per_block = kw.take_int("num_kv_pages_per_block");
  in.num_queries_per_block = kw.take_int("num_queries_per_block");
  in.vmem_limit_bytes = kw.take_int("vmem_limit_bytes");
  if (auto s = kw.take_float("k_scale")) in.k_scale = to_float32(*s, "k_scale");
  if (auto s = kw.take_float("v_scale")) in.v_scale = to_float32(*s, "v_scale");
  py::object sinks = kw.take_object("sinks");
  py::object alibi_slopes = kw.take_object("alibi_slopes");
  kw.finish();

  in.q = read_array(q, "q");
  in.combined = !(py::isinstance<py::tuple>(kv_pages) || py::isinstance<py::list>(kv_pages));
  if (in.combined) {
    in.kv = read_array(kv_pages, "kv_pages");
  } else {
    const auto pair = py::reinterpret_borrow<py::sequence>(kv_pages);
    if (pair.size() != 2)
      throw py::type_error("kv_pages is one array or a (k_pages, v_pages) pair");
    in.k = read_array(pair[0], "k_pages");
    in.v = read_array(pair[1], "v_pages");
  }
  in.kv_lens = read_array(kv_lens, "kv_lens");
  in.page_indices = read_array(page_indices, "page_indices");
  in.cu_q_lens = read_array(cu_q_lens, "cu_q_lens");
  // An int or an integer scalar (numpy.int64(2)); arrays and tensors are read as arrays.
  if (!py::isinstance<py::bool_>(num_seqs) && !py::isinstance<py::array>(num_seqs) &&
      !py::hasattr(num_seqs, "__dlpack__") && py::hasattr(num_seqs, "__index__")) {
    in.num_seqs_int = to_int64(num_seqs, "num_seqs");
  } else {
    in.num_seqs = read_array(num_seqs, "num_seqs");
  }

  raise_if_error(check_rank(in.q, 3, "q is [max_num_batched_tokens, num_q_heads, head_dim]"));
  if (in.combined) {
    raise_if_error(check_rank(in.kv, 4,
                              "kv_pages is [total_pages, page_size, 2 * num_kv_heads, "
                              "head_dim], or pass a (k_pages, v_pages) pair"));
  } else {
    const char* hint =
        "pages are [num_kv_heads, total_pages, page_size, head_dim] (kv_layout='jax'), "
        "[total_pages, page_size, num_kv_heads, head_dim] ('nhd') or "
        "[total_pages, num_kv_heads, page_size, head_dim] ('hnd')";
    raise_if_error(check_rank(in.k, 4, hint));
    raise_if_error(check_rank(in.v, 4, hint));
  }
  raise_if_error(check_rank(in.kv_lens, 1, "kv_lens is [max_num_seqs]"));
  raise_if_error(check_rank(in.page_indices, 2, "page_indices is [max_num_seqs, pages_per_seq]"));
  raise_if_error(check_rank(in.cu_q_lens, 1, "cu_q_lens is [max_num_seqs + 1]"));
  if (in.num_seqs.present()) raise_if_error(check_rank(in.num_seqs, 1, "num_seqs is [1]"));
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  return in;
}

/// The num_seqs of the call, as `Index` storage for a view, or as a host value: an int, a
/// one-element array of any index dtype (read as a value), or an array of `Index` of another
/// extent (kept as a view, so JAX's R1 reports the extent; other dtypes get zeros of it).
template <class Index>
struct NumSeqs {
  std::optional<std::int64_t> value;
  std::int64_t extent = 0;  // else: the array's extent, viewed as zeros (one, at stride 0)
};

template <class Index>
NumSeqs<Index> num_seqs_of(const RaggedInputs& in) {
  NumSeqs<Index> n;
  if (in.num_seqs_int) {
    n.value = *in.num_seqs_int;
    return n;
  }
  n.extent = in.num_seqs.shape[0];
  if (n.extent == 1) {
    const std::vector<std::int64_t> wide = widen_indices(in.num_seqs);
    if (wide.size() == 1) n.value = wide[0];
  }
  return n;
}

template <class Q, class KV, class Index>
RaggedPagedAttentionArgs<Q, KV, Index> make_args(const RaggedInputs& in, const NumSeqs<Index>& n) {
  RaggedPagedAttentionArgs<Q, KV, Index> a;
  a.q = view_of<Q, 3>(in.q);
  if (in.combined) {
    raise_if_error(ragged_kv_views(view_of<KV, 4>(in.kv), &a.k_pages, &a.v_pages));
  } else {
    a.k_pages = view_permuted<KV>(in.k, in.layout);
    a.v_pages = view_permuted<KV>(in.v, in.layout);
  }
  if (n.value) {
    a.num_seqs_value = n.value;
  } else {
    static const Index zero{0};
    a.num_seqs = TensorView<const Index, 1>(&zero, {n.extent}, kZeroStride);
  }
  a.sm_scale = in.common.sm_scale;
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.sliding_window = in.sliding_window;
  a.k_scale = in.k_scale;
  a.v_scale = in.v_scale;
  a.num_kv_pages_per_block = in.num_kv_pages_per_block;
  a.num_queries_per_block = in.num_queries_per_block;
  a.vmem_limit_bytes = in.vmem_limit_bytes;
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
  return a;
}

/// The index dtypes, reported in JAX's order: R12, R13 and R1..R4 come before R5, so on a dtype
/// error the shape tier runs over int32 stand-ins of the index arrays (it reads their extents,
/// never their data) and one of those findings wins.
template <class Q, class KV>
void check_index_dtypes(const RaggedInputs& in) {
  const DType num_seqs_dtype = in.num_seqs_int ? DType::kInt64 : in.num_seqs.dtype;
  const Status dtypes =
      check_ragged_index_dtypes(in.kv_lens.dtype, in.page_indices.dtype, in.cu_q_lens.dtype,
                                num_seqs_dtype, in.common.profile);
  if (dtypes.ok()) return;
  const std::int32_t zero = 0;
  NumSeqs<std::int32_t> n;
  if (in.num_seqs_int) {
    n.value = *in.num_seqs_int;
  } else {
    n.extent = in.num_seqs.shape[0];
  }
  RaggedPagedAttentionArgs<Q, KV, std::int32_t> a = make_args<Q, KV, std::int32_t>(in, n);
  a.kv_lens = TensorView<const std::int32_t, 1>(&zero, {in.kv_lens.shape[0]}, kZeroStride);
  a.page_indices = TensorView<const std::int32_t, 2>(
      &zero, {in.page_indices.shape[0], in.page_indices.shape[1]}, {0, 0});
  a.cu_q_lens = TensorView<const std::int32_t, 1>(&zero, {in.cu_q_lens.shape[0]}, kZeroStride);
  raise_in_jax_order(check_ragged_shapes(a, in.common.profile),
                     {"R12", "R13", "R1", "R2", "R3", "R4"}, dtypes);
}

/// Calls `fn(args)` with `in`'s index arrays viewed in place, in their own dtype.
template <class Q, class KV, class Fn>
void with_native_indices(const RaggedInputs& in, Fn&& fn) {
  check_index_dtypes<Q, KV>(in);
  dispatch(IndexTypes{}, in.kv_lens.dtype, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const NumSeqs<I> n = num_seqs_of<I>(in);
    RaggedPagedAttentionArgs<Q, KV, I> a = make_args<Q, KV, I>(in, n);
    a.kv_lens = view_of<I, 1>(in.kv_lens);
    a.page_indices = view_of<I, 2>(in.page_indices);
    a.cu_q_lens = view_of<I, 1>(in.cu_q_lens);
    fn(a);
  });
}

/// The kernels' num_seqs and index arrays, widened to int64 (kept alive while the args view
/// them).
struct WideIndices {
  NumSeqs<std::int64_t> num_seqs;
  WideIndex<1> kv_lens;
  WideIndex<2> table;
  WideIndex<1> cu;
};

/// `*a` with int64 views of `in`'s index arrays, which the result holds. The call is validated
/// on the caller's arrays first, so a bad length is reported before anything is copied.
template <class Q, class KV>
WideIndices wide_args(const RaggedInputs& in, RaggedPagedAttentionArgs<Q, KV, std::int64_t>* a) {
  with_native_indices<Q, KV>(
      in, [](const auto& native) { raise_if_error(check_ragged(native, Profile::kReference)); });
  WideIndices w{num_seqs_of<std::int64_t>(in), widen_index<1>(in.kv_lens),
                widen_index<2>(in.page_indices), widen_index<1>(in.cu_q_lens)};
  *a = make_args<Q, KV, std::int64_t>(in, w.num_seqs);
  a->kv_lens = w.kv_lens.view;
  a->page_indices = w.table.view;
  a->cu_q_lens = w.cu.view;
  return w;
}

void check_ragged_py(py::handle q, py::handle kv_pages, py::handle kv_lens, py::handle page_indices,
                     py::handle cu_q_lens, py::handle num_seqs, py::kwargs kwargs) {
  const RaggedInputs in = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), false, "check_ragged");
  dispatch_q_kv(in.q, in.pages(), in.combined ? nullptr : &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    with_native_indices<Q, KV>(in, [&](const auto& a) {
      const Profile p = in.common.profile;
      raise_if_error(check_ragged_shapes(a, p));
      if (in.common.metadata) raise_if_error(check_ragged_metadata(a, p));
      if (in.common.data) raise_if_error(check_ragged_data(a));
    });
  });
}

py::object ragged_attention_py(py::handle q, py::handle kv_pages, py::handle kv_lens,
                               py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                               py::kwargs kwargs) {
  const RaggedInputs in = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), true, "ragged_paged_attention");
  py::object out;
  py::array lse;
  dispatch_q_kv(in.q, in.pages(), in.combined ? nullptr : &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    RaggedPagedAttentionArgs<Q, KV, std::int64_t> a;
    const WideIndices idx = wide_args<Q, KV>(in, &a);
    // The shapes before the outputs: a q of head_dim 0 holds nothing, whatever its token rows
    // and heads claim, and is refused by a shape check rather than sized.
    raise_if_error(check_ragged_shapes(a, Profile::kReference));
    lse = new_array(DType::kFloat32, {in.q.shape[0], in.q.shape[1]});
    QueryOutput<Q> q_out(in.q.shape);
    const auto out_view = q_out.template view<3>();
    const auto lse_view = output_view<float, 2>(lse);
    Status status;
    run_released(in.common.num_threads, [&](auto& executor) {
      status = try_ragged_paged_attention(a, out_view, lse_view, executor);
    });
    raise_if_error(status);
    out = q_out.finish();
  });
  if (in.common.return_lse) return py::make_tuple(out, lse);
  return out;
}

py::dict compare_ragged_py(py::handle got, py::handle q, py::handle kv_pages, py::handle kv_lens,
                           py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                           py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_ragged");
  const RaggedInputs in = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), true, "compare_ragged");
  require_query(in.q);
  raise_if_error(check_compare_shapes(c, in.q.shape, {in.q.shape[0], in.q.shape[1]}));
  compare::Report report;
  dispatch_q_kv(in.q, in.pages(), in.combined ? nullptr : &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    RaggedPagedAttentionArgs<Q, KV, std::int64_t> a;
    const WideIndices idx = wide_args<Q, KV>(in, &a);
    Status status;
    {
      py::gil_scoped_release release;
      status = compare::try_compare_ragged(a, c.got, c.got_lse, c.options, &report);
    }
    raise_if_error(status);
  });
  return report_dict(report);
}

}  // namespace

void bind_ragged(py::module_& m) {
  m.def("check_ragged", &check_ragged_py, py::arg("q"), py::arg("kv_pages"), py::arg("kv_lens"),
        py::arg("page_indices"), py::arg("cu_q_lens"), py::arg("num_seqs"),
        R"(check_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
             kv_layout="jax", sliding_window=None, soft_cap=None, sm_scale=1.0,
             mask_value=None, k_scale=None, v_scale=None, num_kv_pages_per_block=None,
             num_queries_per_block=None, vmem_limit_bytes=None, sinks=None,
             alibi_slopes=None, profile="reference", tiers=("shape", "metadata")) -> None

Validates ragged paged attention inputs; raises ShapeError on the first failed check.
  q             [max_num_batched_tokens, num_q_heads, head_dim]: float16, float32, float64 or
                bfloat16 (a torch.bfloat16 tensor or view_as(uint16, 'bfloat16'))
  kv_pages      JAX's combined pool [total_pages, page_size, 2 * num_kv_heads, head_dim]
                (K of KV head h at 2h, V at 2h+1), or a (k_pages, v_pages) pair in kv_layout:
                [num_kv_heads, total_pages, page_size, head_dim] ("jax"),
                [total_pages, page_size, num_kv_heads, head_dim] ("nhd"),
                [total_pages, num_kv_heads, page_size, head_dim] ("hnd"); q's dtype or int8;
                float32 and bfloat16 q also read float32, float16, bf16 and fp8 (view_as) pages
  kv_lens       [max_num_seqs] int32 or int64
  page_indices  [max_num_seqs, pages_per_seq], kv_lens' dtype
  cu_q_lens     [max_num_seqs + 1], kv_lens' dtype
  num_seqs      an int, or [1] int32/int64
  sliding_window  w > 0: row r of a sequence (at position kv_len - q_len + r) sees only keys
                in (pos - w, pos]
  sinks         [num_q_heads]: one extra logit per head in the softmax (float, read as float32)
  alibi_slopes  [num_q_heads]: slope[h] * (key_pos - query_pos) added after the soft cap)");
  m.def("ragged_paged_attention", &ragged_attention_py, py::arg("q"), py::arg("kv_pages"),
        py::arg("kv_lens"), py::arg("page_indices"), py::arg("cu_q_lens"), py::arg("num_seqs"),
        R"(ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                       <the options of check_ragged but profile and tiers>,
                       return_lse=False, num_threads=1) -> out or (out, lse)

Validates (reference profile), then runs the reference kernel with the GIL released.
  out  [max_num_batched_tokens, num_q_heads, head_dim], q's dtype (bfloat16 q: float32 of bf16
       values); zero on padding rows
  lse  [max_num_batched_tokens, num_q_heads] float32 (-inf on padding rows))");
  m.def("compare_ragged", &compare_ragged_py, py::arg("got"), py::arg("q"), py::arg("kv_pages"),
        py::arg("kv_lens"), py::arg("page_indices"), py::arg("cu_q_lens"), py::arg("num_seqs"),
        R"(compare_ragged(got, q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
               atol=1e-5, rtol=1e-5, got_lse=None, ignore_padding=False,
               <the options of ragged_paged_attention but return_lse and num_threads>) -> dict

Compares another kernel's output `got` [max_num_batched_tokens, num_q_heads, head_dim] (and
`got_lse` [max_num_batched_tokens, num_q_heads] when given) with attnref's reference; as
compare_paged (ignore_padding leaves out rows past cu_q_lens[num_seqs]). Returns compare_paged's
dict.)");
}

}  // namespace python
}  // namespace attnref
