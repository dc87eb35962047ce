"""The harness from Python: an experiment run with specdec.run writes the same results as
`specdec run`; validate / run raise specdec.Error naming the file, key path and value;
read_run gives plain structures; Python drafters run inside an experiment, where the
harness's distribution checks test their output law at temperature > 0."""
import json
import os

import numpy as np
import pytest

import specdec
from conftest import ROOT, cli

TINY = os.path.join(ROOT, "experiments", "tiny_ci.yaml")
SMALL = ["repeats=1", "warmup=0", "plots=false", "sweep.gamma=[3]", "checks.first_token.samples=300",
         "checks.sequence.samples=100"]

# What a generation is, without how long it took.
SAMPLE_KEYS = ("cell", "prompt", "repeat", "role", "seed", "finish", "n_generated", "n_prompt", "n_drafted",
               "n_accepted", "n_target_forwards", "text", "tokens")


def samples(run):
    return [{k: s.get(k) for k in SAMPLE_KEYS} for s in run["samples"]]


def checks(run):
    return [(c["key"], [(k["name"], k["pass"], k.get("p_value")) for k in c["checks"]]) for c in run["metrics"]["cells"]]


def test_run_from_python_writes_what_specdec_run_writes(tmp_path):
    out_cli, out_py = tmp_path / "cli", tmp_path / "py"
    args = ["run", TINY, "--out", out_cli, "-q"]
    for s in SMALL:
        args += ["--set", s]
    cli(*args)
    outcome = specdec.run(TINY, out=out_py, overrides=SMALL, progress=False)
    assert outcome["checks_passed"] and outcome["n_finished"] == outcome["n_cells"] == 5
    a, b = specdec.read_run(out_cli), specdec.read_run(out_py)
    assert len(a["samples"]) == len(b["samples"]) > 0
    assert samples(a) == samples(b)
    assert checks(a) == checks(b)
    assert [r["key"] for r in a["summary"]] == [r["key"] for r in b["summary"]]
    assert a["config"] == b["config"]
    assert sorted(os.listdir(out_cli)) == sorted(os.listdir(out_py))
    # pandas-friendly: flat rows with typed values
    row = b["summary"][0]
    assert isinstance(row["tok_s_median"], float) and isinstance(row["n_prompts"], int)


def test_resume_skips_finished_cells(tmp_path):
    out = tmp_path / "r"
    first = specdec.run(TINY, out=out, overrides=SMALL + ["checks.first_token=false", "checks.sequence=false"],
                        progress=False, cells="0:2")
    assert first["n_finished"] == 2
    again = specdec.run(TINY, out=out, overrides=SMALL + ["checks.first_token=false", "checks.sequence=false"],
                        progress=False, resume=True)
    assert again["n_resumed"] == 2 and again["n_finished"] == again["n_cells"]


def test_experiment_as_dict_and_errors(tmp_path):
    exp = {"name": "py_dict", "models": {"target": {"name": "tiny-llama", "seed": 0}, "threads": 1},
           "prompts": [{"text": "the quick brown fox"}], "strategies": [{"name": "greedy", "params": {"temperature": 0}}],
           "repeats": 1, "warmup": 0, "max_new_tokens": 6, "plots": False}
    assert "greedy" in specdec.validate(exp)
    out = specdec.run(exp, out=tmp_path / "d", progress=False)
    run = specdec.read_run(out["run_dir"])
    assert run["metrics"]["cells"][0]["n_generated"] == 6
    with pytest.raises(specdec.Error, match=r"<dict>.*strategies\[0\].*'nope'"):
        specdec.validate({**exp, "strategies": [{"name": "nope"}]})
    with pytest.raises(specdec.Error, match="repeats"):
        specdec.validate(exp, overrides={"repeats": -3})
    with pytest.raises(specdec.Error, match="gamma"):
        specdec.validate({**exp, "strategies": [{"name": "speculative", "params": {"gamma": "x"}}]})
    with pytest.raises(specdec.Error, match="no_such.yaml"):
        specdec.run(os.path.join(ROOT, "no_such.yaml"), out=tmp_path / "x", progress=False)


