// SPDX-License-Identifier: Apache-2.0
// The module `attnref`: ShapeError, arrays read in place, shared options, and the registration
// of each family (paged.cpp, splash.cpp, ragged.cpp, merge_config.cpp). See binding.hpp for the
// layout.
#include "binding.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/isa.hpp"
#include "attnref/validate/options.hpp"

namespace attnref {
namespace python {
namespace {

/// Element types numpy has no dtype of its own for: `attnref.view_as(array, name)` tags raw
/// codes as one, and ml_dtypes' arrays of the same name are read as they are. One line per
/// name: (name, DType, bytes per element).
struct ExplicitDtype {
  const char* name;
  DType dtype;
  std::int64_t itemsize;
};
constexpr ExplicitDtype explicit_dtypes[] = {
    {"bfloat16", DType::kBFloat16, 2},
    {"float8_e4m3fn", DType::kFloat8E4M3FN, 1},
    {"float8_e5m2", DType::kFloat8E5M2, 1},
};

/// `attnref.view_as(array, dtype)`: an array whose bits are read as `dtype`.
struct TypedArray {
  py::object array;
  std::string dtype;
};

/// A numpy dtype's facts, read through its Python attributes: pybind11's struct accessors
/// assume numpy 1's descriptor layout, which numpy 2 changed.
struct NumpyDtype {
  explicit NumpyDtype(const py::dtype& d)
      : kind(py::str(d.attr("kind")).cast<std::string>()[0]),
        byteorder(py::str(d.attr("byteorder")).cast<std::string>()[0]),
        itemsize(d.attr("itemsize").cast<std::int64_t>()),
        name(py::str(d.attr("name")).cast<std::string>()) {}
  char kind, byteorder;
  std::int64_t itemsize;
  std::string name;
};

DType dtype_of_numpy(const NumpyDtype& d) {
  if (d.byteorder == '>') return DType::kUnknown;  // attnref reads native little-endian data
  const auto size = d.itemsize;
  // ml_dtypes' arrays of these types (kind 'V', or 'f' for some), read as they are.
  for (const ExplicitDtype& e : explicit_dtypes)
    if ((d.kind == 'V' || d.kind == 'f') && d.name == e.name && size == e.itemsize) return e.dtype;
  switch (d.kind) {
    case 'f':
      return size == 2   ? DType::kFloat16
             : size == 4 ? DType::kFloat32
             : size == 8 ? DType::kFloat64
                         : DType::kUnknown;
    case 'i':
      return size == 1   ? DType::kInt8
             : size == 4 ? DType::kInt32
             : size == 8 ? DType::kInt64
                         : DType::kUnknown;
    case 'b':
      return DType::kBool;
    case 'u':  // raw codes: named in messages, read only through view_as
      return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : DType::kUnknown;
    default:
      return DType::kUnknown;
  }
}

/// What attnref reads, for the message of a dtype it does not.
const char* const kReadDtypes =
    "attnref reads float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2, int8, int32, "
    "int64 and bool in native byte order (the function's docstring says which each argument "
    "takes)";

/// ShapeError (dtype_not_supported) naming `described`, a dtype attnref does not read.
[[noreturn]] void raise_unread_dtype(const std::string& described, const char* name) {
  const Status s(ErrorCode::kDtypeNotSupported, "", "{f} has a dtype attnref does not read",
                 kReadDtypes, {}, {}, name);
  throw StatusError(
      s, std::string(name) + " has dtype " + described + ", which attnref does not read");
}

/// numpy's name of `d`, with "big-endian" for a non-native byte order.
std::string describe_numpy_dtype(const NumpyDtype& d) {
  std::string out = d.name;
  if (d.byteorder == '>') out += " (big-endian)";
  return out;
}

/// A DLPack dtype as numpy would name it ("uint32", "complex64"; lanes as "x4").
std::string describe_dlpack_dtype(DLDataType t) {
  const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string out = t.code < 7 ? kinds[t.code] : "code " + std::to_string(t.code) + " ";
  out += std::to_string(t.bits);
  if (t.lanes != 1) out += "x" + std::to_string(t.lanes);
  return out;
}

/// Keeps a Python object alive as long as an Array that reads its memory (released with the
/// GIL held: Arrays live in the bound functions' frames).
std::shared_ptr<const void> keep(py::object obj) {
  return std::shared_ptr<const void>(new py::object(std::move(obj)), [](const void* o) {
    delete static_cast<const py::object*>(o);
  });
}

Array read_numpy(const py::array& arr, const char* name, const ExplicitDtype* as) {
  Array a;
  a.name = name;
  a.given = true;
  a.keep_alive = keep(arr);
  const NumpyDtype dtype(arr.dtype());
  a.dtype = dtype_of_numpy(dtype);
  const std::int64_t itemsize = dtype.itemsize;
  if (as != nullptr) {
    const bool bits = dtype.kind == 'u' && itemsize == as->itemsize;
    if (!bits) {
      throw StatusError(Status(ErrorCode::kDtypeNotSupported, "",
                               "{f}: view_as takes an unsigned integer array of {0}-byte elements "
                               "(the bit patterns); got {1}-byte elements",
                               "e.g. view_as(x.view(numpy.uint16), 'bfloat16')",
                               {as->itemsize, itemsize}, {}, name));
    }
    a.dtype = as->dtype;
  }
  if (a.dtype == DType::kUnknown) raise_unread_dtype(describe_numpy_dtype(dtype), name);
  a.data = arr.data();
  if (reinterpret_cast<std::uintptr_t>(a.data) % static_cast<std::uintptr_t>(itemsize) != 0) {
    throw StatusError(Status(ErrorCode::kMisalignedOffset, "",
                             "{f}: the first element is not aligned to the element size {0}",
                             "pass an aligned array (numpy.ascontiguousarray makes one)",
                             {itemsize}, {}, name));
  }
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    const auto bytes = static_cast<std::int64_t>(arr.strides(i));
    if (bytes % itemsize != 0) {
      throw StatusError(Status(ErrorCode::kMisalignedOffset, "",
                               "{f}: the stride of dimension {0} is {1} bytes, not a whole number "
                               "of {2}-byte elements",
                               "attnref views take element strides; copy the array "
                               "(numpy.ascontiguousarray)",
                               {static_cast<std::int64_t>(i), bytes, itemsize}, {}, name));
    }
    a.shape.push_back(static_cast<std::int64_t>(arr.shape(i)));
    a.strides.push_back(bytes / itemsize);
  }
  return a;
}

/// The first element and element strides of a DLPack tensor of up to four dimensions, through
/// `view_from_dlpack` (device, dtype, offset alignment and view checks); a tensor of more
/// dimensions keeps its shape only, for the families' rank checks to refuse.
template <class T, size_t Rank>
void resolve_dlpack_as(const DLTensor& t, Array* a) {
  TensorView<const T, Rank> view;
  raise_if_error(view_from_dlpack(t, &view, a->name.c_str()));
  a->data = view.data;
  a->strides.assign(view.strides.begin(), view.strides.end());
}

template <class T>
void resolve_dlpack_rank(const DLTensor& t, Array* a) {
  switch (t.ndim) {
    case 0:  // a scalar: one element at data + byte_offset
      a->data = static_cast<const char*>(t.data) + t.byte_offset;
      return;
    case 1:
      return resolve_dlpack_as<T, 1>(t, a);
    case 2:
      return resolve_dlpack_as<T, 2>(t, a);
    case 3:
      return resolve_dlpack_as<T, 3>(t, a);
    case 4:
      return resolve_dlpack_as<T, 4>(t, a);
    default:
      return;
  }
}

void resolve_dlpack(const DLTensor& t, Array* a) {
  switch (a->dtype) {
    case DType::kFloat16:
      return resolve_dlpack_rank<Eigen::half>(t, a);
    case DType::kBFloat16:
      return resolve_dlpack_rank<Eigen::bfloat16>(t, a);
    case DType::kFloat32:
      return resolve_dlpack_rank<float>(t, a);
    case DType::kFloat64:
      return resolve_dlpack_rank<double>(t, a);
    case DType::kInt8:
      return resolve_dlpack_rank<std::int8_t>(t, a);
    case DType::kInt32:
      return resolve_dlpack_rank<std::int32_t>(t, a);
    default:
      return resolve_dlpack_rank<std::int64_t>(t, a);
  }
}

Array read_dlpack(py::handle obj, const char* name) {
  if (py::hasattr(obj, "__dlpack_device__")) {
    const auto device = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
    if (device.first != kDLCPU) {
      throw StatusError(Status(ErrorCode::kDeviceNotSupported, "",
                               "{f} is on DLPack device type {0} (id {1}); attnref reads CPU "
                               "memory (kDLCPU = 1)",
                               "copy the tensor to host memory first, e.g. tensor.cpu()",
                               {device.first, device.second}, {}, name));
    }
  }
  // A lazily negated torch tensor (x.conj().imag) exports its memory without the negation.
  if (py::hasattr(obj, "is_neg") && obj.attr("is_neg")().cast<bool>()) {
    throw StatusError(Status(ErrorCode::kDtypeNotSupported, "",
                             "{f} is a tensor with its negative bit set (a lazy negation); "
                             "DLPack exports its memory without the negation",
                             "materialize it first: tensor.resolve_neg()", {}, {}, name));
  }
  Array a;
  a.name = name;
  a.given = true;
  py::capsule capsule = obj.attr("__dlpack__")();
  // Borrowed: the capsule keeps its name "dltensor", so its destructor releases the tensor
  // when `a.keep_alive` goes, after the kernel ran.
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  a.keep_alive = keep(capsule);
  const DLTensor& t = managed->dl_tensor;
  a.dtype = dtype_from_dlpack(t.dtype);
  if (a.dtype == DType::kUnknown) raise_unread_dtype(describe_dlpack_dtype(t.dtype), name);
  if (t.shape == nullptr && t.ndim > 0) {
    throw StatusError(Status(ErrorCode::kNullData, "", "DLPack {f} has ndim {0} but a null shape",
                             "a producer must fill DLTensor::shape", {t.ndim}, {}, name));
  }
  for (int i = 0; i < t.ndim; ++i) a.shape.push_back(t.shape[i]);
  resolve_dlpack(t, &a);
  return a;
}

std::string require_string(py::handle obj, const char* key, const char* function) {
  if (!py::isinstance<py::str>(obj)) {
    throw py::type_error(std::string(function) + "(): " + key + " must be a str");
  }
  return obj.cast<std::string>();
}

}  // namespace

py::dtype numpy_dtype(DType t) { return py::dtype(dtype_name(t)); }

Array read_array(py::handle obj, const char* name, bool optional) {
  if (obj.is_none()) {
    if (optional) {
      Array a;
      a.name = name;
      return a;
    }
    throw StatusError(Status(ErrorCode::kNullData, "", "{f} is None; an array is required",
                             "pass a numpy array or a CPU tensor", {}, {}, name));
  }
  if (py::isinstance<TypedArray>(obj)) {
    const auto& typed = obj.cast<const TypedArray&>();
    for (const ExplicitDtype& e : explicit_dtypes)
      if (typed.dtype == e.name) return read_numpy(typed.array, name, &e);
  }
  if (py::isinstance<py::array>(obj))
    return read_numpy(py::reinterpret_borrow<py::array>(obj), name, nullptr);
  if (py::hasattr(obj, "__dlpack__")) return read_dlpack(obj, name);
  // Lists, tuples and scalars: numpy converts them (a copy the caller asked for); an error of
  // the conversion (an __array__ that raises, a MemoryError) propagates as raised.
  return read_numpy(py::module_::import("numpy").attr("asarray")(obj), name, nullptr);
}

bool PendingSignal::operator()() {
  if (std::this_thread::get_id() != caller_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return false;
  next_ = now + std::chrono::milliseconds(50);
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

py::array new_array(DType t, const std::vector<std::int64_t>& shape) {
  const py::dtype dtype = numpy_dtype(t);
  // C-order strides from the dtype's Python itemsize (pybind11's own assume numpy 1's layout).
  const auto itemsize = dtype.attr("itemsize").cast<py::ssize_t>();
  std::vector<py::ssize_t> s(shape.begin(), shape.end()), strides(shape.size(), itemsize);
  std::int64_t stride = itemsize;  // saturates: numpy then refuses the size itself
  for (size_t i = shape.size(); i-- > 1;) {
    if (!checked_mul(stride, std::max<std::int64_t>(shape[i], 1), &stride))
      stride = std::numeric_limits<std::int64_t>::max();
    strides[i - 1] = static_cast<py::ssize_t>(stride);
  }
  return py::array(dtype, s, strides);
}

Kwargs::Kwargs(py::kwargs kwargs, const char* function)
    : dict_(py::dict(kwargs)), function_(function) {}

py::object Kwargs::take_object(const char* key) {
  if (!dict_.contains(key)) return py::none();
  py::object v = dict_[key];
  PyDict_DelItemString(dict_.ptr(), key);
  return v;
}

std::optional<double> Kwargs::take_float(const char* key) {
  py::object v = take_object(key);
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(v) ||
      !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v) ||
        py::hasattr(v, "__float__"))) {
    throw py::type_error(std::string(function_) + "(): " + key + " must be a number");
  }
  return py::float_(v).cast<double>();
}

