// SPDX-License-Identifier: Apache-2.0
/// @file validate.hpp
/// Umbrella of the validators only (target attnref::validate): no Eigen, no kernels.
#pragma once

#include "attnref/core/checked_math.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/error.hpp"
#include "attnref/core/float8.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/profile.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"
#include "attnref/validate/engines.hpp"
#include "attnref/validate/head_options.hpp"
#include "attnref/validate/heads.hpp"
#include "attnref/validate/logit_conventions.hpp"
#include "attnref/validate/mask_blocks.hpp"
#include "attnref/validate/mask_checks.hpp"
#include "attnref/validate/merge.hpp"
#include "attnref/validate/model_config.hpp"
#include "attnref/validate/options.hpp"
#include "attnref/validate/outputs.hpp"
#include "attnref/validate/paged.hpp"
#include "attnref/validate/ragged.hpp"
#include "attnref/validate/splash.hpp"
#include "attnref/version.hpp"
