#!/usr/bin/env bash
# Builds the `fuzz` preset (clang++, libFuzzer + ASan + UBSan) and runs every harness on its
# committed corpus, tests/fuzz/corpus/<harness>/, for a bounded time. Fails on any crash,
# sanitizer report, timeout (a hang: one input over 10 s), RSS over 2 GiB or single allocation
# over 512 MiB (the harnesses cap their own buffers far below that, so a bigger one is attnref
# sizing memory from a number the inputs do not justify), or a call over its work budget (bytes
# held and parallel_for items proportional to the bytes of its inputs and outputs; see
# fuzz_common.hpp). Long random-seed campaigns from prebuilt binaries: run_campaign.sh.
# CI must not fail by luck, so the run is close to reproducible: a fixed seed (ATTNREF_FUZZ_SEED,
# default 1), a fresh work directory and at most ATTNREF_FUZZ_RUNS executions (default 300000)
# per harness. CI then explores nearly the inputs a clean local run of the same seed and cap
# explored (not exactly: some harness paths depend on temporary names and timing). Long,
# random-seed runs that hunt for new bugs are described in docs/hostile-inputs.md.
# New inputs the fuzzer finds go to build-fuzz/fuzz-work/<harness>/ (the committed corpus is
# only read); a failing input is kept as build-fuzz/fuzz-work/<harness>-crash-* and its log as
# build-fuzz/fuzz-work/<harness>.log.
# Usage: tests/fuzz/run_smoke.sh [seconds per harness, default 60] [harness ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
seed=${ATTNREF_FUZZ_SEED:-1}
runs=${ATTNREF_FUZZ_RUNS:-300000}
if ! command -v clang++ >/dev/null; then
  echo "attnref fuzz: clang++ not found (scripts/deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for dir in tests/fuzz/corpus/*/; do harnesses+=("$(basename "$dir")"); done
fi
# Absolute paths: fuzz_cli_args works inside its own sandbox directory.
work=$PWD/build-fuzz/fuzz-work
mkdir -p "$work"
# Harnesses run side by side, one per core (ATTNREF_FUZZ_JOBS, default nproc): each libFuzzer
# process is single-threaded, so on CI's two cores this halves the wall time at the same
# per-harness time and execution cap.
jobs=${ATTNREF_FUZZ_JOBS:-$(nproc)}
# run_one <harness>: one bounded run; its summary lines go to stdout, and a failure leaves
# $work/<harness>.failed.
run_one() {
  local h=$1 exe=build-fuzz/tests/fuzz/$1 log=$work/$1.log
  rm -rf "${work:?}/$h" "$work/$h"-crash-* "$work/$h"-oom-* "$work/$h"-timeout-* "$work/$h.failed"
  if [ ! -x "$exe" ]; then
    echo "attnref fuzz: $h: not built ($exe)" >&2
    touch "$work/$h.failed"
    return
  fi
  mkdir -p "$work/$h"
  if "$exe" -seed="$seed" -runs="$runs" -max_total_time="$seconds" -rss_limit_mb=2048 \
       -malloc_limit_mb=512 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="$work/$h-" "$work/$h" "$PWD/tests/fuzz/corpus/$h" \
       >"$log" 2>&1; then
    # The last status line (cov, ft, corpus) and the execution count, printed in one write.
    printf '=== fuzz: %s (seed %s, at most %ss and %s runs) ===\n%s\n' "$h" "$seed" "$seconds" \
      "$runs" "$(grep -E '^#[0-9]+' "$log" | tail -n 1; grep -E 'stat::number_of_executed_units' "$log")"
  else
    touch "$work/$h.failed"
  fi
}
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$h" &
done
wait
failed=()
for h in "${harnesses[@]}"; do
  [ -e "$work/$h.failed" ] || continue
  failed+=("$h")
  echo "attnref fuzz: $h FAILED; input and log in $work/:" >&2
  ls "$work" | grep -E "^$h-" >&2 || true
  if [ -f "$work/$h.log" ]; then tail -n 60 "$work/$h.log" >&2; fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "attnref fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "attnref fuzz: ${#harnesses[@]} harnesses (seed $seed), no crash"