std::int64_t to_int64(py::handle v, const std::string& what) {
  if (py::isinstance<py::bool_>(v) || !py::hasattr(v, "__index__"))
    throw py::type_error(what + " must be an int");
  py::int_ i(py::reinterpret_borrow<py::object>(v));
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(what + " does not fit in int64");
  return static_cast<std::int64_t>(value);
}

std::optional<std::int64_t> Kwargs::take_int(const char* key) {
  py::object v = take_object(key);
  if (v.is_none()) return std::nullopt;
  return to_int64(v, std::string(function_) + "(): " + key);
}

std::optional<bool> Kwargs::take_bool(const char* key) {
  py::object v = take_object(key);
  if (v.is_none()) return std::nullopt;
  if (!py::isinstance<py::bool_>(v)) {
    throw py::type_error(std::string(function_) + "(): " + key + " must be a bool");
  }
  return v.cast<bool>();
}

std::optional<std::string> Kwargs::take_string(const char* key) {
  py::object v = take_object(key);
  if (v.is_none()) return std::nullopt;
  return require_string(v, key, function_);
}

void Kwargs::finish() {
  for (auto item : dict_) {
    throw py::type_error(std::string(function_) + "() got an unexpected keyword argument '" +
                         py::str(item.first).cast<std::string>() + "'");
  }
}

