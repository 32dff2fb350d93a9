// SPDX-License-Identifier: Apache-2.0
// attnref.check_paged and attnref.paged_attention: paged attention (decode).
// The front end's builder (tools/frontend/paged.hpp) makes the args; this file reads Python's
// arguments into its inputs.
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tools/frontend/paged.hpp"
#include "attnref/compare/paged.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/validate/paged.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

using PagedCall = FamilyCall<frontend::PagedInputs>;

/// The words of this front end for the shapes and dtypes the builder checks.
const frontend::PagedHints kHints{
    kPagesLayoutHint, "scales are the pages' shape with a last dim of 1 or head_dim",
    "q is float16, float32, float64 or bfloat16 (a torch.bfloat16 tensor, or view_as(q_uint16, "
    "'bfloat16'))"};

PagedCall read_paged(py::handle q, py::handle k, py::handle v, py::handle lengths,
                     py::handle page_indices, py::kwargs kwargs, bool for_kernel,
                     const char* function) {
  Kwargs kw(std::move(kwargs), function);
  PagedCall call = start_call<frontend::PagedInputs>(kw, for_kernel);
  frontend::PagedInputs& in = call.in;
  in.layout = parse_kv_layout_option(kw);
  if (auto n = kw.take_int("pages_per_compute_block")) in.pages_per_compute_block = *n;
  if (auto mode = kw.take_string("megacore_mode"))
    in.megacore_mode = frontend::megacore_mode_from_name(*mode, "pass None, 'kv_head' or 'batch'");
  if (auto r = kw.take_bool("round_kv_to_bf16")) in.round_kv_to_bf16 = *r;
  in.sliding_window = kw.take_int("sliding_window");
  py::object sinks = kw.take_object("sinks");
  py::object alibi_slopes = kw.take_object("alibi_slopes");
  py::object k_scales = kw.take_object("k_scales");
  py::object v_scales = kw.take_object("v_scales");
  kw.finish();

  in.q = read_array(q, "q");
  in.k_pages = read_array(k, "k_pages");
  in.v_pages = read_array(v, "v_pages");
  in.lengths = read_array(lengths, "lengths");
  in.page_indices = read_array(page_indices, "page_indices");
  in.k_scales = read_array(k_scales, "k_scales", true);
  in.v_scales = read_array(v_scales, "v_scales", true);
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  frontend::check_paged_ranks(in, kHints);
  require_query(in.q);
  raise_raw_codes(in.k_pages, &in.v_pages);
  frontend::check_paged_dtypes(in, kHints);
  return call;
}

void check_paged_py(py::handle q, py::handle k, py::handle v, py::handle lengths,
                    py::handle page_indices, py::kwargs kwargs) {
  const PagedCall call =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), false, "check_paged");
  frontend::check_paged_call(call.in);
}

py::object paged_attention_py(py::handle q, py::handle k, py::handle v, py::handle lengths,
                              py::handle page_indices, py::kwargs kwargs) {
  const PagedCall call =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), true, "paged_attention");
  py::object result;
  frontend::with_paged_run_args(call.in, [&](const auto& a) {
    using Q = std::remove_const_t<typename decltype(a.q)::element_type>;
    result = run_kernel_call<Q>({a.batch(), a.num_q_heads(), a.head_dim_v()}, call.num_threads,
                                call.return_lse, [&](auto out, auto lse, auto& executor) {
                                  return try_paged_attention(a, out, lse, executor);
                                });
  });
  return result;
}

py::dict compare_paged_py(py::handle got, py::handle q, py::handle k, py::handle v,
                          py::handle lengths, py::handle page_indices, py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_paged");
  const PagedCall call =
      read_paged(q, k, v, lengths, page_indices, std::move(kwargs), true, "compare_paged");
  const Array& qa = call.in.q;
  // out is [batch, num_q_heads, head_dim_v]: V's last dim in every layout.
  raise_if_error(check_compare_shapes(c, {qa.shape[0], qa.shape[1], call.in.v_pages.shape[3]},
                                      {qa.shape[0], qa.shape[1]}));
  compare::Report report;
  frontend::with_paged_run_args(call.in, [&](const auto& a) {
    run_compare(
        [&] { return compare::try_compare_paged(a, c.got, c.got_lse, c.options, &report); });
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
  alibi_convention "signed" (slope * (key_pos - query_pos)) or "absolute" (-slope * |...|,
                FlashAttention-2 non-causal); soft_cap_order "cap_then_alibi" or "alibi_then_cap"
                (c * tanh((s + bias) / c), FlashInfer)
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
  out  [batch, num_q_heads, head_dim_v] (V's last dim: head_dim, or MLA's narrower V, such as a
       view v_pages = k_pages[..., :512] of a 576-wide latent cache), q's dtype (bfloat16 q:
       float32 of bf16 values); a zero row for a sequence of length 0
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
