#!/usr/bin/env bash
# Quick start 1: builds and runs the main example (validate, then run, a Llama-3-8B decode batch).
# Installs only what the example needs (scripts/deps.sh --example) and builds it alone in
# build/example (preset example: no tests, benchmarks or Python module).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --example
cmake --preset example >/dev/null
cmake --build --preset example
./build/example/examples/validate_then_run
