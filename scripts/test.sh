#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, fetches the small real model
# and runs the tests. CI (.ci/run) calls exactly this.
#   scripts/test.sh            # unit + integration + fuzz (bounded) tests; skips label "slow"
#   scripts/test.sh --slow     # also the Qwen2.5-Coder 0.5B -> 1.5B tests (needs ~2 GB download)
#   scripts/test.sh --gpu [cmake args]
#                              # on a machine with a GPU: the CUDA kernel tests and the device
#                              # tests on cuda, which then fail instead of skipping when CUDA is
#                              # unusable. Needs nvcc and a CUDA LibTorch, e.g.
#                              #   scripts/test.sh --gpu -DTorch_DIR=<libtorch>/share/cmake/Torch
set -euo pipefail
cd "$(dirname "$0")/.."

slow=0
[ "${1:-}" = "--slow" ] && slow=1
if [ "${1:-}" = "--gpu" ]; then
  shift
  bash scripts/setup.sh
  bash scripts/build.sh "$@"
  bash scripts/fetch_models.sh smollm2-135m
  export SPECDEC_REQUIRE_CUDA=1
  exec ctest --test-dir build --output-on-failure -R 'cuda|device'
fi

bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_models.sh smollm2-135m

# ---- portable kernel build (issue 14) -------------------------------------------------------
# A second build, build-portable/, with -DSPECDEC_PORTABLE=ON: no AVX-512 code and no
# <immintrin.h>, as on a CPU other than x86-64 (and no CUDA, which is not what it tests).
# Only the model tests are built and run there (the panel kernel's unit tests and dtype
# native == float32 on SmolLM2); the main build's *_portable ctest entries run the portable
# kernel too, through SPECDEC_KERNELS=portable.
# The tests are the group portable_tests of tests/CMakeLists.txt (label "portable").
cmake -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DSPECDEC_PORTABLE=ON -DSPECDEC_CUDA=OFF
cmake --build build-portable -j "${SPECDEC_JOBS:-$(nproc)}" --target portable_tests
ctest --test-dir build-portable --output-on-failure -L portable
# ---- end of the portable kernel build ---------------------------------------------------------

if [ $slow = 1 ]; then
  bash scripts/fetch_models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b
  exec ctest --test-dir build --output-on-failure
fi
ctest --test-dir build --output-on-failure -LE 'slow|fuzz'
# The fuzzers run for a fixed wall time each, one process apiece: two at a time.
exec ctest --test-dir build --output-on-failure -L fuzz -j "${SPECDEC_JOBS:-$(nproc)}"
