// SPDX-License-Identifier: Apache-2.0
// Every benchmark binary reports the instruction-set level its kernels were compiled for
// (attnref_isa in the context block and in --benchmark_format=json), beside the CPU's best.
#pragma once

#include <benchmark/benchmark.h>

#include "attnref/core/isa.hpp"

namespace attnref_bench {
inline const bool kIsaContextAdded = [] {
  benchmark::AddCustomContext("attnref_isa", attnref::isa_name(attnref::compiled_isa()));
  benchmark::AddCustomContext("cpu_isa", attnref::isa_name(attnref::cpu_isa()));
  return true;
}();
}  // namespace attnref_bench
