// SPDX-License-Identifier: Apache-2.0
/// @file profile.hpp
/// Which rule set a check runs against.
#pragma once

namespace attnref {

/// `kJax` mirrors every check JAX's Pallas TPU kernels make, TPU tiling rules included.
/// `kReference` keeps only what the math and memory safety need (the kernels' default).
/// Both always run attnref's own safety checks.
enum class Profile { kJax, kReference };

/// "jax" or "reference".
constexpr const char* to_string(Profile p) noexcept {
  return p == Profile::kJax ? "jax" : "reference";
}

}  // namespace attnref
