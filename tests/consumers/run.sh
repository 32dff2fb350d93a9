#!/usr/bin/env bash
# Builds and runs a tiny consumer project against attnref, with the parent build's generator and
# compiler (a fresh machine may have ninja but no make). Prints the log only on failure.
# Usage: run.sh find_package|add_subdirectory <attnref source dir> <attnref build dir> <work dir>
#               <cmake generator> <c++ compiler>
set -euo pipefail
mode=$1 src=$2 build=$3 work=$4/$1 generator=$5 cxx=$6
rm -rf "$work" && mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
log=$work/log
trap 'status=$?; [ $status -eq 0 ] || cat "$log"; exit $status' EXIT
common=(-G "$generator" -DCMAKE_CXX_COMPILER="$cxx")
if [ "$mode" = find_package ]; then
  cmake --install "$build" --prefix "$work/prefix" >>"$log" 2>&1
  test -f "$work/prefix/share/pkgconfig/attnref.pc"
  cmake -S "$here/find_package" -B "$work/build" "${common[@]}" \
        -DCMAKE_PREFIX_PATH="$work/prefix" >>"$log" 2>&1
else
  cmake -S "$here/add_subdirectory" -B "$work/build" "${common[@]}" \
        -DATTNREF_SOURCE_DIR="$src" >>"$log" 2>&1
fi
cmake --build "$work/build" -j2 >>"$log" 2>&1
"$work/build/consumer"
