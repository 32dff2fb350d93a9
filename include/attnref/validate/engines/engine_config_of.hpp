// SPDX-License-Identifier: Apache-2.0
/// @file engine_config_of.hpp
/// The engine configuration a family's arguments describe, so a call that attnref validates can
/// be checked against an engine kernel at run time: paged decode feeds the decode kernels,
/// ragged batches the prefill/varlen kernels, splash a single prefill. The args' ALiBi
/// convention and soft-cap order become the configuration's stated conventions, so
/// `check_engine` reports a kernel that computes them differently.
///
/// Example:
/// @code
///   args.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;  // what FlashInfer computes
///   const attnref::EngineReport r = attnref::check_engine(
///       attnref::engine_config_of(args), {attnref::EngineKernel::kFlashInferPrefillFa2, 90});
/// @endcode
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnref/core/dtype.hpp"
#include "attnref/validate/engines/engine_target.hpp"
#include "attnref/validate/paged.hpp"
#include "attnref/validate/ragged.hpp"
#include "attnref/validate/splash.hpp"

namespace attnref {

namespace detail {

/// The features and conventions every family's args carry.
template <class Args>
constexpr void engine_features_of(const Args& args, EngineConfig& c) noexcept {
  c.sliding_window = args.sliding_window.value_or(0);
  c.soft_cap = args.soft_cap.has_value();
  c.alibi = !args.alibi_slopes.empty_view();
  c.sinks = !args.sinks.empty_view();
  c.conventions.alibi = args.alibi_convention;
  c.conventions.soft_cap_order = args.soft_cap_order;
}

}  // namespace detail

/// A paged decode call as an engine configuration: one query token per sequence, after the
/// longest sequence's keys (kv_len).
/// Precondition: `check_paged_shapes(args)` passed (the extents are read as they are).
template <class Q, class KV, class Index>
constexpr EngineConfig engine_config_of(const PagedAttentionArgs<Q, KV, Index>& args) noexcept {
  EngineConfig c;
  c.num_q_heads = args.q.extent(1);
  c.num_kv_heads = args.k_pages.extent(0);
  c.head_dim = args.k_pages.extent(3);
  c.head_dim_v = args.v_pages.extent(3);  // MLA: 512 of a 576-wide latent row
  c.page_size = args.k_pages.extent(2);
  c.q_dtype = dtype_of<Q>;
  c.kv_dtype = dtype_of<KV>;
  detail::engine_features_of(args, c);
  c.q_len = 1;
  c.kv_len = 1;
  for (std::int64_t i = 0; i < args.lengths.extent(0); ++i)
    c.kv_len = std::max<std::int64_t>(c.kv_len, static_cast<std::int64_t>(args.lengths(i)));
  return c;
}

/// A ragged batch as a prefill/varlen configuration: q_len is the most query rows of a live
/// sequence (at least 1), kv_len q_len plus the longest cached prefix of a sequence with rows;
/// rows align to the end of their sequence, a bottom-right causal mask.
/// Precondition: `check_ragged(args)` passed (cu_q_lens and kv_lens are read).
template <class Q, class KV, class Index>
constexpr EngineConfig engine_config_of(
    const RaggedPagedAttentionArgs<Q, KV, Index>& args) noexcept {
  EngineConfig c;
  c.num_q_heads = args.q.extent(1);
  c.num_kv_heads = args.k_pages.extent(0);
  c.head_dim = args.k_pages.extent(3);
  c.head_dim_v = args.v_pages.extent(3);
  c.page_size = args.k_pages.extent(2);
  c.q_dtype = dtype_of<Q>;
  c.kv_dtype = dtype_of<KV>;
  detail::engine_features_of(args, c);
  c.q_len = 1;
  std::int64_t prefix = 0;
  for (std::int64_t i = 0; i < args.num_seqs_count(); ++i) {
    const auto rows = static_cast<std::int64_t>(args.cu_q_lens(i + 1) - args.cu_q_lens(i));
    c.q_len = std::max<std::int64_t>(c.q_len, rows);
    if (rows > 0)
      prefix = std::max<std::int64_t>(prefix, static_cast<std::int64_t>(args.kv_lens(i)) - rows);
  }
  c.kv_len = c.q_len + prefix;
  c.causal = true;
  c.conventions.causal_alignment = CausalAlignment::kBottomRight;  // JAX's ragged positions
  return c;
}

/// A splash call as a single prefill: Sq query tokens over Skv keys, not paged. `causal` says
/// whether the call's mask is the causal one (the args do not hold the mask); ALiBi's sign
/// matters only without it. `alignment` says where the causal mask's diagonal is when Skv > Sq:
/// top-left for `CausalMask` with offset 0 (its default), bottom-right for offset Skv - Sq.
/// Precondition: `check_splash_shapes(args, mask)` passed.
template <class Q, class KV>
constexpr EngineConfig engine_config_of(
    const SplashAttentionArgs<Q, KV>& args, bool causal,
    CausalAlignment alignment = CausalAlignment::kTopLeft) noexcept {
  EngineConfig c;
  c.num_q_heads = args.q.extent(0);
  c.num_kv_heads = args.is_mqa ? 1 : args.k.extent(0);
  c.head_dim = args.q.extent(2);
  c.head_dim_v = args.v.extent(2);
  c.page_size = 0;
  c.q_dtype = dtype_of<Q>;
  c.kv_dtype = dtype_of<KV>;
  detail::engine_features_of(args, c);
  c.q_len = std::max<std::int64_t>(1, args.q.extent(1));
  c.kv_len = args.k.extent(1);
  c.causal = causal;
  c.conventions.causal_alignment = alignment;
  return c;
}

}  // namespace attnref
