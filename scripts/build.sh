#!/usr/bin/env bash
# Configure and build specdec into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch -DSPECDEC_CUDA=OFF
#   scripts/build.sh --sanitize   # ASan + UBSan build in build-asan/ (the CLI and the unit
#                                 # tests only), then runs the `unit` label there
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  shift
  # -O1 -g1: line numbers in the reports at a fraction of -O2 -g's compile time.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
        -DSPECDEC_SANITIZE=ON -DSPECDEC_CUDA=OFF -DSPECDEC_PYTHON=OFF "$@"
  cmake --build build-asan -j "${SPECDEC_JOBS:-$(nproc)}" --target unit_tests  # the CLI and the unit tests
  # Any report (overflow, use after free, leak, undefined behaviour) fails the test.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
  # Two at a time: most of the stage is test_bad_inputs starting the instrumented CLI ~160 times.
  exec ctest --test-dir build-asan --output-on-failure -L unit -j "${SPECDEC_JOBS:-$(nproc)}"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "${SPECDEC_JOBS:-$(nproc)}"
