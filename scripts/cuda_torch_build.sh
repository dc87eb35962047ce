#!/usr/bin/env bash
# CI stage (.ci/run, after scripts/test.sh): compile and link the code that only a CUDA LibTorch
# compiles (the aten engine's CUDA paths, CUDA graphs, ...) against PyPI's torch 2.11.0 CUDA wheel,
# on a machine without a GPU. It only has to link, not run: the wheel's libtorch_cuda.so needs
# cuDNN, NCCL, cuSPARSELt, ... from separate nvidia-* wheels that are not installed, so the link
# ignores what those shared libraries leave undefined.
#   bash scripts/cuda_torch_build.sh     # a few minutes on 2 cores from scratch (wheel cached; docs/ci.md), seconds when built
# Knobs (environment): TORCH_CUDA_CACHE (default ~/.cache/specdec/torch-cuda), TORCH_CUDA_VERSION
# (2.11.0), BUILD_DIR (build-cuda-torch), CUDA_ROOT (/usr/local/cuda), SPECDEC_JOBS (nproc),
# TARGETS (overrides the list below), AUTO_TARGETS=0 (do not add the *cuda* / *graph* targets).
# Not part of scripts/test.sh (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."

# Targets that need a CUDA LibTorch: the CLI, the device tests (the ATen engine: test_model_aten,
# test_model_aten_smollm2, test_strategies_device_smollm2) and the kernels' tests (with
# test_kernels_cuda). Every executable target whose name contains "cuda" or "graph" is added to
# these at configure time (AUTO_TARGETS=1).
TARGETS_DEFAULT="specdec tests_device tests_kernels"
TARGETS=${TARGETS:-$TARGETS_DEFAULT}
AUTO_TARGETS=${AUTO_TARGETS:-1}

VER=${TORCH_CUDA_VERSION:-2.11.0}
CACHE=${TORCH_CUDA_CACHE:-$HOME/.cache/specdec/torch-cuda}
WHEEL=$CACHE/torch-$VER-cp312-cp312-manylinux_2_28_x86_64.whl
PREFIX=$CACHE/torch-$VER              # holds torch/{include,lib,share}
TORCH=$PREFIX/torch
BUILD=${BUILD_DIR:-build-cuda-torch}
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
JOBS=${SPECDEC_JOBS:-$(nproc)}
T0=$SECONDS
say() { echo "[cuda_torch_build $(( (SECONDS - T0) / 60 ))m$(( (SECONDS - T0) % 60 ))s] $*"; }

if [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  echo "cuda_torch_build: no nvcc at $CUDA_ROOT/bin/nvcc; set CUDA_ROOT" >&2; exit 1
fi

# ---- 1. the wheel (cached) --------------------------------------------------------------
mkdir -p "$CACHE"
if [ ! -f "$TORCH/share/cmake/Torch/TorchConfig.cmake" ]; then
  if [ ! -s "$WHEEL" ]; then
    say "downloading torch==$VER (cp312 manylinux_2_28_x86_64, ~530 MB) into $CACHE"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 -d "$CACHE" "torch==$VER"
  fi
  # ---- 2. only what a C++ build needs: torch/include, torch/lib, torch/share -------------
  say "unpacking torch/{include,lib,share} into $PREFIX"
  rm -rf "$PREFIX.tmp"; mkdir -p "$PREFIX.tmp"
  python3 - "$WHEEL" "$PREFIX.tmp" <<'EOF'
import os, sys, zipfile
wheel, dst = sys.argv[1], sys.argv[2]
keep = ("torch/include/", "torch/lib/", "torch/share/")
skip = ("torch/lib/libtorch_python.so",)   # Python bindings: not linked by C++ programs
with zipfile.ZipFile(wheel) as z:
    n = 0
    for i in z.infolist():
        if i.filename.startswith(keep) and not i.filename.startswith(skip):
            z.extract(i, dst)
            mode = (i.external_attr >> 16) & 0o777
            if mode:
                os.chmod(os.path.join(dst, i.filename), mode)
            n += 1
print(f"  {n} entries extracted")
EOF
  rm -rf "$PREFIX"; mv "$PREFIX.tmp" "$PREFIX"
fi
say "LibTorch: $TORCH ($(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$TORCH/version.py" 2>/dev/null || echo "$VER"))"

