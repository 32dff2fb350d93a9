// SPDX-License-Identifier: Apache-2.0
/// @file attnref.hpp
/// Umbrella: every public validator and kernel (target attnref::attnref, needs Eigen). For each
/// family (paged, splash, ragged): the checks `check_f*` / `validate_f`, the kernels `try_f`,
/// `f`, `f_unchecked` (each with an optional logsumexp output and an optional executor,
/// core/executor.hpp) and `check_f_output`; merging partial results over disjoint key sets
/// (`merge_attention_states`).
#pragma once

#include "attnref/core/executor.hpp"
#include "attnref/core/isa.hpp"
#include "attnref/core/kv_dtypes.hpp"
#include "attnref/kernels/merge_attention_states.hpp"
#include "attnref/kernels/paged_attention.hpp"
#include "attnref/kernels/ragged_paged_attention.hpp"
#include "attnref/kernels/splash_attention.hpp"
#include "attnref/masks/mask_info.hpp"
#include "attnref/validate.hpp"
#include "attnref/version.hpp"
