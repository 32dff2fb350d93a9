// SPDX-License-Identifier: Apache-2.0
/// @file attnref.hpp
/// Umbrella: every public validator and kernel (target attnref::attnref, needs Eigen).
#pragma once

#include "attnref/validate.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask_info.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
