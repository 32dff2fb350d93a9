// SPDX-License-Identifier: Apache-2.0
// The machinery every family's binding shares: arrays read in place (numpy buffers and DLPack
// tensors), the dtype table, keyword options parsed once per family, and errors raised as
// attnref.ShapeError.
//
// How the module is laid out (so that one more option or dtype stays a small change):
//  - the front end (tools/frontend/): attnref-run and this module fill the same inputs struct
//    per family (`frontend::PagedInputs`, `RaggedInputs`, `SplashInputs`, `MergeInputs`) with
//    `Array`s and options; its builders check ranks and dtypes, dispatch on the dtypes through
//    core/kv_dtypes.hpp and make the family args. This module only reads Python's arguments:
//    arrays (`read_array`: numpy, DLPack, `view_as`) and keywords (`Kwargs`, which refuses
//    unknown keywords, and `parse_common_options` for the shared ones). A new keyword is one
//    line in the family's `read_*` (and the docstring and .pyi stub) and one member of the
//    front end's inputs. A bit-pattern type numpy has no dtype for (bf16, fp8) also needs one
//    line in `explicit_dtypes` in binding.cpp so `attnref.view_as(uint_array, "name")` can
//    tag it.
//  - comparison reports (`compare_*`): `read_compare_options` takes the output and tolerances out
//    of the keywords before the family's `read_*` sees the rest; `report_dict` renders a Report.
//  - one translation unit per family (paged.cpp, splash.cpp, ragged.cpp, merge_config.cpp), as
//    the Eigen kernels compile slowly; binding.cpp holds the shared code and registers them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../tools/frontend/array.hpp"
#include "../tools/frontend/options.hpp"
#include "attnref/compare/report.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/interop/dlpack.hpp"

namespace attnref {
namespace python {

namespace py = pybind11;

/// Thrown inside the binding (the front end's rendered check); the module translates it into
/// attnref.ShapeError.
using StatusError = frontend::Error;
using frontend::raise_if_error;

// ---- dtypes -------------------------------------------------------------------------------

/// numpy's dtype object for DType `t` (float16 for Eigen::half and so on).
py::dtype numpy_dtype(DType t);

// ---- arrays -------------------------------------------------------------------------------

/// One input array, read in place (frontend/array.hpp): `keep_alive` holds the numpy array or
/// the DLPack capsule for the call.
using frontend::Array;
using frontend::check_rank;
using frontend::dtype_error;
using frontend::dtype_mismatch;
using frontend::view_of;

/// Reads a numpy array (any strides), an object with `__dlpack__` (a torch CPU tensor), or an
/// `attnref.view_as` result, without copying. `None` gives an absent Array when `optional`.
/// Raises ShapeError for another device, a stride that is not a whole element, or a dtype
/// attnref does not read.
Array read_array(py::handle obj, const char* name, bool optional = false);

/// dtype_not_supported unless `a` has a paged or ragged query's dtype (float16, bfloat16,
/// float32, float64: core/kv_dtypes.hpp).
inline void require_query(const Array& a) {
  // Splash takes the same four dtypes (AnyFloatTypes).
  if (!query_dtype_supported(a.dtype)) {
    raise_if_error(dtype_error(a,
                               "q is float16, float32, float64 or bfloat16 (a torch.bfloat16 "
                               "tensor, or view_as(q_uint16, 'bfloat16'))"));
  }
}

/// A fresh C-contiguous numpy array of dtype `t` and shape `shape`.
py::array new_array(DType t, const std::vector<std::int64_t>& shape);

/// An output of q's element type `Q`, as a new C-contiguous array: of q's dtype, but float32 for
/// a bfloat16 q, which numpy has no dtype for (float32 holds each bfloat16 value exactly; as
/// attnref-run writes it). The kernel writes `view<Rank>()`, then `finish()` (GIL held) returns
/// the array, widening a bfloat16 result into it.
template <class Q>
class QueryOutput {
 public:
  explicit QueryOutput(const std::vector<std::int64_t>& shape)
      : array_(new_array(kWiden ? DType::kFloat32 : dtype_of<Q>, shape)) {
    if constexpr (kWiden) buffer_.resize(static_cast<size_t>(array_.size()));
  }
  /// A row-major view with the array's shape.
  template <size_t Rank>
  TensorView<Q, Rank> view() {
    std::array<std::int64_t, Rank> extents{};
    for (size_t i = 0; i < Rank; ++i)
      extents[i] = static_cast<std::int64_t>(array_.shape(static_cast<py::ssize_t>(i)));
    return view(extents);
  }
  /// A row-major view with `extents`, whose product is the array's size.
  template <size_t Rank>
  TensorView<Q, Rank> view(const std::array<std::int64_t, Rank>& extents) {
    Q* data = kWiden ? buffer_.data() : static_cast<Q*>(array_.mutable_data());
    return TensorView<Q, Rank>(data, extents, static_cast<std::int64_t>(array_.size()));
  }
  py::array finish() {
    if constexpr (kWiden) {
      auto* out = static_cast<float*>(array_.mutable_data());
      for (size_t i = 0; i < buffer_.size(); ++i) out[i] = static_cast<float>(buffer_[i]);
    }
    return array_;
  }

