#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, fetches the small real model
# and runs the tests. CI (.ci/run) calls exactly this.
#   scripts/test.sh            # unit + integration + fuzz (bounded) tests; skips label "slow"
#   scripts/test.sh --slow     # also the Qwen2.5-Coder 0.5B -> 1.5B tests (needs ~2 GB download)
set -euo pipefail
cd "$(dirname "$0")/.."

slow=0
[ "${1:-}" = "--slow" ] && slow=1

bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_models.sh smollm2-135m
if [ $slow = 1 ]; then
  bash scripts/fetch_models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b
  exec ctest --test-dir build --output-on-failure
fi
exec ctest --test-dir build --output-on-failure -LE slow
