#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzers (tests/fuzz/seeds_*/) and the two small tokenizers
the BPE fuzzer runs (tests/fuzz/tokenizers/). Python stdlib only; everything is committed
(seeds named *.seed so no tool takes them for model weights); rerun this only to change them.
The tokenizers are cut from the GGUF vocabularies in models/ (smollm2-135m-instruct.gguf,
qwen2.5-coder-0.5b-instruct.gguf); without those files they are left as they are."""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def gguf_str(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def gguf_kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gguf_str(key.encode()) + struct.pack("<I", vtype) + payload


def gguf(version: int, tensors, alignment: int = 32) -> bytes:
    """tensors: list of (name, ne list, ggml type, data bytes)."""
    kvs = [
        gguf_kv("general.architecture", 8, gguf_str(b"llama")),
        gguf_kv("general.alignment", 4, struct.pack("<I", alignment)),
        gguf_kv("t.u8", 0, b"\x07"),
        gguf_kv("t.i16", 3, struct.pack("<h", -5)),
        gguf_kv("t.f32", 6, struct.pack("<f", 0.5)),
        gguf_kv("t.bool", 7, b"\x01"),
        gguf_kv("t.u64", 10, struct.pack("<Q", 1 << 40)),
        gguf_kv("t.f64", 12, struct.pack("<d", 2.5)),
        gguf_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gguf_str(b"a") + gguf_str(b"bc")),
        gguf_kv("t.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 5, 1) + struct.pack("<i", 3)),
    ]
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    offset, offsets = 0, []
    for name, ne, ttype, data in tensors:
        offsets.append(offset)
        out += gguf_str(name.encode()) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", ttype, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    start = len(out)
    for off, (_, _, _, data) in zip(offsets, tensors):
        out += b"\0" * (start + off - len(out)) + data
    return out


def pattern(n: int, seed: int = 11) -> bytes:
    """Deterministic, varied bytes (every value in 0..255 appears) for quantised payloads."""
    return bytes((i * 37 + seed) % 256 for i in range(n))


def f16(x: float) -> bytes:
    return struct.pack("<e", x)


def write(folder: str, name: str, data: bytes) -> None:
    d = HERE / folder
    d.mkdir(exist_ok=True)
    assert len(data) < 4096, (name, len(data))
    (d / name).write_bytes(data)


def main() -> None:
    f32 = ("a", [4, 2], 0, struct.pack("<8f", *range(8)))
    q8_0 = ("b", [32], 8, f16(0.5) + bytes(range(32)))
    q4_1 = ("c", [32], 3, f16(0.25) + f16(-1.0) + pattern(16))
    q4_k = ("k4", [256], 12, f16(1.0) + f16(0.5) + pattern(12, 3) + pattern(128))
    q5_k = ("k5", [256], 13, f16(1.0) + f16(0.5) + pattern(12, 3) + pattern(32, 7) + pattern(128))
    q6_k = ("k6", [256], 14, pattern(128) + pattern(64, 5) + pattern(16, 200) + f16(0.5))
    q5_0 = ("q50", [32], 6, f16(2.0) + pattern(4, 9) + pattern(16))
    q5_1 = ("q51", [32], 7, f16(2.0) + f16(1.0) + pattern(4, 9) + pattern(16))
    q4_0 = ("q40", [32], 2, f16(2.0) + pattern(16))
    f16t = ("h", [3], 1, f16(1.0) + f16(-2.0) + f16(0.5))
    bf16 = ("bf", [2], 30, b"\x80\x3f\x40\xc0")
    q2_k = ("q2", [256], 10, bytes(84))
    write("seeds_gguf", "v3_small.gguf.seed", gguf(3, [f32, q8_0, q4_1]))
    write("seeds_gguf", "v2_kquants.gguf.seed", gguf(2, [q4_k, q5_k, q6_k], alignment=64))
    write("seeds_gguf", "v3_legacy.gguf.seed", gguf(3, [q4_0, q5_0, q5_1, f16t, bf16, q2_k]))

    def st(entries, meta=None) -> bytes:
        header, data = {}, b""
        if meta:
            header["__metadata__"] = meta
        for name, dtype, shape, raw in entries:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + data

    write("seeds_safetensors", "small.safetensors.seed", st([
        ("w.f32", "F32", [2, 3], struct.pack("<6f", *range(6))),
        ("w.f16", "F16", [2], f16(1.0) + f16(-2.0)),
        ("w.bf16", "BF16", [2], b"\x80\x3f\x40\xc0"),
        ("w.f64", "F64", [1], struct.pack("<d", 0.1)),
        ("w.i32", "I32", [1], struct.pack("<i", 3)),
    ], meta={"format": "pt"}))
    write("seeds_safetensors", "empty.safetensors.seed", st([]))



# ---- tokenizers (fuzz_tokenizer_json seeds, fuzz_bpe's two tokenizers) ----------------------

ROOT = HERE.parent.parent
SMOLLM_GGUF = ROOT / "models" / "smollm2-135m-instruct.gguf"
QWEN_GGUF = ROOT / "models" / "qwen2.5-coder-0.5b-instruct.gguf"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def gguf_tokenizer_meta(path: pathlib.Path) -> dict:
    """tokenizer.ggml.{tokens,token_type,merges} of a GGUF file (metadata only)."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        def unpack(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def value(t):
            if t == 8:
                return f.read(unpack("<Q"))
            if t == 9:
                et, n = unpack("<I"), unpack("<Q")
                return [value(et) for _ in range(n)]
            return unpack(scalar[t])

        assert f.read(4) == b"GGUF", path
        unpack("<I")
        unpack("<Q")
        n_kv = unpack("<Q")
        out = {}
        for _ in range(n_kv):
            key = f.read(unpack("<Q")).decode()
            v = value(unpack("<I"))
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
                out[key.rsplit(".", 1)[1]] = v
        return out


