#!/usr/bin/env python3
"""Helper of scripts/peer_llamacpp.sh (see its header for usage): prompt preparation, the
greedy-equality check through llama.cpp's C API, the alternating timing runs of specdec and
llama.cpp, and the markdown report. Python 3 standard library only.

Every prompt is given to both engines as the same text with the chat template already applied
(specdec's ChatML rendering, rebuilt here from the GGUF's tokenizer.chat_template exactly as
src/tokenizer/chat_template.cpp does), and each tool's prompt token count is checked against
`specdec tokenize` of that text.
"""
import argparse
import datetime
import json
import os
import re
import resource
import shlex
import statistics
import struct
import subprocess
import sys
import time

# specdec's weights: float32 (default) or native (the GGUF file's own blocks; bit-identical
# logits, issue 13). From the environment: SPECDEC_DTYPE=native scripts/peer_llamacpp.sh ...
SPECDEC_DTYPE = os.environ.get("SPECDEC_DTYPE", "float32")
# The draft model's (default: SPECDEC_DTYPE), e.g. q4_1: requantised at load; llama.cpp's
# speculative tools then get a Q4_1 copy of the draft file (--llama-draft).
SPECDEC_DRAFT_DTYPE = os.environ.get("SPECDEC_DRAFT_DTYPE") or SPECDEC_DTYPE

# ----------------------------------------------------------------------------------------------
# GGUF metadata (only the key/value section; tensors are never read)

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path, wanted):
    """Values of the keys in `wanted` (strings and scalars; arrays are skipped)."""
    out = {}
    with open(path, "rb") as f:
        def read(fmt):
            size = struct.calcsize(fmt)
            return struct.unpack(fmt, f.read(size))[0]

        def read_str():
            n = read("<Q")
            return f.read(n)

        def skip_value(vtype):
            if vtype == 8:
                f.seek(read("<Q"), 1)
            elif vtype == 9:
                itype, n = read("<I"), read("<Q")
                if itype == 8:
                    for _ in range(n):
                        f.seek(read("<Q"), 1)
                elif itype in _GGUF_SCALARS:
                    f.seek(n * struct.calcsize(_GGUF_SCALARS[itype]), 1)
                else:
                    for _ in range(n):
                        skip_value(itype)
            else:
                f.seek(struct.calcsize(_GGUF_SCALARS[vtype]), 1)

        if f.read(4) != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        version = read("<I")
        if version < 2:
            raise SystemExit(f"{path}: GGUF v{version} is not supported")
        read("<Q")  # n_tensors
        n_kv = read("<Q")
        for _ in range(n_kv):
            key = read_str().decode("utf-8", "replace")
            vtype = read("<I")
            if key in wanted and vtype == 8:
                out[key] = read_str().decode("utf-8")
            elif key in wanted and vtype in _GGUF_SCALARS:
                out[key] = read(_GGUF_SCALARS[vtype])
            else:
                skip_value(vtype)
            if len(out) == len(wanted):
                break
    return out


def _template_literals(t):
    """String literals inside {{ }} and {% %} blocks, in order (as specdec's chat_template.cpp)."""
    out, i = [], 0
    while i + 1 < len(t):
        if t[i] != "{" or t[i + 1] not in "{%":
            i += 1
            continue
        close = "}}" if t[i + 1] == "{" else "%}"
        i += 2
        while i < len(t) and not t.startswith(close, i):
            if t[i] in "'\"":
                quote, value = t[i], []
                i += 1
                while i < len(t) and t[i] != quote:
                    c = t[i]
                    i += 1
                    if c == "\\" and i < len(t):
                        e = t[i]
                        i += 1
                        value.append({"n": "\n", "t": "\t", "r": "\r"}.get(e, e))
                    else:
                        value.append(c)
                if i < len(t):
                    i += 1
                out.append("".join(value))
            else:
                i += 1
        i += 2
    return out


def default_system_prompt(chat_template):
    head, tail = "<|im_start|>system\n", "<|im_end|>"
    for lit in _template_literals(chat_template or ""):
        if not lit.startswith(head):
            continue
        end = lit.find(tail, len(head))
        if end == -1 or end == len(head):
            continue
        return lit[len(head):end]
    return ""


def chatml(user_text, system):
    out = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return out + f"<|im_start|>user\n{user_text}<|im_end|>\n<|im_start|>assistant\n"


# ----------------------------------------------------------------------------------------------
# Running a command while recording the machine's load

