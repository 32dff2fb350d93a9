// SPDX-License-Identifier: Apache-2.0
// attnref.check_paged and attnref.paged_attention: paged attention (decode).
// Options: one PagedInputs, filled by read_paged, applied by make_args.
#include <optional>
#include <string>
#include <vector>

#include "attnref/compare/paged.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/paged.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

struct PagedInputs {
  Array q, k, v, lengths, page_indices, k_scales, v_scales;
  std::array<int, 4> layout{0, 1, 2, 3};
  CommonOptions common;
  std::int64_t pages_per_compute_block = 1;
  MegacoreMode megacore_mode = MegacoreMode::kNone;
  bool round_kv_to_bf16 = false;
  std::optional<std::int64_t> sliding_window;
  Float32Vector sinks, alibi_slopes;
};

PagedInputs read_paged(py::handle q, py::handle k, py::handle v, py::handle lengths,
                       py::handle page_indices, py::kwargs kwargs, bool for_kernel,
                       const char* function) {
  PagedInputs in;
  Kwargs kw(std::move(kwargs), function);
  in.common = parse_common_options(kw, for_kernel);
  in.layout = parse_kv_layout_option(kw);
  if (auto n = kw.take_int("pages_per_compute_block")) in.pages_per_compute_block = *n;
  if (auto mode = kw.take_string("megacore_mode")) {
    if (*mode == "kv_head") {
      in.megacore_mode = MegacoreMode::kKvHead;
    } else if (*mode == "batch") {
      in.megacore_mode = MegacoreMode::kBatch;
    } else {
      // JAX's P10, whose text names the accepted values.
      throw StatusError(Status(ErrorCode::kInvalidMegacoreMode, "P10",
                               "megacore_mode must be one of ['kv_head', 'batch', None]",
                               "pass None, 'kv_head' or 'batch'"));
    }
  }
  if (auto r = kw.take_bool("round_kv_to_bf16")) in.round_kv_to_bf16 = *r;
  in.sliding_window = kw.take_int("sliding_window");
  py::object sinks = kw.take_object("sinks");
  py::object alibi_slopes = kw.take_object("alibi_slopes");
  py::object k_scales = kw.take_object("k_scales");
  py::object v_scales = kw.take_object("v_scales");
  kw.finish();

  in.q = read_array(q, "q");
  in.k = read_array(k, "k_pages");
  in.v = read_array(v, "v_pages");
  in.lengths = read_array(lengths, "lengths");
  in.page_indices = read_array(page_indices, "page_indices");
  in.k_scales = read_array(k_scales, "k_scales", true);
  in.v_scales = read_array(v_scales, "v_scales", true);

  raise_if_error(check_rank(in.q, 3, "q is [batch, num_q_heads, head_dim]"));
  const char* pages_hint =
      "pages are [num_kv_heads, total_pages, page_size, head_dim] (kv_layout='jax'), "
      "[total_pages, page_size, num_kv_heads, head_dim] ('nhd') or "
      "[total_pages, num_kv_heads, page_size, head_dim] ('hnd')";
  raise_if_error(check_rank(in.k, 4, pages_hint));
  raise_if_error(check_rank(in.v, 4, pages_hint));
  if (in.lengths.rank() == 2 && in.q.rank() == 3 && in.lengths.shape[0] == in.q.shape[0]) {
    raise_if_error(paged_lengths_rank_error(in.lengths.shape[0], in.lengths.shape[1]));
  }
  raise_if_error(check_rank(in.lengths, 1, "lengths is [batch]"));
  raise_if_error(check_rank(in.page_indices, 2, "page_indices is [batch, pages_per_sequence]"));
  for (const Array* s : {&in.k_scales, &in.v_scales}) {
    if (!s->present()) continue;
    raise_if_error(
        check_rank(*s, 4, "scales are the pages' shape with a last dim of 1 or head_dim"));
    if (s->dtype != DType::kFloat32) raise_if_error(dtype_error(*s, "scales are float32"));
  }
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  return in;
}

template <class Q, class KV, class Index>
PagedAttentionArgs<Q, KV, Index> make_args(const PagedInputs& in) {
  PagedAttentionArgs<Q, KV, Index> a;
  a.q = view_of<Q, 3>(in.q);
  a.k_pages = view_permuted<KV>(in.k, in.layout);
  a.v_pages = view_permuted<KV>(in.v, in.layout);
  if (in.k_scales.present()) a.k_scales = view_permuted<float>(in.k_scales, in.layout);
  if (in.v_scales.present()) a.v_scales = view_permuted<float>(in.v_scales, in.layout);
  a.sm_scale = in.common.sm_scale;
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.pages_per_compute_block = in.pages_per_compute_block;
  a.megacore_mode = in.megacore_mode;
  a.round_kv_to_bf16 = in.round_kv_to_bf16;
  a.sliding_window = in.sliding_window;
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
  return a;
}

