#!/usr/bin/env bash
# Builds and runs a tiny consumer project against attnref, with the parent build's generator and
# compiler (a fresh machine may have ninja but no make). Prints the log only on failure.
#   add_subdirectory  vendored source tree: consumer + engine, strict flags, C++17 and C++20
#   find_package      install, then find_package(attnref): the same, with the *other* compiler
#                     when it is here (g++ parent: clang++), so CI sees both g++'s and clang's
#                     warnings in every public header
#   pkg_config        install, move the prefix elsewhere (the .pc must follow), build consumer.cpp
#                     with `pkg-config --cflags attnref`; run bin/attnref-run when it was built
# Usage: run.sh find_package|add_subdirectory|pkg_config <attnref source dir> <attnref build dir>
#               <work dir> <cmake generator> <c++ compiler> [attnref-run built: 0|1]
set -euo pipefail
mode=$1 src=$2 build=$3 work=$4/$1 generator=$5 cxx=$6 with_tool=${7:-0}
rm -rf "$work" && mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
log=$work/log
# shellcheck disable=SC2154  # status is assigned inside the trap
trap 'status=$?; [ $status -eq 0 ] || [ $status -eq 77 ] || cat "$log"; exit $status' EXIT
if [ "$mode" = find_package ]; then
  if "$cxx" --version 2>/dev/null | grep -qi clang; then other=g++; else other=clang++; fi
  if command -v "$other" >/dev/null; then cxx=$(command -v "$other"); fi
fi
common=(-G "$generator" -DCMAKE_CXX_COMPILER="$cxx")

run_consumers() {  # every consumer program the project built
  local exe
  for exe in "$work"/build/consumer*; do
    [ -x "$exe" ] || continue
    echo "== $(basename "$exe") ($("$cxx" --version | head -n 1))"
    "$exe"
  done
}

case "$mode" in
  find_package)
    cmake --install "$build" --prefix "$work/prefix" >>"$log" 2>&1
    cmake -S "$here/find_package" -B "$work/build" "${common[@]}" \
          -DCMAKE_PREFIX_PATH="$work/prefix" >>"$log" 2>&1
    cmake --build "$work/build" -j2 >>"$log" 2>&1
    run_consumers
    ;;
  add_subdirectory)
    cmake -S "$here/add_subdirectory" -B "$work/build" "${common[@]}" \
          -DATTNREF_SOURCE_DIR="$src" >>"$log" 2>&1
    cmake --build "$work/build" -j2 >>"$log" 2>&1
    run_consumers
    ;;
  pkg_config)
    if ! command -v pkg-config >/dev/null; then
      echo "pkg-config not found (scripts/deps.sh installs it): skipped"
      exit 77
    fi
    cmake --install "$build" --prefix "$work/staging" >>"$log" 2>&1
    mv "$work/staging" "$work/moved"  # a relocatable install works where it lands
    prefix=$work/moved
    pc=$(find "$prefix" -name attnref.pc -print -quit)
    [ -n "$pc" ] || { echo "no attnref.pc under $prefix"; exit 1; }
    echo "== $pc" && cat "$pc"
    if grep -q "$work/staging" "$pc"; then
      echo "attnref.pc names the install prefix; it must derive it from \${pcfiledir}"
      exit 1
    fi
    pc_dir=$(dirname "$pc")
    export PKG_CONFIG_PATH=$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    read -r -a cflags <<<"$(pkg-config --cflags attnref)"
    echo "== pkg-config --cflags attnref: ${cflags[*]}"
    test -f "$(pkg-config --variable=includedir attnref)/attnref/attnref.hpp"
    mkdir -p "$work/build"
    "$cxx" -std=c++17 "${cflags[@]}" "$here/consumer.cpp" -o "$work/build/consumer" -pthread \
           >>"$log" 2>&1
    run_consumers
    if [ "$with_tool" = 1 ]; then
      echo "== $prefix/bin/attnref-run --help, --version"
      "$prefix/bin/attnref-run" --help >"$work/help" 2>&1
      head -n 3 "$work/help"
      "$prefix/bin/attnref-run" --version
    elif [ -e "$prefix/bin/attnref-run" ]; then
      echo "attnref-run installed although it was not built"
      exit 1
    fi
    ;;
  *)
    echo "run.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