_CLK_TCK = os.sysconf("SC_CLK_TCK")
CONTENDED_CORES = 0.2  # foreign CPU (in cores) above which a row is flagged


def _proc_stat():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    busy = v[0] + v[1] + v[2] + v[5] + v[6]
    steal = v[7] if len(v) > 7 else 0
    return busy / _CLK_TCK, steal / _CLK_TCK


def _loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_measured(cmd, log_path):
    """Runs cmd (stdin closed); returns stdout, stderr, wall time and the load beside it:
    foreign cores = (CPU time of the whole machine - this run's CPU time) / wall time."""
    busy0, steal0 = _proc_stat()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = _loadavg()
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, steal1 = _proc_stat()
    load1 = _loadavg()
    own = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    stdout = p.stdout.decode("utf-8", "replace")
    stderr = p.stderr.decode("utf-8", "replace")
    with open(log_path, "w") as f:
        f.write("$ " + shlex.join(cmd) + f"\n# exit {p.returncode}, wall {wall:.2f} s\n")
        f.write("## stdout\n" + stdout + "\n## stderr\n" + stderr)
    if p.returncode != 0:
        raise SystemExit(f"command failed (exit {p.returncode}), log {log_path}:\n  {shlex.join(cmd)}\n"
                         + "\n".join(stderr.strip().splitlines()[-15:]))
    return {
        "stdout": stdout, "stderr": stderr, "wall_s": wall, "own_cpu_s": own,
        "foreign_cores": max(0.0, (busy1 - busy0) - own) / wall if wall > 0 else 0.0,
        "steal_cores": (steal1 - steal0) / wall if wall > 0 else 0.0,
        "loadavg": max(load0, load1),
    }


# ----------------------------------------------------------------------------------------------
# Parsers of each tool's own report

