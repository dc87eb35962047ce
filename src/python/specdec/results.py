"""A run folder (results/<experiment>/<run-id>/) as plain Python structures.

Lists of flat dicts load straight into pandas (pandas.DataFrame(run["summary"])) without
specdec depending on pandas. Only the standard library reads them: these files are the
harness's documented output (metrics.json, cells.jsonl, samples.jsonl, summary.csv).
"""
import csv
import json
import os


def _number(text):
    # summary.csv holds numbers, booleans and text; give each its Python type.
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_run(run_dir):
    """{"run_dir", "metrics" (metrics.json), "cells" (cells.jsonl: one dict per finished cell),
    "samples" (samples.jsonl: one dict per generation), "summary" (summary.csv rows, typed),
    "env" (env.json), "config" (config.yaml as text), "report" (report.md as text)}."""
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"read_run: '{run_dir}' is not a run folder")

    def text(name):
        p = os.path.join(run_dir, name)
        if not os.path.exists(p):
            return None
        with open(p, encoding="utf-8") as f:
            return f.read()

    def js(name):
        t = text(name)
        return json.loads(t) if t is not None else None

    summary = []
    p = os.path.join(run_dir, "summary.csv")
    if os.path.exists(p):
        with open(p, newline="", encoding="utf-8") as f:
            summary = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return {"run_dir": run_dir, "metrics": js("metrics.json"), "cells": _jsonl(os.path.join(run_dir, "cells.jsonl")),
            "samples": _jsonl(os.path.join(run_dir, "samples.jsonl")), "summary": summary, "env": js("env.json"),
            "config": text("config.yaml"), "report": text("report.md")}
