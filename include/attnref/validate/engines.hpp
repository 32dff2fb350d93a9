// SPDX-License-Identifier: Apache-2.0
/// @file engines.hpp
/// Engine targets: would FlashInfer's, vLLM's, FlashAttention's or FlashMLA's kernel accept an
/// attention configuration, and compute it right? Everything in validate/engines/.
#pragma once

#include "attnref/validate/engines/check_engine.hpp"
#include "attnref/validate/engines/engine_config_of.hpp"
#include "attnref/validate/engines/engine_conventions.hpp"
#include "attnref/validate/engines/engine_matrix.hpp"
#include "attnref/validate/engines/engine_rule.hpp"
#include "attnref/validate/engines/engine_target.hpp"
#include "attnref/validate/engines/parse_engine_target.hpp"
#include "attnref/validate/engines/vllm_selection.hpp"
