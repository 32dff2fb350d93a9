#!/usr/bin/env bash
# Compiles tests/cuda/validate_host.cu with nvcc (C++17, host code only, every warning an error)
# and runs it; no GPU is needed. Exits 77 (ctest: skipped) when nvcc is not available.
# Usage: run.sh <nvcc or empty> <source dir> <work dir>
set -euo pipefail
nvcc="${1:-}" src="$2" work="$3"
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "nvcc not found: skipping the CUDA host-code test (set CUDACXX or put nvcc on PATH)"
  exit 77
fi
mkdir -p "$work"
"$nvcc" --version | tail -n 1
"$nvcc" -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra \
  -I "$src/include" "$src/tests/cuda/validate_host.cu" -o "$work/validate_host"
"$work/validate_host"
