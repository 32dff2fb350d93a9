// SPDX-License-Identifier: Apache-2.0
// The machinery every family's binding shares: arrays read in place (numpy buffers and DLPack
// tensors), the dtype table, keyword options parsed once per family, and errors raised as
// attnref.ShapeError.
//
// How the module is laid out (so that one more option or dtype stays a small change):
//  - dtypes: paged and ragged take the library's table of (q, K/V) pairs (core/kv_dtypes.hpp,
//    through `dispatch_q_kv` below), as attnref-run does; `AnyFloatTypes` is the table for
//    splash and attention states; `dispatch(list, dtype, fn)` calls `fn(Tag<T>{})` with the
//    matching C++ type. A bit-pattern type numpy has no dtype for (bf16, fp8) also needs one line
//    in `explicit_dtypes` in binding.cpp so `attnref.view_as(uint_array, "name")` can tag it.
//  - options: each family has one inputs struct (`PagedInputs`, `SplashInputs`,
//    `RaggedInputs`) filled from `**kwargs` by one `read_*` function (through `Kwargs`, which
//    refuses unknown keywords, and `parse_common_options` for the shared ones) and applied to
//    the C++ Args by one `make_args`. A new keyword is one member, one line in `read_*`, one in
//    `make_args` (and the docstring and .pyi stub).
//  - per-head float arrays (sinks, alibi_slopes) go through one reader, `read_float32_vector`.
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

#include "attnref/compare/report.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/interop/dlpack.hpp"