def byte_symbols() -> list:
    """GPT-2's byte -> printable character table (HF ByteLevel)."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def cut_tokenizer(path: pathlib.Path, n_merges: int, style: str) -> dict:
    """A real vocabulary cut down to its 256 byte tokens, its special tokens and the first
    n_merges merges (in rank order, each made of tokens already kept), ids renumbered densely
    in the original order, written as a Hugging Face tokenizer.json."""
    meta = gguf_tokenizer_meta(path)
    tokens = [t.decode("utf-8") for t in meta["tokens"]]
    types = meta["token_type"]
    index = {t: i for i, t in enumerate(tokens)}
    # SmolLM2 lacks 21 of the 256 byte tokens (bytes 4, 6, 19, 20, 22, 29, 192, 193, 241-255):
    # encoding drops those bytes, as HF does; fuzz_bpe's round trip accounts for it.
    keep = {index[s] for s in byte_symbols() if s in index}
    keep |= {i for i, t in enumerate(types) if t in (3, 4)}  # control and user-defined tokens
    have = {tokens[i] for i in keep}
    merges = []
    for m in meta["merges"]:
        left, right = m.decode("utf-8").split(" ", 1)
        if left in have and right in have and left + right in index:
            merges.append([left, right])
            have.add(left + right)
            keep.add(index[left + right])
            if len(merges) == n_merges:
                break
    new_id = {old: new for new, old in enumerate(sorted(keep))}
    added = [{"id": new_id[i], "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3} for i in sorted(keep) if types[i] in (3, 4)]
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added}
    if style == "smollm":
        doc["normalizer"] = None
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    else:
        doc["normalizer"] = {"type": "NFC"}
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    doc["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                             "use_regex": False}
    doc["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                    "ignore_merges": False, "vocab": {tokens[i]: new_id[i] for i in sorted(keep)},
                    "merges": merges}
    return doc


def dump(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def write_sized(folder: str, name: str, data: bytes, limit: int) -> None:
    d = HERE / folder
    d.mkdir(exist_ok=True)
    assert len(data) <= limit, (name, len(data))
    (d / name).write_bytes(data)


def tokenizer_seeds() -> None:
    if not SMOLLM_GGUF.exists() or not QWEN_GGUF.exists():
        print("make_seeds: models/*.gguf missing, tokenizers and tokenizer seeds left as they are")
        return
    # fuzz_bpe's tokenizers: enough merges for multi-level BPE on text, code and CJK.
    write_sized("tokenizers", "smollm2_cut.json", dump(cut_tokenizer(SMOLLM_GGUF, 1500, "smollm")), 60000)
    write_sized("tokenizers", "qwen2_cut.json", dump(cut_tokenizer(QWEN_GGUF, 1500, "qwen2")), 60000)
    # fuzz_tokenizer_json seeds: the same two formats, small enough to mutate quickly.
    small = cut_tokenizer(SMOLLM_GGUF, 40, "smollm")
    write_sized("seeds_tokenizer_json", "smollm2_small.json.seed", dump(small), 12000)
    qwen = cut_tokenizer(QWEN_GGUF, 40, "qwen2")
    qwen["added_tokens"] = qwen["added_tokens"][:6]  # Qwen2 has 22 special tokens
    write_sized("seeds_tokenizer_json", "qwen2_small.json.seed", dump(qwen), 12000)
    # Every other branch of the loader: string merges, added-token flags, Split behaviors,
    # ignore_merges, unk_token, a TemplateProcessing post-processor, and a tokenizer_config.json
    # (after a NUL byte: the fuzzer writes it next to tokenizer.json).
    syms = byte_symbols()
    vocab = {s: i for i, s in enumerate(syms)}
    vocab.update({"Ġt": 256, "he": 257, "Ġthe": 258, "<s>": 259, "</s>": 260})
    tiny = {
        "added_tokens": [
            {"id": 259, "content": "<s>", "special": True},
            {"id": 260, "content": "</s>", "special": True, "lstrip": True, "rstrip": True},
            {"id": 261, "content": "[word]", "special": False, "single_word": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[0-9]+"}, "behavior": "Removed", "invert": True},
            {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Contiguous"},
            {"type": "Split", "pattern": {"String": "."}, "behavior": "MergedWithPrevious"},
            {"type": "Digits", "individual_digits": False},
            {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel"},
            {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                      {"Sequence": {"id": "A", "type_id": 0}},
                                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}]}]},
        "model": {"type": "BPE", "unk_token": "<s>", "ignore_merges": True, "vocab": vocab,
                  "merges": ["Ġ t", "h e", "Ġt he"]},
    }
    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>",
              "chat_template": "{{ '<|im_start|>system\\nYou are kind.<|im_end|>\\n' }}"}
    write_sized("seeds_tokenizer_json", "branches.json.seed", dump(tiny) + b"\0" + dump(config), 12000)


# ---- fuzz_bpe: texts ---------------------------------------------------------------------------

def bpe_seeds() -> None:
    texts = {
        "english": "Hello, world! I'm sure they'll say it's fine, don't you think?\n",
        "code": "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "c": "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "numbers": "In 2024, 1234567 items cost $89.99 (3.14159e-10) -- 0x1F, 007.",
        "spaces": "a  b   c\t\td\n\n\ne \r\n  \u00a0\u3000end   ",
        "accents": "Café naïve résumé façade Ångström crème brûlée e\u0301 a\u0300",
        "cjk": "你好，世界！这是一个测试。日本語のテキストとカタカナ 한국어",
        "rtl_cyrillic": "مرحبا بالعالم، كيف حالك؟ Россия и Україна — привет!",
        "emoji": "🙂👍🏽 family: 👨‍👩‍👧 flags: 🇫🇷 math: ∑ √ ∞ ≠",
        "chatml": "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
        "specials_glued": "x<|im_end|><|im_start|>y <|endoftext|>z",
    }
    for name, text in texts.items():
        write("seeds_bpe", name + ".seed", text.encode())
    # Not UTF-8: the byte round trip must still hold.
    write("seeds_bpe", "invalid_utf8.seed", b"ok \xff\xfe \xc3( \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 end\x00\x01")


# ---- fuzz_experiment and fuzz_prompts ----------------------------------------------------------

# The prompt file fuzz_experiment writes into its scratch folder as prompts.jsonl (the fuzzer
# embeds the same lines; keep them in sync): Spec-Bench lines of several groups and plain ones.
SPEC_BENCH_LINES = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now in French."]},
    {"question_id": 101, "category": "reasoning", "turns": ["Why is the sky blue?", "Shorter."]},
    {"question_id": 121, "category": "coding", "turns": ["Reverse a list in C.", "In Rust."]},
    {"question_id": "t1", "category": "translation", "turns": ["Translate to German: good morning"]},
    {"question_id": 7, "category": "summarization", "turns": ["Summarize: cats sleep a lot."]},
    {"question_id": 8, "category": "qa", "turns": ["Who wrote Hamlet?"]},
    {"question_id": 9, "category": "math_reasoning", "turns": ["2 + 2 * 3 = ?"]},
    {"question_id": 10, "category": "rag", "turns": ["Context: X is 3. Question: what is X?"]},
]


def experiment_seeds() -> None:
    for src in sorted((ROOT / "experiments").glob("*.yaml")):
        text = src.read_text()
        text = text.replace("experiments/prompts/spec_bench.jsonl", "prompts.jsonl")
        text = text.replace("experiments/spec_bench_leaderboard.md", "context.md")
        write("seeds_experiment", src.stem + ".yaml.seed", text.encode())
    full = """name: every_key
