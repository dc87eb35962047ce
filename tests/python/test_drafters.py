"""Drafters written in Python, run by the C++ speculative loop and verified by the C++ verifier.

- A Python port of the n-gram drafter equals the C++ `ngram` drafter token for token and round
  for round (the drafts of every round, the accepted path, the per-position counts).
- Deliberately wrong drafters (random tokens; a q that is not the one the tokens came from)
  still give exactly greedy's tokens at temperature 0: the verifier, not the drafter, decides.
  At temperature > 0 nothing can make such a drafter lossless: a q that is not the law of its
  tokens biases the output (computed exactly in tests/unit/test_strategies_drafter_contract.cpp).
  test_harness.py checks the law at temperature 1 of honest drafters only (random tokens
  without q; tokens drawn from the random q they hand over).
- A drafter's context carries its own seed (derived, not the verifier's), and its q rows reach
  the verifier divided by their sums.
- What a Python drafter returns is checked, and a bad answer is a specdec.Error naming the
  drafter and the problem.
"""
import numpy as np
import pytest

import specdec
from specdec.examples import NgramDrafter as PyNgram

PROMPTS = [
    "Write a short list of fruits: apple, banana, apple, banana,",
    'Repeat exactly: "a b c == a b c == a b c == 1111111111"',
    'def is_prime(n):\n    """Return True when n is a prime number."""\n',
]
N = 32




@pytest.fixture(scope="module", autouse=True)
def registered():
    specdec.register_drafter("py_ngram", PyNgram, "Python port of ngram", replace=True)
    yield
    specdec.unregister_drafter("py_ngram")


def rounds(out):
    # Each round's draft (tokens, parents), accepted path and committed tokens.
    return [([n["token"] for n in r["nodes"]], [n["parent"] for n in r["nodes"]], r["path"],
             [e["token"] for e in r["emitted"]]) for r in out["trace"]["rounds"]]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.95},
                                    {"temperature": 0, "ngram_min": 2, "ngram_max": 4, "gamma": 6}])
def test_python_ngram_port_equals_cpp_ngram_round_for_round(smol, prompt, params):
    cpp = specdec.generate(smol, prompt, strategy="speculative", drafter="ngram", max_new_tokens=N, seed=5,
                           trace=True, **params)
    py = specdec.generate(smol, prompt, strategy="speculative", drafter="py_ngram", max_new_tokens=N, seed=5,
                          trace=True, **params)
    assert py["tokens"] == cpp["tokens"]
    assert rounds(py) == rounds(cpp)
    for key in ("n_rounds", "n_drafted", "n_accepted", "accepted_per_position", "drafted_per_position",
                "verify_modes"):
        assert py["stats"][key] == cpp["stats"][key], key


def test_the_round_comparison_can_fail(smol):
    # A port that drafts one token fewer than allowed gives the same text (the verifier sees to
    # that) but different rounds: the test above would catch such a port.
    class Short(PyNgram):
        def propose(self, context, max_depth):
            return super().propose(context, max_depth)[:max(max_depth - 1, 1)]
    specdec.register_drafter("py_ngram_short", Short)
    try:
        cpp = specdec.generate(smol, PROMPTS[1], strategy="speculative", drafter="ngram", temperature=0,
                               max_new_tokens=N, trace=True)
        py = specdec.generate(smol, PROMPTS[1], strategy="speculative", drafter="py_ngram_short", temperature=0,
                              max_new_tokens=N, trace=True)
    finally:
        specdec.unregister_drafter("py_ngram_short")
    assert py["tokens"] == cpp["tokens"]
    assert rounds(py) != rounds(cpp)