 private:
  static constexpr bool kWiden = std::is_same_v<Q, Eigen::bfloat16>;
  py::array array_;
  std::vector<Q> buffer_;  // bfloat16 only
};

/// A row-major view of an array `new_array` made (C-contiguous, owned by the module).
template <class T, size_t Rank>
TensorView<T, Rank> output_view(py::array& out) {
  std::array<std::int64_t, Rank> extents{};
  for (size_t i = 0; i < Rank; ++i)
    extents[i] = static_cast<std::int64_t>(out.shape(static_cast<py::ssize_t>(i)));
  return TensorView<T, Rank>(static_cast<T*>(out.mutable_data()), extents,
                             static_cast<std::int64_t>(out.size()));
}

// ---- options --------------------------------------------------------------------------------

/// `v` (an int or an object with __index__, not a bool) as int64: TypeError "<what> must be an
/// int", ValueError "<what> does not fit in int64".
std::int64_t to_int64(py::handle v, const std::string& what);

/// The keyword arguments of one call; `take_*` removes what it reads, `finish` rejects the rest.
class Kwargs {
 public:
  Kwargs(py::kwargs kwargs, const char* function);
  std::optional<double> take_float(const char* key);
  std::optional<std::int64_t> take_int(const char* key);
  std::optional<bool> take_bool(const char* key);
  std::optional<std::string> take_string(const char* key);
  /// The raw object (None when absent).
  py::object take_object(const char* key);
  /// Raises TypeError naming the first keyword no parser took.
  void finish();

 private:
  py::dict dict_;
  const char* function_;
};

/// A float option narrowed to float32: refused (ValueError) when it leaves float32's range or
/// underflows to zero, as attnref-run does, so `1e39` is not silently `inf`.
float to_float32(double value, const char* key);

/// A per-query-head float array option (sinks, alibi_slopes), as the front end reads it.
using Float32Vector = frontend::HeadValues;

/// Reads `obj` (None: absent) as the sinks or the ALiBi slopes (`name` "sinks" or
/// "alibi_slopes"), as attnref-run reads its files.
Float32Vector read_float32_vector(py::handle obj, const char* name);

/// The options every family shares: the front end's, and what a kernel call returns and runs on.
struct CommonOptions : frontend::CommonOptions {
  bool return_lse = false;
  int num_threads = 1;
};

/// Parses sm_scale, soft_cap and mask_value, then return_lse and num_threads for a kernel
/// (`for_kernel`: the kernels validate under the reference profile) or profile and tiers for a
/// check_* function.
CommonOptions parse_common_options(Kwargs& kw, bool for_kernel);

/// A family's call: the front end's inputs (`Inputs`: frontend::PagedInputs, ...) and what a
/// kernel call returns and runs on.
template <class Inputs>
struct FamilyCall {
  Inputs in;
  bool return_lse = false;
  int num_threads = 1;
};

/// A call started from its keywords: the common options (`parse_common_options`) in place.
template <class Inputs>
FamilyCall<Inputs> start_call(Kwargs& kw, bool for_kernel) {
  FamilyCall<Inputs> call;
  const CommonOptions common = parse_common_options(kw, for_kernel);
  call.in.common = common;
  call.return_lse = common.return_lse;
  call.num_threads = common.num_threads;
  return call;
}

/// What the paged and ragged functions' `kv_layout` values make of K/V pages (their ShapeError
/// hints).
inline constexpr const char* kPagesLayoutHint =
    "pages are [num_kv_heads, total_pages, page_size, head_dim] (kv_layout='jax'), "
    "[total_pages, page_size, num_kv_heads, head_dim] ('nhd') or "
    "[total_pages, num_kv_heads, page_size, head_dim] ('hnd')";

/// The kv_layout option ("jax", "nhd", "hnd"; default "jax").
KvLayout parse_kv_layout_option(Kwargs& kw);

/// Raises dtype_not_supported for pages of raw codes (uint8, uint16: `v` may be null), with a
/// hint to tag them with view_as.
inline void raise_raw_codes(const Array& k, const Array* v) {
  for (const Array* pages : {&k, v}) {
    if (pages != nullptr && (pages->dtype == DType::kUInt8 || pages->dtype == DType::kUInt16)) {
      raise_if_error(dtype_error(*pages,
                                 "raw codes: tag bfloat16 bits with view_as(pages_uint16, "
                                 "'bfloat16') and fp8 codes with view_as(pages_uint8, "
                                 "'float8_e4m3fn' or 'float8_e5m2')"));
    }
  }
}

/// What a compare_* call compares: the user's output and logsumexp as doubles in C order, their
/// shapes, and the tolerances.
struct CompareInputs {
  std::vector<double> got, got_lse;
  std::vector<std::int64_t> got_shape, got_lse_shape;
  compare::Options options;
};

/// Reads `got` and takes atol, rtol, got_lse and ignore_padding out of `kwargs` (the rest are
/// the family's kernel options); return_lse and num_threads are refused (TypeError).
CompareInputs read_compare_options(py::handle got, py::kwargs& kwargs, const char* function);

/// shape_mismatch unless got (and got_lse when given) have the reference's shapes.
Status check_compare_shapes(const CompareInputs& c, const std::vector<std::int64_t>& out_shape,
                            const std::vector<std::int64_t>& lse_shape);

/// The keyword arguments (or inputs) that make a report's change: "soft_cap=30", "sinks=None".
std::string reproduce_keywords(const compare::Reproduce& r);

/// The report as a dict: ok, count, mismatches, lse_mismatches, max_abs, max_rel, lse_max_abs,
/// ignored_padding, padding_only, causes (dicts of what, max_abs, reproduce), where, notes and
/// text (attnref-run's report).
py::dict report_dict(const compare::Report& r);

/// Whether Python has a pending signal (Ctrl-C): asked between work items, it takes the GIL
/// on the calling thread (where Python runs signal handlers) at most every 50 ms. When the
/// handler raised, the exception stays set for `run_released` to raise.
class PendingSignal {
 public:
  bool operator()();

