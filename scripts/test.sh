#!/usr/bin/env bash
# Quick start 2: builds and runs the whole test suite in every configuration CI checks:
# Debug, Release (with benchmarks and examples built), C++20, and ASan+UBSan.
# Usage: scripts/test.sh [preset ...]   (default: debug release cxx20 asan)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(debug release cxx20 asan)
for preset in "${presets[@]}"; do
  echo "=== attnref: $preset ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  ctest --preset "$preset"
done
# Fuzz smoke runs (issue 7): every libFuzzer harness 45 s on its corpus, when clang++ is here.
if command -v clang++ >/dev/null; then tests/fuzz/run_smoke.sh 45; fi