float to_float32(double value, const char* key) {
  if (std::isfinite(value) && std::fabs(value) > static_cast<double>(FLT_MAX)) {
    throw py::value_error(std::string(key) + "=" + std::to_string(value) +
                          " is outside the float32 range");
  }
  if (value != 0.0 && std::isfinite(value) && static_cast<float>(value) == 0.0f) {
    throw py::value_error(std::string(key) + " underflows to 0 in float32");
  }
  return static_cast<float>(value);
}

Float32Vector read_float32_vector(py::handle obj, const char* name) {
  Array a = read_array(obj, name, true);
  if (std::strcmp(name, "sinks") == 0) return frontend::read_sinks(std::move(a));
  return frontend::read_alibi_slopes(std::move(a));
}

namespace {

/// `obj` (a float array) as doubles in C order, with its shape; `name` a literal.
std::vector<double> read_doubles(py::handle obj, const char* name,
                                 std::vector<std::int64_t>* shape) {
  const Array a = read_array(obj, name);
  // An ml_dtypes bfloat16 array converts as it is; bits tagged by view_as do not.
  const bool numpy_float = a.dtype == DType::kFloat16 || a.dtype == DType::kFloat32 ||
                           a.dtype == DType::kFloat64 ||
                           (a.dtype == DType::kBFloat16 && py::isinstance<py::array>(obj));
  if (!numpy_float) raise_if_error(dtype_error(a, "a float dtype (float16, float32 or float64)"));
  *shape = a.shape;
  const py::module_ np = py::module_::import("numpy");
  // numpy's conversion error (a MemoryError, say) propagates as raised.
  const auto c = np.attr("ascontiguousarray")(obj, np.attr("float64")).cast<py::array_t<double>>();
  return std::vector<double>(c.data(), c.data() + c.size());
}

}  // namespace

