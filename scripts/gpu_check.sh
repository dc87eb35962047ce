#!/usr/bin/env bash
# GPU check: one command for a lent GPU machine (one H100/H200, 16 cores, no network, root).
# Carry .gpu_pack (made here by scripts/gpu_pack.sh) with the working tree and run, from the
# repository root:
#   bash scripts/gpu_check.sh
# Within a wall budget (BUDGET_S, default 500 s; every step's timeout is cut to fit, and a summary
# is always printed and written, also after a failure or a timeout) it:
#   1. prints the machine: GPU, driver, nvcc, torch, cmake, gcc;
#   2. unpacks .gpu_pack/debs with dpkg-deb -x into a private prefix (DEPS_PREFIX; never /),
#      and builds xgrammar from .gpu_pack/xgrammar's sdist (scripts/fetch_xgrammar.sh, cached);
#   3. configures build-gpu/ with CMake + Ninja against the torch wheel's LibTorch (sm_90);
#   4. copies the shrunk model to models/ if models/ lacks it, builds (ninja -k 0, all cores)
#      tests_kernels (test_kernels_cuda), then specdec, tests_device (test_model_aten,
#      test_model_aten_smollm2, test_strategies_device_smollm2) and the two benchmarks;
#   5. runs the CUDA and device tests with SPECDEC_REQUIRE_CUDA=1 (gtest XML);
#   6. build-gpu/bench/bench_model_steps: decode and verify-curve step costs of the SmolLM2 and
#      Qwen2.5-1.5B shapes (random bf16 weights), static steps on and off, and
#      bench_strategies_loop: the speculative loop with synthetic acceptance, chains and static
#      trees, against the prediction from the step costs measured in the same process
#      (Leviathan's for chains, its positional form for trees), and greedy batches of 8 and 32 beside batch 1
#      (batch_greedy) -> $OUT/steps.json;
#   7. scripts/peer/hf_gpu_decode.py, the Hugging Face reference (eager and static cache +
#      torch.compile, same shapes) -> $OUT/hf.json;
#   8. `specdec generate` on cuda vs cpu: tokens of greedy, speculative (ngram, layer_skip, tree,
#      the cost controller over two drafters), bfloat16, and structured output (a JSON schema:
#      constrained greedy, n-gram + jump-forward, the draft model, the controller);
#   9. compute-sanitizer: memcheck + racecheck on test_kernels_cuda, memcheck on one
#      `specdec generate --device cuda` speculative tree sampling run;
#  10. the device tests' cpu half (CI runs it too: first to go when time runs short).
# The figures come first, so that a tight budget cuts the checks that CI or a rerun can make.
# $OUT receives at most 8 files: log.txt (everything), summary.txt, tests.xml (all gtest XMLs
# merged), generate.json, sanitizer.txt, steps.json, hf.json, buildlogs.tar.gz.
#
# Knobs (environment), mostly for trying the non-GPU parts on a machine without a GPU:
#   OUT (default /tmp/gpu_out)   BUDGET_S (500)   JOBS (nproc)   PACK (.gpu_pack)
#   BUILD_DIR (build-gpu)        DEPS_PREFIX (/tmp/specdec_gpu_deps)
#   STEPS       comma list of: deps,configure,build,tests,sanitize,generate,bench,hf
#               (default all; e.g. STEPS=hf runs only the HF reference, STEPS=tests,generate
#               reuses an existing BUILD_DIR)
#   STOP_AFTER  deps|configure|build|tests|sanitize|generate: stop (with the summary) after it
#   SKIP_CUDA=1 configure with -DSPECDEC_CUDA=OFF, do not require CUDA, run the "device" side of
#               every comparison on DEVICE (default cpu then)
#   TORCH_DIR   a Torch_DIR (<prefix>/share/cmake/Torch) instead of the python's torch wheel
#   DEVICE      the device of the device runs (default cuda)
#   SAN_NO_CACHING=1  memcheck the generate run with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#   BENCHES     comma list of: steps (bench_model_steps), loop (bench_strategies_loop); default both
#   HF_ARGS     extra arguments for hf_gpu_decode.py (e.g. "--skip-compile")
#   EXTRA_CMAKE_ARGS  more configure arguments (space-separated), e.g. for a CUDA build on a
#               machine without the nvidia-* wheels: -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE_PID=$!
T0=$SECONDS
BUDGET=${BUDGET_S:-500}
RESERVE=20                                   # seconds kept for the summary
PACK=${PACK:-$ROOT/.gpu_pack}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
DEPS=${DEPS_PREFIX:-/tmp/specdec_gpu_deps}
JOBS=${JOBS:-$(nproc)}
STEPS=",${STEPS:-deps,configure,build,tests,sanitize,generate,bench,hf},"
STOP_AFTER=${STOP_AFTER:-}
SKIP_CUDA=${SKIP_CUDA:-0}
if [ "$SKIP_CUDA" = 1 ]; then DEVICE=${DEVICE:-cpu}; else DEVICE=${DEVICE:-cuda}; fi
LOGS=$(mktemp -d /tmp/specdec_gpu_logs.XXXXXX)
mkdir -p "$LOGS/xml"
MODEL=models/smollm2-135m-instruct.gguf
TARGETS_FIRST=(tests_kernels)
TARGETS_REST=(specdec tests_device bench_model_steps bench_strategies_loop)