# ---- 3. configure -------------------------------------------------------------------------
# The wheel's libtorch_cuda.so NEEDs libcudnn, libnccl, libcusparseLt, libcufile, libnvshmem...
# Where they are absent, ld warns "not found" and would report their symbols as undefined:
# --allow-shlib-undefined accepts that (this build is never run). -rpath-link lets ld find the
# toolkit libraries that do exist (cudart, cublas, cufft, curand, cusparse, nvrtc, ...).
LINK="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$CUDA_ROOT/lib64 -Wl,-rpath-link,$TORCH/lib"
[ -d "$CUDA_ROOT/lib64/stubs" ] && LINK="$LINK -Wl,-rpath-link,$CUDA_ROOT/lib64/stubs"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
# The compiler cache, as scripts/build.sh uses it (SPECDEC_CCACHE=0: off).
if [ "${SPECDEC_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  GEN+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$PWD/scripts/ccache_launcher.sh" -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
  export CCACHE_SLOPPINESS=pch_defines,time_macros
  export CCACHE_DEPEND=${CCACHE_DEPEND:-true}  # for nvcc too: no preprocessor run on a miss (ccache_launcher.sh)
fi
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -qx "Torch_DIR:[A-Z]*=$TORCH/share/cmake/Torch" "$BUILD/CMakeCache.txt"; then
  say "$BUILD was configured against another LibTorch: starting it afresh"; rm -rf "$BUILD"
fi
say "configuring $BUILD (log: $BUILD/configure.log)"
export CMAKE_POLICY_VERSION_MINIMUM=3.5   # CMake 4 and old cmake_minimum_required()s
mkdir -p "$BUILD"
# -O0: this build is compiled and linked, never run, and at -O0 it compiles in about half the
# time (docs/ci.md). Its precompiled headers are made at -O0 as well, so they stay valid.
if ! cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
    -DSPECDEC_TEST_OPT=-O0 -DSPECDEC_TOOL_OPT=-O0 \
    -DTorch_DIR="$TORCH/share/cmake/Torch" \
    -DSPECDEC_CUDA=ON -DSPECDEC_PCH=ON -DSPECDEC_PYTHON=OFF \
    -DCMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_ROOT" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0 \
    -DCMAKE_EXE_LINKER_FLAGS="$LINK" -DCMAKE_SHARED_LINKER_FLAGS="$LINK" \
    > "$BUILD/configure.log" 2>&1; then
  grep -n -A8 'CMake Error' "$BUILD/configure.log" | head -60
  echo "cuda_torch_build: configure failed (full log: $BUILD/configure.log)" >&2; exit 1
fi
grep -E 'specdec:|PyTorch: CUDA detected|Found Torch' "$BUILD/configure.log" || true
grep -q '^SPECDEC_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" && grep -q 'CUDA kernels ON' "$BUILD/configure.log" ||
  { echo "cuda_torch_build: CUDA was not enabled (see $BUILD/configure.log)" >&2; exit 1; }

# ---- 4. build ---------------------------------------------------------------------------------
read -ra targets <<< "$TARGETS"
if [ "$AUTO_TARGETS" = 1 ]; then
  if [ -f "$BUILD/build.ninja" ]; then
    # Executables: "<dir>/name: CXX_EXECUTABLE_LINKER__name_Release" lines of ninja's list.
    mapfile -t extra < <(ninja -C "$BUILD" -t targets all 2>/dev/null |
      sed -n 's/^.*: [A-Z]*_EXECUTABLE_LINKER__\(.*\)_Release$/\1/p' | grep -E 'cuda|graph' | sort -u)
  else
    mapfile -t extra < <(make -C "$BUILD" help 2>/dev/null |
      sed -n 's/^\.\.\. \([A-Za-z0-9_]*\)$/\1/p' | grep -E 'cuda|graph' | grep -v '^specdec_' | sort -u)
  fi
  for t in "${extra[@]}"; do
    case " ${targets[*]} " in *" $t "*) ;; *) targets+=("$t") ;; esac
  done
fi
say "building (-j$JOBS): ${targets[*]}"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
for t in "${targets[@]}"; do
  f=$(find "$BUILD" -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
  if [ -z "$f" ]; then echo "cuda_torch_build: $t was not linked" >&2; exit 1; fi
  say "linked $f"
done
say "done: ${#targets[@]} targets compiled and linked against the CUDA LibTorch $VER"