 private:
  std::thread::id caller_ = std::this_thread::get_id();
  std::chrono::steady_clock::time_point next_ = std::chrono::steady_clock::now();
};

/// Runs `fn(executor)` with the GIL released on a pool of `num_threads` threads (1: the
/// calling thread only). A signal whose handler raises (Ctrl-C: KeyboardInterrupt) stops the
/// work between items and is raised here; the outputs the call was writing are never returned.
template <class Fn>
void run_released(int num_threads, Fn&& fn) {
  bool stopped = false;
  {
    py::gil_scoped_release release;
    ThreadPoolExecutor pool(num_threads);
    StoppableExecutor<ThreadPoolExecutor, PendingSignal> executor(pool, PendingSignal{});
    fn(executor);
    stopped = executor.stopped();
  }
  if (stopped) throw py::error_already_set();
}

/// Runs `fn()` (a compare_* call, returning its Status) with the GIL released as
/// run_released's one work item, on the calling thread: the kernels it runs with their default
/// serial executor ask the same stop check between their steps, as do its own loops
/// (`detail::stop_requested`). Raises the Status's error.
template <class Fn>
void run_compare(Fn&& fn) {
  Status status;
  run_released(
      1, [&](auto& executor) { executor.parallel_for(1, [&](std::int64_t) { status = fn(); }); });
  raise_if_error(status);
}

/// Runs a validated kernel call with the GIL released on `num_threads` threads:
/// `kernel(out, lse, executor)` writes a new output of `shape` and q's element type `Q` and a
/// new float32 logsumexp of `shape`'s first two dims. Returns the output, or (output,
/// logsumexp) with `return_lse`.
template <class Q, class Kernel>
py::object run_kernel_call(const std::array<std::int64_t, 3>& shape, int num_threads,
                           bool return_lse, Kernel&& kernel) {
  py::array lse = new_array(DType::kFloat32, {shape[0], shape[1]});
  QueryOutput<Q> q_out({shape.begin(), shape.end()});
  const auto out_view = q_out.template view<3>();
  const auto lse_view = output_view<float, 2>(lse);
  Status status;
  run_released(num_threads, [&](auto& executor) { status = kernel(out_view, lse_view, executor); });
  raise_if_error(status);
  py::object out = q_out.finish();
  if (return_lse) return py::make_tuple(out, lse);
  return out;
}

// ---- family registration ---------------------------------------------------------------------

void bind_paged(py::module_& m);
void bind_splash(py::module_& m);
void bind_ragged(py::module_& m);
void bind_merge_and_config(py::module_& m);
void bind_engines(py::module_& m);

}  // namespace python
}  // namespace attnref
