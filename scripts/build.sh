#!/usr/bin/env bash
# Configure and build specdec into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch -DSPECDEC_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "${SPECDEC_JOBS:-$(nproc)}"
