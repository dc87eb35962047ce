"""specdec from Python: the C++ engine, its registries and its harness.

    import specdec
    m = specdec.load("smollm2-135m")
    out = specdec.generate(m, "def fib(n):", strategy="speculative", drafter="ngram", temperature=0)
    print(out["text"], out["stats"]["alpha"], out["stats"]["tau"])

Where Python ends and C++ begins: everything below runs in C++ with the GIL released (model
loading, every strategy's decoding loop, the verifier, the harness). Python is entered only for
(a) a drafter written in Python (its propose / observe / prefill, once per round), (b) an
on_token callback or a stream() consumer, once per chunk of final tokens, and (c) the check for
Ctrl-C at those same boundaries. Acceptance is always decided by the C++ verifier.
"""
import json
import os
import queue
import threading

from . import _specdec
from ._specdec import Error, Model  # noqa: F401  (Error is a ValueError naming the key or value)
from .results import read_run  # noqa: F401

__all__ = ["Error", "Model", "load", "generate", "stream", "strategies", "drafters", "processor_params",
           "resolve_params", "Drafter", "drafter", "register_drafter", "unregister_drafter", "validate", "run",
           "read_run", "repo_root"]


def load(name, dtype="auto", device="cpu", threads=2, engine="auto", graphs="auto", threads_oversubscribe=False,
         seed=0):
    """Loads a model by catalog name (configs/models.yaml), .gguf path, HF directory or tiny-llama.

    The same choices as `specdec generate --model/--dtype/--device/--threads/--engine/--graphs`;
    seed picks a tiny random model. threads sets the engine's threads for the whole process; its
    default, 2, is the CLI's and the experiment YAML's (model::ModelOptions); 0 means all cores.
    """
    return _specdec.load(str(name), dtype, device, int(threads), engine, graphs, bool(threads_oversubscribe),
                         int(seed))


def _param_text(key, value):
    # Parameters travel as the text the CLI's --set key=value would carry.
    if key == "json_schema" and isinstance(value, (dict, list)):  # structured output: a schema as JSON text
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_param_text(key, v) for v in value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    if hasattr(value, "item"):  # a numpy scalar
        return _param_text(key, value.item())
    raise Error(f"parameter '{key}': cannot pass a value of type {type(value).__name__} ({value!r})")


def _params(params):
    return {k: _param_text(k, v) for k, v in params.items()}


def generate(model, prompt, strategy="greedy", draft=None, max_new_tokens=128, seed=0, stop=(), timeout=0.0,
             chat=False, on_token=None, trace=False, **params):
    """Generates with any registered strategy; returns {"tokens", "text", "finish", "stats", ...}.

    prompt: text (encoded with the model's tokenizer, BOS added, as the CLI) or a list of token
    ids. params: the strategy's parameters by their CLI names (HF names where HF has one):
    temperature, top_k, top_p, min_p, repetition_penalty, gamma, drafter, num_beams, ... (see
    strategies()). stats is the CLI's `generate --json` stats: phases, alpha, tau,
    accepted_per_position / drafted_per_position, ... on_token(tokens, text) is called as tokens
    become final. trace=True adds "trace": every round's draft nodes, accepted path and
    distributions (`specdec generate --trace`'s data). Ctrl-C stops the generation
    (KeyboardInterrupt).
    """
    if isinstance(stop, str):
        stop = [stop]
    return _specdec.generate(model, prompt, strategy, draft, _params(params), int(max_new_tokens), int(seed),
                             list(stop), float(timeout), bool(chat), on_token, bool(trace))


class _Cancelled(Exception):
    pass


class Stream:
    """Iterator over (tokens, text) chunks of one generation; .result holds generate()'s dict
    once the iteration has ended. The generation runs in a background thread; leaving the loop
    early (break, Ctrl-C) stops it at its next boundary."""

    def __init__(self, model, prompt, **kwargs):
        self.result = None
        self._queue = queue.Queue()
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(model, prompt, kwargs), daemon=True)
        self._thread.start()

    def _work(self, model, prompt, kwargs):
        def on_token(tokens, text):
            if self._cancel.is_set():
                raise _Cancelled()
            self._queue.put(("chunk", (tokens, text)))
        try:
            self._queue.put(("done", generate(model, prompt, on_token=on_token, **kwargs)))
        except _Cancelled:
            self._queue.put(("done", None))
        except BaseException as e:  # re-raised in the consumer's thread
            self._queue.put(("error", e))

    def __iter__(self):
        return self

    def __next__(self):
        try:
            kind, value = self._queue.get()
        except KeyboardInterrupt:
            self.close()
            raise
        if kind == "chunk":
            return value
        self._thread.join()
        if kind == "error":
            raise value
        self.result = value
        raise StopIteration

    def close(self):
        """Stops the generation (at its next chunk of tokens) and waits for it."""
        self._cancel.set()
        self._thread.join()

    def __del__(self):
        if self._thread.is_alive():
            self._cancel.set()


def stream(model, prompt, **kwargs):
    """generate() as an iterator of (tokens, text) chunks: `for tokens, text in specdec.stream(m, p): ...`"""
    return Stream(model, prompt, **kwargs)


# ---- registries ----------------------------------------------------------------------------

_python_drafters = {}  # name -> factory, the drafters this process registered


def strategies():
    """The registered strategies: [{"name", "description", "needs_draft_model", "params": [...]}]."""
    return _specdec.strategies()


def drafters():
    """The registered drafters (built in, then those written in Python), with their parameters."""
    out = _specdec.drafters()
    for d in out:
        d["python"] = d["name"] in _python_drafters
    return out


