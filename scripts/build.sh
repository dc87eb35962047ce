#!/usr/bin/env bash
# Configure and build specdec into build/ (Release, Ninja). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch -DSPECDEC_CUDA=OFF
#   scripts/build.sh --sanitize   # ASan + UBSan build in build-asan/ with clang (the CLI, the unit
#                                 # tests and the fuzzers), then runs the `unit` label there, then
#                                 # the fuzzers (`fuzz`, a fixed time each)
#   SPECDEC_TARGETS="specdec" scripts/build.sh   # only these targets (the quickstart builds the CLI)
# With ccache installed (scripts/setup.sh) every compile goes through it, with paths taken
# relative to the checkout (CCACHE_BASEDIR), so that a clone at another path hits the same
# cache (C++ through scripts/ccache_launcher.sh, which also keeps clang's precompiled headers from
# tying the cache to the path). ccache runs in depend mode: on a miss it takes the headers from
# the compiler's -MD output rather than running the preprocessor first, which made an empty
# cache cost more than no cache (docs/ci.md, "fifth sitting"). SPECDEC_CCACHE=0 turns it off.
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
if [ "${SPECDEC_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  GEN+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$PWD/scripts/ccache_launcher.sh" -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
  export CCACHE_SLOPPINESS=pch_defines,time_macros
  export CCACHE_DEPEND=${CCACHE_DEPEND:-true}  # for nvcc too: no preprocessor run on a miss (ccache_launcher.sh)
else
  GEN+=(-UCMAKE_CXX_COMPILER_LAUNCHER -UCMAKE_CUDA_COMPILER_LAUNCHER)
fi
# configure DIR ARGS...: cmake -S . -B DIR, starting DIR afresh when another generator made it
configure() {
  local dir=$1; shift
  if [ -f "$dir/CMakeCache.txt" ] && [ ${#GEN[@]} -gt 0 ] && [ "${GEN[0]}" = -G ] &&
     ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    echo "build.sh: $dir was made by another generator: configuring it afresh"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  # likewise for another compiler than the one asked for (build-asan made by GCC before clang)
  local want; want=$(printf '%s\n' "$@" | sed -n 's/^-DCMAKE_CXX_COMPILER=//p')
  if [ -n "$want" ] && [ -f "$dir/CMakeCache.txt" ] &&
     ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*$want\$" "$dir/CMakeCache.txt"; then
    echo "build.sh: $dir was made with another compiler than $want: configuring it afresh"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  cmake -S . -B "$dir" "${GEN[@]}" "$@"
}
JOBS=${SPECDEC_JOBS:-$(nproc)}
# xgrammar's C++ core (structured output): fetched from PyPI's sdist and built once per machine
# into ~/.cache/specdec (docs/building.md, "xgrammar"); a one-line no-op when built.
SPECDEC_JOBS=$JOBS bash scripts/fetch_xgrammar.sh
if [ "${1:-}" = "--sanitize" ]; then
  shift
  # -O1 -g1: line numbers in the reports at a fraction of -O2 -g's compile time. Compiled with
  # clang (installed by setup.sh for the fuzzers) where present: with ASan + UBSan it compiles
  # this tree in about half of GCC's CPU time (docs/ci.md). The OpenMP runtime stays GCC's
  # libgomp, the one LibTorch and OpenBLAS use: clang generates no OpenMP regions for it, so the
  # OpenMP backend of core/parallel.h is left out of this build (a named error there); nothing
  # else of specdec opens an OpenMP region.
  CLANG=()
  if command -v clang++ >/dev/null; then
    CLANG=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
           -DOpenMP_CXX_FLAGS=-fopenmp=libgomp
           -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$(g++ -print-file-name=libgomp.so)"
           -DOpenMP_C_FLAGS=-fopenmp=libgomp -DOpenMP_C_LIB_NAMES=gomp)
  fi
  configure build-asan "${CLANG[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
        -DSPECDEC_SANITIZE=ON -DSPECDEC_CUDA=OFF -DSPECDEC_PYTHON=OFF "$@"
  cmake --build build-asan -j "$JOBS" --target unit_tests  # the CLI, the unit tests, the fuzzers
  # Any report (overflow, use after free, leak, undefined behaviour) fails the test.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
  # The fast tier's unit tests (the heavy ones run in the main build's shards), two at a time.
  ctest --test-dir build-asan --output-on-failure -L unit -LE 'heavy|slow' -j "$JOBS"
  # The fuzzers run for a fixed wall time each, one process apiece: two at a time.
  exec ctest --test-dir build-asan --output-on-failure -L fuzz -j "$JOBS"
fi
configure build -DCMAKE_BUILD_TYPE=Release "$@"
read -ra targets <<< "${SPECDEC_TARGETS:-all}"
cmake --build build -j "$JOBS" --target "${targets[@]}"
