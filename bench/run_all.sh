#!/usr/bin/env bash
# Reproduces the benchmark tables and charts of docs/benchmarks/: builds the release preset, runs
# every benchmark 3 times (medians are reported) and writes docs/benchmarks/benchmark-tables.md,
# the PNGs and docs/benchmarks/benchmark-targets.md (the performance targets, met or not).
# Usage: bench/run_all.sh [extra Google Benchmark flags, e.g. --benchmark_filter=...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh python3-matplotlib
cmake --preset release >/dev/null
cmake --build --preset release
out=build/release/bench-results
mkdir -p "$out"
for b in build/release/bench/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  echo "=== $name"
  "$b" --benchmark_repetitions=3 --benchmark_out="$out/$name.json" --benchmark_out_format=json \
       --benchmark_display_aggregates_only=true "$@"
done
# Debian's python3 has python3-matplotlib; a pyenv python3 earlier on PATH may not.
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
"$py" bench/report.py --out-dir docs/benchmarks "$out"/*.json
"$py" bench/targets.py --out-dir docs/benchmarks "$out"/bench_paged.json "$out"/bench_ragged.json \
    "$out"/bench_splash.json
