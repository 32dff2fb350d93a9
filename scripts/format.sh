#!/usr/bin/env bash
# Checks that every C++ file (include, tests, tools, bench, examples, python; not the fuzz
# corpus) is formatted as .clang-format says, with clang-format-14 (other versions format
# differently).
# Prints the files that are not, and exits 1. `--fix` rewrites them in place instead.
# Usage: scripts/format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "attnref format: $clang_format not found (scripts/deps.sh installs clang-format-14)" >&2
  exit 1
fi
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find include tests tools bench examples python -path tests/fuzz/corpus -prune -o -type f \
       \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.h' \) -print0 | sort -z)
if [ "${1:-}" = --fix ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
# One process for every file; each unformatted spot is reported as "<file>:<line>:<col>: error".
report=$("$clang_format" --dry-run -Werror "${files[@]}" 2>&1) || true
bad=()
while IFS= read -r f; do [ -n "$f" ] && bad+=("$f"); done < <(
  grep -E '^[^:]+:[0-9]+:[0-9]+: error' <<<"$report" | cut -d: -f1 | sort -u)
if [ ${#bad[@]} -eq 0 ] && grep -q . <<<"$report"; then
  echo "$report" >&2  # clang-format itself failed (a missing file, a bad .clang-format)
  exit 1
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "attnref format: ${#bad[@]} of ${#files[@]} C++ files are not clean under $clang_format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "Fix them with: scripts/format.sh --fix" >&2
  exit 1
fi
echo "attnref format: ${#files[@]} C++ files clean under $clang_format"
