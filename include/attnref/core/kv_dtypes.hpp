// SPDX-License-Identifier: Apache-2.0
/// @file kv_dtypes.hpp
/// The element types a paged or ragged query and its K/V pages may have at run time, as one
/// table: attnref's front ends and any engine that picks a kernel from runtime dtypes
/// take the same pairs, refuse the others with the same error, and instantiate one kernel per
/// pair (`dispatch_query_and_kv`).
///
/// A query is float16, bfloat16, float32 or float64. Every query reads pages of its own dtype and
/// int8 pages (with scales); float32 and bfloat16 queries, as engines run them, also read
/// float32, bfloat16, float16 and fp8 (e4m3fn, e5m2) pages.
///
/// Example:
/// @code
///   attnref::Status s = attnref::check_kv_dtypes(q_dtype, k_dtype, v_dtype);
///   if (s.ok()) attnref::dispatch_query_and_kv(q_dtype, k_dtype, [&](auto q, auto kv) {
///     using Q = typename decltype(q)::type;    // float, Eigen::bfloat16, ...
///     using KV = typename decltype(kv)::type;  // std::int8_t, attnref::float8_e4m3fn, ...
///     run<Q, KV>();
///   });
/// @endcode
#pragma once

#include <cstdint>
#include <type_traits>

#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"

namespace attnref {

/// Whether a paged or ragged query may have dtype `q`.
constexpr bool query_dtype_supported(DType q) noexcept {
  return q == DType::kFloat16 || q == DType::kBFloat16 || q == DType::kFloat32 ||
         q == DType::kFloat64;
}

/// Whether a query of dtype `q` reads K/V pages of dtype `kv` (see the file comment).
constexpr bool kv_dtype_supported(DType q, DType kv) noexcept {
  if (!query_dtype_supported(q)) return false;
  if (kv == q || kv == DType::kInt8) return true;
  const bool engine_query = q == DType::kFloat32 || q == DType::kBFloat16;
  return engine_query &&
         (kv == DType::kFloat32 || kv == DType::kBFloat16 || kv == DType::kFloat16 ||
          kv == DType::kFloat8E4M3FN || kv == DType::kFloat8E5M2);
}

/// dtype_not_supported unless a query of dtype `q` reads pages of dtype `kv`; `pages` names the
/// pages in the message ("k_pages", "kv_pages"). Precondition: `query_dtype_supported(q)`.
inline Status check_kv_dtype(DType q, DType kv, const char* pages) {
  if (kv_dtype_supported(q, kv)) return Status();
  return Status(ErrorCode::kDtypeNotSupported, "",
                "{f} has dtype {d0}; a {d1} query reads K/V pages of its own dtype or int8 with "
                "scales (float32 and bfloat16 queries also read float32, bfloat16, float16 and "
                "fp8 pages)",
                "store the pages in q's dtype or as int8 with float32 scales, or use a float32 "
                "or bfloat16 query",
                {static_cast<std::int64_t>(kv), static_cast<std::int64_t>(q)}, {}, pages);
}

/// The checks of separate K and V pages: `check_kv_dtype` for k_pages, then for v_pages, then
/// quantization_mismatch unless the two share a dtype. Precondition: `query_dtype_supported(q)`.
inline Status check_kv_dtypes(DType q, DType k, DType v) {
  if (Status s = check_kv_dtype(q, k, "k_pages"); !s.ok()) return s;
  if (Status s = check_kv_dtype(q, v, "v_pages"); !s.ok()) return s;
  if (k == v) return Status();
  return Status(ErrorCode::kQuantizationMismatch, "",
                "k_pages ({d0}) and v_pages ({d1}) must have the same dtype",
                "quantize K and V together, or neither",
                {static_cast<std::int64_t>(k), static_cast<std::int64_t>(v)});
}

/// The type a dispatch callback receives for each runtime dtype: `typename decltype(tag)::type`.
template <class T>
struct DTypeTag {
  using type = T;
};

/// Calls `f(DTypeTag<Q>{}, DTypeTag<KV>{})` with the element types of `q` and `kv` (Q one of
/// Eigen::half, Eigen::bfloat16, float, double; KV one of Q, std::int8_t, float, Eigen::bfloat16,
/// Eigen::half, float8_e4m3fn, float8_e5m2) and returns what it returns: one instantiation of
/// `f` per supported pair, none for the others. Precondition: `kv_dtype_supported(q, kv)`.
template <class F>
decltype(auto) dispatch_query_and_kv(DType q, DType kv, F&& f) {
  auto with_query = [&](auto q_tag, auto engine_query) -> decltype(auto) {
    using Q = typename decltype(q_tag)::type;
    if (kv == DType::kInt8) return f(q_tag, DTypeTag<std::int8_t>{});
    if constexpr (decltype(engine_query)::value) {
      switch (kv) {
        case DType::kFloat32:
          return f(q_tag, DTypeTag<float>{});
        case DType::kBFloat16:
          return f(q_tag, DTypeTag<Eigen::bfloat16>{});
        case DType::kFloat16:
          return f(q_tag, DTypeTag<Eigen::half>{});
        case DType::kFloat8E4M3FN:
          return f(q_tag, DTypeTag<float8_e4m3fn>{});
        case DType::kFloat8E5M2:
          return f(q_tag, DTypeTag<float8_e5m2>{});
        default:
          break;
      }
    }
    return f(q_tag, DTypeTag<Q>{});
  };
  switch (q) {
    case DType::kFloat16:
      return with_query(DTypeTag<Eigen::half>{}, std::false_type{});
    case DType::kFloat64:
      return with_query(DTypeTag<double>{}, std::false_type{});
    case DType::kBFloat16:
      return with_query(DTypeTag<Eigen::bfloat16>{}, std::true_type{});
    default:
      return with_query(DTypeTag<float>{}, std::true_type{});
  }
}

/// Calls `f(DTypeTag<T>{})` with the element type of a query dtype (T one of Eigen::half,
/// Eigen::bfloat16, float, double) and returns what it returns: the one table of the families
/// whose inputs share q's dtype (splash, attention states). Precondition:
/// `query_dtype_supported(q)`.
template <class F>
decltype(auto) dispatch_query(DType q, F&& f) {
  switch (q) {
    case DType::kFloat16:
      return f(DTypeTag<Eigen::half>{});
    case DType::kFloat64:
      return f(DTypeTag<double>{});
    case DType::kBFloat16:
      return f(DTypeTag<Eigen::bfloat16>{});
    default:
      return f(DTypeTag<float>{});
  }
}

}  // namespace attnref
