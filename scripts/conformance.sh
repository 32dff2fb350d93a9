#!/usr/bin/env bash
# Runs the conformance suite with its full grids (attnref's verdicts and numbers against JAX's
# own Pallas TPU kernels on the CPU, tests/conformance) and writes the JAX section of
# docs/conformance.md; then the engines as judges (scripts/judge_engines.sh, full draw), which
# write its engines section. Installs what it needs (scripts/deps.sh: Debian's packages;
# scripts/pyenv.sh: the pinned PyPI tools; scripts/engines_env.sh: the pinned engines) and
# builds the Python module and attnref-run of the release preset if they are missing. Takes a
# while; pytest prints each test as it runs.
# Usage: scripts/conformance.sh [build dir holding python/ and the CLI; default build/release]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
python=$(scripts/pyenv.sh | tail -n 1)
if [ "$#" -gt 0 ]; then
  build=$(cd "$1" && pwd)
else
  build=$PWD/build/release
  cmake --preset release >/dev/null
  cmake --build --preset release --target attnref_python attnref-run
fi
record=$(mktemp)
section=$(mktemp)
export HYPOTHESIS_STORAGE_DIRECTORY=$(mktemp -d)  # hypothesis' cache, out of the source tree
trap 'rm -rf "$record" "$section" "$HYPOTHESIS_STORAGE_DIRECTORY"' EXIT
start=$SECONDS
echo "=== attnref conformance: full grids (JAX interpret mode; progress below) ==="
PYTHONPATH="$build/python" ATTNREF_RUN="$build/tools/attnref_run/attnref-run" \
  ATTNREF_REQUIRE_JAX=1 ATTNREF_CONFORMANCE_RECORD="$record" JAX_PLATFORMS=cpu \
  ATTNREF_CONFORMANCE_EXAMPLES=300 \
  PYTHONDONTWRITEBYTECODE=1 \
  "$python" -m pytest -v -s -p no:cacheprovider tests/conformance --full || status=$?
PYTHONPATH="$build/python:$PWD/tests/conformance" \
  "$python" tests/conformance/report.py "$record" "$section" $((SECONDS - start))
"$python" scripts/conformance_section.py jax "$section"
echo "attnref: wrote the JAX section of docs/conformance.md ($((SECONDS - start)) s)"
scripts/judge_engines.sh || status=$?
exit "${status:-0}"
