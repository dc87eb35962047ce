#!/usr/bin/python3
"""Plots of one specdec run folder (called by `specdec run`; also runnable by hand).

    /usr/bin/python3 scripts/plot_results.py results/<experiment>/<run-id>

Reads metrics.json and writes next to it:
  speedup_vs_gamma.png        measured speedup (median, min-max bars) vs gamma, one line per
                              strategy and temperature; Leviathan et al.'s prediction dashed
  acceptance_by_position.png  acceptance rate per draft position, one line per cell
  tok_s_per_strategy.png      tok/s per cell (median, min-max bars) with its baseline
  speedup_per_category.png    Spec-Bench's speedup (mean question tok/s / the baseline's) per
                              prompt category and overall, one bar per cell (runs with several
                              categories only)
  batch_scaling.png           runs with several batch sizes (batch_size swept): tok/s of each
                              strategy and of its autoregressive baseline, the speedup, and the
                              share of wall time in target forwards that verify (or decode) without
                              prefilling a prompt, vs batch size
Uses Debian's python3-matplotlib (run with /usr/bin/python3, not a venv python).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cell_name(c):
    point = " ".join(f"{k}={v}" for k, v in sorted(c["point"].items()))
    return c["label"] + (f" [{point}]" if point else "")


def plot_speedup_vs_gamma(cells, out):
    series = {}
    for c in cells:
        if c["gamma"] <= 0:
            continue
        temp = c["params"].get("temperature", "?")
        batch = c["params"].get("batch_size")
        series.setdefault((c["label"] + (f" B={batch}" if batch else ""), temp), []).append(c)
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, temp), cs in sorted(series.items()):
        cs.sort(key=lambda c: c["gamma"])
        g = [c["gamma"] for c in cs]
        med = [c["speedup"]["median"] for c in cs]
        lo = [c["speedup"]["median"] - c["speedup"]["min"] for c in cs]
        hi = [c["speedup"]["max"] - c["speedup"]["median"] for c in cs]
        line = ax.errorbar(g, med, yerr=[lo, hi], marker="o", capsize=3, label=f"{label} T={temp}")
        pred = [c["predicted_speedup"] for c in cs]
        if any(p > 0 for p in pred):
            ax.plot(g, pred, linestyle="--", color=line[0].get_color(), alpha=0.6)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("gamma (draft tokens per round)")
    ax.set_ylabel("speedup vs autoregressive (measured; dashed: predicted)")
    ax.set_title("Speedup vs gamma per temperature")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_acceptance(cells, out):
    rows = [c for c in cells if c["acceptance_per_position"]]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in rows:
        acc = c["acceptance_per_position"]
        ax.plot(range(1, len(acc) + 1), acc, marker="o", label=cell_name(c))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance by draft position")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_tok_s(cells, out):
    if not cells:
        return False
    names = [cell_name(c) for c in cells]
    med = [c["tok_s"]["median"] for c in cells]
    err = [[c["tok_s"]["median"] - c["tok_s"]["min"] for c in cells],
           [c["tok_s"]["max"] - c["tok_s"]["median"] for c in cells]]
    base = [c["baseline_tok_s"]["median"] for c in cells]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(cells) + 3), 4.5))
    x = range(len(cells))
    ax.bar(x, med, yerr=err, capsize=3, label="strategy")
    ax.scatter(x, base, color="black", marker="_", s=300, label="its baseline", zorder=3)
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("tokens / s")
    ax.set_title("Throughput per strategy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


SPEC_BENCH_GROUPS = ["multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag"]


def plot_speedup_per_category(cells, out):
    cells = [c for c in cells if c.get("baseline") and len(c.get("categories", {})) > 1]
    if not cells:
        return False
    present = {k for c in cells for k in c["categories"]}
    cols = [g for g in SPEC_BENCH_GROUPS if g in present] + sorted(present - set(SPEC_BENCH_GROUPS))
    groups = cols + ["overall"]
    width = 0.8 / len(cells)
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(groups) + 2), 4.5))
    for i, c in enumerate(cells):
        ys = [c["categories"].get(g, {}).get("mean_speedup", 0) for g in cols] + [c.get("mean_speedup", 0)]
        xs = [j + (i - (len(cells) - 1) / 2) * width for j in range(len(groups))]
        ax.bar(xs, ys, width=width, label=cell_name(c))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(range(len(groups))))
    ax.set_xticklabels(groups, rotation=20, ha="right")
    ax.set_ylabel("speedup over autoregressive (mean tok/s)")
    ax.set_title("Speedup per category (Spec-Bench's definition)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def batch_of(c):
    return int(c["params"].get("batch_size", 1))


def plot_batch_scaling(cells, out):
    cells = [c for c in cells if "batch_size" in c["params"]]
    if len({batch_of(c) for c in cells}) < 2:
        return False
    series = {}
    for c in cells:
        point = " ".join(f"{k}={v}" for k, v in sorted(c["point"].items()) if k != "batch_size")
        series.setdefault(c["label"] + (f" [{point}]" if point else ""), []).append(c)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for name, cs in sorted(series.items()):
        cs.sort(key=batch_of)
        b = [batch_of(c) for c in cs]
        line = axes[0].plot(b, [c["tok_s"]["median"] for c in cs], marker="o", label=name)[0]
        if any(c.get("baseline") for c in cs):
            axes[0].plot(b, [c["baseline_tok_s"]["median"] for c in cs], marker="x", linestyle="--",
                         color=line.get_color(), label=f"{name}: its autoregressive baseline")
            axes[1].plot(b, [c["speedup"]["median"] for c in cs], marker="o", color=line.get_color(), label=name)

        def verify_share(ph):
            return ph["ms"].get("verify", 0) / ph["wall_ms"] if ph.get("wall_ms", 0) > 0 else 0

        axes[2].plot(b, [verify_share(c["phases"]) for c in cs], marker="o", color=line.get_color(), label=name)
        if any(c.get("baseline") for c in cs):
            axes[2].plot(b, [verify_share(c["baseline_phases"]) for c in cs], marker="x", linestyle="--",
                         color=line.get_color(), label=f"{name}: baseline")
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    titles = ["Throughput (all sequences)", "Speedup over autoregressive",
              "Share of time in verification forwards"]
    ylabels = ["tokens / s", "speedup (tok/s ratio, same batch size)",
               "verify phase / wall (rounds that prefill a prompt: prefill)"]
    for ax, t, y in zip(axes, titles, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(y)
        ax.set_title(t)
        ax.legend(fontsize=7)
    axes[2].set_ylim(0, 1.05)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 1
    run = sys.argv[1]
    with open(os.path.join(run, "metrics.json")) as f:
        cells = json.load(f)["cells"]
    made = []
    for name, fn in [("speedup_vs_gamma.png", plot_speedup_vs_gamma),
                     ("acceptance_by_position.png", plot_acceptance),
                     ("tok_s_per_strategy.png", plot_tok_s),
                     ("speedup_per_category.png", plot_speedup_per_category),
                     ("batch_scaling.png", plot_batch_scaling)]:
        if fn(cells, os.path.join(run, name)):
            made.append(name)
    print(" ".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
