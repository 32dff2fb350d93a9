#!/usr/bin/env bash
# Makes build/venv: a virtual environment of Debian's /usr/bin/python3 (the interpreter the
# Python module is built for) holding the pinned tools of requirements-dev.txt (JAX, ml_dtypes,
# hypothesis, pytest, scikit-build-core, pybind11). Reinstalls only when that file changes.
# Prints the environment's python on its last line.
# Usage: scripts/pyenv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv
stamp=$venv/.requirements.sha256
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "attnref: installing requirements-dev.txt into $venv" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt >&2
  echo "$want" >"$stamp"
fi
echo "$PWD/$venv/bin/python"
