#!/usr/bin/env bash
# peer_llamacpp.sh: specdec against llama.cpp on the same GGUF files, prompts, token counts and
# threads (issue 10, item 5). llama.cpp is built OUTSIDE the repository (PEER_DIR, default
# /work/peer) from the source vendored in PyPI's llama-cpp-python sdist; nothing of it is ever
# written inside the repository.
#
# Usage:
#   scripts/peer_llamacpp.sh [options]
#     --models "A B"        catalog names (configs/models.yaml), space or comma separated;
#                           with two, A drafts for B (default: qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
#     --precision f32|original   f32 (default): F32 copies made by llama-quantize in PEER_DIR/models;
#                           original: the files as shipped (Q4_K_M, Q4_1 ...)
#     --out FILE            markdown report (default PEER_DIR/peer_<UTC date-time>.md; a .json beside it)
#     --peer-dir DIR        where llama.cpp, the F32 copies and logs go (must be outside the repo)
#     --threads N (2)  --n-tokens N (64)  --n-prompts N (3)  --repeats N (2)  --gamma N (4)
#     --spec auto|yes|no    speculative runs: auto = only with two models; yes with one model =
#                           self-speculation (the model drafts for itself)
#     --no-check | --check-only   skip / only run the greedy-equality check
#     --check-tokens N      tokens of the greedy-equality check (default --n-tokens), on
#     --check-prompts N     the first N prompts (1) of each model
#     --build-only          fetch and build llama.cpp (and the F32 copies), then stop
#     --prompts FILE        a prompts .jsonl (default experiments/prompts/code.jsonl); --n-prompts 0 = all
#     --category NAME       only its prompts of this category (e.g. json in json_tasks.jsonl)
#     --constrain           structured output: each prompt's json_schema goes to both engines
#                           (specdec --json-schema, llama.cpp --json-schema); the report counts
#                           the outputs that are valid JSON for their schema (python3-jsonschema)
#     --greedy all|target   greedy runs of every model (default) or of the target only
#     --lookup              also n-gram lookup on the target alone: specdec drafter=ngram (with
#                           jump_forward under --constrain) against llama-speculative-simple
#                           --spec-type ngram-simple (suffixes of 3, drafts of gamma)
#   The same settings can come from the environment: PEER_DIR THREADS N_TOKENS N_PROMPTS REPEATS
#   GAMMA MODELS PRECISION SPEC OUT, LLAMA_CPP_PYTHON_VERSION (pin the sdist; default: newest,
#   or the one already in PEER_DIR/sdist), LLAMA_EXTRA_ARGS (appended to every llama.cpp tool),
#   SPECDEC (default REPO/build/specdec), SPECDEC_DTYPE (float32, or native: the GGUF blocks),
#   SPECDEC_DRAFT_DTYPE (the draft's, default SPECDEC_DTYPE; with q4_1 specdec requantises the
#   draft to Q4_1 at load, and llama.cpp's speculative tools get the same: a Q4_1 copy of the
#   draft file made by llama-quantize --allow-requantize --pure, every matrix Q4_1 as in specdec).
#
# Examples:
#   scripts/peer_llamacpp.sh                                   # the Qwen pair, F32, full comparison
#   scripts/peer_llamacpp.sh --models smollm2-135m --n-tokens 16 --n-prompts 1 --repeats 1
#   scripts/peer_llamacpp.sh --models qwen2.5-coder-1.5b --check-only --check-tokens 32
#   scripts/peer_llamacpp.sh --precision original              # as users run it (Q4_K_M)
#   SPECDEC_DTYPE=native_q8 SPECDEC_DRAFT_DTYPE=q4_1 scripts/peer_llamacpp.sh --precision original \
#     --prompts experiments/prompts/json_tasks.jsonl --category json --constrain --greedy target \
#     --n-prompts 0 --repeats 1 --no-check                    # constrained, the JSON task set
#
# What it does:
#  1. pip download --no-binary :all: --no-deps llama-cpp-python (sdist) into PEER_DIR/sdist,
#     extracts it, and builds vendor/llama.cpp in PEER_DIR/build (Release, shared libllama; no
#     server, UI, OpenSSL or tests, so nothing is downloaded) under nice -n 15 -j2. GGML_NATIVE
#     is off and the CPU's AVX2 / AVX-512 extensions are named instead: with native on,
#     ggml's AMX matmul crashes on the Intel machines that have AMX.
#     Skipped when the binaries exist. Targets: llama-quantize llama-completion
#     llama-speculative llama-speculative-simple llama-tokenize and libllama.
#  2. F32 copies: llama-quantize --allow-requantize IN OUT F32 (skipped when present).
#  3. Compiles scripts/peer/greedy_tokens.cpp (our own code on llama.h) to PEER_DIR/bin.
#  4. scripts/peer/peer_bench.py: ChatML-templates the prompts exactly as specdec's --chat does
#     and gives both engines that same text raw (llama-completion -no-cnv; the speculative tools
#     never template); checks each tool's prompt token count against `specdec tokenize`;
#     greedy-equality check (greedy_tokens on specdec's prompt ids vs `specdec generate --chat`);
#     then the timing runs, engines alternated per prompt and repeat: greedy on each model
#     (specdec generate | llama-completion), speculative on the pair (specdec --strategy
#     speculative | llama-speculative-simple | llama-speculative, draft max = gamma, greedy),
#     recording /proc/loadavg and the CPU used by other processes beside every run.
#  Exit status 2 when the greedy-equality check finds a difference (the report is still written);
#  with --precision original llama.cpp multiplies quantised weights by Q8-quantised activations,
#  so a late difference there is not necessarily a bug.
#  Timing runs belong on a quiet machine: the report prints the foreign load of every row and
#  marks rows where other processes used > 0.2 cores. Under contention ggml's 2-thread barriers
#  spin: llama.cpp then loses 3-10x (seen in the smoke runs), specdec much less.
#  Duration (defaults, quiet 2-core machine): first build ~12 min, F32 copies ~1 min, the
#  comparison itself roughly 25 min (each specdec run loads the 7.1 GB F32 1.5B afresh).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER_DIR=${PEER_DIR:-/work/peer}
THREADS=${THREADS:-2}
N_TOKENS=${N_TOKENS:-64}
N_PROMPTS=${N_PROMPTS:-3}
REPEATS=${REPEATS:-2}
GAMMA=${GAMMA:-4}
MODELS=${MODELS:-"qwen2.5-coder-0.5b qwen2.5-coder-1.5b"}
PRECISION=${PRECISION:-f32}
SPEC=${SPEC:-auto}
OUT=${OUT:-}
CHECK=yes
CHECK_TOKENS=0
CHECK_PROMPTS=1
BUILD_ONLY=0
SPECDEC=${SPECDEC:-$REPO/build/specdec}
PROMPTS=$REPO/experiments/prompts/code.jsonl
CATEGORY=
CONSTRAIN=()
LOOKUP=()
GREEDY=all
LLAMA_EXTRA_ARGS=${LLAMA_EXTRA_ARGS:-}

