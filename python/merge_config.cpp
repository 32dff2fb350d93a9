// SPDX-License-Identifier: Apache-2.0
// attnref.merge_attention_states (two attention states over disjoint keys into one) and
// attnref.check_config (a layer's head counts and dims, no tensors).
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tools/frontend/merge.hpp"
#include "attnref/kernels/merge_attention_states.hpp"
#include "attnref/validate/model_config.hpp"
#include "binding.hpp"

namespace attnref {
namespace python {
namespace {

py::tuple merge_py(py::handle out_a, py::handle lse_a, py::handle out_b, py::handle lse_b,
                   py::kwargs kwargs) {
  Kwargs kw(std::move(kwargs), "merge_attention_states");
  int num_threads = 1;
  if (auto v = kw.take_int("num_threads")) {
    if (*v < 1 || *v > 1024) throw py::value_error("num_threads must be in [1, 1024]");
    num_threads = static_cast<int>(*v);
  }
  kw.finish();
  frontend::MergeInputs in;
  in.out_a = read_array(out_a, "out_a");
  in.lse_a = read_array(lse_a, "lse_a");
  in.out_b = read_array(out_b, "out_b");
  in.lse_b = read_array(lse_b, "lse_b");
  frontend::check_merge_arrays(in,
                               "states are float16, float32, float64 or bfloat16 (a "
                               "torch.bfloat16 tensor, or attnref.view_as(uint16_codes, "
                               "\"bfloat16\"))");
  py::array out, lse;
  frontend::with_merge_args(in, [&](const auto& a) {
    using T = std::remove_const_t<typename decltype(a.out_a)::element_type>;
    lse = new_array(DType::kFloat32, {a.rows(), a.heads()});
    QueryOutput<T> merged({a.rows(), a.heads(), a.head_dim()});
    const auto out_view = merged.template view<3>();
    const auto lse_view = output_view<float, 2>(lse);
    Status status;
    run_released(num_threads, [&](auto& executor) {
      status = try_merge_attention_states(a, out_view, lse_view, executor);
    });
    raise_if_error(status);
    out = merged.finish();
  });
  return py::make_tuple(out, lse);
}

void check_config_py(std::int64_t num_q_heads, std::int64_t num_kv_heads, std::int64_t head_dim,
                     std::optional<std::int64_t> head_dim_v,
                     std::optional<std::int64_t> page_size) {
  raise_if_error(
      check_config(AttentionConfig{num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size}));
}

}  // namespace

void bind_merge_and_config(py::module_& m) {
  m.def("merge_attention_states", &merge_py, py::arg("out_a"), py::arg("lse_a"), py::arg("out_b"),
        py::arg("lse_b"),
        R"(merge_attention_states(out_a, lse_a, out_b, lse_b, *, num_threads=1) -> (out, lse)

Merges two attention states of the same query rows over disjoint key sets (e.g. paged
attention over the first pages and over the rest) into the state over both.
  out_a, out_b  [rows, heads, head_dim], one dtype: float16, float32, float64 or bfloat16
  lse_a, lse_b  [rows, heads] float32 natural logsumexp (-inf: the state saw no key)
  out [rows, heads, head_dim] (their dtype; for bfloat16 states float32 holding the bfloat16
  result), lse [rows, heads] float32)");
  m.def("check_config", &check_config_py, py::arg("num_q_heads"), py::arg("num_kv_heads"),
        py::arg("head_dim"), py::kw_only(), py::arg("head_dim_v") = py::none(),
        py::arg("page_size") = py::none(),
        R"(check_config(num_q_heads, num_kv_heads, head_dim, *, head_dim_v=None, page_size=None)
    -> None

Checks a layer's shape without tensors: head counts positive and divisible (GQA), head dims
positive, the page size positive when given. Raises ShapeError.)");
}

}  // namespace python
}  // namespace attnref