/// The index dtypes, reported in JAX's order: JAX checks P1..P6 before P7 (lengths int32), so
/// on a dtype error the shape tier runs over int32 stand-ins of the index arrays (it reads
/// their extents, never their data) and a P1..P6 finding wins.
template <class Q, class KV>
void check_index_dtypes(const PagedInputs& in) {
  const Status dtypes =
      check_paged_index_dtypes(in.lengths.dtype, in.page_indices.dtype, in.common.profile);
  if (dtypes.ok()) return;
  const std::int32_t zero = 0;
  PagedAttentionArgs<Q, KV, std::int32_t> a = make_args<Q, KV, std::int32_t>(in);
  a.lengths = TensorView<const std::int32_t, 1>(&zero, {in.lengths.shape[0]}, kZeroStride);
  a.page_indices = TensorView<const std::int32_t, 2>(
      &zero, {in.page_indices.shape[0], in.page_indices.shape[1]}, {0, 0});
  raise_in_jax_order(check_paged_shapes(a, in.common.profile), {"P1", "P2", "P3", "P4", "P5", "P6"},
                     dtypes);
}

/// Calls `fn(args)` with `in`'s lengths and page table viewed in place, in their own dtype.
template <class Q, class KV, class Fn>
void with_native_indices(const PagedInputs& in, Fn&& fn) {
  check_index_dtypes<Q, KV>(in);
  dispatch(IndexTypes{}, in.lengths.dtype, [&](auto itag) {
    using I = typename decltype(itag)::type;
    PagedAttentionArgs<Q, KV, I> a = make_args<Q, KV, I>(in);
    a.lengths = view_of<I, 1>(in.lengths);
    a.page_indices = view_of<I, 2>(in.page_indices);
    fn(a);
  });
}

/// The kernels' index arrays, widened to int64 (kept alive while the args view them).
struct WideIndices {
  WideIndex<1> lengths;
  WideIndex<2> table;
};

/// `*a` with int64 views of `in`'s lengths and page table, which the result holds. The call is
/// validated on the caller's arrays first, so a bad length is reported before anything is
/// copied.
template <class Q, class KV>
WideIndices wide_args(const PagedInputs& in, PagedAttentionArgs<Q, KV, std::int64_t>* a) {
  with_native_indices<Q, KV>(
      in, [](const auto& native) { raise_if_error(check_paged(native, Profile::kReference)); });
  *a = make_args<Q, KV, std::int64_t>(in);
  WideIndices w{widen_index<1>(in.lengths), widen_index<2>(in.page_indices)};
  a->lengths = w.lengths.view;
  a->page_indices = w.table.view;
  return w;
}

void check_paged_py(py::handle q, py::handle k, py::handle v, py::handle lengths,
                    py::handle page_indices, py::kwargs kwargs) {
  const PagedInputs in =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), false, "check_paged");
  dispatch_q_kv(in.q, in.k, &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    with_native_indices<Q, KV>(in, [&](const auto& a) {
      const Profile p = in.common.profile;
      raise_if_error(check_paged_shapes(a, p));
      if (in.common.metadata) raise_if_error(check_paged_metadata(a, p));
      if (in.common.data) raise_if_error(check_paged_data(a));
    });
  });
}

py::object paged_attention_py(py::handle q, py::handle k, py::handle v, py::handle lengths,
                              py::handle page_indices, py::kwargs kwargs) {
  const PagedInputs in =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), true, "paged_attention");
  py::object out;
  py::array lse;
  dispatch_q_kv(in.q, in.k, &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    PagedAttentionArgs<Q, KV, std::int64_t> a;
    const WideIndices idx = wide_args<Q, KV>(in, &a);
    // The shapes before the outputs: a q of head_dim 0 holds nothing, whatever its batch and
    // heads claim, and is refused by a shape check rather than sized.
    raise_if_error(check_paged_shapes(a, Profile::kReference));
    lse = new_array(DType::kFloat32, {in.q.shape[0], in.q.shape[1]});
    QueryOutput<Q> q_out(in.q.shape);
    const auto out_view = q_out.template view<3>();
    const auto lse_view = output_view<float, 2>(lse);
    Status status;
    run_released(in.common.num_threads, [&](auto& executor) {
      status = try_paged_attention(a, out_view, lse_view, executor);
    });
    raise_if_error(status);
    out = q_out.finish();
  });
  if (in.common.return_lse) return py::make_tuple(out, lse);
  return out;
}