declare -A RESULT NOTE
ORDER=()
want() { [[ $STEPS == *",$1,"* ]]; }
ts() { echo "t=$((SECONDS - T0))s"; }
hdr() { echo; echo "=============== [$(ts)] $*"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
record() { # record NAME RESULT [NOTE]
  [ -z "${RESULT[$1]+x}" ] && ORDER+=("$1")
  RESULT[$1]=$2; NOTE[$1]=${3:-}
  echo ">>> [$(ts)] $1: $2 ${3:-}"
}
# run NAME CAP cmd...: cmd under a timeout of CAP seconds, cut to the budget; output to the log
# and to $RUNLOG (default $LOGS/<name>.txt); records PASS / FAIL / TIMEOUT / SKIPPED.
run() {
  local name=$1 cap=$2; shift 2
  local t=$(( $(left) - RESERVE ))
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 5 ]; then record "$name" SKIPPED "(out of time: $(left)s of ${BUDGET}s left)"; return 125; fi
  local lf=${RUNLOG:-$LOGS/${name//[^A-Za-z0-9_.-]/_}.txt}
  hdr "$name (timeout ${t}s)"
  echo "+ $*"
  local s=$SECONDS
  timeout -k 5 "$t" "$@" 2>&1 | tee "$lf"
  local rc=${PIPESTATUS[0]} d=$((SECONDS - s))
  if [ "$rc" -eq 0 ]; then record "$name" PASS "(${d}s)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then record "$name" TIMEOUT "(after ${d}s, limit ${t}s)"
  else record "$name" FAIL "(rc $rc, ${d}s)"; fi
  if [ "$rc" -ne 0 ]; then   # the first lines that say why, for the summary
    grep -m 5 -E 'Failure|FAILED|error:|Error|what\(\)|not found|Segmentation|Aborted|illegal|CUDA error|ERROR SUMMARY: [1-9]|Expected|Which is|error while loading' "$lf" 2>/dev/null |
      cut -c1-220 | sed "s/^/  [$name] /" >> "$LOGS/why.txt"
  fi
  return "$rc"
}
gtest_note() { # gtest_note XML STEP: "[n tests, f failed, s skipped]" into the step's note
  [ -f "$1" ] || return 0
  local n f s
  n=$(grep -c '<testcase' "$1"); f=$(grep -c '<failure' "$1"); s=$(grep -c 'result="skipped"' "$1")
  NOTE[$2]+=" [$n tests, $f failures, $s skipped]"
}
merge_xml() { # all gtest XMLs so far -> $OUT/tests.xml (one <testsuites>, every suite named by binary)
  "$PYBIN" - "$LOGS/xml" "$OUT/tests.xml" <<'EOF' || true
import glob, os, sys
import xml.etree.ElementTree as ET
root = ET.Element("testsuites", name="specdec gpu_check")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.xml"))):
    label = os.path.basename(f)[:-4]
    try:
        r = ET.parse(f).getroot()
    except Exception as e:
        ET.SubElement(root, "testsuite", name=label, error="unreadable XML: %s" % e); continue
    for s in (r.findall("testsuite") if r.tag == "testsuites" else [r]):
        s.set("binary", label); root.append(s)
for k in ("tests", "failures", "errors", "disabled"):
    root.set(k, str(sum(int(s.get(k, 0) or 0) for s in root)))
ET.ElementTree(root).write(sys.argv[2], encoding="utf-8", xml_declaration=True)
EOF
}
# entry ENTRY: the command of ctest entry ENTRY (one word a line): a test file's executable and
# its --gtest_filter (tests/CMakeLists.txt: one executable per module, one entry per file)
entry() {
  ctest --test-dir "$BUILD" --show-only=json-v1 2>/dev/null | "$PYBIN" -c '
import json, sys
for t in json.load(sys.stdin).get("tests", []):
    if t["name"] == sys.argv[1]: print("\n".join(t["command"]))' "$1"
}
# gtest_entry ENTRY LABEL CAP [args]: gtest (below) on a ctest entry; a --gtest_filter in args
# replaces the entry's own (give one naming the file's suites)
gtest_entry() {
  local name=$1; shift
  local cmd; mapfile -t cmd < <(entry "$name")
  if [ ${#cmd[@]} -eq 0 ]; then record "$1" "NOT BUILT" "(no ctest entry $name)"; return 0; fi
  gtest "${cmd[@]}" "$@"
}
# gtest BIN [--gtest_filter=F] LABEL CAP [args]: a gtest binary, its XML kept as $LOGS/xml/LABEL.xml
gtest() {
  local filter=()
  if [[ ${2:-} == --gtest_filter=* ]]; then filter=("$2"); set -- "$1" "${@:3}"; fi
  local bin=$1 label=$2 cap=$3; shift 3
  if [ ! -x "$bin" ]; then record "$label" "NOT BUILT" ""; return 0; fi
  run "$label" "$cap" "$bin" "${filter[@]}" --gtest_output="xml:$LOGS/xml/$label.xml" "$@"
  gtest_note "$LOGS/xml/$label.xml" "$label"
  merge_xml
}

summary() {
  local rc=$?
  set +x
  trap - EXIT INT TERM
  {
    hdr "build logs -> buildlogs.tar.gz"
    cp -f "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" "$LOGS/" 2>/dev/null
    cp -f "$BUILD/.ninja_log" "$LOGS/ninja_log.txt" 2>/dev/null
    tar -czf "$OUT/buildlogs.tar.gz" -C "$LOGS" --exclude=xml . 2>/dev/null
    touch "$OUT/summary.txt"
    local files; files=$(cd "$OUT" && ls -A)
    {
      echo "################ gpu_check SUMMARY ($(ts) of ${BUDGET}s budget; exit status $rc) ################"
      echo "machine: ${GPU_INFO:-?} | driver ${DRIVER:-?} | nvcc ${NVCC_VER:-?} | torch ${TORCH_VER:-?} | cmake ${CMAKE_VER:-?} | gcc ${GCC_VER:-?}"
      echo "device runs on: $DEVICE | build: $BUILD | model: $MODEL ($(stat -c %s "$MODEL" 2>/dev/null || echo '?') bytes)"
      local n
      for n in "${ORDER[@]}"; do printf '%-36s %-9s %s\n' "$n" "${RESULT[$n]}" "${NOTE[$n]}"; done
      if [ -s "$LOGS/why.txt" ]; then echo "--- first lines of each failure:"; head -c 5000 "$LOGS/why.txt"; fi
      if [ -s "$LOGS/compare.txt" ]; then echo "--- generate: tokens compared"; cat "$LOGS/compare.txt"; fi
      echo "--- files in \$OUT ($(echo "$files" | grep -c .)): $(echo $files)"
      [ "$(echo "$files" | grep -c .)" -le 8 ] || echo "WARNING: more than 8 files in \$OUT: some will not come back"
      echo "#########################################################################################"
    } > "$OUT/summary.txt"
    echo; cat "$OUT/summary.txt"
  }
  exec 1>&- 2>&-
  wait "$TEE_PID" 2>/dev/null || sleep 1
  rm -rf "$LOGS"
  exit "$rc"
}
trap summary EXIT
trap 'echo "gpu_check: interrupted"; exit 130' INT TERM
stop_after() { [ "$STOP_AFTER" = "$1" ] && { echo "STOP_AFTER=$1"; exit 0; }; }

# ================================================================= 1. machine
hdr "machine"
uname -srm; echo "cores: $(nproc)"; free -g | sed -n 2p
timeout 20 nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
GPU_INFO=$(timeout 20 nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
PY=""; TORCH=""
for p in /opt/torch/.venv/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [ -n "$p" ] && [ -x "$p" ] || continue
  # one import of torch (seconds): the information, and the package's folder on the last line
  timeout 120 "$p" - > "$LOGS/pyinfo.txt" 2>&1 <<'EOF'
import os, torch
print("torch", torch.__version__, "| built for cuda", torch.version.cuda, "| cuda available", torch.cuda.is_available(),
      "| cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)
if torch.cuda.is_available():
    print("device 0:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
try:
    import transformers; print("transformers", transformers.__version__)
except Exception as e:
    print("transformers: not importable:", e)
print("TORCH_PACKAGE=" + os.path.dirname(torch.__file__))
EOF
  if grep -q '^TORCH_PACKAGE=' "$LOGS/pyinfo.txt"; then
    PY=$p; grep -v '^TORCH_PACKAGE=' "$LOGS/pyinfo.txt"
    TORCH=$(sed -n 's/^TORCH_PACKAGE=//p' "$LOGS/pyinfo.txt"); break
  fi
done
PYBIN=${PY:-$(command -v python3)}
[ -n "$PY" ] && PATH="$(dirname "$PY"):$PATH" && export PATH   # pip's cmake and ninja live beside it
echo "python with torch: ${PY:-none}"
[ -z "$PY" ] && tail -3 "$LOGS/pyinfo.txt" 2>/dev/null
[ -n "${TORCH_DIR:-}" ] && TORCH=$(cd "$TORCH_DIR/../../.." 2>/dev/null && pwd)
TORCH_VER=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$TORCH/version.py" 2>/dev/null)
[ -z "$TORCH_VER" ] && [ -n "${TORCH_DIR:-}" ] && TORCH_VER="(Torch_DIR $TORCH_DIR)"
echo "LibTorch: ${TORCH:-none} ${TORCH_VER:-}"
NVCC=$(command -v nvcc 2>/dev/null)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-1*/bin/nvcc; do [ -z "$NVCC" ] && [ -x "$c" ] && NVCC=$c; done
if [ -n "$NVCC" ]; then
  NVCC=$(readlink -f "$NVCC"); CUDA_ROOT=$(dirname "$(dirname "$NVCC")")
  export PATH="$CUDA_ROOT/bin:$PATH" CUDACXX=$NVCC
  NVCC_VER=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); echo "nvcc $NVCC_VER ($NVCC)"
else
  CUDA_ROOT=""; echo "nvcc: none"
fi
CMAKE_VER=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}'); echo "cmake ${CMAKE_VER:-none}, ninja $(ninja --version 2>/dev/null || echo none)"
GCC_VER=$(gcc -dumpfullversion 2>/dev/null); echo "gcc ${GCC_VER:-none}"
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || { [ -x "$CUDA_ROOT/bin/compute-sanitizer" ] && echo "$CUDA_ROOT/bin/compute-sanitizer"; })
echo "compute-sanitizer: ${SANITIZER:-none}"
echo "source: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null | cut -c1-100) ($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files)"
cat "$PACK/MANIFEST.txt" 2>/dev/null | head -2
record "machine" INFO "(${GPU_INFO:-no GPU})"

# ================================================================= 2. dependencies
DL=$DEPS/usr/lib/x86_64-linux-gnu
if want deps || want configure; then
  hdr "dependencies: dpkg-deb -x $PACK/debs/*.deb -> $DEPS"
  ok=1
  case $DEPS in /|/usr|/usr/*) echo "refusing DEPS_PREFIX=$DEPS"; exit 1 ;; esac
  rm -rf "$DEPS"; mkdir -p "$DEPS/bin"
  n=0
  for deb in "$PACK"/debs/*.deb; do
    [ -f "$deb" ] || { echo "no .debs in $PACK/debs: run scripts/gpu_pack.sh here and carry .gpu_pack"; ok=0; break; }
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$deb" "$DEPS" || ok=0
    else t=$(mktemp -d); (cd "$t" && ar x "$deb" && tar -xf data.tar.* -C "$DEPS") || ok=0; rm -rf "$t"; fi
    n=$((n + 1))
  done
  cat > "$DEPS/bin/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$DL\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $DEPS/usr/bin/pkgconf "\$@"
EOF
  chmod +x "$DEPS/bin/pkg-config"
  # pkg-config is asked for libpcre2-8 only: only the bundled .pc files, paths under $DEPS
  export PKG_CONFIG_LIBDIR="$DL/pkgconfig:$DEPS/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR=$DEPS
  echo "pkg-config libpcre2-8: $("$DEPS/bin/pkg-config" --cflags --libs libpcre2-8 2>&1)"
  "$DEPS/bin/pkg-config" --exists libpcre2-8 || ok=0
  for f in "$DL"/cmake/yaml-cpp/yaml-cpp-config.cmake "$DL"/cmake/GTest/GTestConfig.cmake \
           "$DL"/cmake/benchmark/benchmarkConfig.cmake "$DL"/cmake/Boost-1.74.0/BoostConfig.cmake \
           "$DEPS"/usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake "$DL"/libpcre2-8.so; do
    [ -e "$f" ] || { echo "missing after extraction: $f"; ok=0; }
  done
  # xgrammar (structured output) from the pack's sdist, built into the usual cache: offline
  XG_CACHE=$(dirname "$(bash "$ROOT/scripts/fetch_xgrammar.sh" --print-prefix)")
  mkdir -p "$XG_CACHE/xgrammar-sdist"
  cp -u "$PACK"/xgrammar/xgrammar-*.tar.gz "$XG_CACHE/xgrammar-sdist/" 2>/dev/null ||
    echo "no xgrammar sdist in $PACK/xgrammar: run scripts/gpu_pack.sh here"
  SPECDEC_JOBS=${JOBS:-$(nproc)} bash "$ROOT/scripts/fetch_xgrammar.sh" || { echo "xgrammar did not build"; ok=0; }
  echo "$n debs, $(du -sh "$DEPS" | cut -f1)"
  [ $ok = 1 ] && record "deps (dpkg-deb -x)" PASS "($n debs)" || record "deps (dpkg-deb -x)" FAIL
  stop_after deps
fi

# ================================================================= 3. configure
if want configure; then
  if [ -z "$TORCH" ] || [ ! -f "$TORCH/share/cmake/Torch/TorchConfig.cmake" ] && [ -z "${TORCH_DIR:-}" ]; then
    record "configure" FAIL "(no LibTorch: no python with torch, no TORCH_DIR)"; exit 1
  fi
  export CMAKE_POLICY_VERSION_MINIMUM=3.5     # CMake 4: old cmake_minimum_required() in configs
  ARGS=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
    -DTorch_DIR="${TORCH_DIR:-$TORCH/share/cmake/Torch}"
    -DCMAKE_PREFIX_PATH="$DEPS/usr"
    -Dyaml-cpp_DIR="$DL/cmake/yaml-cpp" -DGTest_DIR="$DL/cmake/GTest" -Dbenchmark_DIR="$DL/cmake/benchmark"
    -DBoost_DIR="$DL/cmake/Boost-1.74.0" -Dnlohmann_json_DIR="$DEPS/usr/share/cmake/nlohmann_json"
    -DPKG_CONFIG_EXECUTABLE="$DEPS/bin/pkg-config" -DCMAKE_POLICY_VERSION_MINIMUM=3.5
    -DSPECDEC_PYTHON=OFF)  # the Python package is not what this checks (and .gpu_pack has no pybind11)
  command -v ninja >/dev/null && ARGS+=(-G Ninja)
  # shellcheck disable=SC2206
  ARGS+=(${EXTRA_CMAKE_ARGS:-})
  if [ "$SKIP_CUDA" = 1 ]; then ARGS+=(-DSPECDEC_CUDA=OFF)
  else ARGS+=(-DSPECDEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0
              -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDAToolkit_ROOT="$CUDA_ROOT"); fi
  # a build dir configured with another generator or LibTorch is started afresh
  if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -qx "Torch_DIR:[A-Z]*=${TORCH_DIR:-$TORCH/share/cmake/Torch}" "$BUILD/CMakeCache.txt"; then
    rm -rf "$BUILD"; fi
  configured=0
  RUNLOG=$LOGS/configure1.txt run "configure" 150 cmake "${ARGS[@]}" && configured=1
  if [ $configured = 0 ] && [ "$SKIP_CUDA" != 1 ] && [ "$(left)" -gt 200 ]; then
    # second try: a fresh tree, cuDNN off, nvcc told to accept this host compiler
    grep -n -A6 'CMake Error' "$LOGS/configure1.txt" | head -40
    rm -rf "$BUILD"
    export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }-allow-unsupported-compiler"
    RUNLOG=$LOGS/configure2.txt run "configure (2nd try)" 120 cmake "${ARGS[@]}" -DCAFFE2_USE_CUDNN=OFF -DUSE_CUDNN=OFF \
      -DCUDA_NVCC_EXECUTABLE="$NVCC" -DCUDA_INCLUDE_DIRS="$CUDA_ROOT/include" && configured=1
  fi
  grep -hE 'specdec:|PyTorch: CUDA detected|Found Torch' "$LOGS"/configure*.txt 2>/dev/null | sort -u
  grep -E '^(yaml-cpp_DIR|GTest_DIR|benchmark_DIR|Boost_DIR|nlohmann_json_DIR|pkgcfg_lib_PCRE2_pcre2-8|CMAKE_CUDA_COMPILER|TORCH_LIBRARY):' "$BUILD/CMakeCache.txt" 2>/dev/null
  if [ $configured = 1 ] && [ "$SKIP_CUDA" != 1 ] && ! grep -q 'CUDA kernels ON' "$LOGS"/configure*.txt; then
    record "configure" FAIL "(configured, but the CUDA kernels are OFF)"; configured=0
  fi
  [ $configured = 1 ] || exit 1
  stop_after configure
fi

# ================================================================= 4. model + build
if [ ! -s "$MODEL" ]; then
  if [ -s "$PACK/smollm2-135m-instruct.gguf" ]; then
    mkdir -p models && cp "$PACK/smollm2-135m-instruct.gguf" "$MODEL" &&
      echo "model: copied the pack's shrunk SmolLM2 to $MODEL"
  else echo "WARNING: no $MODEL and none in $PACK"; fi
else echo "model: $MODEL is there ($(stat -c %s "$MODEL") bytes)"; fi

build() { # build NAME CAP targets...: those of the targets that exist, ninja -k 0
  local name=$1 cap=$2; shift 2
  local have t list=()
  have=$(ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\([^:]*\): .*/\1/p' | sed 's|.*/||' | sort -u)
  for t in "$@"; do
    if echo "$have" | grep -qx "$t"; then list+=("$t"); else echo "no target $t (not in this source tree yet): skipped"; fi
  done
  [ ${#list[@]} -gt 0 ] || return 0
  RUNLOG=$LOGS/${name// /_}.txt run "$name" "$cap" ninja -C "$BUILD" -k 0 -j "$JOBS" "${list[@]}"
  local rc=$?
  [ $rc -ne 0 ] && { echo "---- $name: first errors"; grep -n -E 'error|FAILED|undefined reference' "$LOGS/${name// /_}.txt" | head -40; }
  return $rc
}
T=$BUILD/tests
if want build; then
  [ "$SKIP_CUDA" = 1 ] || build "build tests_kernels" 150 "${TARGETS_FIRST[@]}"
fi
[ "$SKIP_CUDA" = 1 ] || export SPECDEC_REQUIRE_CUDA=1
if want tests && [ "$SKIP_CUDA" != 1 ]; then
  gtest_entry test_kernels_cuda kernels_cuda 90
fi
if want build; then
  build "build the rest" 330 "${TARGETS_REST[@]}"
  for x in "$BUILD/specdec" "$T/tests_kernels" "$T/tests_device" "$BUILD/bench/bench_model_steps"; do
    [ -x "$x" ] && echo "built: $x" || echo "not built: $x"
  done
  [ -x "$BUILD/specdec" ] && ldd "$BUILD/specdec" | grep -E 'not found|torch_cuda|cudart|cublas|yaml|boost|pcre2' | head -12
  stop_after build
fi

# ================================================================= 5. tests
if want tests; then
  gtest_entry test_model_aten model_aten 120
  gtest_entry test_model_aten_smollm2 model_aten_smollm2 150
  if [ "$SKIP_CUDA" = 1 ]; then gtest_entry test_strategies_device_smollm2 device 200
  else gtest "$T/tests_device" --gtest_filter='*/OnDevice.*/cuda*' device_cuda 200; fi
  stop_after tests
fi

# ================================================================= 6. benchmark: bench_model_steps
if want bench; then
  if [[ ",${BENCHES:-steps,loop}," != *,steps,* ]]; then record "bench_model_steps" SKIPPED "(BENCHES=$BENCHES)"
  elif [ -x "$BUILD/bench/bench_model_steps" ]; then
    # SmolLM2 and Qwen2.5-1.5B shapes, bf16, static steps (graphs) on and off; Google Benchmark JSON.
    run "bench_model_steps" 240 "$BUILD/bench/bench_model_steps" --device="$DEVICE" --shapes="${BENCH_SHAPES:-smollm2,qwen2.5-1.5b}" \
        --dtype=bfloat16 --benchmark_out="$OUT/steps.json" --benchmark_out_format=json
  else record "bench_model_steps" "NOT BUILT" "(no $BUILD/bench/bench_model_steps)"; fi
  if [[ ",${BENCHES:-steps,loop}," != *,loop,* ]]; then record "bench_strategies_loop" SKIPPED "(BENCHES=$BENCHES)"
  elif [ -x "$BUILD/bench/bench_strategies_loop" ]; then
    # The speculative loop with synthetic acceptance against Leviathan's prediction from the step
    # costs measured in the same process, and batch 8 / 32 greedy tokens/s against batch 1; its
    # rows join steps.json (8 files come back at most).
    run "bench_strategies_loop" 180 "$BUILD/bench/bench_strategies_loop" --device="$DEVICE" \
        --shapes="${BENCH_SHAPES:-smollm2,qwen2.5-1.5b}" --dtype=bfloat16 \
        --benchmark_out="$LOGS/loop.json" --benchmark_out_format=json
    "$PYBIN" - "$OUT/steps.json" "$LOGS/loop.json" <<'EOF'
import json, os, sys
steps, loop = sys.argv[1:3]
if os.path.exists(loop):
    d = json.load(open(steps)) if os.path.exists(steps) else {"benchmarks": []}
    d["benchmarks"] += json.load(open(loop)).get("benchmarks", [])
    json.dump(d, open(steps, "w"), indent=1)
EOF
  else record "bench_strategies_loop" "NOT BUILT" "(no $BUILD/bench/bench_strategies_loop)"; fi
fi

# ================================================================= 7. Hugging Face reference
if want hf; then
  if [ -z "$PY" ]; then record "hf_gpu_decode.py" SKIPPED "(no python with torch)"
  else
    hf_t=$(( $(left) - RESERVE )); [ "$hf_t" -gt 200 ] && hf_t=200; [ "$hf_t" -lt 20 ] && hf_t=20
    # shellcheck disable=SC2086
    run "hf_gpu_decode.py" 200 "$PY" scripts/peer/hf_gpu_decode.py --out "$OUT/hf.json" --budget-s $((hf_t - 10)) ${HF_ARGS:-}
  fi
fi

# ================================================================= 8. generate: device vs cpu
G=$LOGS/generate.jsonl
: > "$G"
PROMPT=$'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
SPEC=(--strategy speculative --set temperature=0)
SCHEMA=$LOGS/schema.json   # structured output (issue 57): a small object
printf '%s\n' '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "count": {"type": "integer"}}, "required": ["name", "count"]}' > "$SCHEMA"
CPU_THREADS=${CPU_THREADS:-8}
[ "$CPU_THREADS" -gt "$(nproc)" ] && CPU_THREADS=$(nproc)
gen() { # gen LABEL args...: one `specdec generate --json --stats`; its JSON line kept in $G
  local label=$1; shift
  local o=$LOGS/gen_$label.txt rc line
  RUNLOG=$o run "generate $label" 60 "$BUILD/specdec" generate --model "$MODEL" --prompt "$PROMPT" \
    --max-new-tokens 48 --json --stats "$@"
  rc=$?
  line=$(grep '^{.*"stats":' "$o" | tail -1)  # the --json line (its keys in any order)
  printf '{"label": "%s", "rc": %s, "args": "%s", "out": %s}\n' "$label" "$rc" "${*//\"/}" "${line:-null}" >> "$G"
}
# CASES: label|arguments (the device side adds --device D, the cpu side --device cpu --engine aten)
CASES=("greedy|"
       "spec_ngram|${SPEC[*]} --set drafter=ngram"
       "spec_layerskip|${SPEC[*]} --set drafter=layer_skip --set skip_layers=10"
       "spec_tree|${SPEC[*]} --set drafter=tree --draft $MODEL"
       "greedy_bf16|--dtype bfloat16"
       "greedy_bf16_nographs|--dtype bfloat16 --graphs off"
       "spec_model_bf16|${SPEC[*]} --set drafter=model --draft $MODEL --dtype bfloat16"
       "spec_tree_bf16|${SPEC[*]} --set drafter=tree --draft $MODEL --dtype bfloat16"
       "spec_cost|${SPEC[*]} --set drafters=ngram,model --set adaptive_gamma=cost --draft $MODEL"
       "greedy_json|--json-schema $SCHEMA"
       "spec_ngram_json|${SPEC[*]} --set drafter=ngram --set jump_forward=true --json-schema $SCHEMA"
       "spec_model_json|${SPEC[*]} --set drafter=model --draft $MODEL --json-schema $SCHEMA"
       "spec_cost_json|${SPEC[*]} --set drafters=ngram,model --set adaptive_gamma=cost --set jump_forward=true --draft $MODEL --json-schema $SCHEMA")
if want generate && [ -x "$BUILD/specdec" ]; then
  for c in "${CASES[@]}"; do   # device runs first: a tight deadline cuts the CPU ones
    # shellcheck disable=SC2086
    gen "dev_${c%%|*}" --device "$DEVICE" ${c#*|}
  done
  for c in "${CASES[@]}"; do
    # shellcheck disable=SC2086
    gen "cpu_${c%%|*}" --device cpu --engine aten --threads "$CPU_THREADS" ${c#*|}
  done
  gen cpu_greedy_packed --device cpu --threads "$CPU_THREADS"
  hdr "generate: tokens compared"
  "$PYBIN" - "$G" "$OUT/generate.json" "$DEVICE" > "$LOGS/compare.txt" <<'EOF'
import json, sys
src, dst, device = sys.argv[1:4]
dev = "dev"
rows = {}
for line in open(src):
    try:
        r = json.loads(line); rows[r["label"]] = r
    except Exception as e:
        print("  unreadable row:", e, line[:160])
def toks(l):
    return ((rows.get(l) or {}).get("out") or {}).get("tokens")
def cmp(a, b):
    if a is None or b is None: return "n/a"
    if a == b: return "SAME"
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return "DIFF@%d" % i
cases = list(dict.fromkeys(l.split("_", 1)[1] for l in rows))
bad, table = [], []
print("  dev = --device %s; cpu = --device cpu --engine aten" % device)
print("  %-22s %-10s %-14s %-14s %s" % ("case", "dev==cpu", "dev==greedy", "cpu==greedy", "dev stats"))
for c in cases:
    if c == "greedy_packed": continue
    bf16 = "bf16" in c  # greedy_bf16, greedy_bf16_nographs, spec_*_bf16
    ref = "greedy_bf16" if bf16 else "greedy_json" if c.endswith("_json") else "greedy"
    d, p = toks(dev + "_" + c), toks("cpu_" + c)
    r = {"case": c, "dev_vs_cpu": cmp(d, p), "dev_vs_dev_greedy": cmp(d, toks(dev + "_" + ref)),
         "cpu_vs_cpu_greedy": cmp(p, toks("cpu_" + ref))}
    st = ((rows.get(dev + "_" + c) or {}).get("out") or {}).get("stats") or {}
    r["dev_stats"] = {k: st[k] for k in ("n_generated", "alpha", "tau", "n_accepted", "n_drafted", "n_forced", "n_jump",
                                        "ms_per_token", "tokens_per_s") if k in st}
    grammar_ms = ((st.get("phases") or {}).get("ms") or {}).get("grammar")
    if grammar_ms: r["dev_stats"]["ms_grammar"] = grammar_ms
    table.append(r)
    # fp32 device == cpu, and greedy speculative == greedy on each device, are required; bf16 is
    # reported (other accumulation orders may legitimately flip a near-tie)
    for k in ("dev_vs_cpu", "dev_vs_dev_greedy", "cpu_vs_cpu_greedy"):
        if r[k].startswith("DIFF") and not (k == "dev_vs_cpu" and bf16):
            bad.append("%s %s %s" % (c, k, r[k]))
    print("  %-22s %-10s %-14s %-14s %s" % (c, r["dev_vs_cpu"], r["dev_vs_dev_greedy"], r["cpu_vs_cpu_greedy"],
          " ".join("%s=%s" % (k, round(v, 3) if isinstance(v, float) else v) for k, v in r["dev_stats"].items())))
print("  cpu_greedy_packed vs cpu_greedy (aten): %s" % cmp(toks("cpu_greedy_packed"), toks("cpu_greedy")))
for l in (dev + "_greedy", "cpu_greedy"):
    print("  %-12s text: %r" % (l, (((rows.get(l) or {}).get("out") or {}).get("text") or "")[:120]))
failed = [l for l, r in rows.items() if r["rc"] not in (0, 125)]
failed += [l + " (no --json line)" for l, r in rows.items() if r["rc"] == 0 and not r.get("out")]
skipped = [l for l, r in rows.items() if r["rc"] == 125]
if failed: print("  runs that failed: " + ", ".join(failed))
if skipped: print("  runs skipped (out of time): " + ", ".join(skipped))
json.dump({"device": device, "table": table, "mismatches": bad, "failed_runs": failed, "skipped_runs": skipped,
           "rows": rows}, open(dst, "w"), indent=1)
if bad or failed:
    print("  RESULT: MISMATCH/FAILED: " + "; ".join(bad + ["%s failed" % l for l in failed]))
    sys.exit(1)
print("  RESULT: " + ("OK" if not skipped else "OK for the runs made (%d of %d skipped)" % (len(skipped), len(rows))))
sys.exit(2 if len(skipped) == len(rows) else 0)
EOF
  crc=$?
  if [ $crc -eq 0 ]; then record "generate: $DEVICE vs cpu tokens" PASS "$(grep RESULT "$LOGS/compare.txt" | cut -c1-200)"
  elif [ $crc -eq 2 ]; then record "generate: $DEVICE vs cpu tokens" SKIPPED "(no run fitted the budget)"
  else record "generate: $DEVICE vs cpu tokens" FAIL "$(grep RESULT "$LOGS/compare.txt" | cut -c1-300)"; fi
  cat "$LOGS/compare.txt"
fi
stop_after generate

# ================================================================= 9. compute-sanitizer
SAN_OUT=$OUT/sanitizer.txt
sanitize() { # sanitize NAME CAP TOOL cmd...
  local name=$1 cap=$2 tool=$3; shift 3
  RUNLOG=$LOGS/san_$name.txt run "$name" "$cap" "$SANITIZER" --tool "$tool" --error-exitcode 86 "$@"
  local rc=$?
  { echo "##### $name: rc $rc ($*)"; grep -E '^=+' "$LOGS/san_$name.txt" | head -c 30000; echo; } >> "$SAN_OUT"
  local s; s=$(grep -hE '(ERROR|RACECHECK) SUMMARY' "$LOGS/san_$name.txt" | tail -1 | sed 's/^=* *//')
  NOTE[$name]+=" ${s:-}"
}
if want sanitize && [ "$SKIP_CUDA" != 1 ]; then
  if [ -z "$SANITIZER" ]; then record "compute-sanitizer" "NOT FOUND" ""
  else
    mapfile -t KCUDA < <(entry test_kernels_cuda)   # tests_kernels --gtest_filter=<its suites>
    [ ${#KCUDA[@]} -gt 0 ] && sanitize "memcheck test_kernels_cuda" 120 memcheck "${KCUDA[@]}"
    # SAN_NO_CACHING=1: LibTorch's caching allocator off, so that memcheck sees each tensor's own
    # allocation (off by default: CUDA graph capture needs the caching allocator's pools)
    [ "${SAN_NO_CACHING:-0}" = 1 ] && export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    [ -x "$BUILD/specdec" ] && sanitize "memcheck generate tree T=0.8" 150 memcheck \
      "$BUILD/specdec" generate --model "$MODEL" --device cuda --prompt 'def fibonacci(n):' --max-new-tokens 24 \
      --strategy speculative --set drafter=tree --draft "$MODEL" --set temperature=0.8 --seed 7 --json
    unset PYTORCH_NO_CUDA_MEMORY_CACHING
    [ ${#KCUDA[@]} -gt 0 ] && sanitize "racecheck test_kernels_cuda" 120 racecheck "${KCUDA[@]}"
  fi
  stop_after sanitize
fi

# ================================================================= 10. the device tests' cpu half
# (CPU only: last, so that a tight budget cuts it rather than a GPU step)
if want tests && [ "$SKIP_CUDA" != 1 ]; then
  gtest "$T/tests_device" --gtest_filter='*/OnDevice.*/cpu*' device_cpu 150
fi
exit 0
