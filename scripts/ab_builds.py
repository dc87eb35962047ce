#!/usr/bin/env python3
"""A/B two specdec binaries on the same `generate` command, interleaved (A, B, A, B, ...), and
print each side's decode speed and the ratio B/A per pair, with the machine's load beside it.

Used to check that a change keeps the engine's speed (issue 10: "within 3 % of today's,
measured in one run against a build of the previous commit"):

    git worktree add /tmp/base HEAD~1 && (cd /tmp/base && ln -s $PWD/models models && scripts/build.sh)
    scripts/ab_builds.py --a /tmp/base/build/specdec --b build/specdec --repeats 5 -- \\
        --model qwen2.5-coder-1.5b --chat --max-new-tokens 48 --prompt "Write a quicksort in C."

Everything after `--` goes to `specdec generate` on both sides (`--json` is added). The figure
compared is the decode speed (`tokens_per_s`: generated tokens after the first / decode time),
so model loading and prefill are left out. Both binaries run from this repository's root so
that model names resolve through configs/models.yaml.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def busy_jiffies():
    """Busy and total jiffies of all CPUs from /proc/stat (idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])
    return total - v[3] - v[4], total


def run(binary, args, root):
    """Runs one generation; returns (tokens/s, foreign cores during it)."""
    b0, _ = busy_jiffies()
    r0 = os.times()
    t0 = time.monotonic()
    p = subprocess.run([binary, "generate", *args, "--json"], cwd=root, capture_output=True, text=True)
    wall = time.monotonic() - t0
    b1, _ = busy_jiffies()
    r1 = os.times()
    if p.returncode != 0:
        sys.exit(f"{binary} generate failed ({p.returncode}):\n{p.stderr[-2000:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    stats = json.loads(line)
    stats = stats.get("stats", stats)
    hz = os.sysconf("SC_CLK_TCK")
    own = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    foreign = max(0.0, (b1 - b0) / hz - own) / wall
    return float(stats["tokens_per_s"]), foreign


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="baseline specdec binary")
    ap.add_argument("--b", required=True, help="candidate specdec binary")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the generate arguments")
    o = ap.parse_args()
    args = o.rest[1:] if o.rest[:1] == ["--"] else o.rest
    if not args:
        ap.error("give the generate arguments after --")
    for b in (o.a, o.b):
        if not os.access(b, os.X_OK):
            ap.error(f"'{b}' is not an executable file")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run(o.a, args, root)  # warm-up of the page cache for both (same model files)
    ratios, a_tps, b_tps, loads = [], [], [], []
    print(f"{'pair':>4} {'A tok/s':>9} {'B tok/s':>9} {'B/A':>6}  foreign cores (A, B)")
    for i in range(o.repeats):
        ta, la = run(o.a, args, root)
        tb, lb = run(o.b, args, root)
        a_tps.append(ta)
        b_tps.append(tb)
        ratios.append(tb / ta)
        loads += [la, lb]
        print(f"{i + 1:>4} {ta:9.2f} {tb:9.2f} {tb / ta:6.3f}  {la:.2f}, {lb:.2f}")
    with open("/proc/loadavg") as f:
        loadavg = f.read().split()[0]
    print(f"median: A {statistics.median(a_tps):.2f} tok/s, B {statistics.median(b_tps):.2f} tok/s, "
          f"B/A {statistics.median(ratios):.3f} [min {min(ratios):.3f}, max {max(ratios):.3f}]; "
          f"foreign cores max {max(loads):.2f}; loadavg at end {loadavg}")


if __name__ == "__main__":
    main()
