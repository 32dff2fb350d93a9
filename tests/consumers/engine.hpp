// The consumer tests' engine: one function per kernel family, each returning 0 on success or the
// engine.cpp line of the first failed check.
#pragma once

namespace engine {
int run_paged();
int run_splash();
int run_ragged();
int run_interop();
}  // namespace engine
