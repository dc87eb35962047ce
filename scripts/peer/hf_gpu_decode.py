#!/usr/bin/env python3
"""Hugging Face reference on the lent GPU machine (no network: models are built from configs with
random weights; nothing is downloaded). Run by scripts/gpu_check.sh:

    python3 scripts/peer/hf_gpu_decode.py --out $OUT/hf.json [--shapes smollm2,qwen1.5b]
                                          [--skip-compile] [--budget-s 190]

For each shape, in bfloat16 on cuda:
  * eager: greedy decode of --new-tokens (128) tokens after a --prompt-len (16) token prompt,
    ms/token = (time of prompt + N tokens - time of prompt + 1 token) / (N - 1), i.e. without the
    prefill; the plain total / N is reported too;
  * verify-width curve (eager): the time of one forward feeding k tokens (k = 1, 2, 4, ..., 128)
    after --context (512) cached tokens (median of --reps);
  * static cache + torch.compile: generate(..., cache_implementation="static"), which makes
    transformers compile the forward itself (its compile_config: CUDA graphs), warmed up
    twice, then timed as above (compiling takes ~70 s per shape on an H200).
Order: eager and curves of every shape first (cheap), then the compiled runs, each only if the
time left (--budget-s) allows --compile-guard-s, and under an alarm. The JSON is rewritten after
every piece, so a run cut short still leaves what it measured.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time
import traceback

T_START = time.monotonic()

SHAPES = {
    # SmolLM2-135M(-Instruct)
    "smollm2": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", kw=dict(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2)),
    # Qwen2.5-1.5B(-Instruct / Coder)
    "qwen1.5b": dict(cls="Qwen2ForCausalLM", cfg="Qwen2Config", kw=dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)),
}


class Budget(Exception):
    pass


def left(args):
    return args.budget_s - (time.monotonic() - T_START)


def main():
    ap = argparse.ArgumentParser(description="HF transformers GPU decode reference (random weights)")
    ap.add_argument("--out", default="hf.json")
    ap.add_argument("--shapes", default="smollm2,qwen1.5b", help="comma list of: " + ",".join(SHAPES))
    ap.add_argument("--skip-compile", action="store_true", help="no static cache + torch.compile runs")
    ap.add_argument("--skip-curve", action="store_true", help="no verify-width curve")
    ap.add_argument("--skip-eager", action="store_true", help="no eager decode run")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--context", type=int, default=512, help="cached tokens before the curve's forward")
    ap.add_argument("--ks", default="1,2,4,8,16,32,64,128", help="fed tokens of the curve")
    ap.add_argument("--reps", type=int, default=10, help="timed forwards per curve point (median)")
    ap.add_argument("--budget-s", type=float, default=190.0, help="wall time for everything")
    ap.add_argument("--compile-guard-s", type=float, default=80.0,
                    help="start a shape's compiled run only with this much time left")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = ap.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    ks = [int(k) for k in args.ks.split(",")]

    res = {"script": "scripts/peer/hf_gpu_decode.py", "argv": sys.argv[1:], "status": "running",
           "weights": "random (built from configs; no download)", "shapes": {}, "errors": []}

    def save():
        res["elapsed_s"] = round(time.monotonic() - T_START, 1)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, args.out)

    def log(*a):
        print(f"[hf {time.monotonic() - T_START:6.1f}s]", *a, flush=True)

    save()
    import torch
    import transformers
    res["torch"] = torch.__version__
    res["torch_cuda"] = torch.version.cuda
    res["transformers"] = transformers.__version__
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            res["status"] = "no cuda"
            save()
            log("CUDA is not available")
            return 1
        res["gpu"] = torch.cuda.get_device_name(0)
        res["gpu_capability"] = list(torch.cuda.get_device_capability(0))
    dtype = getattr(torch, args.dtype)
    dev = torch.device(args.device)
    res["dtype"], res["device"] = args.dtype, args.device
    save()
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {res.get('gpu', args.device)}")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def build(name):
        spec = SHAPES[name]
        cfg = getattr(transformers, spec["cfg"])(**spec["kw"])
        torch.manual_seed(0)
        with dev:                          # parameters are created (and initialised) on the GPU
            m = getattr(transformers, spec["cls"])(cfg)
        m = m.to(dev, dtype).eval()
        m.generation_config.do_sample = False
        m.generation_config.pad_token_id = cfg.pad_token_id
        return m, cfg

    def decode(m, ids, n, **kw):
        with torch.no_grad():
            sync()
            t = time.perf_counter()
            out = m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
            sync()
            return time.perf_counter() - t, out.shape[1] - ids.shape[1]

    def timed_decode(m, ids, **kw):
        n = args.new_tokens
        decode(m, ids, 1, **kw)            # warm (a static cache is reused: no new shapes)
        t1, _ = decode(m, ids, 1, **kw)
        tn, got = decode(m, ids, n, **kw)
        return {"new_tokens": got, "ms_per_token": round((tn - t1) / max(got - 1, 1) * 1e3, 3),
                "ms_per_token_incl_prefill": round(tn / got * 1e3, 3), "ms_prefill_plus_1": round(t1 * 1e3, 3)}

    models = {}
    # ---- phase 1: eager decode and the verify-width curve, every shape ----------------------
    for name in shapes:
        if left(args) < 15:
            res["errors"].append(f"{name}: eager skipped, out of time")
            continue
        r = res["shapes"].setdefault(name, {})
        try:
            t = time.monotonic()
            m, cfg = build(name)
            models[name] = (m, cfg)
            r["config"] = {k: v for k, v in SHAPES[name]["kw"].items()}
            r["params_M"] = round(sum(p.numel() for p in m.parameters()) / 1e6, 1)
            r["attn_implementation"] = getattr(m.config, "_attn_implementation", None)
            r["build_s"] = round(time.monotonic() - t, 1)
            g = torch.Generator(device="cpu").manual_seed(1)
            ids = torch.randint(0, cfg.vocab_size, (1, args.prompt_len), generator=g).to(dev)
            if not args.skip_eager:
                decode(m, ids, 8)                                   # warm-up
                r["eager"] = timed_decode(m, ids)
                log(f"{name}: eager {r['eager']['ms_per_token']} ms/token")
                save()
            if not args.skip_curve:
                ctx = torch.randint(0, cfg.vocab_size, (1, args.context), generator=g).to(dev)
                curve = {}
                with torch.no_grad():
                    cache = transformers.DynamicCache()
                    m(ctx, past_key_values=cache, use_cache=True)
                    for k in ks:
                        if left(args) < 10:
                            res["errors"].append(f"{name}: curve cut at k={k}, out of time")
                            break
                        x = torch.randint(0, cfg.vocab_size, (1, k), generator=g).to(dev)
                        ts = []
                        for rep in range(args.reps + 2):            # 2 warm-ups
                            sync()
                            t = time.perf_counter()
                            m(x, past_key_values=cache, use_cache=True)
                            sync()
                            if rep >= 2:
                                ts.append(time.perf_counter() - t)
                            cache.crop(args.context)
                        curve[str(k)] = round(statistics.median(ts) * 1e3, 3)
                r["verify_curve_ms"] = curve
                r["verify_curve_note"] = (f"eager, one forward of k fed tokens after {args.context} cached "
                                          f"tokens, median of {args.reps}")
                log(f"{name}: verify curve (ms) {curve}")
                save()
        except Exception as e:
            res["errors"].append(f"{name} eager/curve: {type(e).__name__}: {e}")
            traceback.print_exc()
            save()

    # ---- phase 2: static cache + torch.compile, shape by shape, under a time guard -----------
    def alarm(signum, frame):
        raise Budget("time budget reached")

    signal.signal(signal.SIGALRM, alarm)
    for name in shapes:
        if args.skip_compile:
            break
        r = res["shapes"].setdefault(name, {})
        if name not in models:
            continue
        if left(args) < args.compile_guard_s:
            r["compiled"] = {"skipped": f"{left(args):.0f} s left < --compile-guard-s {args.compile_guard_s:.0f}"}
            log(f"{name}: compiled run skipped ({left(args):.0f} s left)")
            save()
            continue
        m, cfg = models[name]
        r["compiled"] = {"status": "compiling"}
        save()
        signal.alarm(max(1, int(left(args) - 3)))
        try:
            torch._dynamo.reset()
            # transformers' own recipe: generate() with a static cache compiles the forward itself
            # (generation_config.compile_config, CUDA graphs included). Wrapping model.forward in
            # torch.compile(mode="reduce-overhead") on top failed in the first run (transformers 5.17:
            # "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run").
            g = torch.Generator(device="cpu").manual_seed(1)
            ids = torch.randint(0, cfg.vocab_size, (1, args.prompt_len), generator=g).to(dev)
            t = time.monotonic()
            for _ in range(2):                                   # warm-ups: compile, capture graphs
                decode(m, ids, args.new_tokens, cache_implementation="static")
            warm = time.monotonic() - t
            out = timed_decode(m, ids, cache_implementation="static")
            out["warmup_s"] = round(warm, 1)
            out["status"] = "ok"
            r["compiled"] = out
            log(f"{name}: static cache + compile {out['ms_per_token']} ms/token (warm-up {warm:.0f} s)")
        except Budget:
            r["compiled"] = {"status": "cut by the time budget"}
            res["errors"].append(f"{name} compiled: cut by the time budget")
            log(f"{name}: compiled run cut by the time budget")
        except Exception as e:
            r["compiled"] = {"status": f"{type(e).__name__}: {str(e)[:300]}"}
            res["errors"].append(f"{name} compiled: {type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc()
        finally:
            signal.alarm(0)
        save()
        del models[name]
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    res["status"] = "done" if not res["errors"] else "done with errors"
    save()
    log(f"wrote {args.out}: {res['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
