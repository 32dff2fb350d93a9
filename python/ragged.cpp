// SPDX-License-Identifier: Apache-2.0
// attnref.check_ragged and attnref.ragged_paged_attention: ragged paged attention (continuous
// batching), over JAX's combined K/V pool or an engine's separate K and V pools.
// The front end's builder (tools/frontend/ragged.hpp) makes the args; this file reads Python's
// arguments into its inputs.
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tools/frontend/ragged.hpp"
#include "attnref/compare/ragged.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/validate/ragged.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

using RaggedCall = FamilyCall<frontend::RaggedInputs>;

/// The words of this front end for the shapes and dtypes the builder checks.
const frontend::RaggedHints kHints{
    kPagesLayoutHint,
    "kv_pages is [total_pages, page_size, 2 * num_kv_heads, head_dim], or pass a (k_pages, "
    "v_pages) pair",
    "num_seqs is an int or a one-element array [1]",
    "q is float16, float32, float64 or bfloat16 (a torch.bfloat16 tensor, or view_as(q_uint16, "
    "'bfloat16'))"};

/// kv_pages: one array (JAX's combined pool) or a (k_pages, v_pages) pair.
void read_pages(py::handle kv_pages, frontend::RaggedInputs* in) {
  if (!(py::isinstance<py::tuple>(kv_pages) || py::isinstance<py::list>(kv_pages))) {
    in->kv_pages = read_array(kv_pages, "kv_pages");
    return;
  }
  const auto pair = py::reinterpret_borrow<py::sequence>(kv_pages);
  if (pair.size() != 2) throw py::type_error("kv_pages is one array or a (k_pages, v_pages) pair");
  in->k_pages = read_array(pair[0], "k_pages");
  in->v_pages = read_array(pair[1], "v_pages");
}

RaggedCall read_ragged(py::handle q, py::handle kv_pages, py::handle kv_lens,
                       py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                       py::kwargs kwargs, bool for_kernel, const char* function) {
  Kwargs kw(std::move(kwargs), function);
  RaggedCall call = start_call<frontend::RaggedInputs>(kw, for_kernel);
  frontend::RaggedInputs& in = call.in;
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
  read_pages(kv_pages, &in);
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
  in.sinks = read_float32_vector(sinks, "sinks");
  in.alibi_slopes = read_float32_vector(alibi_slopes, "alibi_slopes");
  frontend::check_ragged_ranks(in, kHints);
  require_query(in.q);
  raise_raw_codes(in.pages(), in.separate() ? &in.v_pages : nullptr);
  frontend::check_ragged_dtypes(in, kHints);
  return call;
}

void check_ragged_py(py::handle q, py::handle kv_pages, py::handle kv_lens, py::handle page_indices,
                     py::handle cu_q_lens, py::handle num_seqs, py::kwargs kwargs) {
  const RaggedCall call = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), false, "check_ragged");
  frontend::check_ragged_call(call.in);
}

py::object ragged_attention_py(py::handle q, py::handle kv_pages, py::handle kv_lens,
                               py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                               py::kwargs kwargs) {
  const RaggedCall call = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), true, "ragged_paged_attention");
  py::object result;
  frontend::with_ragged_run_args(call.in, [&](const auto& a) {
    using Q = std::remove_const_t<typename decltype(a.q)::element_type>;
    result = run_kernel_call<Q>({a.max_num_batched_tokens(), a.num_q_heads(), a.q.extents[2]},
                                call.num_threads, call.return_lse,
                                [&](auto out, auto lse, auto& executor) {
                                  return try_ragged_paged_attention(a, out, lse, executor);
                                });
  });
  return result;
}

py::dict compare_ragged_py(py::handle got, py::handle q, py::handle kv_pages, py::handle kv_lens,
                           py::handle page_indices, py::handle cu_q_lens, py::handle num_seqs,
                           py::kwargs kwargs) {
  const CompareInputs c = read_compare_options(got, kwargs, "compare_ragged");
  const RaggedCall call = read_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                      std::move(kwargs), true, "compare_ragged");
  const Array& qa = call.in.q;
  raise_if_error(check_compare_shapes(c, qa.shape, {qa.shape[0], qa.shape[1]}));
  compare::Report report;
  frontend::with_ragged_run_args(call.in, [&](const auto& a) {
    run_compare(
        [&] { return compare::try_compare_ragged(a, c.got, c.got_lse, c.options, &report); });
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
  alibi_slopes  [num_q_heads]: slope[h] * (key_pos - query_pos) added after the soft cap
  alibi_convention "signed" (slope * (key_pos - query_pos)) or "absolute" (-slope * |...|,
                FlashAttention-2 non-causal); soft_cap_order "cap_then_alibi" or "alibi_then_cap"
                (c * tanh((s + bias) / c), FlashInfer))");
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
