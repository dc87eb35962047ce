"""specdec.generate against `specdec generate --json`: the same tokens for every registered
strategy (and every drafter of the speculative one), the stats as a dict, streaming, Ctrl-C,
and errors that name the key or value."""
import os
import signal
import threading
import time

import pytest

import specdec
from conftest import cli_generate

PROMPT = "Write a short list of fruits: apple, banana, apple, banana,"
N = 20

# Each strategy with parameters that make it do its own work (sampling at T > 0 is seeded).
STRATEGY_CASES = [
    ("greedy", {}),
    ("sampling", {"temperature": 0.8, "top_k": 20}),
    ("beam", {"num_beams": 2, "temperature": 0}),
    ("speculative", {"drafter": "ngram", "temperature": 0.8}),
]


def test_every_strategy_is_covered():
    names = {s["name"] for s in specdec.strategies()}
    assert names == {name for name, _ in STRATEGY_CASES}, "add a case to STRATEGY_CASES for each new strategy"


@pytest.mark.parametrize("strategy,params", STRATEGY_CASES, ids=[c[0] for c in STRATEGY_CASES])
def test_generate_equals_cli(smol, strategy, params):
    py = specdec.generate(smol, PROMPT, strategy=strategy, max_new_tokens=N, seed=3, **params)
    cli = cli_generate("smollm2-135m", PROMPT, N, strategy, sorted(params.items()), ["--seed", 3])
    assert py["tokens"] == cli["tokens"]
    assert py["text"] == cli["text"]
    for key in ("n_generated", "n_rounds", "n_drafted", "n_accepted", "accepted_per_position",
                "drafted_per_position", "verify_modes", "finish"):
        assert py["stats"][key] == cli["stats"][key], key


def drafter_args(d, q4_draft):
    params = {"drafter": d["name"], "temperature": 0}
    if d["name"] == "tree":
        params["tree_branching"] = [3, 2, 1]
    extra = ["--draft", "smollm2-135m", "--draft-dtype", "q4_1"] if d["needs_draft_model"] else []
    return params, (q4_draft if d["needs_draft_model"] else None), extra


BUILTIN_DRAFTERS = [d["name"] for d in specdec.drafters() if not d["python"]]


@pytest.mark.parametrize("name", BUILTIN_DRAFTERS)
def test_speculative_every_drafter_equals_cli_and_greedy(smol, smol_q4, name):
    d = next(x for x in specdec.drafters() if x["name"] == name)
    params, draft, extra = drafter_args(d, smol_q4)
    try:
        py = specdec.generate(smol, PROMPT, strategy="speculative", draft=draft, max_new_tokens=N, **params)
    except specdec.Error as e:
        if "needs a trained" not in str(e):
            raise
        pytest.skip(f"drafter {name} needs trained weights this test does not make: {e}")
    cli = cli_generate("smollm2-135m", PROMPT, N, "speculative", sorted(params.items()), extra)
    assert py["tokens"] == cli["tokens"]
    assert py["stats"]["n_rounds"] == cli["stats"]["n_rounds"]
    assert py["stats"]["accepted_per_position"] == cli["stats"]["accepted_per_position"]
    greedy = specdec.generate(smol, PROMPT, max_new_tokens=N, temperature=0)
    assert py["tokens"] == greedy["tokens"]


def test_stats_dict(smol):
    out = specdec.generate(smol, PROMPT, strategy="speculative", drafter="ngram", temperature=0, max_new_tokens=N)
    st = out["stats"]
    assert out["finish"] in ("length", "eos")
    assert len(out["tokens"]) == st["n_generated"] > 0
    assert 0 <= st["alpha"] <= 1 and st["tau"] >= 1
    assert len(st["accepted_per_position"]) == len(st["drafted_per_position"]) == 8  # gamma_max
    assert set(st["phases"]["ms"]) >= {"prefill", "draft", "verify", "sample", "rollback"}
    assert st["n_accepted"] == sum(st["accepted_per_position"])


