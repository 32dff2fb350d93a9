#!/usr/bin/env bash
# Quick start 1: builds and runs the main example (validate, then run, a Llama-3-8B decode batch).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target validate_then_run
./build/release/examples/validate_then_run