def processor_params():
    """The logits-processor parameters every strategy takes (temperature, top_k, ...)."""
    return _specdec.processor_params()


def resolve_params(strategy, **params):
    """The strategy's parameters with defaults filled in, checked as generate() checks them."""
    return _specdec.resolve_params(strategy, _params(params))


class Drafter:
    """Base class of a drafter written in Python (any object with propose() will do).

    The factory registered for it (usually the subclass itself) is called once per generation
    with a context dict: n_vocab, max_depth (gamma_max), capacity, seed, temperature, params
    (the speculative strategy's resolved parameters, as text) and prompt (int32 array). seed is
    the drafter's own: derived from generate()'s seed (C++ drafter_seed), fixed for a seed, and
    independent of the uniforms the verifier draws. Seed any randomness of the drafter from it.

    propose(context, max_depth) gets the committed tokens (int32 numpy array; its last token is
    the one the target scores next) and returns, for at most max_depth tokens deep:
      tokens                        a chain: 1-D integer array (empty: no draft this round)
      (tokens, parents)             a tree in topological order, parents[i] < i (-1: the root);
                                    parents None = a chain
      (tokens, parents, q)          q: float [n, n_vocab], row i the distribution tokens[i] was
                                    drawn from (used by speculative sampling at temperature > 0)
    Without q the verifier treats the draft as fixed tokens, which is lossless whatever they are.
    With q the output is the target's only if q tells the truth, which no check can see:
      - chains: row i is the exact distribution tokens[i] was drawn from, given the tokens drafted
        before it in this round (a q that claims another law biases the output);
      - trees: siblings are drawn with replacement from their parent's row (numpy's
        rng.choice(n_vocab, k, p=row), replace=True; torch.multinomial(row, k, replacement=True)),
        duplicates allowed; siblings drawn without replacement (multinomial's default) need
        each row to be that node's law given the siblings drawn before it;
      - a deterministic drafter (argmax, lookup) returns no q, or one-hot rows on its tokens,
        never the softmax it took the argmax of.
    Each q row must sum to 1 within 1e-3; it is divided by its sum before the verifier sees it.
    observe(n_valid, accepted) is told after each round which draft nodes were accepted (root
    first) and that the context now holds n_valid + 1 tokens, as C++ Drafter::observe's Round: a
    drafter with state past them drops it there. prefill(tokens) sees the prompt first.
    """

    def __init__(self, ctx=None):
        self.ctx = ctx

    def propose(self, context, max_depth):
        raise NotImplementedError

    def observe(self, n_valid, accepted):
        pass

    def prefill(self, tokens):
        pass


def register_drafter(name, factory, description="", chains_with_q=False, replace=False):
    """Registers a Python drafter under `name` (then usable as drafter=name in generate() and in
    experiments run from this process). factory(ctx) returns the drafter (a Drafter subclass
    itself will do). replace=True first removes a Python drafter of that name."""
    if replace and name in _python_drafters:
        unregister_drafter(name)
    _specdec.register_drafter(name, factory, description, bool(chains_with_q))
    _python_drafters[name] = factory
    return factory


def unregister_drafter(name):
    _specdec.unregister_drafter(name)
    _python_drafters.pop(name, None)


def drafter(name, description="", chains_with_q=False, replace=False):
    """Class (or factory function) decorator: @specdec.drafter("my_drafter")."""
    def wrap(factory):
        return register_drafter(name, factory, description or (factory.__doc__ or "").strip().split("\n")[0],
                                chains_with_q, replace)
    return wrap


# ---- harness -------------------------------------------------------------------------------

def _experiment(experiment):
    # (path, text): a dict becomes JSON text, which is YAML; a str is a path to a YAML file.
    if isinstance(experiment, dict):
        return "<dict>", json.dumps(experiment)
    return os.fspath(experiment), ""


def _overrides(overrides):
    if overrides is None:
        return []
    if isinstance(overrides, dict):  # {"sweep.gamma": [2, 4]} -> "sweep.gamma=[2, 4]" (YAML)
        return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    return list(overrides)


def validate(experiment, overrides=None):
    """Checks an experiment (YAML path or dict) as `specdec validate`; returns the plan as text,
    raises specdec.Error naming the file, key path and value."""
    path, text = _experiment(experiment)
    return _specdec.validate(path, text, _overrides(overrides))


def run(experiment, out=None, overrides=None, resume=False, results_root="results", progress=True, cells=None,
        threads_oversubscribe=False):
    """Runs an experiment (YAML path or dict) as `specdec run`; returns {"run_dir", "n_cells",
    "n_finished", "n_resumed", "interrupted", "checks_passed", "unit"}. Drafters registered from
    Python may be used in it. Ctrl-C stops after the current generation (finished cells are kept;
    resume=True with the same out continues) and then raises KeyboardInterrupt."""
    path, text = _experiment(experiment)
    outcome = _specdec.run(path, text, _overrides(overrides), os.fspath(out) if out else "", os.fspath(results_root),
                           bool(resume), bool(progress), cells or "", bool(threads_oversubscribe))
    if outcome["interrupted"]:
        raise KeyboardInterrupt(f"specdec.run interrupted; finished cells are in {outcome['run_dir']} "
                                f"(continue with resume=True, out={outcome['run_dir']!r})")
    return outcome


def repo_root():
    """The repository root specdec reads configs/models.yaml and models/ from ($SPECDEC_ROOT)."""
    return _specdec.repo_root()
