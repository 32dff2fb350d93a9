#!/usr/bin/env bash
# The engines as judges of attnref's engine rules, with the full draw: installs the pinned
# engines (scripts/engines_env.sh), builds the Python module (release preset) and writes
# docs/conformance-engines.md (tests/engines/vllm_judge.py). CI runs a bounded draw
# (test_engines_vllm). Exits non-zero on any disagreement.
# Usage: scripts/judge_engines.sh [examples, default 5000]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
py=$(scripts/engines_env.sh | tail -n 1)
cmake --preset release >/dev/null
cmake --build --preset release --target attnref_python
PYTHONPATH=$PWD/build/release/python PYTHONDONTWRITEBYTECODE=1 "$py" tests/engines/vllm_judge.py \
  --examples "${1:-5000}" --markdown docs/conformance-engines.md
