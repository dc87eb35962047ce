#!/usr/bin/env bash
# Configure and build specdec into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch -DSPECDEC_CUDA=OFF
#   scripts/build.sh --sanitize   # ASan + UBSan build in build-asan/ (the CLI and the unit
#                                 # tests only), then runs the `unit` label there
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  shift
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=ON -DSPECDEC_CUDA=OFF "$@"
  targets=(specdec)
  for f in tests/unit/test_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
  cmake --build build-asan -j "${SPECDEC_JOBS:-$(nproc)}" --target "${targets[@]}"
  # LibTorch keeps process-lifetime allocations that LeakSanitizer would report at exit;
  # everything else (heap/stack overflows, use after free, UB) fails the test.
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
  exec ctest --test-dir build-asan --output-on-failure -L unit
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "${SPECDEC_JOBS:-$(nproc)}"