def test_prompt_as_token_ids_and_tokenizer(smol):
    ids = smol.encode(PROMPT)
    assert smol.decode(ids, skip_special=True).strip() == PROMPT
    a = specdec.generate(smol, PROMPT, max_new_tokens=8, temperature=0)
    b = specdec.generate(smol, ids, max_new_tokens=8, temperature=0)
    assert a["tokens"] == b["tokens"]
    info = smol.info()
    assert info["n_vocab"] == 49152 and info["n_layers"] == 30
    assert info["resident_bytes"] > 0 and info["weight_bytes"] > 0


def test_stream_yields_the_same_tokens(smol):
    s = specdec.stream(smol, PROMPT, strategy="speculative", drafter="ngram", temperature=0, max_new_tokens=N)
    chunks = list(s)
    assert len(chunks) >= 2
    assert [t for toks, _ in chunks for t in toks] == s.result["tokens"]
    assert "".join(text for _, text in chunks) == s.result["text"]
    # Leaving early stops the generation.
    s2 = specdec.stream(smol, PROMPT, max_new_tokens=200, temperature=0)
    next(iter(s2))
    s2.close()
    assert not s2._thread.is_alive()


def test_on_token_exception_propagates(smol):
    def boom(tokens, text):
        raise ZeroDivisionError("from on_token")
    with pytest.raises(ZeroDivisionError, match="from on_token"):
        specdec.generate(smol, PROMPT, max_new_tokens=8, on_token=boom)
    assert len(specdec.generate(smol, PROMPT, max_new_tokens=4)["tokens"]) == 4  # still usable


def test_ctrl_c_interrupts_a_generation(smol):
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        specdec.generate(smol, PROMPT, max_new_tokens=2000, temperature=0)  # ~1 minute uninterrupted
    assert time.monotonic() - t0 < 5
    assert len(specdec.generate(smol, PROMPT, max_new_tokens=4)["tokens"]) == 4


@pytest.mark.parametrize("kwargs,needle", [
    ({"strategy": "nope"}, "unknown strategy 'nope'"),
    ({"temperature": -1}, "'temperature'"),
    ({"top_p": 0}, "'top_p'"),
    ({"bogus_key": 1}, "unknown parameter 'bogus_key'"),
    ({"strategy": "speculative", "gamma": "four"}, "'gamma'"),
    ({"strategy": "speculative", "drafter": "oracle"}, "unknown drafter 'oracle'"),
    ({"strategy": "speculative", "drafter": "model"}, "needs draft="),
    ({"strategy": "speculative", "ngram_min": 5, "ngram_max": 2}, "ngram_min"),
    ({"seed": -1}, "seed"),
])
def test_bad_input_raises_error_naming_it(smol, kwargs, needle):
    with pytest.raises(specdec.Error, match=needle.replace("(", r"\(")):
        specdec.generate(smol, PROMPT, max_new_tokens=4, **kwargs)
    assert issubclass(specdec.Error, ValueError)


def test_bad_model_and_prompt(smol):
    with pytest.raises(specdec.Error, match="no-such-model"):
        specdec.load("no-such-model")
    with pytest.raises(specdec.Error, match="token id 999999"):
        specdec.generate(smol, [1, 999999], max_new_tokens=4)
    with pytest.raises(specdec.Error, match="parameter 'gamma'"):
        specdec.generate(smol, PROMPT, strategy="speculative", gamma=object())


def test_registries(smol):
    spec = next(s for s in specdec.strategies() if s["name"] == "speculative")
    assert {"gamma", "gamma_max", "drafter"} <= {p["name"] for p in spec["params"]}
    ngram = next(d for d in specdec.drafters() if d["name"] == "ngram")
    assert [p["name"] for p in ngram["params"]] == ["ngram_min", "ngram_max"]
    assert {p["name"] for p in specdec.processor_params()} >= {"temperature", "top_k", "top_p"}
    assert specdec.resolve_params("speculative", gamma=3)["gamma"] == "3"