CompareInputs read_compare_options(py::handle got, py::kwargs& kwargs, const char* function) {
  for (const char* refused : {"return_lse", "num_threads"}) {
    if (kwargs.contains(refused)) {
      throw py::type_error(std::string(function) + "() got an unexpected keyword argument '" +
                           refused + "'");
    }
  }
  CompareInputs c;
  c.got = read_doubles(got, "got", &c.got_shape);
  const auto pop = [&](const char* key) { return kwargs.attr("pop")(key, py::none()); };
  const py::object lse = pop("got_lse");
  if (!lse.is_none()) c.got_lse = read_doubles(lse, "got_lse", &c.got_lse_shape);
  const py::object atol = pop("atol"), rtol = pop("rtol"), padding = pop("ignore_padding");
  if (!atol.is_none()) c.options.tol.atol = atol.cast<double>();
  if (!rtol.is_none()) c.options.tol.rtol = rtol.cast<double>();
  if (!(c.options.tol.atol >= 0 && c.options.tol.rtol >= 0))
    throw py::value_error("atol and rtol must be 0 or more");
  if (!padding.is_none()) c.options.ignore_padding = padding.cast<bool>();
  return c;
}

Status check_compare_shapes(const CompareInputs& c, const std::vector<std::int64_t>& out_shape,
                            const std::vector<std::int64_t>& lse_shape) {
  // Outputs are rank 3 and logsumexps rank 2 in every family: one message literal each.
  const auto check = [](const std::vector<std::int64_t>& got, const std::vector<std::int64_t>& want,
                        const char* message, const char* what) {
    if (got == want) return Status();
    Status::Ints v{
        static_cast<std::int64_t>(got.size()),
        std::accumulate(got.begin(), got.end(), std::int64_t{1}, std::multiplies<std::int64_t>())};
    for (size_t i = 0; i < want.size() && i < 3; ++i) v[2 + i] = want[i];
    return Status(ErrorCode::kShapeMismatch, "", message,
                  "compare an output of the reference's shape", v, {}, what);
  };
  ATTNREF_RETURN_IF_ERROR(check(c.got_shape, out_shape,
                                "{f} has {0} dimensions and {1} values; the reference output "
                                "is ({2}, {3}, {4})",
                                "got"));
  if (c.got_lse.empty() && c.got_lse_shape.empty()) return Status();
  return check(c.got_lse_shape, lse_shape,
               "{f} has {0} dimensions and {1} values; the reference logsumexp is ({2}, {3})",
               "got_lse");
}

