// SPDX-License-Identifier: Apache-2.0
/// @file engine_config_of.hpp
/// The engine configuration a family's arguments describe, so a call that attnref validates can
/// be checked against an engine kernel at run time: paged decode feeds the decode kernels.
#pragma once

#include "attnref/core/dtype.hpp"
#include "attnref/validate/engines/engine_target.hpp"
#include "attnref/validate/paged.hpp"

namespace attnref {

/// A paged decode call as an engine configuration: one query token per sequence.
/// Precondition: `check_paged_shapes(args)` passed (the extents are read as they are).
template <class Q, class KV, class Index>
constexpr EngineConfig engine_config_of(const PagedAttentionArgs<Q, KV, Index>& args) noexcept {
  EngineConfig c;
  c.num_q_heads = args.q.extent(1);
  c.num_kv_heads = args.k_pages.extent(0);
  c.head_dim = args.k_pages.extent(3);
  c.head_dim_v = args.v_pages.extent(3);
  c.page_size = args.k_pages.extent(2);
  c.q_dtype = dtype_of<Q>;
  c.kv_dtype = dtype_of<KV>;
  c.sliding_window = args.sliding_window.value_or(0);
  c.soft_cap = args.soft_cap.has_value();
  c.alibi = !args.alibi_slopes.empty_view();
  c.sinks = !args.sinks.empty_view();
  c.q_len = 1;
  return c;
}

}  // namespace attnref
