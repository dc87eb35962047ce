#!/usr/bin/env python3
"""Reference fixtures for the strategies tests, made with Hugging Face transformers.

  tests/fixtures/strategies/beam_smollm2.json  beam search (4 beams, 32 new tokens) and greedy
      continuations of 5 prompts on SmolLM2-135M-Instruct (GGUF, dequantised to fp32)
  tests/fixtures/strategies/processors.json    HF logits processors (repetition penalty,
      temperature, top-k, top-p, min-p) applied to random logits

Usage: ~/.cache/specdec/venv/bin/python scripts/reference/make_beam_fixtures.py
Only for generating committed fixtures; never run by the C++ build or ctest.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.logits_process import (
    LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "strategies")

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "Here is a list of three fruits:\n1.",
    "Question: What is the boiling point of water at sea level?\nAnswer:",
]
# (length_penalty, early_stopping) pairs; HF's default early_stopping is False.
BEAM_CONFIGS = [(1.0, False), (-1.0, False), (2.0, "never"), (1.0, True)]


def processors_fixture():
    g = torch.Generator().manual_seed(1234)
    cases = []
    configs = [
        dict(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
        dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
        dict(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0, repetition_penalty=1.0),
        dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, repetition_penalty=1.0),
        dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.3),
        dict(temperature=0.8, top_k=12, top_p=0.9, min_p=0.05, repetition_penalty=1.2),
    ]
    vocab = 40
    for cfg in configs:
        logits = torch.randn(1, vocab, generator=g) * 2.0
        context = torch.randint(0, vocab, (1, 6), generator=g)
        chain = LogitsProcessorList()
        if cfg["repetition_penalty"] != 1.0:
            chain.append(RepetitionPenaltyLogitsProcessor(cfg["repetition_penalty"]))
        if cfg["temperature"] != 1.0:
            chain.append(TemperatureLogitsWarper(cfg["temperature"]))
        if cfg["top_k"]:
            chain.append(TopKLogitsWarper(cfg["top_k"]))
        if cfg["top_p"] < 1.0:
            chain.append(TopPLogitsWarper(cfg["top_p"]))
        if cfg["min_p"] > 0.0:
            chain.append(MinPLogitsWarper(cfg["min_p"]))
        probs = chain(context, logits.clone()).softmax(-1)
        cases.append(dict(config=cfg, context=context[0].tolist(), logits=logits[0].tolist(),
                          probs=probs[0].tolist()))
    return dict(generator=f"transformers {transformers.__version__}", cases=cases)


def strip(seq, n_prompt, eos_ids, pad_id):
    gen = seq[n_prompt:].tolist()
    for i, t in enumerate(gen):
        if t in eos_ids:
            return gen[: i + 1]
    while gen and pad_id is not None and gen[-1] == pad_id and pad_id not in eos_ids:
        gen.pop()
    return gen


def beam_fixture(model_path):
    d, f = os.path.split(model_path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    eos_ids = eos if isinstance(eos, list) else [eos]
    pad_id = model.generation_config.pad_token_id
    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        n = ids.shape[1]
        with torch.no_grad():
            greedy = model.generate(ids, do_sample=False, max_new_tokens=32, num_beams=1,
                                    attention_mask=torch.ones_like(ids))
        case = dict(prompt=prompt, prompt_ids=ids[0].tolist(),
                    greedy=strip(greedy[0], n, eos_ids, pad_id), beams=[])
        for lp, es in BEAM_CONFIGS:
            with torch.no_grad():
                out = model.generate(ids, do_sample=False, num_beams=4, max_new_tokens=32,
                                     length_penalty=lp, early_stopping=es, num_return_sequences=2,
                                     output_scores=True, return_dict_in_generate=True,
                                     attention_mask=torch.ones_like(ids))
            seqs = [strip(s, n, eos_ids, pad_id) for s in out.sequences]
            case["beams"].append(dict(length_penalty=lp, early_stopping=str(es).lower(),
                                      sequences=seqs, scores=out.sequences_scores.tolist()))
        cases.append(case)
        print(prompt[:30], case["greedy"][:8], case["beams"][0]["sequences"][0][:8], file=sys.stderr)
    return dict(generator=f"transformers {transformers.__version__}, torch {torch.__version__}",
                model="models/smollm2-135m-instruct.gguf", num_beams=4, max_new_tokens=32,
                eos_ids=eos_ids, cases=cases)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "processors.json"), "w") as fh:
        json.dump(processors_fixture(), fh)
    model_path = os.path.join(ROOT, "models", "smollm2-135m-instruct.gguf")
    with open(os.path.join(OUT, "beam_smollm2.json"), "w") as fh:
        json.dump(beam_fixture(model_path), fh)


if __name__ == "__main__":
    main()