def parse_specdec(out):
    line = [l for l in out["stdout"].splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    s = j["stats"]
    ms_decode = s["ms_total"] - s["ms_prefill"]
    r = {"tokens": j["tokens"], "n_prompt": s["n_prompt"], "n_gen": s["n_generated"],
         "decode_s": ms_decode / 1000.0, "alpha": None, "ms_grammar_compile": j.get("ms_grammar_compile")}
    if s.get("n_rounds", 0) > 0:
        r["alpha"] = s["alpha"]
        r["tau"] = s["tau"]
        r["tok_s"] = s["tokens_per_s"]  # n_generated / decode time, as llama-speculative reports
    else:
        # Greedy: the first token comes from the prefill logits, so the decode phase holds
        # n_generated - 1 forwards; counted like llama.cpp's "eval time ... runs".
        r["tok_s"] = (s["n_generated"] - 1) / r["decode_s"] if r["decode_s"] > 0 else 0.0
    return r


_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def parse_llama_completion(out):
    err = out["stderr"]
    pe = re.findall(r"prompt eval time =\s*" + _NUM + r" ms /\s*(\d+) tokens", err)
    ev = re.findall(r"(?<!prompt )eval time =\s*" + _NUM + r" ms /\s*(\d+) runs", err)
    if not pe or not ev:
        raise SystemExit("llama-completion: no timing lines in its output")
    ms_eval, runs = float(ev[-1][0]), int(ev[-1][1])
    # "eval time" is the forwards alone; its samplers (the grammar among them) are timed apart as
    # "sampling time", over all runs + 1 tokens. specdec's decode time holds its sampling and
    # grammar, so the share of the tokens after the first is added here.
    sa = re.findall(r"sampling time =\s*" + _NUM + " ms", err)
    ms_sample = float(sa[-1]) * runs / (runs + 1) if sa else 0.0
    ms_decode = ms_eval + ms_sample
    return {"n_prompt": int(pe[-1][1]), "n_gen": runs + 1, "decode_s": ms_decode / 1000.0,
            "tok_s": runs / (ms_decode / 1000.0) if ms_decode > 0 else 0.0, "alpha": None}


def parse_llama_speculative(out):
    err = out["stderr"]
    enc = re.findall(r"encoded\s+(\d+) tokens in\s+" + _NUM + " seconds", err)
    dec = re.findall(r"decoded\s+(\d+) tokens in\s+" + _NUM + r" seconds, speed:\s*" + _NUM + " t/s", err)
    drafted = re.findall(r"n_drafted\s*=\s*(\d+)", err)
    accept = re.findall(r"n_accept\s*=\s*(\d+)", err)
    if not enc or not dec:
        raise SystemExit("llama-speculative: no 'encoded/decoded ... tokens' lines in its output")
    n_dr = int(drafted[-1]) if drafted else 0
    n_acc = int(accept[-1]) if accept else 0
    return {"n_prompt": int(enc[-1][0]), "n_gen": int(dec[-1][0]), "decode_s": float(dec[-1][1]),
            "tok_s": float(dec[-1][2]), "alpha": n_acc / n_dr if n_dr else None}


# ----------------------------------------------------------------------------------------------

def load_prompts(path, n, category=""):
    """The first n prompts of path (n = 0: all), only those of `category` when one is given."""
    prompts = []
    with open(path) as f:
        for line in f:
            if line.strip():
                p = json.loads(line)
                if not category or p.get("category") == category:
                    prompts.append(p)
    n = n or len(prompts)
    if n > len(prompts):
        raise SystemExit(f"{path} has only {len(prompts)} prompts{' of category ' + category if category else ''}, "
                         f"{n} asked for")
    return prompts[:n]


def json_output_status(text, schema):
    """'valid' when text (surrounding whitespace aside) is one JSON value that meets schema,
    'invalid' when it parses and does not, 'not JSON' otherwise (e.g. cut by the token limit)."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        return "not JSON"
    try:
        import jsonschema  # Debian's python3-jsonschema, installed by scripts/setup.sh
        jsonschema.validate(value, schema)
    except ImportError:
        return "parses (jsonschema missing)"
    except jsonschema.ValidationError:
        return "invalid"
    return "valid"


def generated_text(engine, out, prompt_text):
    """What the engine generated, from its output: specdec's JSON line, llama-completion's stdout
    (--no-display-prompt), the speculative tools' stdout after the echoed prompt."""
    if engine == "specdec":
        return json.loads([l for l in out["stdout"].splitlines() if l.startswith("{")][-1])["text"]
    text = out["stdout"]
    i = text.find(prompt_text)
    text = text[i + len(prompt_text):] if i >= 0 else text
    return text.split("<|im_end|>")[0].split("[end of text]")[0]


class Bench:
    def __init__(self, a):
        self.a = a
        self.models = []  # (name, path)
        for m in a.model:
            name, path = m.split("=", 1)
            self.models.append((name, path))
        self.work = a.work
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.prompts = load_prompts(a.prompts, a.n_prompts, a.category)
        self.warnings = []
        self.runs = []
        self.prepared = {}  # model name -> list of {id, raw, chat, ids, raw_path, chat_path, ids_path}
        self.commands = {}  # (mode, engine) -> example command

    def warn(self, msg):
        self.warnings.append(msg)
        print("WARNING: " + msg, file=sys.stderr, flush=True)

    # Prompts: the chat text and specdec's token ids of it, per model (tokenizers may differ).
    def prepare(self, name, path):
        if name in self.prepared:
            return self.prepared[name]
        meta = gguf_metadata(path, {"tokenizer.chat_template"})
        system = default_system_prompt(meta.get("tokenizer.chat_template", ""))
        d = os.path.join(self.work, "prompts", name)
        os.makedirs(d, exist_ok=True)
        out = []
        for p in self.prompts:
            text = chatml(p["text"], system) if p.get("chat", True) else p["text"]
            raw_path, chat_path = os.path.join(d, p["id"] + ".raw.txt"), os.path.join(d, p["id"] + ".txt")
            with open(raw_path, "w") as f:
                f.write(p["text"])
            with open(chat_path, "w") as f:
                f.write(text)
            r = subprocess.run([self.a.specdec, "tokenize", "--model", path, "--text", text, "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
            ids = json.loads(r.stdout)["ids"]
            ids_path = os.path.join(d, p["id"] + ".ids")
            with open(ids_path, "w") as f:
                f.write(",".join(map(str, ids)) + "\n")
            out.append({"id": p["id"], "chat": p.get("chat", True), "text": text, "ids": ids,
                        "raw_path": raw_path, "chat_path": chat_path, "ids_path": ids_path,
                        "schema": p.get("json_schema") if self.a.constrain else None})
        self.prepared[name] = out
        return out

    # ------------------------------------------------------------------------------------------
    def greedy_check(self):
        a = self.a
        results = []
        for name, path in self.models:
            for p in self.prepare(name, path)[: a.check_prompts]:
                sd_cmd = [a.specdec, "generate", "--model", path, "--max-new-tokens", str(a.check_tokens),
                          "--threads", str(a.threads), "--dtype", SPECDEC_DTYPE, "--json"]
                # specdec applies its own chat template here (the way a user runs it); the
                # prompt count must equal that of the pre-templated text given to llama.cpp.
                sd_cmd += ["--prompt-file", p["raw_path"]] + (["--chat"] if p["chat"] else [])
                ll_cmd = [a.tool, "--model", path, "--ids-file", p["ids_path"], "--text-file", p["chat_path"],
                          "-n", str(a.check_tokens), "-t", str(a.threads)]
                print(f"[check] {name} / {p['id']}: specdec ...", file=sys.stderr, flush=True)
                sd = run_measured(sd_cmd, os.path.join(self.logs, f"check_{name}_{p['id']}_specdec.log"))
                print(f"[check] {name} / {p['id']}: llama.cpp C API ...", file=sys.stderr, flush=True)
                ll = run_measured(ll_cmd, os.path.join(self.logs, f"check_{name}_{p['id']}_llama.log"))
                sdj = json.loads([l for l in sd["stdout"].splitlines() if l.startswith("{")][-1])
                llj = json.loads(ll["stdout"].strip().splitlines()[-1])
                t_sd, t_ll = sdj["tokens"], llj["tokens"]
                first_diff = next((i for i in range(min(len(t_sd), len(t_ll))) if t_sd[i] != t_ll[i]), None)
                if first_diff is None and len(t_sd) != len(t_ll):
                    first_diff = min(len(t_sd), len(t_ll))
                res = {"model": name, "file": path, "prompt": p["id"], "n_prompt_specdec_chat": sdj["stats"]["n_prompt"],
                       "n_prompt_ids": len(p["ids"]), "llama_tokenizer_equal": llj["text_ids_equal"],
                       "n_specdec": len(t_sd), "n_llama": len(t_ll), "equal": first_diff is None,
                       "first_diff": first_diff, "specdec_tokens": t_sd, "llama_tokens": t_ll,
                       "commands": [shlex.join(sd_cmd), shlex.join(ll_cmd)]}
                if res["n_prompt_specdec_chat"] != res["n_prompt_ids"]:
                    self.warn(f"{name}/{p['id']}: specdec --chat gives {res['n_prompt_specdec_chat']} prompt tokens, "
                              f"the pre-templated text {res['n_prompt_ids']}: the chat templates differ")
                if not llj["text_ids_equal"]:
                    self.warn(f"{name}/{p['id']}: llama.cpp tokenizes the prompt text differently from specdec "
                              f"({len(llj['text_ids'])} vs {len(p['ids'])} tokens)")
                if first_diff is not None:
                    i = first_diff
                    res["context"] = {"specdec": t_sd[max(0, i - 2): i + 3], "llama": t_ll[max(0, i - 2): i + 3]}
                results.append(res)
                verdict = "EQUAL" if res["equal"] else f"DIFFER at position {first_diff}"
                print(f"[check] {name} / {p['id']}: {len(t_sd)} vs {len(t_ll)} tokens: {verdict}", file=sys.stderr, flush=True)
        return results

    # ------------------------------------------------------------------------------------------
    def engines_for(self, mode, tgt, dft):
        """(engine label, argv builder(prompt) , parser) for one mode."""
        a = self.a
        t = str(a.threads)
        # llama.cpp gets the text with -p: its -f drops one trailing newline, and a ChatML
        # prompt ends with "<|im_start|>assistant\n".
        common_sd = ["--max-new-tokens", str(a.n_tokens), "--threads", t, "--dtype", SPECDEC_DTYPE, "--json"]
        ctx = ["-c", str(a.ctx)]
        sampling = ["--temp", "0", "--top-k", "1", "--seed", "0"]
        bin_ = lambda n: os.path.join(a.llama_bin, n)
        extra = shlex.split(a.llama_extra)
        # --constrain: the prompt's JSON schema, compact, given to both engines (specdec compiles
        # it with xgrammar; llama.cpp converts it to a GBNF grammar of its own).
        schema = lambda p: ["--json-schema", json.dumps(p["schema"], separators=(",", ":"))] if p.get("schema") else []
        if mode == "greedy":
            name, path = tgt
            return [
                ("specdec", lambda p: [a.specdec, "generate", "--model", path, "--prompt-file", p["chat_path"]]
                 + common_sd + schema(p), parse_specdec),
                ("llama-completion", lambda p: [bin_("llama-completion"), "-m", path, "-p", p["text"],
                                                "-n", str(a.n_tokens), "-t", t, "-tb", t] + ctx + sampling
                 + ["-no-cnv", "--no-display-prompt"] + schema(p) + extra, parse_llama_completion),
            ]
        if mode == "lookup":  # drafts looked up in the context, no draft model
            name, path = tgt
            jump = ["--set", "jump_forward=true"] if a.constrain else []
            return [
                ("specdec", lambda p: [a.specdec, "generate", "--model", path, "--strategy", "speculative",
                                       "--set", "drafter=ngram", "--set", f"gamma={a.gamma}", "--set", "temperature=0"]
                 + jump + ["--prompt-file", p["chat_path"]] + common_sd + schema(p), parse_specdec),
                # ngram-simple as specdec's n-gram drafter: suffixes of up to 3 tokens, drafts of gamma.
                ("llama-speculative-simple", lambda p: [bin_("llama-speculative-simple"), "-m", path, "-p", p["text"],
                                                        "-n", str(a.n_tokens), "-t", t, "-tb", t] + ctx + sampling
                 + ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                    "--spec-ngram-simple-size-m", str(a.gamma), "--spec-draft-n-max", str(a.gamma)]
                 + schema(p) + extra, parse_llama_speculative),
            ]
        (tname, tpath), (dname, dpath) = tgt, dft
        ll_dpath = a.llama_draft or dpath
        spec_ll = lambda tool: (lambda p: [bin_(tool), "-m", tpath, "-md", ll_dpath, "-p", p["text"],
                                           "-n", str(a.n_tokens), "-t", t, "-tb", t, "-td", t, "-tbd", t]
                                + ctx + sampling + ["--spec-draft-n-max", str(a.gamma)] + schema(p) + extra)
        return [
            ("specdec", lambda p: [a.specdec, "generate", "--model", tpath, "--draft", dpath,
                                   "--strategy", "speculative", "--set", f"gamma={a.gamma}",
                                   "--set", "temperature=0", "--prompt-file", p["chat_path"],
                                   "--draft-dtype", SPECDEC_DRAFT_DTYPE] + common_sd + schema(p),
             parse_specdec),
            # llama-speculative-simple needs the speculator named (its default type is none);
            # llama-speculative loads the draft model itself.
            ("llama-speculative-simple", lambda p: spec_ll("llama-speculative-simple")(p)
             + ["--spec-type", "draft-simple"], parse_llama_speculative),
            ("llama-speculative", spec_ll("llama-speculative"), parse_llama_speculative),
        ]

    def modes(self):
        out = []
        for m in self.models if self.a.greedy == "all" else self.models[-1:]:
            out.append(("greedy", m, None, f"greedy {m[0]}"))
        spec = self.a.spec
        if spec == "auto":
            spec = "yes" if len(self.models) >= 2 else "no"
        if spec == "yes":
            tgt = self.models[-1]
            dft = self.models[0]  # with one model: self-speculation
            label = f"speculative {dft[0]} -> {tgt[0]}, gamma {self.a.gamma}"
            out.append(("speculative", tgt, dft, label))
        if self.a.lookup:
            tgt = self.models[-1]
            jump = " + jump-forward" if self.a.constrain else ""
            out.append(("lookup", tgt, None, f"n-gram lookup{jump} {tgt[0]}, gamma {self.a.gamma}"))
        return out

    def bench(self):
        a = self.a
        open(os.path.join(self.work, "runs.jsonl"), "w").close()
        for mode, tgt, dft, label in self.modes():
            prompts = self.prepare(tgt[0], tgt[1])
            engines = self.engines_for(mode, tgt, dft)
            for eng, build, _ in engines:
                example = shlex.join(build({"chat_path": "PROMPT.txt", "text": "@PROMPT_TEXT@",
                                            "schema": {"@SCHEMA@": 1} if a.constrain else None}))
                self.commands[(label, eng)] = example.replace("@PROMPT_TEXT@", '"$PROMPT"')
            for rep in range(a.repeats):
                for p in prompts:
                    for eng, build, parse in engines:  # alternate the engines per prompt and repeat
                        cmd = build(p)
                        tag = f"{mode}_{tgt[0]}_{p['id']}_r{rep}_{eng}"
                        print(f"[bench] {label} | {p['id']} | repeat {rep + 1}/{a.repeats} | {eng} ...",
                              file=sys.stderr, flush=True)
                        out = run_measured(cmd, os.path.join(self.logs, tag + ".log"))
                        r = parse(out)
                        if r["n_prompt"] != len(p["ids"]):
                            self.warn(f"{label} / {p['id']} / {eng}: {r['n_prompt']} prompt tokens, "
                                      f"specdec tokenize gives {len(p['ids'])}")
                        row = {"label": label, "mode": mode, "engine": eng, "prompt": p["id"], "repeat": rep,
                               "wall_s": out["wall_s"], "foreign_cores": out["foreign_cores"],
                               "steal_cores": out["steal_cores"], "loadavg": out["loadavg"],
                               "own_cpu_s": out["own_cpu_s"]}
                        row.update({k: v for k, v in r.items() if k != "tokens"})
                        if p.get("schema"):
                            row["json"] = json_output_status(generated_text(eng, out, p["text"]), p["schema"])
                        self.runs.append(row)
                        acc = f" alpha {r['alpha']:.3f}" if r.get("alpha") is not None else ""
                        print(f"        {r['tok_s']:.2f} tok/s decode, {r['n_gen']} tokens, wall {out['wall_s']:.1f} s,"
                              f"{acc} foreign {out['foreign_cores']:.2f} cores, load {out['loadavg']:.2f}",
                              file=sys.stderr, flush=True)
                        with open(os.path.join(self.work, "runs.jsonl"), "a") as f:
                            f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------------------------------
    def report(self, checks, info):
        a = self.a
        L = []
        L.append(f"## specdec vs llama.cpp ({info['date']})")
        L.append("")
        L.append(f"- Machine: {info['cpu']}, nproc {info['nproc']}, {info['mem']}; "
                 f"load average at start {info['load_start']}, at end {info['load_end']}.")
        L.append(f"- llama.cpp: {info['llama_version']} (vendored in llama-cpp-python {info['pycpp_version']}, "
                 f"PyPI sdist), built outside the repository in `{info['peer_dir']}`: `{info['cmake']}`.")
        L.append(f"- specdec: commit {info['specdec_commit']}{' (uncommitted changes)' if info['specdec_dirty'] else ''}.")
        L.append(f"- Weights: {info['precision_note']}.")
        files = "; ".join(f"{n}: `{p}`" for n, p in self.models)
        L.append(f"- Files (the same for both engines): {files}.")
        prompts_src = os.path.relpath(a.prompts, info["repo"])
        if self.runs:
            L.append(f"- Prompts: first {len(self.prompts)} of `{prompts_src}`"
                     f"{' (category ' + a.category + ')' if a.category else ''}"
                     f"{', each with its JSON schema given to both engines (--json-schema)' if a.constrain else ''} "
                     f"({', '.join(p['id'] for p in self.prompts)}), ChatML-templated text given raw to both engines; "
                     f"{a.n_tokens} new tokens, greedy, {a.threads} threads, {a.repeats} repeats, engines alternated "
                     "per prompt and repeat.")
        if checks:
            L.append(f"- Greedy-equality check: first {a.check_prompts} prompt(s) of `{prompts_src}`, "
                     f"{a.check_tokens} new tokens, {a.threads} threads.")
        L.append("")
        if self.runs:
            L.append("decode tok/s = each tool's own timing of the generation phase (prompt processing and "
                     "model loading excluded, and specdec's grammar compile, which runs before its clock like "
                     "llama.cpp's sampler set-up): specdec `ms_total - ms_prefill`, llama-completion "
                     "`eval time` plus its `sampling time` (tokens after the first), llama-speculative(-simple) `decoded N tokens in T s`. "
                     "Greedy rows count the forwards after the prefill (n - 1 tokens) for both engines. "
                     "wall = the whole process (model load included). alpha = accepted / drafted. "
                     "foreign = CPU used by other processes during the runs, in cores "
                     "(/proc/stat busy time minus the run's own CPU time, over wall time); "
                     "load = highest /proc/loadavg 1-min seen at the runs' start or end; rows where another "
                     f"process used more than {CONTENDED_CORES} cores during any run are marked contended "
                     "and do not rank the engines.")
            L.append("")
            L.append("| mode | engine | decode tok/s (median) | min-max | summed | tokens | wall s | alpha | foreign cores median (max) | load max |"
                     + (" JSON valid / not JSON / invalid |" if a.constrain else ""))
            L.append("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.constrain else ""))
            flag = lambda fc: " **contended**" if max(fc) > CONTENDED_CORES else ""
            groups = {}
            for r in self.runs:
                groups.setdefault((r["label"], r["engine"]), []).append(r)
            medians, summed = {}, {}
            counted = lambda r: r["tok_s"] * r["decode_s"]  # the tokens its tok/s counts
            for (label, eng), rs in groups.items():
                tok = [r["tok_s"] for r in rs]
                med = statistics.median(tok)
                summed[(label, eng)] = sum(map(counted, rs)) / max(1e-9, sum(r["decode_s"] for r in rs))
                medians[(label, eng)] = med
                gen = sorted(set(r["n_gen"] for r in rs))
                gen = gen if len(gen) <= 3 else [f"{min(gen)}-{max(gen)} ({sum(r['n_gen'] for r in rs)} in all)"]
                js = [r.get("json") for r in rs]
                valid = (f" {js.count('valid')} / {js.count('not JSON')} / {js.count('invalid')} |"
                         if a.constrain else "")
                alphas = [r["alpha"] for r in rs if r.get("alpha") is not None]
                fc = [r["foreign_cores"] for r in rs]
                alpha = f"{statistics.median(alphas):.3f}" if alphas else "-"
                wall = statistics.median(r["wall_s"] for r in rs)
                L.append(f"| {label} | {eng} | **{med:.2f}** | {min(tok):.2f}-{max(tok):.2f} | "
                         f"{summed[(label, eng)]:.2f} | "
                         f"{'/'.join(map(str, gen))} | {wall:.1f} | {alpha} | "
                         f"{statistics.median(fc):.2f} ({max(fc):.2f}){flag(fc)} | {max(r['loadavg'] for r in rs):.2f} |{valid}")
            # Speculative speedup within each engine, against its own greedy run of the target.
            spec = [m for m in self.modes() if m[0] != "greedy"]
            if spec:
                glabel = f"greedy {spec[0][1][0]}"
                lines = []
                slabels = {m[3] for m in spec}
                for (label, eng), med in medians.items():
                    if label not in slabels:
                        continue
                    base_eng = "specdec" if eng == "specdec" else "llama-completion"
                    base = medians.get((glabel, base_eng))
                    if not base:
                        continue
                    # Each prompt and repeat's own ratio, paired with the greedy run beside it.
                    g = {(r["prompt"], r["repeat"]): r["tok_s"] for r in groups[(glabel, base_eng)]}
                    pairs = [r["tok_s"] / g[(r["prompt"], r["repeat"])] for r in groups[(label, eng)]
                             if g.get((r["prompt"], r["repeat"]))]
                    sb = summed[(glabel, base_eng)]
                    lines.append(f"| {label} | {eng} | {med:.2f} / {base:.2f} = **{med / base:.2f}x** | "
                                 f"{summed[(label, eng)]:.2f} / {sb:.2f} = {summed[(label, eng)] / sb:.2f}x | "
                                 f"{statistics.median(pairs):.2f}x ({len(pairs)}) |")
                if lines:
                    L.append("")
                    L.append(f"Speculative over greedy within each engine (decode tok/s, {glabel} as the base): "
                             "medians of the runs, summed (all tokens over all decode time), and the median "
                             "of each prompt's own ratio:")
                    L.append("")
                    L.append("| mode | engine | median / median | summed | median of per-prompt ratios |")
                    L.append("|---|---|---|---|---|")
                    L += lines
            comp = [r["ms_grammar_compile"] for r in self.runs if r.get("ms_grammar_compile") is not None]
            if comp:
                L.append("")
                L.append(f"specdec's grammar compile, before its clock (once per schema and tokenizer): median "
                         f"{statistics.median(comp):.0f} ms ({min(comp):.0f}-{max(comp):.0f}) over {len(comp)} runs.")
            L.append("")
            L.append("Per-run figures: `" + os.path.join(self.work, "runs.jsonl") + "`; logs: `" + self.logs + "/`.")
            L.append("")
            L.append("Commands (PROMPT.txt = one templated prompt file under "
                     f"`{os.path.join(self.work, 'prompts')}/MODEL/`; $PROMPT = its exact contents, final "
                     "newline included: `PROMPT=$(cat PROMPT.txt; echo .); PROMPT=${PROMPT%.}`, since `$(cat)` "
                     "and llama.cpp's own `-f` both drop it):")
            L.append("```")
            for (label, eng), cmd in self.commands.items():
                L.append(f"# {label}, {eng}")
                L.append(cmd)
            L.append("```")
        if checks:
            L.append("")
            L.append(f"Greedy equality through llama.cpp's C API (`scripts/peer/greedy_tokens.cpp`: prompt ids from "
                     f"`specdec tokenize`, argmax of the logits, no sampler) against `specdec generate --chat`:")
            L.append("")
            L.append("| model | prompt | prompt tokens (specdec --chat / templated ids) | llama.cpp tokenizer = specdec | generated (specdec / llama.cpp) | result |")
            L.append("|---|---|---|---|---|---|")
            for c in checks:
                verdict = "**equal**" if c["equal"] else f"**differ at position {c['first_diff']}** " \
                    f"(specdec {c['context']['specdec']} vs llama.cpp {c['context']['llama']})"
                L.append(f"| {c['model']} | {c['prompt']} | {c['n_prompt_specdec_chat']} / {c['n_prompt_ids']} | "
                         f"{'yes' if c['llama_tokenizer_equal'] else 'NO'} | {c['n_specdec']} / {c['n_llama']} | {verdict} |")
            L.append("")
            L.append("```")
            for c in checks:
                L += c["commands"]
            L.append("```")
        if self.warnings:
            L.append("")
            L.append("Warnings:")
            L += [f"- {w}" for w in self.warnings]
        return "\n".join(L) + "\n"


def machine_info(a):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": os.cpu_count(), "repo": a.repo, "peer_dir": a.peer_dir,
            "llama_version": a.llama_version, "pycpp_version": a.pycpp_version, "cmake": a.cmake_line,
            "precision_note": a.precision_note}
    cpu = "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        if m:
            cpu = m.group(1).strip()
    except OSError:
        pass
    info["cpu"] = cpu
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["mem"] = f"{kb / 2**20:.0f} GiB RAM"
    except OSError:
        info["mem"] = "RAM unknown"
    git = lambda *args: subprocess.run(["git", "-C", a.repo] + list(args), stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True).stdout.strip()
    info["specdec_commit"] = git("rev-parse", "--short", "HEAD") or "unknown"
    info["specdec_dirty"] = bool(git("status", "--porcelain", "--untracked-files=no"))
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specdec", required=True)
    ap.add_argument("--llama-bin", required=True, help="directory of llama.cpp's binaries")
    ap.add_argument("--tool", required=True, help="the compiled greedy_tokens")
    ap.add_argument("--model", action="append", required=True, help="NAME=FILE.gguf; with two, the first drafts for the second")
    ap.add_argument("--work", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--n-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--spec", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--check", choices=["yes", "no", "only"], default="yes")
    ap.add_argument("--check-tokens", type=int, default=0, help="0 = --n-tokens")
    ap.add_argument("--check-prompts", type=int, default=1)
    ap.add_argument("--llama-extra", default="", help="extra arguments for every llama.cpp tool")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--peer-dir", required=True)
    ap.add_argument("--llama-version", default="unknown")
    ap.add_argument("--pycpp-version", default="unknown")
    ap.add_argument("--cmake-line", default="")
    ap.add_argument("--precision-note", default="")
    ap.add_argument("--category", default="", help="only the prompts of this category (e.g. json)")
    ap.add_argument("--lookup", action="store_true",
                    help="also n-gram lookup on the target alone (specdec drafter=ngram, with jump-forward under "
                         "--constrain; llama-speculative-simple --spec-type ngram-simple)")
    ap.add_argument("--constrain", action="store_true", help="give each prompt's json_schema to both engines")
    ap.add_argument("--greedy", choices=["all", "target"], default="all",
                    help="greedy runs of every model, or of the target (the last) only")
    ap.add_argument("--llama-draft", default="", help="the draft file llama.cpp's speculative tools load "
                    "(default: the draft model's own)")
    a = ap.parse_args()
    if a.check_tokens <= 0:
        a.check_tokens = a.n_tokens
    if a.n_prompts:
        a.check_prompts = min(a.check_prompts, a.n_prompts)

    b = Bench(a)
    load_start = _loadavg()
    checks = b.greedy_check() if a.check in ("yes", "only") else []
    if a.check != "only":
        b.bench()
    info = machine_info(a)
    info["load_start"], info["load_end"] = f"{load_start:.2f}", f"{_loadavg():.2f}"
    text = b.report(checks, info)
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump({"runs": b.runs, "checks": checks, "info": info, "warnings": b.warnings}, f, indent=1)
    print(text)
    print(f"(written to {a.out})", file=sys.stderr)
    bad = [c for c in checks if not c["equal"]]
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
