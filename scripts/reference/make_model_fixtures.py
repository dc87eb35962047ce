#!/usr/bin/env python3
"""Reference logits and greedy continuations for the model oracle tests.

Loads a GGUF model with Hugging Face transformers (dequantised to fp32) and writes
tests/fixtures/model/<name>.json with, for a handful of varied prompts:
  - the prompt token ids from the HF tokenizer (so model tests do not depend on ours),
  - the top-k logits (ids and values) at the first, middle and last prompt position,
  - the greedy continuation of n_new tokens (no EOS stopping; eos_at records where the
    first EOS/end-of-turn token appears, -1 if none).

Run with the oracle venv:
  ~/.cache/specdec/venv/bin/python scripts/reference/make_model_fixtures.py [smollm2|qwen0.5b|qwen1.5b ...]
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = {
    "smollm2": "smollm2-135m-instruct.gguf",
    "qwen0.5b": "qwen2.5-coder-0.5b-instruct.gguf",
    "qwen1.5b": "qwen2.5-coder-1.5b-instruct.gguf",
}
TOP_K = 50
N_NEW = 64


def chat(system, user):
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


PROMPTS = [
    ("english", "The history of the printing press begins in the fifteenth century, when"),
    ("code", "#include <stdio.h>\n\nint fibonacci(int n) {\n    if (n < 2) return n;\n"),
    ("chat", chat("You are a helpful AI assistant.", "Give me three tips for writing clear emails.")),
    ("numbers", "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233,"),
    ("unicode", "Ünïcödé tëxt: 東京は日本の首都です。 Привет, мир! 🙂 naïve café →"),
]


def top_k(row, k):
    vals, ids = torch.topk(row, k)
    return {"ids": ids.tolist(), "values": [float(v) for v in vals]}


def make(name):
    file = MODELS[name]
    path = os.path.join(ROOT, "models", file)
    if not os.path.exists(path):
        print(f"skip {name}: {path} missing (run scripts/fetch_models.sh)")
        return
    d = os.path.join(ROOT, "models")
    tok = AutoTokenizer.from_pretrained(d, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=file, dtype=torch.float32)
    model.eval()
    eos = set()
    if tok.eos_token_id is not None:
        eos.add(int(tok.eos_token_id))
    for t in ("<|im_end|>", "<|endoftext|>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tok.unk_token_id:
            eos.add(int(i))
    cases = []
    for label, text in PROMPTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0]  # [T, V]
        positions = sorted(set([0, len(ids) // 2, len(ids) - 1]))
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N_NEW,
                                 min_new_tokens=N_NEW, do_sample=False, num_beams=1,
                                 eos_token_id=None, pad_token_id=0)
        new = out[0, len(ids):].tolist()
        eos_at = next((i for i, t in enumerate(new) if t in eos), -1)
        cases.append({
            "label": label,
            "text": text,
            "prompt_ids": ids,
            "positions": [
                {"pos": p, "top": top_k(logits[p], TOP_K)} for p in positions
            ],
            "greedy": new,
            "eos_at": eos_at,
        })
        print(f"{name}/{label}: {len(ids)} prompt tokens, greedy {tok.decode(new)[:60]!r}")
    doc = {
        "model_file": f"models/{file}",
        "generator": "transformers " + __import__("transformers").__version__
                     + ", torch " + torch.__version__ + ", fp32, gguf_file=",
        "top_k": TOP_K,
        "n_new": N_NEW,
        "eos_ids": sorted(eos),
        "cases": cases,
    }
    out_path = os.path.join(ROOT, "tests", "fixtures", "model", name.replace(".", "_") + ".json")
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=0, ensure_ascii=False)
    print("wrote", out_path, os.path.getsize(out_path), "bytes")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for n in (sys.argv[1:] or list(MODELS)):
        make(n)