std::string reproduce_keywords(const compare::Reproduce& r) {
  using K = compare::Reproduce::Kind;
  switch (r.kind) {
    case K::kSet:
      if (r.field == "offset") return "mask offset " + r.value;
      if (r.field == "local_left") return "mask=('local', " + r.value + ", right)";
      return r.field + "=" + r.value;
    case K::kUnset:
      return r.field + "=None";
    case K::kEnable:
      return r.field + "=True";
    case K::kSwap:
      if (r.other.empty()) return "K and V swapped in " + r.field;
      return "swapping " + r.field + " and " + r.other +
             (r.value == "scales" ? " (and their scales)" : "");
    case K::kRelayout:
      return r.field + "='" + r.value + "' with " + r.other + " reshaped (same bytes) to the " +
             r.value + " shape";
    case K::kLseLog2:
      return "the lse of return_lse=True divided by ln 2";
    case K::kInterleaveQueryHeads:  // the library's words name the inputs as the functions do
    case K::kShiftEach:
    case K::kQueryLengths:
    case K::kNone:
      break;
  }
  return compare::words_of(r);
}

py::dict report_dict(const compare::Report& r) {
  py::dict d;
  d["ok"] = r.ok();
  d["count"] = r.count;
  d["mismatches"] = r.mismatches;
  d["lse_mismatches"] = r.lse_mismatches;
  d["max_abs"] = r.max_abs;
  d["max_rel"] = r.max_rel;
  d["lse_max_abs"] = r.lse_max_abs;
  d["ignored_padding"] = r.ignored_padding;
  d["padding_only"] = r.padding_only;
  py::list causes;
  for (const compare::Cause& c : r.causes) {
    py::dict one;
    one["what"] = c.what;
    one["max_abs"] = c.max_abs;
    one["reproduce"] = reproduce_keywords(c.reproduce);
    causes.append(one);
  }
  d["causes"] = causes;
  d["where"] = py::cast(r.where);
  std::vector<std::string> notes = r.skipped;
  if (!r.cap_note.empty()) notes.insert(notes.begin(), r.cap_note);
  d["notes"] = py::cast(notes);
  d["text"] = compare::format_report(r, reproduce_keywords);
  return d;
}