namespace attnref {
namespace python {

namespace py = pybind11;

/// Thrown inside the binding; the module translates it into attnref.ShapeError. Rendered when
/// thrown: a Status may name a field whose storage the unwinding frees.
struct StatusError {
  explicit StatusError(const Status& s)
      : code(error_code_name(s.code())),
        jax_check(s.jax_check()),
        text(s.to_string()),
        message(s.message()),
        hint(s.hint()),
        field(s.field()) {
    for (int i = 0; i < 8; ++i) values[static_cast<size_t>(i)] = s.value(i);
    for (int i = 0; i < 2; ++i) reals[static_cast<size_t>(i)] = s.real(i);
  }
  /// `s` with its message replaced by `message` (a value a Status cannot carry, such as a
  /// numpy dtype's name).
  StatusError(const Status& s, const std::string& message_) : StatusError(s) {
    message = message_;
    text = "error[" + code + "] " + message + (hint.empty() ? "" : " (hint: " + hint + ")");
  }
  std::string code, jax_check, text, message, hint, field;
  std::array<std::int64_t, 8> values{};
  std::array<double, 2> reals{};
};

/// Raises `status` as attnref.ShapeError when it is an error.
inline void raise_if_error(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

/// The stride of a rank-1 stand-in index view, which reads one int32 at every position (a bare
/// `{0}` would pick TensorView's buffer-size constructor and a row-major stride instead).
inline constexpr std::array<std::int64_t, 1> kZeroStride{0};

/// Raises the error of a shape tier run over stand-in index views when JAX makes its check
/// (one of `earlier`) before the index dtype check, else `dtypes`. `dtypes` is an error.
inline void raise_in_jax_order(const Status& shapes, std::initializer_list<const char*> earlier,
                               const Status& dtypes) {
  for (const char* id : earlier)
    if (!shapes.ok() && std::string(shapes.jax_check()) == id) raise_if_error(shapes);
  raise_if_error(dtypes);
}

// ---- dtypes -------------------------------------------------------------------------------

/// The library's type tag (core/kv_dtypes.hpp): `typename decltype(tag)::type`.
template <class T>
using Tag = DTypeTag<T>;
template <class... Ts>
struct TypeList {};

/// The float element types numpy has (per-head arrays, compared values).
using FloatTypes = TypeList<Eigen::half, float, double>;
/// The element types of splash's q, k, v and dout and of attention states: FloatTypes and, as
/// attnref-run takes them, bfloat16 (a torch.bfloat16 tensor or view_as bits; its outputs are
/// float32 arrays of bfloat16 values, `QueryOutput`).
using AnyFloatTypes = TypeList<Eigen::half, float, double, Eigen::bfloat16>;
/// The element types of index arrays (lengths, page tables, cumulative lengths).
using IndexTypes = TypeList<std::int32_t, std::int64_t>;

/// Calls `fn(Tag<T>{})` for the T of `list` whose dtype is `t`; false when none matches.
template <class... Ts, class Fn>
bool dispatch(TypeList<Ts...>, DType t, Fn&& fn) {
  bool found = false;
  const auto one = [&](auto tag) {
    if (!found && dtype_of<typename decltype(tag)::type> == t) {
      found = true;
      fn(tag);
    }
  };
  (one(Tag<Ts>{}), ...);
  return found;
}

/// numpy's dtype object for DType `t` (float16 for Eigen::half and so on).
py::dtype numpy_dtype(DType t);

// ---- arrays -------------------------------------------------------------------------------

/// One input array, read in place: its dtype, extents, element strides and first element,
/// plus the Python objects that keep the memory alive for the call.
struct Array {
  std::string name;  // the argument's name, for messages
  DType dtype = DType::kUnknown;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // elements (numpy inputs)
  const void* data = nullptr;         // numpy inputs
  py::object owner;                   // the numpy array or the DLPack capsule
  const void* dl_tensor = nullptr;    // the DLTensor when read through __dlpack__

  std::int64_t rank() const { return static_cast<std::int64_t>(shape.size()); }
  bool present() const { return owner && !owner.is_none(); }
};

/// Reads a numpy array (any strides), an object with `__dlpack__` (a torch CPU tensor), or an
/// `attnref.view_as` result, without copying. `None` gives an absent Array when `optional`.
/// Raises ShapeError for another device, a stride that is not a whole element, or a dtype
/// attnref does not read.
Array read_array(py::handle obj, const char* name, bool optional = false);

/// kRankMismatch unless `a` has `rank` dimensions; `hint` is a string literal naming the shape.
Status check_rank(const Array& a, std::int64_t rank, const char* hint);

/// kDtypeNotSupported: `a`'s dtype is not one of those `hint` (a literal) lists.
Status dtype_error(const Array& a, const char* hint);

/// kDtypeNotSupported: `a` must have the dtype of `like` (both named).
Status dtype_mismatch(const Array& a, const Array& like, const char* hint);

/// A `Rank`-dimensional view of `a` as elements of `T` (its dtype must be T's; the caller
/// dispatched on it). DLPack inputs go through `view_from_dlpack` (device, dtype, alignment
/// and view checks); numpy inputs keep their strides and are checked with `check_view`.
template <class T, size_t Rank>
TensorView<const T, Rank> view_of(const Array& a) {
  TensorView<const T, Rank> view;
  // The families check ranks with their own hints first; this keeps a missed one an error.
  raise_if_error(check_rank(a, static_cast<std::int64_t>(Rank), "see the function's docstring"));
  if (a.dl_tensor != nullptr) {
    raise_if_error(
        view_from_dlpack(*static_cast<const DLTensor*>(a.dl_tensor), &view, a.name.c_str()));
    return view;
  }
  for (size_t i = 0; i < Rank; ++i) {
    view.extents[i] = a.shape[i];
    view.strides[i] = a.strides[i];
  }
  view.data = static_cast<const T*>(a.data);
  raise_if_error(check_view(view, a.name.c_str()));
  return view;
}

/// A 4-d view whose dim i is `a`'s dim physical_of_logical[i]: page layouts (nhd, hnd).
template <class T>
TensorView<const T, 4> view_permuted(const Array& a,
                                     const std::array<int, 4>& physical_of_logical) {
  const TensorView<const T, 4> physical = view_of<T, 4>(a);
  TensorView<const T, 4> view = physical;
  for (size_t i = 0; i < 4; ++i) {
    const auto p = static_cast<size_t>(physical_of_logical[i]);
    view.extents[i] = physical.extents[p];
    view.strides[i] = physical.strides[p];
  }
  return view;
}

/// An int32/int64 array copied to int64 (lengths, page tables: O(batch + pages)); the kernels
/// run with int64 indices, so each (q, K/V) pair is one instantiation.
std::vector<std::int64_t> widen_indices(const Array& a);

/// An int32/int64 index array of rank `Rank` widened to int64, keeping each dimension of stride
/// 0 at stride 0 (one copy of its values): a broadcast table that claims 2^31 entries copies
/// what it holds, not what it claims. The caller validates `a` first.
template <size_t Rank>
struct WideIndex {
  std::vector<std::int64_t> values;
  TensorView<const std::int64_t, Rank> view;
};

template <size_t Rank>
WideIndex<Rank> widen_index(const Array& a) {
  WideIndex<Rank> w;
  dispatch(IndexTypes{}, a.dtype, [&](auto tag) {
    using I = typename decltype(tag)::type;
    const TensorView<const I, Rank> src = view_of<I, Rank>(a);
    std::array<std::int64_t, Rank> held{};  // the extents the copy holds
    for (size_t i = 0; i < Rank; ++i) held[i] = src.strides[i] == 0 ? 1 : src.extents[i];
    if (src.holds_no_elements()) held.fill(0);
    w.view.extents = src.extents;
    w.view.strides = row_major_strides(held);
    std::int64_t count = 1;
    for (size_t i = 0; i < Rank; ++i) {
      count *= held[i];
      if (held[i] == 1) w.view.strides[i] = 0;
    }
    w.values.resize(static_cast<size_t>(count));
    for (std::int64_t flat = 0; flat < count; ++flat) {
      std::int64_t rest = flat, at = 0;
      for (size_t i = Rank; i-- > 0;) {
        at += (rest % held[i]) * src.strides[i];
        rest /= held[i];
      }
      w.values[static_cast<size_t>(flat)] = static_cast<std::int64_t>(src.data[at]);
    }
    w.view.data = w.values.data();
    w.view.buffer_size = count;
  });
  return w;
}

/// dtype_not_supported unless `a` has a dtype of FloatTypes.
inline void require_float(const Array& a, const char* hint) {
  if (!dispatch(FloatTypes{}, a.dtype, [](auto) {})) raise_if_error(dtype_error(a, hint));
}

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

/// A per-query-head float array option (sinks, alibi_slopes): any float dtype, narrowed to the
/// float32 the kernels read. `view()` is empty when the option is absent.
struct Float32Vector {
  Array array;
  std::vector<float> values;
  bool present() const { return array.present(); }
  TensorView<const float, 1> view() const {
    if (!present()) return {};
    return TensorView<const float, 1>(values.data(), {static_cast<std::int64_t>(values.size())});
  }
};

/// Reads `obj` (None: absent) as a rank-1 float array named `name` (a literal). A finite value
/// outside float32's range is non_finite_data, not a silent inf; NaN and inf pass through for
/// the family's own checks (data tier, invalid_alibi_slope).
Float32Vector read_float32_vector(py::handle obj, const char* name);

/// The options every family shares.
struct CommonOptions {
  Profile profile = Profile::kReference;
  bool shape = true, metadata = true, data = false;  // validation tiers (check_* functions)
  float sm_scale = 1.0f;
  std::optional<float> soft_cap;
  float mask_value;
  bool return_lse = false;
  int num_threads = 1;
};

/// Parses sm_scale, soft_cap and mask_value, then return_lse and num_threads for a kernel
/// (`for_kernel`: the kernels validate under the reference profile) or profile and tiers for a
/// check_* function.
CommonOptions parse_common_options(Kwargs& kw, bool for_kernel);

/// The kv_layout option ("jax", "nhd", "hnd"; default "jax") as the physical dim of each
/// logical [num_kv_heads, total_pages, page_size, head_dim] dim.
std::array<int, 4> parse_kv_layout_option(Kwargs& kw);

/// Calls `fn(DTypeTag<Q>{}, DTypeTag<KV>{})` for q's and K/V's dtypes when the library's table
/// (core/kv_dtypes.hpp) has the pair; raises ShapeError otherwise, as attnref-run does. `v` is
/// null for ragged's combined pool. Raw codes (uint8, uint16) get a hint to tag them with
/// view_as.
template <class Fn>
void dispatch_q_kv(const Array& q, const Array& k, const Array* v, Fn&& fn) {
  require_query(q);
  for (const Array* pages : {&k, v}) {
    if (pages != nullptr && (pages->dtype == DType::kUInt8 || pages->dtype == DType::kUInt16)) {
      raise_if_error(dtype_error(*pages,
                                 "raw codes: tag bfloat16 bits with view_as(pages_uint16, "
                                 "'bfloat16') and fp8 codes with view_as(pages_uint8, "
                                 "'float8_e4m3fn' or 'float8_e5m2')"));
    }
  }
  raise_if_error(v != nullptr ? check_kv_dtypes(q.dtype, k.dtype, v->dtype)
                              : check_kv_dtype(q.dtype, k.dtype, k.name.c_str()));
  dispatch_query_and_kv(q.dtype, k.dtype, std::forward<Fn>(fn));
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

// ---- family registration ---------------------------------------------------------------------

void bind_paged(py::module_& m);
void bind_splash(py::module_& m);
void bind_ragged(py::module_& m);
void bind_merge_and_config(py::module_& m);
void bind_engines(py::module_& m);

}  // namespace python
}  // namespace attnref
