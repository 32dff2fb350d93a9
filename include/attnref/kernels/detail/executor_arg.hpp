// SPDX-License-Identifier: Apache-2.0
/// @file executor_arg.hpp
/// The guard every kernel entry point puts on its executor argument: kernels validate under
/// `Profile::kReference` and take no Profile, so a Profile passed where the executor goes is a
/// compile error that says what to do instead.
#pragma once

#include <type_traits>

#include "attnref/core/profile.hpp"

namespace attnref {
namespace detail {

/// Kernels take no Profile: a caller who wants JAX's rules checks with it first.
template <class Executor>
constexpr void assert_executor() {
  static_assert(!std::is_same<std::decay_t<Executor>, Profile>::value,
                "attnref kernels take no Profile (they validate under Profile::kReference); call "
                "the family's check (check_paged, check_splash, check_ragged) with Profile::kJax "
                "first for JAX's rules");
}

}  // namespace detail
}  // namespace attnref
