#!/usr/bin/env python3
"""Reference values for tests/integration/test_io_gguf_smollm2.cpp.

Dequantises a few tensors of models/smollm2-135m-instruct.gguf with the `gguf` Python
package (llama.cpp's own reader, independent of our C++ code) and writes, per tensor,
its type, shape, first 32 and last 8 values, and the float64 sum and sum of |x| of all
its fp32 values. Run with the reference venv:

    ~/.cache/specdec/venv/bin/python scripts/reference/make_io_fixtures.py
"""
import json
import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "smollm2-135m-instruct.gguf"
OUT = ROOT / "tests" / "fixtures" / "io" / "smollm2_tensors.json"
# The fuzzers' tiny seed files hold one tensor of every supported quant type (incl. the
# K-quants SmolLM2 lacks); their full dequantised values become a second fixture.
SEEDS = sorted((ROOT / "tests" / "fuzz" / "seeds_gguf").glob("*.gguf.seed"))
SEEDS_OUT = ROOT / "tests" / "fixtures" / "io" / "seed_tensors.json"
SUPPORTED = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}

# One tensor per type present in the file (Q8_0, Q4_1, F32), plus a second Q4_1 and F32
# tensor from other layers so a wrong per-tensor offset would show.
NAMES = [
    "token_embd.weight",        # Q8_0 [49152, 576]
    "blk.0.ffn_down.weight",    # Q4_1 [576, 1536]
    "blk.17.attn_k.weight",     # Q4_1 [192, 576]
    "blk.0.attn_norm.weight",   # F32 [576]
    "output_norm.weight",       # F32 [576]
]


def write_seed_fixture() -> None:
    files = {}
    for path in SEEDS:
        reader = GGUFReader(str(path))
        tensors = {}
        for t in reader.tensors:
            if t.tensor_type.name not in SUPPORTED:
                continue
            values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            tensors[t.name] = {"type": t.tensor_type.name, "values": [float(x) for x in values]}
        files[path.name] = tensors
    doc = {"generator": "scripts/reference/make_io_fixtures.py (gguf.quants.dequantize)", "files": files}
    SEEDS_OUT.write_text(json.dumps(doc) + "\n")
    print(f"wrote {SEEDS_OUT}")


def main() -> int:
    write_seed_fixture()
    if not MODEL.exists():
        print(f"missing {MODEL}: run scripts/fetch_models.sh smollm2-135m", file=sys.stderr)
        return 1
    reader = GGUFReader(str(MODEL))
    by_name = {t.name: t for t in reader.tensors}
    entries = []
    for name in NAMES:
        t = by_name[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        assert values.size == int(t.n_elements), name
        entries.append({
            "name": name,
            "type": t.tensor_type.name,
            "ne": [int(x) for x in t.shape],
            "n_elements": int(t.n_elements),
            "first32": [float(x) for x in values[:32]],
            "last8": [float(x) for x in values[-8:]],
            "sum": float(values.astype(np.float64).sum()),
            "sum_abs": float(np.abs(values.astype(np.float64)).sum()),
        })
    doc = {
        "model": "models/smollm2-135m-instruct.gguf",
        "generator": "scripts/reference/make_io_fixtures.py (gguf.quants.dequantize)",
        "n_tensors": len(reader.tensors),
        "tensors": entries,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
