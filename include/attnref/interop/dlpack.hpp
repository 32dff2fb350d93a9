// SPDX-License-Identifier: Apache-2.0
/// @file dlpack.hpp
/// Views over borrowed DLPack tensors (`DLTensor`, as PyTorch, JAX, CuPy and TVM exchange them).
/// Optional: needs `<dlpack/dlpack.h>` from the consumer (Debian: libdlpack-dev; any version with
/// `DLTensor`, 0.6 or later), which is why the umbrella header never includes this one and
/// attnref never vendors it: the engine keeps its own copy and version. No Eigen either:
/// float16/bfloat16 are matched through `attnref::DType`, so `T` may be `Eigen::half` or
/// `Eigen::bfloat16` without including Eigen here.
///
/// The view borrows: it never takes ownership, never calls a deleter, and is valid as long as the
/// producer keeps the tensor alive.
///
/// Example:
/// @code
///   #include <attnref/interop/dlpack.hpp>
///   attnref::TensorView<const float, 3> q;
///   if (attnref::Status s = attnref::view_from_dlpack(managed->dl_tensor, &q, "q"); !s.ok())
///     return s;   // wrong ndim, dtype, device, misaligned offset, bad strides ...
/// @endcode
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <limits>

#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {

/// attnref's tag for a DLPack dtype with one lane, or `DType::kUnknown` for anything attnref does
/// not read (unsigned, complex, vector lanes, fp8 ...).
constexpr DType dtype_from_dlpack(DLDataType t) noexcept {
  if (t.lanes != 1) return DType::kUnknown;
  switch (t.code) {
    case kDLFloat:
      return t.bits == 16   ? DType::kFloat16
             : t.bits == 32 ? DType::kFloat32
             : t.bits == 64 ? DType::kFloat64
                            : DType::kUnknown;
    case kDLBfloat:
      return t.bits == 16 ? DType::kBFloat16 : DType::kUnknown;
    case kDLInt:
      return t.bits == 8    ? DType::kInt8
             : t.bits == 32 ? DType::kInt32
             : t.bits == 64 ? DType::kInt64
                            : DType::kUnknown;
    default:
      return DType::kUnknown;
  }
}

/// Builds `*out`, a `Rank`-dimensional view of element type `T` (const or not), over a borrowed
/// `DLTensor`. Checks, in order:
///  - `ndim == Rank` (`kRankMismatch`);
///  - the device is the CPU, `kDLCPU` (`kDeviceNotSupported`): the reference kernels and the
///    data tier read memory on the host;
///  - dtype code/bits/lanes map to `T` (`kDtypeNotSupported`);
///  - `shape` non-null when `ndim > 0` (`kNullData`);
///  - `byte_offset` a multiple of the element size, and `data + byte_offset` aligned to it
///    (`kMisalignedOffset`);
///  - then the view itself (`check_view`): non-negative extents and strides, sizes within int64,
///    non-null data when elements exist.
/// A NULL `strides` means compact row-major; strides are in elements, as in attnref. The buffer
/// size is unknown to DLPack, so `out->buffer_size` is -1. `*out` is written only on success.
/// `name` names the tensor in messages and must outlive the returned Status (string literals do).
template <class T, size_t Rank>
Status view_from_dlpack(const DLTensor& t, TensorView<T, Rank>* out, const char* name = "tensor") {
  if (t.ndim != static_cast<int>(Rank)) {
    return Status(ErrorCode::kRankMismatch, "", "DLPack {f} has ndim {0}; expected {1}",
                  "pass a tensor of the expected rank (reshape or unsqueeze it on the producer's "
                  "side)",
                  {static_cast<std::int64_t>(t.ndim), static_cast<std::int64_t>(Rank)}, {}, name);
  }
  if (t.device.device_type != kDLCPU) {
    return Status(ErrorCode::kDeviceNotSupported, "",
                  "DLPack {f} is on device type {0} (id {1}); attnref reads CPU memory (kDLCPU = "
                  "1)",
                  "copy the tensor to host memory first (e.g. tensor.cpu()); for device tensors, "
                  "validate host mirrors of the metadata",
                  {static_cast<std::int64_t>(t.device.device_type),
                   static_cast<std::int64_t>(t.device.device_id)},
                  {}, name);
  }
  const DType got = dtype_from_dlpack(t.dtype);
  constexpr DType kWant = dtype_of<T>;
  if (got != kWant || got == DType::kUnknown) {
    return Status(ErrorCode::kDtypeNotSupported, "",
                  "DLPack {f} has dtype (code {0}, bits {1}, lanes {2}) = {d3}; the view's element "
                  "type is {d4}",
                  "convert on the producer's side, or view it with the matching element type "
                  "(float16 = Eigen::half, bfloat16 = Eigen::bfloat16)",
                  {static_cast<std::int64_t>(t.dtype.code), static_cast<std::int64_t>(t.dtype.bits),
                   static_cast<std::int64_t>(t.dtype.lanes), static_cast<std::int64_t>(got),
                   static_cast<std::int64_t>(kWant)},
                  {}, name);
  }
  if (t.shape == nullptr) {
    return Status(ErrorCode::kNullData, "", "DLPack {f} has ndim {0} but a null shape",
                  "a producer must fill DLTensor::shape", {static_cast<std::int64_t>(t.ndim)}, {},
                  name);
  }
  // Element size from the dtype (T may be an incomplete Eigen type here); natural alignment.
  const std::uint64_t elem = t.dtype.bits / 8u;
  if (t.byte_offset % elem != 0 ||
      t.byte_offset > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return Status(ErrorCode::kMisalignedOffset, "",
                  "DLPack {f} has byte_offset {0}, not a multiple of the element size {1}",
                  "attnref views start at a whole element; fix the producer's offset",
                  {static_cast<std::int64_t>(t.byte_offset), static_cast<std::int64_t>(elem)}, {},
                  name);
  }
  const char* first = static_cast<const char*>(t.data);
  if (first != nullptr) first += t.byte_offset;
  const auto address = reinterpret_cast<std::uintptr_t>(first);
  if (address % elem != 0) {
    return Status(ErrorCode::kMisalignedOffset, "",
                  "DLPack {f}: data + byte_offset is not aligned to the element size {1} (address "
                  "mod {1} = {0})",
                  "the first element must be aligned to its size; fix the producer's pointer",
                  {static_cast<std::int64_t>(address % elem), static_cast<std::int64_t>(elem)}, {},
                  name);
  }
  std::array<std::int64_t, Rank> extents{};
  for (size_t i = 0; i < Rank; ++i) extents[i] = t.shape[i];
  std::array<std::int64_t, Rank> strides = row_major_strides<Rank>(extents);
  if (t.strides != nullptr)
    for (size_t i = 0; i < Rank; ++i) strides[i] = t.strides[i];
  // const_cast: DLTensor::data is `void*`; constness is the caller's choice of T.
  T* data = reinterpret_cast<T*>(const_cast<char*>(first));
  const TensorView<T, Rank> view(data, extents, strides, -1);
  ATTNREF_RETURN_IF_ERROR(check_view(view, name));
  *out = view;
  return Status();
}

/// Same, from a `DLManagedTensor` (borrowed: its deleter is never called here).
template <class T, size_t Rank>
Status view_from_dlpack(const DLManagedTensor& t, TensorView<T, Rank>* out,
                        const char* name = "tensor") {
  return view_from_dlpack(t.dl_tensor, out, name);
}

}  // namespace attnref
