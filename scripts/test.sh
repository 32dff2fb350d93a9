#!/usr/bin/env bash
# Quick start 2: checks the formatting and the docs (scripts/check_docs.sh: no history
# narration, no broken links), then builds and runs the whole test suite in every
# configuration CI checks: Release (with benchmarks and examples built), C++20, ASan+UBSan (a
# Debug build: it stands in for a plain Debug run, which would repeat the same tests), TSan (the
# executor and concurrent kernel tests), then a short fuzz run of every harness.
# The format check (scripts/format.sh: clang-format-14 against .clang-format) comes first and
# stops the run, listing the files to fix (scripts/format.sh --fix).
# What does not depend on a preset's flags is built in one preset only (CMakePresets.json says
# which): the consumer tests (consume_*: strict-warning and -fno-rtti engine builds, install,
# pkg-config), examples, attnref-run and its tests in release; the header check in release and
# cxx20; asan runs every library test and the Python suite but leaves JAX's full ragged grids
# to release.
# Usage: scripts/test.sh [preset ...]   (default: release cxx20 asan tsan; debug for local work)
set -euo pipefail
cd "$(dirname "$0")/.."
# Seconds each stage took, printed at the end (also when a stage fails): CI has a time budget.
times=()
stage_start=$SECONDS
end_stage() {
  times+=("$1 $((SECONDS - stage_start)) s")
  stage_start=$SECONDS
}
print_times() { printf 'attnref stage times: %s\n' "${times[@]}" "total $SECONDS s"; }
trap print_times EXIT
scripts/deps.sh
scripts/pyenv.sh >/dev/null  # build/venv: the pinned PyPI tools (requirements-dev.txt)
scripts/engines_env.sh >/dev/null  # and the engines that judge (torch, vLLM, FlashInfer)
end_stage deps
echo "=== attnref: format ==="
scripts/format.sh
end_stage format
echo "=== attnref: docs ==="
scripts/check_docs.sh
end_stage docs
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release cxx20 asan tsan)
for preset in "${presets[@]}"; do
  echo "=== attnref: $preset ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  end_stage "$preset-build"
  ctest --preset "$preset"
  end_stage "$preset-test"
done
# Fuzz smoke runs: every libFuzzer harness 45 s on its corpus, when clang++ is here.
if command -v clang++ >/dev/null; then tests/fuzz/run_smoke.sh 45; fi
end_stage fuzz
