#!/usr/bin/env bash
# Builds and runs a tiny consumer project against attnref.
# Usage: run.sh find_package|add_subdirectory <attnref source dir> <attnref build dir> <work dir>
set -euo pipefail
mode=$1 src=$2 build=$3 work=$4/$1
rm -rf "$work" && mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
if [ "$mode" = find_package ]; then
  cmake --install "$build" --prefix "$work/prefix" >/dev/null
  test -f "$work/prefix/share/pkgconfig/attnref.pc"
  cmake -S "$here/find_package" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
else
  cmake -S "$here/add_subdirectory" -B "$work/build" -DATTNREF_SOURCE_DIR="$src" >/dev/null
fi
cmake --build "$work/build" -j2 >/dev/null
"$work/build/consumer"