class TokensOnlyRandom(specdec.Drafter):
    """Random tokens and no q: the verifier treats them as fixed proposals (lossless)."""

    def __init__(self, ctx):
        self.v = ctx["n_vocab"]
        self.rng = np.random.default_rng(ctx["seed"])

    def propose(self, context, max_depth):
        return self.rng.integers(0, self.v, size=max_depth)


class RandomQ(specdec.Drafter):
    """A q unrelated to the target (a random distribution per round), tokens drawn from it."""

    def __init__(self, ctx):
        self.v = ctx["n_vocab"]
        self.rng = np.random.default_rng(ctx["seed"] + 1)

    def propose(self, context, max_depth):
        q = self.rng.dirichlet(np.full(self.v, 0.3), size=max_depth)
        tokens = [self.rng.choice(self.v, p=row) for row in q]
        return np.asarray(tokens), None, q


def law_experiment(drafter, out, extra=()):
    return specdec.run(TINY, out=out, progress=False,
                       overrides=["repeats=1", "warmup=0", "plots=false", "sweep={}",
                                  "strategies=[{name: speculative, label: " + drafter + ", params: {drafter: "
                                  + drafter + ", gamma: 3, temperature: 1.0}}]",
                                  "checks.first_token.samples=2000", "checks.sequence.samples=600", *extra])


@pytest.mark.parametrize("drafter,factory", [("py_tokens_random", TokensOnlyRandom), ("py_random_q", RandomQ)])
def test_wrong_python_drafters_pass_the_harness_law_checks_at_t1(tmp_path, drafter, factory):
    # tiny_ci's checks at significance 0.001: first token (2000 samples, 8 bins + other) vs the
    # exact target p, and baseline vs candidate over 3 positions (600 samples each).
    specdec.register_drafter(drafter, factory, replace=True)
    try:
        ok = law_experiment(drafter, tmp_path / "ok")
        run = specdec.read_run(ok["run_dir"])
        cell = run["metrics"]["cells"][0]
        assert {c["name"] for c in cell["checks"]} == {"first_token", "sequence"}, cell["checks"]
        assert ok["checks_passed"], [c["detail"] for c in cell["checks"]]
        assert cell["n_drafted"] > cell["n_accepted"] > 0
        first = next(c for c in cell["checks"] if c["name"] == "first_token")
        # Power: the total-variation distance from p that this first-token test detects with
        # probability 0.8 (about 0.06 here, for 2000 samples in 9 bins at significance 0.001).
        assert 0 < first["detectable_tv"] < 0.1, first
        print(drafter, f"detectable TV {first['detectable_tv']:.3f}", [c["detail"] for c in cell["checks"]])
        # The same checks catch a verifier bug on this path (power, not luck): the planted
        # residual bug fails them.
        bad = law_experiment(drafter, tmp_path / "bug", ["checks.inject_residual_bug=true"])
        assert not bad["checks_passed"]
    finally:
        specdec.unregister_drafter(drafter)


def test_ctrl_c_stops_a_run_which_then_resumes(tmp_path):
    import signal
    import threading
    import time
    out = tmp_path / "int"
    slow = ["repeats=100", "warmup=0", "plots=false", "sweep={}", "max_new_tokens=48", "checks.first_token=false",
            "checks.sequence=false"]
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))  # the run takes ~4 s
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="resume=True"):
        specdec.run(TINY, out=out, overrides=slow, progress=False)
    timer.join()
    assert time.monotonic() - t0 < 30
    # Python's own Ctrl-C handling is back: a SIGINT now interrupts Python code.
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    done = specdec.run(TINY, out=out, overrides=slow, progress=False, resume=True)
    assert done["n_finished"] == done["n_cells"] and not done["interrupted"]
    assert done["n_resumed"] < done["n_cells"]
