#!/usr/bin/env bash
# attnref beside PyTorch's scaled_dot_product_attention and FlexAttention on the CPU
# (bench/peers.py): installs the pinned peers of requirements-peers.txt into build/venv,
# builds the Python module (release preset) and prints the table docs/benchmarks.md shows,
# ending with `peers: N cells, attnref ahead in M`. Nothing here runs in CI.
# Usage: scripts/bench_peers.sh [bench/peers.py flags, e.g. --rounds 9 --cases decode]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
py=$(scripts/pyenv.sh | tail -n 1)
stamp=build/venv/.peers.sha256
want=$(sha256sum requirements-peers.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "attnref: installing requirements-peers.txt into build/venv" >&2
  "$py" -m pip install -q --disable-pip-version-check --no-deps -r requirements-peers.txt >&2
  echo "$want" >"$stamp"
fi
cmake --preset release >/dev/null
cmake --build --preset release --target attnref_python
PYTHONPATH=$PWD/build/release/python "$py" bench/peers.py "$@"
