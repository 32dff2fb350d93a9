#!/usr/bin/env bash
# Makes sure the Debian/Ubuntu packages attnref's build needs are installed. As root it installs
# what is missing with apt-get; otherwise it prints the exact command and exits 1.
# Usage: scripts/deps.sh [--example] [extra packages...]
#   --example  only what the C++ examples need (scripts/example.sh); otherwise every package the
#              tests need too (scripts/test.sh)
set -euo pipefail
example=(cmake ninja-build g++ libeigen3-dev)
# clang-format-14: scripts/format.sh (the first CI step); pkg-config: the consume_pkg_config test.
# pybind11-dev, python3-dev: the Python module (release preset); python3-numpy, python3-pytest,
# python3-torch: its pytest suite (test_python); python3-venv: scripts/pyenv.sh and
# test_packaging make virtual environments.
tests=(libgtest-dev libbenchmark-dev libdlpack-dev clang libclang-rt-14-dev clang-format-14
       pkg-config pybind11-dev python3-dev python3-numpy python3-pytest python3-torch python3-venv)
if [ "${1:-}" = --example ]; then
  shift
  packages=("${example[@]}" "$@")
else
  packages=("${example[@]}" "${tests[@]}" "$@")
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "attnref: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "attnref: missing packages. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