description: every key of the schema once
models:
  target: {name: tiny-llama, dtype: float32, threads: 1, seed: 3}
  draft: {name: tiny-llama, seed: 4}
  dtype: bfloat16
  threads: 2
prompts:
  file: prompts.jsonl
  inline:
    - {text: plain text prompt, category: qa}
    - {turns: [first, second], chat: true, category: writing, id: own-id}
  chat: true
  groups: spec_bench
  per_category: 2
  seed: 5
  categories: [multi_turn, qa, rag]
  range: "1:"
  limit: 4
interleave: cell
strategies:
  - greedy
  - {name: sampling, params: {temperature: 0.7, top_k: 40, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1}}
  - {name: speculative, label: sps, params: {drafter: model, gamma: 4}}
  - {name: speculative, label: ngram, params: {drafter: ngram}}
  - {name: beam}
sweep:
  gamma: [2, 4]
  temperature: ["0", "1.0"]
repeats: 1
warmup: 0
seed: 42
max_new_tokens: 16
stop: ["\\n\\n", "###"]
eos: false
timeout_s: 2.5
plots: false
report: {context: context.md}
checks:
  greedy_equality: true
  first_token: {enabled: true, samples: 100, top_k: 5}
  sequence: {enabled: false, samples: 20, length: 2}
  significance: 0.05
  strategies: [speculative, sampling]
  sampling_where: {gamma: [4]}
  inject_residual_bug: false
