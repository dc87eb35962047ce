#!/usr/bin/env python3
"""Structured output's figures from a run folder's samples.jsonl (issue 57; docs/usage.md).

  python3 scripts/grammar_figures.py RUN_DIR

Per cell and prompt category (experiments/json_tasks_smollm2.yaml: "json", constrained; "free",
not): tokens, tok/s (tokens / wall time, summed over the category's prompts) of the candidate and
of the interleaved baseline (greedy under the same prompts' constraints), their ratio, tokens per
target forward (tau), the forced and jump-forward shares of the generated tokens (jump: accepted /
drafted), and what the grammar's work on the target's rows (phase "grammar", part of "sample")
costs: per scored row (a round scores its draft nodes + 1) and per generated token, in ms and as
a share of the baseline's decode step (its "verify" ms per decode step, a target forward of one
token). The baseline's own mask per token is shown the same way.
"""
import collections
import json
import sys


def main(run_dir):
    lines = [json.loads(l) for l in open(f"{run_dir}/samples.jsonl")]
    keys = ("tokens", "wall_ms", "rounds", "drafted", "forced", "jump", "jump_drafted", "grammar_ms", "verify_ms",
            "steps", "forwards")
    sums = collections.defaultdict(lambda: dict.fromkeys(keys, 0.0))
    for l in lines:
        if l["role"] not in ("candidate", "baseline"):
            continue
        st = l["stats"]
        side = "baseline" if l["role"] == "baseline" else l["cell"]
        s = sums[(side, l["category"])]
        rounds = st["n_rounds"]
        s["tokens"] += l["n_generated"]
        s["wall_ms"] += l["wall_ms"]
        s["rounds"] += rounds
        s["drafted"] += l["n_drafted"]
        s["forced"] += st.get("n_forced", 0)
        s["jump"] += st.get("n_jump", 0)
        s["jump_drafted"] += st.get("n_jump_drafted", 0)
        s["grammar_ms"] += st["phase_ms"].get("grammar", 0.0)
        s["verify_ms"] += st["phase_ms"]["verify"]
        s["steps"] += rounds if rounds > 0 else max(0, l["n_target_forwards"] - 1)  # decode steps / rounds
        s["forwards"] += rounds if rounds > 0 else l["n_target_forwards"]
    cats = sorted({c for _, c in sums})
    for cat in cats:
        base = sums.get(("baseline", cat))
        step_ms = base["verify_ms"] / base["steps"] if base and base["steps"] else float("nan")
        base_tps = 1000 * base["tokens"] / base["wall_ms"] if base else float("nan")
        print(f"## {cat}: baseline {base_tps:.2f} tok/s, decode step {step_ms:.2f} ms"
              + (f", its grammar {base['grammar_ms'] / base['tokens']:.3f} ms/token"
                 f" ({100 * base['grammar_ms'] / base['tokens'] / step_ms:.2f} % of a step)" if base and base["tokens"] else ""))
        print("| cell | tokens | tok/s | speedup | tau | forced | jump (acc/drafted) | grammar ms/row | % step | "
              "grammar ms/token | % step |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for (side, c), s in sorted(sums.items()):
            if c != cat or side == "baseline":
                continue
            tps = 1000 * s["tokens"] / s["wall_ms"]
            rows = s["rounds"] + s["drafted"]
            per_row = s["grammar_ms"] / rows if rows else 0
            per_tok = s["grammar_ms"] / s["tokens"] if s["tokens"] else 0
            jump = f"{100 * s['jump'] / s['tokens']:.1f} % ({int(s['jump'])}/{int(s['jump_drafted'])})"
            print(f"| {side} | {int(s['tokens'])} | {tps:.2f} | {tps / base_tps:.3f} | {s['tokens'] / s['forwards']:.2f} | "
                  f"{100 * s['forced'] / s['tokens']:.1f} % | {jump} | {per_row:.3f} | {100 * per_row / step_ms:.2f} | "
                  f"{per_tok:.3f} | {100 * per_tok / step_ms:.2f} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
