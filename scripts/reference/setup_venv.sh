#!/usr/bin/env bash
# Creates the reference virtual environment (Hugging Face transformers, tokenizers, gguf,
# torch) used only to regenerate the committed fixtures under tests/fixtures/.
# It lives in ~/.cache/specdec/venv (reused across clones) and scripts/reference/.venv
# (git-ignored) links to it. Then run, e.g.:
#   scripts/reference/.venv/bin/python scripts/reference/make_model_fixtures.py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SPECDEC_CACHE:-$HOME/.cache/specdec}/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
fi
"$venv/bin/pip" install --quiet -r "$here/requirements.txt"
ln -sfn "$venv" "$here/.venv"
echo "reference venv ready: $here/.venv"
