#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, fetches the small real model and
# runs the fast tier of the tests. CI (.ci/run) calls exactly this, then one heavy shard.
#   scripts/test.sh                  # the fast tier: every test but those labelled heavy or
#                                    # slow (the fuzzers run in the sanitizer build: build.sh)
#   scripts/test.sh --heavy          # the heavy tier: real-model training, full-power law
#                                    # checks, the full matrices (tests/heavy_shards.txt)
#   scripts/test.sh --heavy-shard K  # one shard of it (K = 0.., or auto: the next in turn,
#                                    # from the commit count, as .ci/run does)
#   scripts/test.sh --slow           # the Qwen2.5-Coder 0.5B -> 1.5B tests (~2 GB download)
#   scripts/test.sh --gpu [cmake args]
#                              # on a machine with a GPU: the CUDA kernel tests and the device
#                              # tests on cuda, which then fail instead of skipping when CUDA is
#                              # unusable. Needs nvcc and a CUDA LibTorch, e.g.
#                              #   scripts/test.sh --gpu -DTorch_DIR=<libtorch>/share/cmake/Torch
# Tiers and shards: docs/testing.md; where the time goes: docs/ci.md.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-fast}
if [ "$mode" = "--gpu" ]; then
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

# heavy_shard K: the ctest entries of shard K of tests/heavy_shards.txt. Every heavy entry must be
# in exactly one shard, so that each runs every few CI runs.
shards=tests/heavy_shards.txt
check_shards() {
  local listed heavy
  listed=$(grep -v '^#' "$shards" | cut -d: -f2- | tr ' ' '\n' | grep . | sort)
  heavy=$(ctest --test-dir build -N -L heavy | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
  if [ "$listed" != "$(echo "$listed" | sort -u)" ]; then
    echo "test.sh: an entry is in two shards of $shards" >&2; exit 1; fi
  if [ "$listed" != "$heavy" ]; then
    echo "test.sh: $shards does not list exactly the heavy ctest entries:" >&2
    diff <(echo "$listed") <(echo "$heavy") | sed 's/^</  only in the file:/; s/^>/  only in ctest:/' | grep only >&2
    exit 1
  fi
}
case $mode in
  fast)
    # Two at a time (SPECDEC_JOBS): most entries are short or wait on a process they start; the
    # ones that time themselves or read the load run alone (RUN_SERIAL, tests/CMakeLists.txt).
    exec ctest --test-dir build --output-on-failure -LE 'heavy|slow' -j "${SPECDEC_JOBS:-$(nproc)}" ;;
  --heavy)
    # Two at a time as well: none of the heavy entries reads the load or times itself.
    check_shards
    exec ctest --test-dir build --output-on-failure -L heavy -j "${SPECDEC_JOBS:-$(nproc)}" ;;
  --heavy-shard)
    check_shards
    n=$(grep -c '^shard' "$shards")
    k=${2:-auto}
    [ "$k" = auto ] && k=$(( $(git rev-list --count HEAD 2>/dev/null || date +%j) % n ))
    names=$(sed -n "s/^shard $k: *//p" "$shards")
    [ -n "$names" ] || { echo "test.sh: no shard $k in $shards (0..$((n - 1)))" >&2; exit 1; }
    echo "test.sh: heavy shard $k of $n: $names"
    exec ctest --test-dir build --output-on-failure -R "^($(echo $names | tr ' ' '|'))\$" -j "${SPECDEC_JOBS:-$(nproc)}" ;;
  --slow)
    bash scripts/fetch_models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b
    exec ctest --test-dir build --output-on-failure -L slow ;;
  *) echo "test.sh: unknown option '$mode' (--heavy, --heavy-shard K|auto, --slow, --gpu)" >&2; exit 1 ;;
esac