die() { echo "peer_llamacpp.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --models) MODELS=${2//,/ }; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --peer-dir) PEER_DIR=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --n-tokens) N_TOKENS=$2; shift 2 ;;
    --n-prompts) N_PROMPTS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --gamma) GAMMA=$2; shift 2 ;;
    --spec) SPEC=$2; shift 2 ;;
    --no-check) CHECK=no; shift ;;
    --check-only) CHECK=only; shift ;;
    --check-tokens) CHECK_TOKENS=$2; shift 2 ;;
    --check-prompts) CHECK_PROMPTS=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --prompts) PROMPTS=$(realpath "$2"); shift 2 ;;
    --category) CATEGORY=$2; shift 2 ;;
    --constrain) CONSTRAIN=(--constrain); shift ;;
    --lookup) LOOKUP=(--lookup); shift ;;
    --greedy) GREEDY=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
case "$PRECISION" in f32|original) ;; *) die "--precision must be f32 or original, got '$PRECISION'" ;; esac
case "$SPEC" in auto|yes|no) ;; *) die "--spec must be auto, yes or no, got '$SPEC'" ;; esac
case "$GREEDY" in all|target) ;; *) die "--greedy must be all or target, got '$GREEDY'" ;; esac
[ -f "$PROMPTS" ] || die "--prompts: no file $PROMPTS"
for v in THREADS N_TOKENS N_PROMPTS REPEATS GAMMA CHECK_TOKENS CHECK_PROMPTS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done

