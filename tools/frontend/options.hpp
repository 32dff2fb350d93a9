// SPDX-License-Identifier: Apache-2.0
/// @file options.hpp
/// The options every family shares, as the front ends hand them to the builders, and the
/// per-query-head float arrays (sinks, ALiBi slopes) read into the float32 the kernels take.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "array.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/validate/logit_conventions.hpp"
#include "attnref/validate/options.hpp"

namespace attnref {
namespace frontend {

/// The options paged, ragged and splash share, parsed by a front end.
struct CommonOptions {
  Profile profile = Profile::kReference;
  bool metadata = true;  ///< run the metadata tier after the shape tier
  bool data = false;     ///< and the data tier (NaN/Inf in what the kernel reads) after it
  float sm_scale = 1.0f;
  std::optional<float> soft_cap;
  float mask_value = kDefaultMaskValue;
  AlibiConvention alibi_convention = AlibiConvention::kSigned;
  SoftCapOrder soft_cap_order = SoftCapOrder::kCapThenAlibi;
};

/// The names of the conventions, as both front ends take them ("signed", "cap_then_alibi").
inline std::optional<AlibiConvention> alibi_convention_named(const std::string& name) {
  if (name == "signed") return AlibiConvention::kSigned;
  if (name == "absolute") return AlibiConvention::kAbsolute;
  return std::nullopt;
}

inline std::optional<SoftCapOrder> soft_cap_order_named(const std::string& name) {
  if (name == "cap_then_alibi") return SoftCapOrder::kCapThenAlibi;
  if (name == "alibi_then_cap") return SoftCapOrder::kAlibiThenCap;
  return std::nullopt;
}

/// A per-query-head float array (sinks, alibi_slopes), narrowed to the float32 the kernels read.
struct HeadValues {
  Array array;
  std::vector<float> values;
  bool present() const noexcept { return array.present(); }
  TensorView<const float, 1> view() const {
    if (!present()) return {};
    return TensorView<const float, 1>(values.data(), {static_cast<std::int64_t>(values.size())});
  }
};

/// A float, double, Eigen::half or Eigen::bfloat16 value as double.
template <class S>
double widen(S x) {
  if constexpr (std::is_same_v<S, double>) {
    return x;
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}

/// Reads `a` (absent: an absent HeadValues) as one float per query head: rank 1
/// (`shape_hint`, a literal, names the shape), a float dtype (float16, bfloat16, float32,
/// float64), and no finite value past float32's range (`range_code`: it would become inf).
/// NaN and inf pass, for the family's own checks.
inline HeadValues read_head_values(Array a, const char* shape_hint, ErrorCode range_code) {
  HeadValues h;
  h.array = std::move(a);
  if (!h.present()) return h;
  raise_if_error(check_rank(h.array, 1, shape_hint));
  if (!query_dtype_supported(h.array.dtype))
    raise_if_error(dtype_error(h.array, "a float array (it is cast to float32)"));
  dispatch_query(h.array.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const TensorView<const S, 1> view = view_of<S, 1>(h.array);
    for (std::int64_t i = 0; i < view.extents[0]; ++i) {
      const double wide = widen(view(i));
      if (std::isfinite(wide) && !std::isfinite(static_cast<float>(wide))) {
        raise_if_error(Status(range_code, "", "{f}[{0}]={r0} is outside the float32 range",
                              "the values are cast to float32, whose largest finite magnitude "
                              "is 3.4028235e+38",
                              {i}, {wide}, h.array.name.c_str()));
      }
      h.values.push_back(static_cast<float>(wide));
    }
  });
  return h;
}

/// The attention-sink logits, one per query head (`sinks`).
inline HeadValues read_sinks(Array a) {
  return read_head_values(std::move(a), "sinks are [num_q_heads]", ErrorCode::kNonFiniteData);
}

/// The ALiBi slopes, one per query head (`alibi_slopes`).
inline HeadValues read_alibi_slopes(Array a) {
  return read_head_values(std::move(a), "ALiBi slopes are [num_q_heads]",
                          ErrorCode::kInvalidAlibiSlope);
}

/// Sets the options every family's args share (the library checks them together,
/// `detail::check_shared_options`) from a family's inputs: the common options, the sliding
/// window, the sinks and the ALiBi slopes.
template <class Inputs, class Args>
void set_shared_options(const Inputs& in, Args& a) {
  a.sm_scale = in.common.sm_scale;
  a.soft_cap = in.common.soft_cap;
  a.mask_value = in.common.mask_value;
  a.alibi_convention = in.common.alibi_convention;
  a.soft_cap_order = in.common.soft_cap_order;
  a.sliding_window = in.sliding_window;
  a.sinks = in.sinks.view();
  a.alibi_slopes = in.alibi_slopes.view();
}

}  // namespace frontend
}  // namespace attnref
