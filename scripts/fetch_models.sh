#!/usr/bin/env bash
# Fetch and verify model weights named in configs/models.yaml (see scripts/fetch_models.py).
#   scripts/fetch_models.sh smollm2-135m            # the small model used by CI and quickstart
#   scripts/fetch_models.sh qwen2.5-coder-0.5b qwen2.5-coder-1.5b
#   scripts/fetch_models.sh all | --list
# Weights are cached in ~/.cache/specdec (override with SPECDEC_CACHE); models/ links there.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's python3 has PyYAML (python3-yaml, installed by scripts/setup.sh).
exec /usr/bin/python3 scripts/fetch_models.py "$@"