# llama.cpp must never land inside the repository.
PEER_DIR=$(realpath -m "$PEER_DIR")  # checked before anything is created
REPO_REAL=$(realpath "$REPO")
case "$PEER_DIR/" in
  "$REPO_REAL"/*) die "PEER_DIR=$PEER_DIR is inside the repository $REPO_REAL; choose a directory outside it" ;;
esac
mkdir -p "$PEER_DIR"
[ -z "$OUT" ] && OUT="$PEER_DIR/peer_$(date -u +%Y%m%d-%H%M%S).md"

# ---------------------------------------------------------------------------------------------
# 1. Fetch the sdist and build the vendored llama.cpp (idempotent)
SDIST_DIR=$PEER_DIR/sdist
mkdir -p "$SDIST_DIR" "$PEER_DIR/src" "$PEER_DIR/bin" "$PEER_DIR/models"
if [ -n "${LLAMA_CPP_PYTHON_VERSION:-}" ]; then
  SDIST=$SDIST_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
else
  SDIST=$(printf '%s\n' "$SDIST_DIR"/llama_cpp_python-*.tar.gz | grep -v '\*' | sort -V | tail -1 || true)
fi
if [ -z "$SDIST" ] || [ ! -f "$SDIST" ]; then
  spec=llama-cpp-python${LLAMA_CPP_PYTHON_VERSION:+==$LLAMA_CPP_PYTHON_VERSION}
  say "pip download --no-binary :all: --no-deps $spec -> $SDIST_DIR"
  python3 -m pip download --no-binary :all: --no-deps "$spec" -d "$SDIST_DIR" >&2
  SDIST=$(printf '%s\n' "$SDIST_DIR"/llama_cpp_python-*.tar.gz | grep -v '\*' | sort -V | tail -1 || true)
  [ -f "$SDIST" ] || die "pip download left no llama_cpp_python-*.tar.gz in $SDIST_DIR"
fi
PYCPP_VERSION=$(basename "$SDIST" .tar.gz); PYCPP_VERSION=${PYCPP_VERSION#llama_cpp_python-}
PYCPP_SRC=$PEER_DIR/src/llama_cpp_python-$PYCPP_VERSION
if [ ! -f "$PYCPP_SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
  say "extracting $SDIST"
  tar -xzf "$SDIST" -C "$PEER_DIR/src"
fi
LLAMA_SRC=$PYCPP_SRC/vendor/llama.cpp
[ -f "$LLAMA_SRC/include/llama.h" ] || die "no vendored llama.cpp in $PYCPP_SRC/vendor/llama.cpp"

# The sdist has no git history: the commit comes from llama-cpp-python's CHANGELOG entry of
# this version ("update llama.cpp to ggml-org/llama.cpp@<commit>").
LLAMA_COMMIT=$(awk -v v="## [$PYCPP_VERSION]" '$0 == v {on=1; next} /^## \[/ {on=0}
  on && match($0, /llama\.cpp@[0-9a-f]+/) {print substr($0, RSTART + 10, RLENGTH - 10); exit}' \
  "$PYCPP_SRC/CHANGELOG.md" 2>/dev/null || true)
LLAMA_COMMIT=${LLAMA_COMMIT:-unknown}

BUILD=$PEER_DIR/build
# A build directory configured for another llama-cpp-python version is started afresh.
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$LLAMA_SRC" "$BUILD/CMakeCache.txt"; then
  say "$BUILD was configured for another source tree; removing it"
  rm -rf "$BUILD"
fi
TOOLS="llama-quantize llama-completion llama-speculative llama-speculative-simple llama-tokenize"
# The CPU's own vector extensions, named (GGML_NATIVE=OFF: see the header).
ISA=()
has() { grep -qw "$1" /proc/cpuinfo; }
if has avx2; then ISA+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON); fi
if has avx512f && has avx512bw && has avx512vl; then
  ISA+=(-DGGML_AVX512=ON)
  has avx512vbmi && ISA+=(-DGGML_AVX512_VBMI=ON)
  has avx512_vnni && ISA+=(-DGGML_AVX512_VNNI=ON)
  has avx512_bf16 && ISA+=(-DGGML_AVX512_BF16=ON)
fi
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF "${ISA[@]}"
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT")
CMAKE_LINE="cmake -S vendor/llama.cpp -B build ${CMAKE_ARGS[*]} && cmake --build build -j2 --target llama $TOOLS"
need_build=0
for t in $TOOLS; do [ -x "$BUILD/bin/$t" ] || need_build=1; done
[ -e "$BUILD/bin/libllama.so" ] || need_build=1
if [ $need_build = 1 ]; then
  say "building llama.cpp $LLAMA_COMMIT (llama-cpp-python $PYCPP_VERSION) in $BUILD (nice -n 15, -j2)"
  t0=$(date +%s)
  nice -n 15 cmake -S "$LLAMA_SRC" -B "$BUILD" "${CMAKE_ARGS[@]}" > "$PEER_DIR/build-configure.log" 2>&1 \
    || { tail -30 "$PEER_DIR/build-configure.log" >&2; die "cmake configure failed (log $PEER_DIR/build-configure.log)"; }
  # shellcheck disable=SC2086
  nice -n 15 cmake --build "$BUILD" -j2 --target llama $TOOLS > "$PEER_DIR/build.log" 2>&1 \
    || { tail -30 "$PEER_DIR/build.log" >&2; die "build failed (log $PEER_DIR/build.log)"; }
  echo "$(( $(date +%s) - t0 )) s" > "$BUILD/build-seconds.txt"
  say "built in $(cat "$BUILD/build-seconds.txt")"
fi
LLAMA_VERSION_LINE=$("$BUILD/bin/llama-completion" --version 2>&1 | grep -m1 -i '^version' || true)
LLAMA_VERSION="commit $LLAMA_COMMIT${LLAMA_VERSION_LINE:+ (\`llama-completion --version\`: $LLAMA_VERSION_LINE)}"

# ---------------------------------------------------------------------------------------------
# 2. Model files: catalog path -> (F32 copy)
catalog_file() {  # configs/models.yaml: the `file:` of model $1
  awk -v n="  $1:" '$0 == n {on=1; next} on && /^  [^ ]/ {exit} on && $1 == "file:" {print $2; exit}' \
    "$REPO/configs/models.yaml"
}
MODEL_ARGS=()
for m in $MODELS; do
  rel=$(catalog_file "$m")
  [ -n "$rel" ] || die "model '$m' is not in configs/models.yaml"
  src=$REPO/$rel
  [ -f "$src" ] || die "model '$m': $src is missing; run scripts/fetch_models.sh $m"
  src=$(readlink -f "$src")
  if [ "$PRECISION" = f32 ]; then
    dst=$PEER_DIR/models/$m.f32.gguf
    if [ ! -f "$dst" ]; then
      say "F32 copy of $m: llama-quantize --allow-requantize $src $dst F32"
      "$BUILD/bin/llama-quantize" --allow-requantize "$src" "$dst.part" F32 "$THREADS" \
        > "$PEER_DIR/quantize-$m.log" 2>&1 \
        || { tail -20 "$PEER_DIR/quantize-$m.log" >&2; die "llama-quantize failed for $m"; }
      mv "$dst.part" "$dst"
    fi
    MODEL_ARGS+=(--model "$m=$dst")
  else
    MODEL_ARGS+=(--model "$m=$src")
  fi
done
if [ "$PRECISION" = f32 ]; then
  PRECISION_NOTE="F32 copies made by llama-quantize --allow-requantize IN OUT F32 from the catalog files; specdec loads the same copies (float32)"
else
  if [ "${SPECDEC_DTYPE:-float32}" = float32 ]; then
    PRECISION_NOTE="the catalog files as shipped (llama.cpp computes on the quantised weights; specdec dequantises them to fp32 at load)"
  else
    PRECISION_NOTE="the catalog files as shipped (llama.cpp computes on the quantised weights with Q8 activations; specdec keeps the quantised blocks, --dtype ${SPECDEC_DTYPE})"
  fi
fi

LLAMA_DRAFT=
n_models=$(echo $MODELS | wc -w)
if [ "${SPECDEC_DRAFT_DTYPE:-}" = q4_1 ] && [ "$n_models" -ge 2 ] && [ "$PRECISION" != f32 ]; then
  d=$(echo $MODELS | cut -d' ' -f1)
  LLAMA_DRAFT=$PEER_DIR/models/$d.q4_1-pure.gguf
  if [ ! -f "$LLAMA_DRAFT" ]; then
    say "Q4_1 copy of the draft $d: llama-quantize --allow-requantize --pure $(readlink -f "$REPO/$(catalog_file "$d")") $LLAMA_DRAFT Q4_1"
    mkdir -p "$PEER_DIR/models"
    # --pure: every matrix Q4_1, as specdec's dtype q4_1 (without it llama-quantize keeps
    # the output head at Q8_0).
    "$BUILD/bin/llama-quantize" --allow-requantize --pure "$(readlink -f "$REPO/$(catalog_file "$d")")" "$LLAMA_DRAFT.part" Q4_1 \
      "$THREADS" > "$PEER_DIR/quantize-$d-q4_1.log" 2>&1 \
      || { tail -20 "$PEER_DIR/quantize-$d-q4_1.log" >&2; die "llama-quantize failed for $d"; }
    mv "$LLAMA_DRAFT.part" "$LLAMA_DRAFT"
  fi
  PRECISION_NOTE="$PRECISION_NOTE; the draft requantised to Q4_1 by both (specdec --draft-dtype q4_1 at load, llama.cpp a copy made by llama-quantize --allow-requantize --pure ... Q4_1)"
fi

# ---------------------------------------------------------------------------------------------
# 3. Our greedy C-API tool
TOOL=$PEER_DIR/bin/greedy_tokens
if [ ! -x "$TOOL" ] || [ "$REPO/scripts/peer/greedy_tokens.cpp" -nt "$TOOL" ] || [ "$BUILD/bin/libllama.so" -nt "$TOOL" ]; then
  say "compiling scripts/peer/greedy_tokens.cpp -> $TOOL"
  nice -n 15 g++ -O2 -std=c++17 -Wall -Wextra "$REPO/scripts/peer/greedy_tokens.cpp" \
    -I "$LLAMA_SRC/include" -I "$LLAMA_SRC/ggml/include" -L "$BUILD/bin" -lllama \
    -Wl,-rpath,"$BUILD/bin" -o "$TOOL"
fi

[ $BUILD_ONLY = 1 ] && { say "built: $BUILD/bin ($LLAMA_VERSION); tool $TOOL"; exit 0; }

# ---------------------------------------------------------------------------------------------
# 4. Check, timing runs and report
[ -x "$SPECDEC" ] || die "$SPECDEC is missing: build specdec first (scripts/build.sh)"
WORK=$PEER_DIR/runs/$(basename "$OUT" .md)
mkdir -p "$WORK"
say "load average now: $(cut -d' ' -f1-3 /proc/loadavg) (timing figures want a quiet machine)"
python3 "$REPO/scripts/peer/peer_bench.py" \
  --specdec "$SPECDEC" --llama-bin "$BUILD/bin" --tool "$TOOL" "${MODEL_ARGS[@]}" \
  --work "$WORK" --prompts "$PROMPTS" --category "$CATEGORY" "${CONSTRAIN[@]}" "${LOOKUP[@]}" --greedy "$GREEDY" \
  --n-prompts "$N_PROMPTS" --n-tokens "$N_TOKENS" --repeats "$REPEATS" --threads "$THREADS" \
  --gamma "$GAMMA" --spec "$SPEC" --check "$CHECK" --check-tokens "$CHECK_TOKENS" \
  --check-prompts "$CHECK_PROMPTS" --llama-extra "$LLAMA_EXTRA_ARGS" --out "$OUT" \
  --repo "$REPO" --peer-dir "$PEER_DIR" --llama-version "$LLAMA_VERSION" \
  --pycpp-version "$PYCPP_VERSION" --cmake-line "$CMAKE_LINE" --precision-note "$PRECISION_NOTE" \
  --llama-draft "$LLAMA_DRAFT"
