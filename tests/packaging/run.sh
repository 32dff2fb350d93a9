#!/usr/bin/env bash
# pip install of the source tree into a new virtual environment, then, from outside the source
# tree: the Python quick start (examples/quickstart.py), attnref-run and `python -m attnref`,
# the version everywhere equal to include/attnref/version.hpp's, and C++ builds against
# attnref.get_include() (the compiler alone) and attnref.get_cmake_dir() (find_package).
# The build tools come from requirements-dev.txt's pins (--no-build-isolation); the wheel's
# CMake build directory stays in <work dir> between runs, so a rerun rebuilds what changed.
# Usage: run.sh <python3> <attnref source dir> <work dir> <c++ compiler>
set -euo pipefail
python=$1 src=$2 work=$3 cxx=$4
venv=$work/venv out=$work/out
t0=$SECONDS
rm -rf "$venv" "$out" && mkdir -p "$work" "$out"
"$python" -m venv "$venv"
py=$venv/bin/python
pip=("$py" -m pip install -q --disable-pip-version-check)
grep -E '^(numpy|scikit-build-core|pybind11|packaging|pathspec)==' "$src/requirements-dev.txt" \
  >"$work/requirements.txt"
"${pip[@]}" -r "$work/requirements.txt"
t1=$SECONDS
# The wheel builds baseline and this CPU's level only (a user's pip install builds every
# level): the other levels' kernels are built and tested by the release preset, and building
# each level costs minutes of CI. This CPU's level, by attnref's own test (cpu_isa()):
printf '#include <attnref/core/isa.hpp>\n#include <cstdio>\nint main() { std::puts(attnref::isa_name(attnref::cpu_isa())); }\n' \
  >"$work/cpu_isa.cpp"
"$cxx" -std=c++17 -I"$src/include" "$work/cpu_isa.cpp" -o "$work/cpu_isa"
level=$("$work/cpu_isa")
levels=(--config-settings=cmake.define.ATTNREF_ISA_VARIANTS=OFF)
[ "$level" = baseline ] || levels=(--config-settings=cmake.define.ATTNREF_ISA_LEVELS="$level")
echo "== this CPU: $level; the wheel builds baseline and $level"
CXX=$cxx CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "${pip[@]}" --no-build-isolation \
  --config-settings=build-dir="$work/wheel-build" "${levels[@]}" "$src"
t2=$SECONDS
echo "== venv and build tools $((t1 - t0)) s, pip install . $((t2 - t1)) s"

cd "$out"  # nothing of the source tree on sys.path from here on
want=$(sed -n 's/^#define ATTNREF_VERSION_STRING "\(.*\)"$/\1/p' "$src/include/attnref/version.hpp")
expect() {  # expect <what> <wanted> <got>
  if [ "$2" != "$3" ]; then
    echo "$1: wanted '$2', got '$3'"
    exit 1
  fi
  echo "$1: $3"
}
cp "$src/examples/quickstart.py" .
echo "== python quickstart.py" && "$py" quickstart.py
"$py" -c 'import attnref, sys; assert attnref.__file__.startswith(sys.prefix), attnref.__file__'
expect "attnref.__version__, dist version" "$want $want" \
  "$("$py" -c 'import attnref, importlib.metadata as m; print(attnref.__version__, m.version("attnref"))')"
expect "attnref-run --version (PATH)" "attnref-run $want" \
  "$(PATH=$venv/bin:$PATH attnref-run --version | head -n 1)"
expect "python -m attnref --version" "attnref-run $want" "$("$py" -m attnref --version | head -n 1)"
# The wheel's programs and module run the kernels built for this CPU's level.
expect "attnref-run runs this CPU's level" "yes" \
  "$("$venv/bin/attnref-run" --version | sed -n 's/^kernels: \([a-z0-9]*\) (this CPU: \1)$/yes/p')"
expect "attnref.build_info(): this CPU's level" "True" \
  "$("$py" -c 'import attnref; b = attnref.build_info(); print(b["isa"] == b["cpu_isa"])')"
status=0
"$venv/bin/attnref-run" no-such-subcommand 2>"$out/usage" || status=$?
expect "attnref-run no-such-subcommand: exit status" 1 "$status"
grep -q "unknown subcommand 'no-such-subcommand'" "$out/usage"

include=$("$py" -c 'import attnref; print(attnref.get_include())')
cmake_dir=$("$py" -c 'import attnref; print(attnref.get_cmake_dir())')
for f in "$include/attnref/attnref.hpp" "$include/attnref/version.hpp" \
         "$cmake_dir/attnrefConfig.cmake" "$cmake_dir/attnrefConfigVersion.cmake"; do
  [ -f "$f" ] || { echo "not in the installed package: $f"; exit 1; }
done
"$cxx" -std=c++17 -I"$include" "$src/tests/packaging/consumer.cpp" -o "$out/consumer"
expect "c++ -I attnref.get_include(): consumer" "$want" "$("$out/consumer")"
cmake -S "$src/tests/packaging/consumer" -B "$out/cmake" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
      -Dattnref_DIR="$cmake_dir" >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
cmake --build "$out/cmake" >>"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
expect "find_package(attnref) with attnref_DIR=get_cmake_dir(): consumer" "$want" \
  "$("$out/cmake/consumer")"
echo "== test_packaging $((SECONDS - t0)) s"
