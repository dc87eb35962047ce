#!/usr/bin/env python3
"""A/B two builds of specdec, interleaved (A, B, A, B, ...): each pair runs the same command on both,
and for each figure it prints each side's value and the ratio B/A per pair, then the medians, with
the machine's load beside them.

Used to check that a change keeps the engine's speed (issue 10: "within 3 % of today's,
measured in one run against a build of the previous commit"; issue 55: bench_strategies_loop and
the quickstart). Build the old commit in a worktree of its own:

    git worktree add /tmp/base HEAD~1 && (cd /tmp/base && scripts/build.sh)

then, by --mode (the figures compared are tokens per second, higher is better):

  generate  (default) `specdec generate ARGS --json` on both; the decode speed (`tokens_per_s`:
            generated tokens after the first / decode time), so model loading and prefill are
            left out:
              scripts/ab_builds.py --a /tmp/base/build/specdec --b build/specdec --repeats 5 -- \\
                  --model qwen2.5-coder-1.5b --chat --max-new-tokens 48 --prompt "Write a quicksort in C."
  run       `specdec run ARGS --out DIR --quiet`; each cell's tokens/s (metrics.json, mean_tok_s):
              scripts/ab_builds.py --mode run --a /tmp/base/build/specdec --b build/specdec -- \\
                  experiments/quickstart.yaml --set 'checks.strategies=[]'
  bench     a Google Benchmark binary, `BINARY ARGS --benchmark_format=json`; each benchmark's
            `tokens_per_s` counter:
              scripts/ab_builds.py --mode bench --a /tmp/base/build/bench/bench_strategies_loop \\
                  --b build/bench/bench_strategies_loop -- --gammas=4 --batches=8

Everything after `--` goes to both sides. Both run from this repository's root so that model
names resolve through configs/models.yaml.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def busy_jiffies():
    """Busy jiffies of all CPUs from /proc/stat (idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - v[4]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def figures_generate(binary, args, root, scratch):
    p = subprocess.run([binary, "generate", *args, "--json"], cwd=root, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{binary} generate failed ({p.returncode}):\n{p.stderr[-2000:]}")
    stats = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    return {"decode tok/s": float(stats.get("stats", stats)["tokens_per_s"])}


def figures_run(binary, args, root, scratch):
    out = tempfile.mkdtemp(dir=scratch)
    os.rmdir(out)  # the run makes its folder
    p = subprocess.run([binary, "run", *args, "--out", out, "--quiet"], cwd=root, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{binary} run failed ({p.returncode}):\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.json")) as f:
        return {c["key"]: float(c["mean_tok_s"]) for c in json.load(f)["cells"]}


def figures_bench(binary, args, root, scratch):
    p = subprocess.run([binary, *args, "--benchmark_format=json"], cwd=root, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{binary} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return {b["name"]: float(b["tokens_per_s"]) for b in json.loads(p.stdout)["benchmarks"] if "tokens_per_s" in b}


def timed(figures, binary, args, root, scratch):
    """Runs one side once; returns (its figures, cores busy with other processes meanwhile)."""
    b0, r0, t0 = busy_jiffies(), os.times(), time.monotonic()
    out = figures(binary, args, root, scratch)
    wall = time.monotonic() - t0
    b1, r1 = busy_jiffies(), os.times()
    own = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    return out, max(0.0, (b1 - b0) / os.sysconf("SC_CLK_TCK") - own) / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="baseline binary")
    ap.add_argument("--b", required=True, help="candidate binary")
    ap.add_argument("--mode", choices=["generate", "run", "bench"], default="generate")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the arguments of both sides")
    o = ap.parse_args()
    args = o.rest[1:] if o.rest[:1] == ["--"] else o.rest
    if not args and o.mode != "bench":
        ap.error("give the arguments after --")
    for b in (o.a, o.b):
        if not os.access(b, os.X_OK):
            ap.error(f"'{b}' is not an executable file")
    figures = {"generate": figures_generate, "run": figures_run, "bench": figures_bench}[o.mode]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"loadavg before: {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="ab_builds.") as scratch:
        timed(figures, o.a, args, root, scratch)  # warm-up of the page cache (same model files)
        a, b, foreign = {}, {}, []
        for i in range(o.repeats):
            fa, la = timed(figures, o.a, args, root, scratch)
            fb, lb = timed(figures, o.b, args, root, scratch)
            foreign += [la, lb]
            print(f"pair {i + 1}: foreign cores A {la:.2f}, B {lb:.2f}")
            for name in fa:
                if name in fb:
                    a.setdefault(name, []).append(fa[name])
                    b.setdefault(name, []).append(fb[name])
                    print(f"  {name}: A {fa[name]:.2f}, B {fb[name]:.2f}, B/A {fb[name] / fa[name]:.3f}")
    print(f"medians of {o.repeats} pairs (tokens/s; B/A: the median of the pairs' ratios [min, max]):")
    for name in a:
        ratios = [y / x for x, y in zip(a[name], b[name])]
        print(f"  {name}: A {statistics.median(a[name]):.2f}, B {statistics.median(b[name]):.2f}, "
              f"B/A {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
    print(f"foreign cores max {max(foreign):.2f}; loadavg after: {loadavg()}")


if __name__ == "__main__":
    main()
