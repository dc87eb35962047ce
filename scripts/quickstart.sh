#!/usr/bin/env bash
# The README's main job: install, build, fetch SmolLM2-135M-Instruct and run the quickstart
# experiment (greedy, sampling, beam, speculative with the target's own Q4_1 copy as draft and with
# n-gram, all checks).
# Results land in results/quickstart/<run-id>/ (report.md, metrics.json, plots).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SPECDEC_TARGETS=specdec bash scripts/build.sh   # only the CLI: the tests are scripts/test.sh's
bash scripts/fetch_models.sh smollm2-135m
exec build/specdec run experiments/quickstart.yaml "$@"