class RandomDrafter(PyNgram):
    """Deliberately wrong: n-gram drafts with random corruptions, random sibling branches (token
    trees) and random q rows unrelated to the target or to how the tokens were chosen."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.v = ctx["n_vocab"]
        self.rng = np.random.default_rng(ctx["seed"] + 11)

    def propose(self, context, max_depth):
        tokens = super().propose(context, max_depth).astype(np.int64)
        if len(tokens) == 0:
            tokens = self.rng.integers(0, self.v, size=int(self.rng.integers(1, max_depth + 1)))
        tokens[self.rng.random(len(tokens)) < 0.3] = self.rng.integers(0, self.v)  # corrupt some
        k = len(tokens)
        parents = np.arange(-1, k - 1)
        if k >= 2 and len(tokens) < max_depth + 1:  # a random sibling of the last node: a tree
            tokens = np.append(tokens, self.rng.integers(0, self.v))
            parents = np.append(parents, parents[-1])
        q = self.rng.random((len(tokens), self.v), dtype=np.float32) + 1e-3
        q /= q.sum(axis=1, keepdims=True)
        return tokens, parents, q


def test_wrong_python_drafter_still_gives_greedy_tokens_at_t0(smol):
    specdec.register_drafter("py_random", RandomDrafter, replace=True)
    totals = {"n_tree_rounds": 0, "n_drafted": 0, "n_accepted": 0}
    try:
        for prompt in PROMPTS:
            for processors in ({}, {"repetition_penalty": 1.3}, {"min_p": 0.1, "top_k": 5}):
                out = specdec.generate(smol, prompt, strategy="speculative", drafter="py_random", temperature=0,
                                       max_new_tokens=N, seed=1, **processors)
                greedy = specdec.generate(smol, prompt, max_new_tokens=N, temperature=0, **processors)
                assert out["tokens"] == greedy["tokens"], (prompt, processors)
                for k in totals:
                    totals[k] += out["stats"][k]
    finally:
        specdec.unregister_drafter("py_random")
    # It did draft trees, and drafts were both accepted and rejected (rollback ran).
    assert totals["n_tree_rounds"] > 0 and totals["n_drafted"] > totals["n_accepted"] > 0, totals


def bad_answer(answer):
    class Bad(specdec.Drafter):
        def propose(self, context, max_depth):
            return answer(context, max_depth)
    return Bad


V = 49152


@pytest.mark.parametrize("answer,needle", [
    (lambda c, d: np.array([V]), r"token id 49152 at index 0, outside the vocabulary \[0, 49152\)"),
    (lambda c, d: np.array([-1]), "token id -1"),
    (lambda c, d: np.zeros((2, 2), np.int64), "tokens of 2 dimensions"),
    (lambda c, d: np.array([0.5]), "tokens of dtype float64"),
    (lambda c, d: np.zeros(d + 1, np.int64), "deep; this round allows max_depth"),
    (lambda c, d: (np.zeros(2, np.int64), np.array([-1, 1])), r"parents\[1\] = 1"),
    (lambda c, d: (np.zeros(2, np.int64), np.array([-1])), "parents that are not a 1-D array of 2"),
    (lambda c, d: (np.zeros(1, np.int64), None, np.ones((1, 5))), r"q of shape \[1, 5\]"),
    (lambda c, d: (np.zeros(1, np.int64), None, np.ones((1, V))), "summing to 49152"),
    (lambda c, d: (np.zeros(1, np.int64), None, np.full((1, V), -1.0)), "finite and >= 0"),
    (lambda c, d: (np.array([3]), None, np.eye(1, V)), "it was not drawn from q"),
    (lambda c, d: (1, 2, 3, 4), "a tuple of 4 items"),
])
def test_bad_python_drafter_answers_are_named_errors(smol, answer, needle):
    specdec.register_drafter("py_bad", bad_answer(answer), replace=True)
    try:
        with pytest.raises(specdec.Error, match="python drafter 'py_bad': propose\\(\\) returned .*" + needle):
            specdec.generate(smol, PROMPTS[0], strategy="speculative", drafter="py_bad", max_new_tokens=8)
    finally:
        specdec.unregister_drafter("py_bad")


def test_python_exception_in_propose_propagates(smol):
    class Raises(specdec.Drafter):
        def propose(self, context, max_depth):
            raise KeyError("inside propose")
    specdec.register_drafter("py_raises", Raises)
    try:
        with pytest.raises(KeyError, match="inside propose"):
            specdec.generate(smol, PROMPTS[0], strategy="speculative", drafter="py_raises", max_new_tokens=8)
    finally:
        specdec.unregister_drafter("py_raises")


def test_registration_errors():
    with pytest.raises(specdec.Error, match="'py_ngram' is already registered"):
        specdec.register_drafter("py_ngram", PyNgram)
    with pytest.raises(specdec.Error, match=r"'ngram' is already registered \(built in\)"):
        specdec.register_drafter("ngram", PyNgram)
    with pytest.raises(specdec.Error, match="bad drafter name 'a-b'"):
        specdec.register_drafter("a-b", PyNgram)
    with pytest.raises(specdec.Error, match="'auto'"):
        specdec.register_drafter("auto", PyNgram)
    with pytest.raises(specdec.Error, match="not callable"):
        specdec.register_drafter("py_x", 42)
    with pytest.raises(specdec.Error, match="'ngram' is a built-in drafter"):
        specdec.unregister_drafter("ngram")
    with pytest.raises(specdec.Error, match="unknown drafter 'py_nothing'"):
        specdec.unregister_drafter("py_nothing")
    listed = {d["name"]: d for d in specdec.drafters()}
    assert listed["py_ngram"]["python"] and not listed["ngram"]["python"]
    assert listed["py_ngram"]["description"] == "Python port of ngram"


def test_decorator_and_observe_hooks(smol):
    seen = {"commits": 0, "prefill": None}

    @specdec.drafter("py_repeat_last")
    class RepeatLast(specdec.Drafter):
        """proposes the last token again"""

        def prefill(self, tokens):
            seen["prefill"] = len(tokens)

        def propose(self, context, max_depth):
            return [int(context[-1])] * max_depth

        def observe(self, n_valid, accepted):
            seen["commits"] += 1

    try:
        out = specdec.generate(smol, PROMPTS[1], strategy="speculative", drafter="py_repeat_last", temperature=0,
                               max_new_tokens=N)
    finally:
        specdec.unregister_drafter("py_repeat_last")
    assert seen["commits"] == out["stats"]["n_rounds"] > 0
    assert seen["prefill"] == out["n_prompt"] - 1
    assert out["tokens"] == specdec.generate(smol, PROMPTS[1], max_new_tokens=N, temperature=0)["tokens"]


def test_drafter_context_seed_is_derived_from_the_request_seed(smol):
    # C++ drafter_seed: m(m(seed) ^ 0x64726166746572) with m SplitMix64's finaliser, so the
    # drafter's randomness is not the verifier's (an Rng seeded with the request's seed).
    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        return z ^ (z >> 31)
    seen = []

    class Capture(specdec.Drafter):
        def __init__(self, ctx):
            seen.append(ctx["seed"])

        def propose(self, context, max_depth):
            return []
    specdec.register_drafter("py_capture", Capture)
    try:
        for seed in (5, 5, 6):
            specdec.generate(smol, PROMPTS[0], strategy="speculative", drafter="py_capture", max_new_tokens=2,
                             seed=seed)
    finally:
        specdec.unregister_drafter("py_capture")
    assert seen == [mix(mix(s) ^ 0x64726166746572) for s in (5, 5, 6)]
    assert seen[0] == 0x75b425648a618eed  # as test_strategies_drafter_contract's DrafterSeed test


def test_q_rows_reach_the_verifier_divided_by_their_sums(smol):
    # A row summing to 1.0005 (within the 1e-3 the check allows) goes on as a distribution: the
    # trace shows the verifier's q of the drafted token, 0.6003 / 1.0005 = 0.6.
    class Off(specdec.Drafter):
        def propose(self, context, max_depth):
            token, other = int(context[-1]), (int(context[-1]) + 1) % V
            q = np.zeros((1, V), np.float32)
            q[0, token], q[0, other] = 0.6003, 0.4002
            return np.array([token]), None, q
    specdec.register_drafter("py_off", Off)
    try:
        out = specdec.generate(smol, PROMPTS[0], strategy="speculative", drafter="py_off", temperature=0.9,
                               max_new_tokens=4, seed=3, trace=True)
    finally:
        specdec.unregister_drafter("py_off")
    nodes = [n for r in out["trace"]["rounds"] for n in r["nodes"]]
    assert nodes and all(abs(n["q"] - 0.6) < 1e-6 for n in nodes), [n["q"] for n in nodes]
