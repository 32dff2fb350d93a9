#!/usr/bin/env bash
# Adds the engines that judge attnref's engine rules to build/venv (scripts/pyenv.sh makes it):
# torch of requirements-peers.txt and vLLM, FlashInfer and what importing their attention
# backends needs (requirements-engines.txt), all pinned, --no-deps (those files say why).
# Reinstalls only when either file changes. Prints the environment's python on its last line.
# Usage: scripts/engines_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(scripts/pyenv.sh | tail -n 1)
stamp=build/venv/.engines.sha256
want=$(cat requirements-peers.txt requirements-engines.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "attnref: installing requirements-peers.txt and requirements-engines.txt into build/venv" >&2
  "$py" -m pip install -q --disable-pip-version-check --no-deps -r requirements-peers.txt \
    -r requirements-engines.txt >&2
  echo "$want" >"$stamp"
fi
echo "$py"
