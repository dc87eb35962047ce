#!/usr/bin/env python3
"""Where a build's and a test run's time went, as Markdown tables for docs/ci.md.

    python3 scripts/ci_times.py build [build-asan ...]

For each build folder: the compile and link time of each target (the sum of its steps' times in
Ninja's .ninja_log, so CPU-seconds of steps that ran two at a time on 2 cores), then the time of
each ctest entry in its last run (Testing/Temporary/CTestCostData.txt), longest first, with its
labels. Reads only; run it after a build and a ctest run of that folder.
"""
import collections
import json
import os
import re
import subprocess
import sys


def target_of(output):
    """The CMake target a Ninja output belongs to."""
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    if m:
        return m.group(1)
    return os.path.basename(output)  # a link step: the executable or library itself


def compile_table(build):
    log = os.path.join(build, ".ninja_log")
    if not os.path.exists(log):
        return f"({log} not found: not a Ninja build)\n"
    latest = {}  # output -> (start, end): the last build of each output
    with open(log) as f:
        for line in f:
            if line.startswith("#"):
                continue
            start, end, _, output, _ = line.rstrip("\n").split("\t")
            latest[output] = (int(start), int(end))
    per = collections.defaultdict(float)
    steps = collections.Counter()
    for output, (s, e) in latest.items():
        t = target_of(output)
        if t.endswith(".a"):
            t = t[3:-2] if t.startswith("lib") else t
        per[t] += (e - s) / 1000
        steps[t] += 1
    total = sum(per.values())
    rows = [f"| target | steps | seconds |", "|---|---|---|"]
    for t, sec in sorted(per.items(), key=lambda x: -x[1]):
        if sec >= 1:
            rows.append(f"| `{t}` | {steps[t]} | {sec:.0f} |")
    rows.append(f"| all ({len(latest)} steps) | | {total:.0f} |")
    return "\n".join(rows) + "\n"


def test_table(build):
    cost = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")
    if not os.path.exists(cost):
        return f"({cost} not found: no ctest run)\n"
    times = {}
    with open(cost) as f:
        for line in f:
            if line.startswith("---"):
                break
            parts = line.split()
            if len(parts) == 3:
                times[parts[0]] = float(parts[2])
    labels = {}
    try:
        out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True,
                             check=True).stdout
        for t in json.loads(out).get("tests", []):
            for p in t.get("properties", []):
                if p["name"] == "LABELS":
                    labels[t["name"]] = ",".join(p["value"])
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    rows = ["| ctest entry | labels | seconds |", "|---|---|---|"]
    for n, s in sorted(times.items(), key=lambda x: -x[1]):
        rows.append(f"| `{n}` | {labels.get(n, '')} | {s:.1f} |")
    rows.append(f"| all ({len(times)}) | | {sum(times.values()):.0f} |")
    return "\n".join(rows) + "\n"


def main():
    for build in sys.argv[1:] or ["build"]:
        print(f"### {build}: compile and link, per target\n")
        print(compile_table(build))
        print(f"### {build}: ctest entries, last run\n")
        print(test_table(build))


if __name__ == "__main__":
    main()