py::dict compare_paged_py(py::handle got, py::handle q, py::handle k, py::handle v,
                          py::handle lengths, py::handle page_indices, py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_paged");
  const PagedInputs in =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), true, "compare_paged");
  require_query(in.q);
  raise_if_error(check_compare_shapes(c, in.q.shape, {in.q.shape[0], in.q.shape[1]}));
  compare::Report report;
  dispatch_q_kv(in.q, in.k, &in.v, [&](auto qtag, auto kvtag) {
    using Q = typename decltype(qtag)::type;
    using KV = typename decltype(kvtag)::type;
    PagedAttentionArgs<Q, KV, std::int64_t> a;
    const WideIndices idx = wide_args<Q, KV>(in, &a);
    Status status;
    {
      py::gil_scoped_release release;
      status = compare::try_compare_paged(a, c.got, c.got_lse, c.options, &report);
    }
    raise_if_error(status);
  });
  return report_dict(report);
}

}  // namespace

void bind_paged(py::module_& m) {
  m.def("check_paged", &check_paged_py, py::arg("q"), py::arg("k_pages"), py::arg("v_pages"),
        py::arg("lengths"), py::arg("page_indices"),
        R"(check_paged(q, k_pages, v_pages, lengths, page_indices, *, kv_layout="jax",
            k_scales=None, v_scales=None, soft_cap=None, sm_scale=1.0, mask_value=None,
            pages_per_compute_block=1, megacore_mode=None, round_kv_to_bf16=False,
            sliding_window=None, sinks=None, alibi_slopes=None, profile="reference",
            tiers=("shape", "metadata")) -> None

Validates paged attention (decode) inputs; raises ShapeError on the first failed check.
  q             [batch, num_q_heads, head_dim]: float16, float32, float64 or bfloat16 (a
                torch.bfloat16 tensor or view_as(uint16, 'bfloat16'))
  k_pages       [num_kv_heads, total_pages, page_size, head_dim] (kv_layout "jax"),
                [total_pages, page_size, num_kv_heads, head_dim] ("nhd"),
                [total_pages, num_kv_heads, page_size, head_dim] ("hnd"); q's dtype or int8;
                float32 and bfloat16 q also read float32, float16, bf16 and fp8 (view_as) pages
  v_pages       as k_pages
  lengths       [batch] int32 or int64
  page_indices  [batch, pages_per_sequence], lengths' dtype
  k_scales, v_scales  float32, the pages' shape with a last dim of 1 or head_dim: int8 pages
                (w * s / 127.5; required), fp8 pages (fp8(w) * s; both or neither, default 1)
  sliding_window  w > 0: the query (at position length-1) sees only the last w keys
  sinks         [num_q_heads]: one extra logit per head in the softmax (float, read as float32)
  alibi_slopes  [num_q_heads]: slope[h] * (key_pos - query_pos) added after the soft cap
profile "jax" adds every check of JAX's Pallas TPU kernel; tiers picks the shape (O(1)),
metadata (lengths and page indices) and data (no NaN/Inf in what the kernel reads) tiers.)");
  m.def("paged_attention", &paged_attention_py, py::arg("q"), py::arg("k_pages"),
        py::arg("v_pages"), py::arg("lengths"), py::arg("page_indices"),
        R"(paged_attention(q, k_pages, v_pages, lengths, page_indices, *, kv_layout="jax",
                k_scales=None, v_scales=None, soft_cap=None, sm_scale=1.0, mask_value=None,
                pages_per_compute_block=1, megacore_mode=None, round_kv_to_bf16=False,
                sliding_window=None, sinks=None, alibi_slopes=None, return_lse=False,
                num_threads=1) -> out or (out, lse)

Validates (reference profile, shape and metadata tiers), then runs attnref's reference kernel
with the GIL released. Arguments as check_paged.
  out  [batch, num_q_heads, head_dim], q's dtype (bfloat16 q: float32 of bf16 values); a zero row for a sequence of length 0
  lse  [batch, num_q_heads] float32, the softmax's natural logsumexp (for length 0: -inf, or
       the sink's logit with sinks))");
  m.def("compare_paged", &compare_paged_py, py::arg("got"), py::arg("q"), py::arg("k_pages"),
        py::arg("v_pages"), py::arg("lengths"), py::arg("page_indices"),
        R"(compare_paged(got, q, k_pages, v_pages, lengths, page_indices, *, atol=1e-5, rtol=1e-5,
              got_lse=None, ignore_padding=False, <the options of paged_attention but
              return_lse and num_threads>) -> dict

Compares another kernel's output `got` [batch, num_q_heads, head_dim] (and `got_lse`
[batch, num_q_heads], natural log, when given) with attnref's reference for the same inputs
and options, as attnref-run --expect does. An element matches when
|got - ref| <= atol + rtol * |ref|. On a mismatch the reference is re-run with one change at a
time (sm_scale, soft cap, GQA head mapping, K/V swapped, layout, ...) and each change under
which `got` matches is a likely cause. Returns a dict: ok, count, mismatches, lse_mismatches,
max_abs, max_rel, lse_max_abs, ignored_padding, padding_only, causes (a list of dicts: what,
max_abs under the change, reproduce: the keyword arguments or inputs that make the change,
such as soft_cap=30), where (lines), notes (lines),
text (the whole report, worded as here).)");
}

}  // namespace python
}  // namespace attnref
