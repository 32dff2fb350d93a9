#!/usr/bin/env bash
# A long fuzzing campaign over prebuilt harness binaries: every harness runs with W workers in
# parallel for S seconds, each worker with its own random seed and artifact prefix, all of a
# harness's workers starting from its committed corpus and sharing one new-input directory.
# Needs only bash, coreutils and the binaries (x86-64 Linux, as built by `cmake --preset fuzz`;
# no cmake, no compiler): copy build-fuzz/tests/fuzz/fuzz_* and tests/fuzz/corpus/ over.
# The same limits as run_smoke.sh: a crash, sanitizer report, broken invariant (including the
# work budget of fuzz_common.hpp), one input over 10 s, RSS over 2 GiB or one allocation over
# 512 MiB ends that worker and leaves its input as an artifact.
#
# Usage: tests/fuzz/run_campaign.sh BIN_DIR SECONDS WORKERS [CORPUS_DIR] [OUT_DIR]
#   BIN_DIR     directory holding fuzz_paged, fuzz_splash, ... (every executable fuzz_* in it)
#   SECONDS     seconds per worker (-max_total_time)
#   WORKERS     workers per harness (all harnesses run at once: harnesses x WORKERS processes)
#   CORPUS_DIR  default: the corpus next to this script (tests/fuzz/corpus)
#   OUT_DIR     default: ./fuzz-campaign-<UTC date and time>
# Output: OUT_DIR/<harness>/w<i>.log (logs), OUT_DIR/<harness>/w<i>-crash-* / -oom-* /
# -timeout-* / -leak-* (artifacts), OUT_DIR/<harness>/new/ (inputs found), and a summary table
# on stdout and in OUT_DIR/summary.md. Exit status: 0 when no worker found anything, 1 when
# one did, 2 on a usage error.
# ATTNREF_FUZZ_FLAGS adds libFuzzer flags to every worker, e.g. "-fork=1 -ignore_crashes=1
# -ignore_timeouts=1 -ignore_ooms=1" to go on past a known bug (the table then counts every
# artifact a worker left).
set -uo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
bin_dir=$(cd "$1" && pwd) || exit 2
seconds=$2
workers=$3
script_dir=$(cd "$(dirname "$0")" && pwd)
corpus_dir=$(cd "${4:-$script_dir/corpus}" && pwd) || exit 2
out_dir=${5:-$PWD/fuzz-campaign-$(date -u +%Y%m%dT%H%M%SZ)}
case "$seconds$workers" in *[!0-9]*)
  echo "run_campaign: SECONDS and WORKERS must be whole numbers" >&2
  exit 2
  ;;
esac
mkdir -p "$out_dir" || exit 2
out_dir=$(cd "$out_dir" && pwd)

harnesses=()
for exe in "$bin_dir"/fuzz_*; do
  [ -f "$exe" ] && [ -x "$exe" ] && harnesses+=("$(basename "$exe")")
done
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "run_campaign: no executable fuzz_* in $bin_dir" >&2
  exit 2
fi

# A random 31-bit seed per worker (libFuzzer takes an unsigned int).
random_seed() { echo $(( $(od -An -N4 -tu4 /dev/urandom) % 2147483647 + 1 )); }

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
pids=()
for h in "${harnesses[@]}"; do
  mkdir -p "$out_dir/$h/new"
  corpus=()
  [ -d "$corpus_dir/$h" ] && corpus=("$corpus_dir/$h")
  for ((i = 1; i <= workers; i++)); do
    seed=$(random_seed)
    echo "$seed" >"$out_dir/$h/w$i.seed"
    # Absolute paths: fuzz_cli_args works inside its own sandbox directory.
    # shellcheck disable=SC2086 # ATTNREF_FUZZ_FLAGS is a list of flags
    "$bin_dir/$h" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$out_dir/$h/w$i-" \
      ${ATTNREF_FUZZ_FLAGS:-} "$out_dir/$h/new" "${corpus[@]}" >"$out_dir/$h/w$i.log" 2>&1 &
    pids+=($!)
  done
done
echo "run_campaign: ${#harnesses[@]} harnesses x $workers workers x ${seconds}s, started $started," \
  "output in $out_dir" >&2
for pid in "${pids[@]}"; do wait "$pid"; done

# Summary: executions summed over workers, the best final cov/ft of any worker, findings.
summary=$out_dir/summary.md
found=0
{
  echo "Campaign started $started, ${seconds}s per worker, $workers workers per harness," \
    "on $(uname -n) ($(nproc) CPUs)."
  echo
  echo "| harness | workers | seconds | executions | cov / ft | crashes | timeouts | OOMs |" \
    "artifacts |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for h in "${harnesses[@]}"; do
    execs=0 cov=0 ft=0
    for ((i = 1; i <= workers; i++)); do
      log=$out_dir/$h/w$i.log
      n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
      # A worker that died has no final stats: its last status line counts instead.
      [ -n "$n" ] || n=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
      execs=$((execs + ${n:-0}))
      line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -n 1)
      c=$(echo "$line" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
      f=$(echo "$line" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
      [ "${c:-0}" -gt "$cov" ] && cov=$c
      [ "${f:-0}" -gt "$ft" ] && ft=$f
    done
    crashes=$(find "$out_dir/$h" -maxdepth 1 -name 'w*-crash-*' | wc -l)
    leaks=$(find "$out_dir/$h" -maxdepth 1 -name 'w*-leak-*' | wc -l)
    timeouts=$(find "$out_dir/$h" -maxdepth 1 -name 'w*-timeout-*' | wc -l)
    ooms=$(find "$out_dir/$h" -maxdepth 1 -name 'w*-oom-*' | wc -l)
    crashes=$((crashes + leaks))
    # Each artifact is run once more: one that passes alone is marked (a fork-mode job stopped
    # at the end of the campaign can leave one; so can a finding that depends on earlier runs).
    artifacts=""
    for a in $(find "$out_dir/$h" -maxdepth 1 \( -name 'w*-crash-*' -o -name 'w*-leak-*' \
      -o -name 'w*-timeout-*' -o -name 'w*-oom-*' \) -printf '%f\n' | sort); do
      if timeout 60 "$bin_dir/$h" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        "$out_dir/$h/$a" >/dev/null 2>&1; then
        artifacts+="$a (passes alone) "
      else
        artifacts+="$a "
      fi
    done
    artifacts=${artifacts% }
    [ $((crashes + timeouts + ooms)) -gt 0 ] && found=1
    echo "| \`$h\` | $workers | $seconds | $execs | $cov / $ft | $crashes | $timeouts | $ooms |" \
      "${artifacts:-none} |"
  done
} >"$summary"
cat "$summary"
if [ "$found" -ne 0 ]; then
  echo "run_campaign: findings above; each worker's log (the report) is $out_dir/<harness>/w<i>.log" >&2
  exit 1
fi
exit 0
