// SPDX-License-Identifier: Apache-2.0
/// @file kv_rows.hpp
/// The data tier's report of a bad element in a live K/V row, shared by paged and ragged: where
/// it is (sequence, token, page, slot, KV head, dim) and, for fp8 pages, the code itself.
#pragma once

#include <cstdint>

#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"

namespace attnref {
namespace detail {

/// `kNonFiniteData` for element `x` (NaN/Inf, or an fp8 NaN/infinity code) of `name`
/// ("k_pages" or "v_pages") at token t of sequence `seq`, stored at (h, page, slot, d).
template <class KV>
constexpr Status non_finite_kv_row(const KV& x, const char* name, std::int64_t seq, std::int64_t t,
                                   std::int64_t page, std::int64_t slot, std::int64_t h,
                                   std::int64_t d) noexcept {
  if constexpr (is_fp8_dtype<KV>) {
    constexpr const char* kHint =
        dtype_of<KV> == DType::kFloat8E4M3FN
            ? "float8_e4m3fn has no infinity and codes 127 and 255 (0x7f, 0xff) are NaN: a "
              "live cache row holds an unwritten page or a value the quantizer did not saturate"
            : "float8_e5m2 codes 124..127 and 252..255 (exponent bits all set) are +-inf or "
              "NaN: a live cache row holds an unwritten page or an overflowing value";
    return Status(ErrorCode::kNonFiniteData, "",
                  "{f} holds the {d7} code {6}, which is not a finite number, at sequence {0}, "
                  "token {1} (page {2}, slot {3}), kv head {4}, dim {5}",
                  kHint,
                  {seq, t, page, slot, h, d, static_cast<std::int64_t>(x.bits),
                   static_cast<std::int64_t>(dtype_of<KV>)},
                  {}, name);
  } else {
    (void)x;
    return Status(ErrorCode::kNonFiniteData, "",
                  "{f} is not finite at sequence {0}, token {1} (page {2}, slot {3}), kv head "
                  "{4}, dim {5}",
                  "a live cache row holds NaN/Inf: an unwritten or corrupted page",
                  {seq, t, page, slot, h, d}, {}, name);
  }
}

}  // namespace detail
}  // namespace attnref