CommonOptions parse_common_options(Kwargs& kw, bool for_kernel) {
  CommonOptions o;
  o.mask_value = kDefaultMaskValue;
  if (auto v = kw.take_float("sm_scale")) o.sm_scale = to_float32(*v, "sm_scale");
  if (auto v = kw.take_float("soft_cap")) o.soft_cap = to_float32(*v, "soft_cap");
  if (auto v = kw.take_float("mask_value")) o.mask_value = to_float32(*v, "mask_value");
  if (auto v = kw.take_string("alibi_convention")) {
    const auto c = frontend::alibi_convention_named(*v);
    if (!c)
      throw py::value_error("alibi_convention must be 'signed' or 'absolute'; got '" + *v + "'");
    o.alibi_convention = *c;
  }
  if (auto v = kw.take_string("soft_cap_order")) {
    const auto c = frontend::soft_cap_order_named(*v);
    if (!c) {
      throw py::value_error("soft_cap_order must be 'cap_then_alibi' or 'alibi_then_cap'; got '" +
                            *v + "'");
    }
    o.soft_cap_order = *c;
  }
  if (for_kernel) {
    if (auto v = kw.take_bool("return_lse")) o.return_lse = *v;
    if (auto v = kw.take_int("num_threads")) {
      if (*v < 1 || *v > 1024) throw py::value_error("num_threads must be in [1, 1024]");
      o.num_threads = static_cast<int>(*v);
    }
    return o;
  }
  if (auto v = kw.take_string("profile")) {
    if (*v == "jax") {
      o.profile = Profile::kJax;
    } else if (*v != "reference") {
      throw py::value_error("profile must be 'reference' or 'jax'; got '" + *v + "'");
    }
  }
  py::object tiers = kw.take_object("tiers");
  if (!tiers.is_none()) {
    bool shape = false;
    o.metadata = o.data = false;
    if (py::isinstance<py::str>(tiers)) tiers = py::make_tuple(tiers);
    for (auto t : tiers) {
      const std::string tier = require_string(t, "tiers", "check");
      if (tier == "shape") {
        shape = true;
      } else if (tier == "metadata") {
        o.metadata = true;
      } else if (tier == "data") {
        o.data = true;
      } else {
        throw py::value_error("tiers holds 'shape', 'metadata' and 'data'; got '" + tier + "'");
      }
    }
    // Each tier reads memory the one before proved valid.
    if (!shape || (o.data && !o.metadata)) {
      throw py::value_error(
          "tiers must include 'shape', and 'metadata' when 'data' is given (each tier reads "
          "memory the one before it validated)");
    }
  }
  return o;
}

