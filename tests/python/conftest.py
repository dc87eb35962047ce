"""Shared fixtures of the Python package's tests (ctest: test_python, label "python").

ctest sets PYTHONPATH=<build>/python and SPECDEC_BIN=<build>/specdec; run by hand with
  PYTHONPATH=build/python SPECDEC_BIN=build/specdec python3 -m pytest tests/python
"""
import json
import os
import subprocess

import pytest

import specdec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOLLM2 = os.path.join(ROOT, "models", "smollm2-135m-instruct.gguf")


def specdec_bin():
    return os.environ.get("SPECDEC_BIN", os.path.join(ROOT, "build", "specdec"))


def cli(*args, check=True):
    """Runs the CLI; returns the CompletedProcess (text)."""
    p = subprocess.run([specdec_bin(), *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    if check and p.returncode != 0:
        raise AssertionError(f"specdec {' '.join(map(str, args))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def cli_generate(model, prompt, max_new_tokens, strategy="greedy", sets=(), extra=()):
    """`specdec generate ... --json`: its JSON object (the last line of stdout)."""
    args = ["generate", "--model", model, "--prompt", prompt, "--max-new-tokens", max_new_tokens, "--json",
            "--strategy", strategy, "--threads", 2]
    for k, v in sets:
        args += ["--set", f"{k}={specdec._param_text(k, v)}"]  # as generate(**params) passes it
    args += list(extra)
    out = cli(*args).stdout.strip().splitlines()
    return json.loads(out[-1])


@pytest.fixture(scope="session")
def smol():
    assert os.path.exists(SMOLLM2), f"{SMOLLM2} is missing: run scripts/fetch_models.sh smollm2-135m"
    return specdec.load("smollm2-135m", threads=2)


@pytest.fixture(scope="session")
def smol_q4():
    """SmolLM2 requantised to Q4_1: a lossy draft of itself (drafts are also rejected)."""
    return specdec.load("smollm2-135m", dtype="q4_1", threads=2)
