#!/usr/bin/env bash
# The engines as judges of attnref's engine rules, with the full draw: installs the pinned
# engines (scripts/engines_env.sh), builds the Python module (release preset) and writes the
# engines section of docs/conformance.md: vLLM's backend checks (tests/engines/vllm_judge.py), then vLLM's
# and SGLang's Triton kernels run by Triton's interpreter (tests/engines/triton_judge.py,
# sglang_judge.py), then FlashAttention-4's own asserts (tests/engines/fa4_judge.py) and
# FlashInfer's Python checks (tests/engines/flashinfer_judge.py). CI runs bounded draws
# (test_engines_vllm, _triton, _sglang, _fa4, _flashinfer). Exits non-zero on any disagreement.
# Usage: scripts/judge_engines.sh [configurations, default 5000] [Triton cases, default 200]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
py=$(scripts/engines_env.sh | tail -n 1)
cmake --preset release >/dev/null
cmake --build --preset release --target attnref_python
export PYTHONPATH=$PWD/build/release/python PYTHONDONTWRITEBYTECODE=1
section=$(mktemp)
part=$(mktemp)
trap 'rm -f "$section" "$part"' EXIT
"$py" tests/engines/vllm_judge.py --examples "${1:-5000}" --markdown "$section"
for judge in triton sglang; do
  "$py" tests/engines/${judge}_judge.py --examples "${2:-200}" --markdown "$part"
  { echo; cat "$part"; } >>"$section"
done
for judge in fa4 flashinfer; do
  "$py" tests/engines/${judge}_judge.py --examples "${1:-5000}" --markdown "$part"
  { echo; cat "$part"; } >>"$section"
done
"$py" scripts/conformance_section.py engines "$section"
echo "attnref: wrote the engines section of docs/conformance.md"