"""
    write("seeds_experiment", "every_key.yaml.seed", full.encode())
    # Overrides (--set) follow the YAML after NUL bytes, one per NUL.
    write("seeds_experiment", "overrides.yaml.seed", (
        "models: {target: tiny-llama}\nprompts: [hi]\nstrategies: [greedy, speculative]\n"
        "\0strategies[1].params.gamma=3\0sweep.temperature=[0, 0.5]\0checks.first_token=false"
        "\0name=over.ridden\0prompts[0]={text: x, chat: true}").encode())
    write("seeds_experiment", "anchors.yaml.seed", (
        "models:\n  target: &m {name: tiny-llama, seed: 1}\n  draft: *m\n"
        "prompts: {inline: [&p {text: a}, *p], range: \"0:1\"}\n"
        "strategies: [{name: speculative, params: {drafter: model, gamma: '2'}}]\n"
        "sweep: {top_k: [0, 5], temperature: [0.0]}\n").encode())


    # Regression (found by fuzz_experiment): a file name longer than NAME_MAX made
    # std::filesystem::exists throw filesystem_error instead of "prompts.file: ... not found".
    long_name = "p" * 300 + ".jsonl"
    write("seeds_experiment", "regression_long_prompts_file.yaml.seed", (
        "models: {target: tiny-llama}\nprompts: {file: " + long_name + "}\nstrategies: [greedy]\n").encode())
    write("seeds_experiment", "regression_long_report_context.yaml.seed", (
        "models: {target: tiny-llama}\nprompts: [hi]\nstrategies: [greedy]\nreport: {context: " + long_name +
        "}\n").encode())
    # Regression (found by fuzz_experiment): a lone CR ending a flow scalar was kept in the value
    # by yaml-cpp and written back unquoted by to_yaml, so the resolved config read back differently.
    write("seeds_experiment", "regression_lone_cr.yaml.seed",
          b"models: {target: tiny-llama, draft: {name: tiny\r, seed: 4}}\nprompts: [hi]\nstrategies: [greedy]\n")


def prompts_seeds() -> None:
    write("seeds_prompts", "spec_bench.jsonl.seed",
          "".join(json.dumps(line) + "\n" for line in SPEC_BENCH_LINES).encode())
    write("seeds_prompts", "plain.jsonl.seed", (
        '{"text": "hello", "category": "greeting"}\n'
        '\n   \t\r\n'
        '{"text": "multi\\nline \\u00e9\\ud83d\\ude00", "chat": true, "id": "x1"}\n'
        '{"turns": ["a", "b", "c"], "chat": true, "question_id": 12}\n'
        '{"text": "no newline at the end", "id": 3}').encode())
    write("seeds_prompts", "crlf.jsonl.seed", b'{"text": "crlf"}\r\n{"turns": ["x"], "chat": false}\r\n')
    src = ROOT / "experiments" / "prompts" / "code.jsonl"
    if src.exists():
        write("seeds_prompts", "code.jsonl.seed", src.read_bytes())


if __name__ == "__main__":
    main()
    tokenizer_seeds()
    bpe_seeds()
    experiment_seeds()
    prompts_seeds()
