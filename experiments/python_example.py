# The example of docs/python.md (the README shows it shortened): load, generate, a drafter written in Python,
# an experiment with it beside the C++ n-gram drafter, and a plot of their speedups.
#   PYTHONPATH=build/python python3 experiments/python_example.py
import specdec, numpy as np, matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
m = specdec.load("smollm2-135m", threads=2)                          # catalog name, .gguf file or HF dir
print(specdec.generate(m, "def fib(n):", max_new_tokens=32, temperature=0)["text"])
@specdec.drafter("last_match")                                        # a drafter in Python: tokens in, tokens out
class LastMatch(specdec.Drafter):                                     # copies what followed the last token last time
    def propose(self, context, max_depth):
        hits = np.flatnonzero(context[:-1] == context[-1])
        return context[hits[-1] + 1:][:max_depth] if len(hits) else []
exp = {"name": "python_example", "models": {"target": {"name": "smollm2-135m"}}, "repeats": 2, "max_new_tokens": 48,
       "prompts": [{"text": "List the numbers from 1 to 20, separated by commas.", "chat": True}],
       "strategies": [{"name": "speculative", "label": d, "params": {"drafter": d, "temperature": 0}} for d in ("ngram", "last_match")]}
rows = specdec.read_run(specdec.run(exp)["run_dir"])["summary"]       # results/python_example/<run-id>/
plt.bar([r["label"] for r in rows], [r["speedup_median"] for r in rows]); plt.ylabel("speedup vs greedy"); plt.savefig("speedup.png")