KvLayout parse_kv_layout_option(Kwargs& kw) {
  const std::string layout = kw.take_string("kv_layout").value_or("jax");
  if (layout == "jax") return KvLayout::kJax;  // [Hkv, P, S, D]
  if (layout == "nhd") return KvLayout::kNhd;  // [P, S, Hkv, D]
  if (layout == "hnd") return KvLayout::kHnd;  // [P, Hkv, S, D]
  throw py::value_error("kv_layout must be 'jax', 'nhd' or 'hnd'; got '" + layout + "'");
}

}  // namespace python
}  // namespace attnref

namespace py = pybind11;
using attnref::python::StatusError;
using attnref::python::TypedArray;

// ATTNREF_PY_MODULE: _attnref, or _attnref_<level> for a build of another x86-64 level.
PYBIND11_MODULE(ATTNREF_PY_MODULE, m) {
  m.doc() =
      "attnref: validators and float reference kernels for paged, splash and ragged attention.\n"
      "Every function reads numpy arrays and CPU tensors (__dlpack__) in place, with their own\n"
      "strides, checks them with the C++ library's rules and raises attnref.ShapeError (a\n"
      "ValueError) with .code, .jax_check, .values, .hint and the library's message.";
  m.attr("__version__") = ATTNREF_PY_VERSION;  // the CMake project version
  m.attr("_kernel_isa") = attnref::isa_name(attnref::compiled_isa());

  static py::exception<StatusError> shape_error(m, "ShapeError", PyExc_ValueError);
  shape_error.doc() =
      "A check failed. str(e) is the library's 'error[<code>] <message> (hint: <hint>)'.\n"
      "Attributes: code (snake_case, e.g. 'gqa_not_divisible'), jax_check (e.g. 'P2', or '' for\n"
      "attnref's own checks), message, hint, field (the tensor or option named, or ''),\n"
      "values (the 8 integer values of the message), reals (its 2 real values).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object error = py::reinterpret_borrow<py::object>(shape_error.ptr())(py::str(e.text));
      error.attr("code") = e.code;
      error.attr("jax_check") = e.jax_check;
      error.attr("message") = e.message;
      error.attr("hint") = e.hint;
      error.attr("field") = e.field;
      error.attr("values") = py::tuple(py::cast(e.values));
      error.attr("reals") = py::tuple(py::cast(e.reals));
      PyErr_SetObject(shape_error.ptr(), error.ptr());
    }
  });

  py::class_<TypedArray>(m, "TypedArray",
                         "An array whose bits are read as another dtype (made by view_as).")
      .def_property_readonly("array", [](const TypedArray& t) { return t.array; })
      .def_property_readonly("dtype", [](const TypedArray& t) { return t.dtype; });
  m.def(
      "view_as",
      [](py::object array, const std::string& dtype) {
        for (const auto& e : attnref::python::explicit_dtypes)
          if (dtype == e.name) return TypedArray{std::move(array), dtype};
        throw py::value_error("view_as: unknown dtype '" + dtype + "'");
      },
      py::arg("array"), py::arg("dtype"),
      "Tags an unsigned-integer array as holding the bit patterns of `dtype` ('bfloat16': a\n"
      "uint16 array; 'float8_e4m3fn', 'float8_e5m2': a uint8 array), for dtypes numpy has none\n"
      "for. No copy.");

  attnref::python::bind_paged(m);
  attnref::python::bind_splash(m);
  attnref::python::bind_ragged(m);
  attnref::python::bind_merge_and_config(m);
  attnref::python::bind_engines(m);
}
