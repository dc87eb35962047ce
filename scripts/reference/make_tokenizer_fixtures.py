#!/usr/bin/env python3
"""Writes the tokenizer oracle fixtures tests/fixtures/tokenizer/<model>.json.

Run with the reference venv (transformers 5.x + tokenizers):
    ~/.cache/specdec/venv/bin/python scripts/reference/make_tokenizer_fixtures.py

For each GGUF present under models/, the reference tokenizer is the one transformers builds
from the GGUF (AutoTokenizer.from_pretrained(models, gguf_file=...)), with one correction:
transformers has no entry for tokenizer.ggml.pre == "smollm" and falls back to plain GPT-2
ByteLevel splitting. SmolLM2's own tokenizer.json (and llama.cpp's "smollm" pre-type) isolates
every digit first: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]. The two
differ on e.g. "a  1" (['a','ĠĠ','1'] vs ['a','Ġ','Ġ','1']), so we install SmolLM2's real
pre-tokenizer before computing the ids.

With --export-json DIR it also saves each reference tokenizer as DIR/<name>/tokenizer.json
(+ tokenizer_config.json, chat_template.jinja) for the optional from_hf_json integration
checks; DIR must be git-ignored (e.g. build-<you>/hf_tokenizers), those files are ~10 MB.

Each fixture holds: the texts with their ids (add_special_tokens as the model defaults), the
chat-template renderings with their ids, and the BOS/EOS metadata. Fixtures stay small.
"""
import json
import os
import random
import sys

from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

LONG_PARAGRAPH = (
    "Speculative decoding accelerates autoregressive generation by letting a small draft model "
    "propose several tokens that the large target model then verifies in a single forward pass. "
    "When the draft agrees with the target, many tokens are accepted at once; when it does not, "
    "the rejected suffix is discarded and the target's own correction is kept. The output "
    "distribution is provably unchanged (Leviathan et al., 2023; Chen et al., 2023), so the "
    "only question is how much wall-clock time is saved. In practice the answer depends on the "
    "acceptance rate alpha, the draft length gamma and the cost ratio c between the two models. "
) * 3

TEXTS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "I'm sure they'll say it's fine, don't you think? We've seen it. I'd go. YOU'RE RIGHT'S",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u64> = (1..=10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "const add = (a, b) => a + b; // arrow\nconsole.log(`sum=${add(2, 3)}`);",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
    "<html><body class=\"x\">&nbsp;&lt;tag&gt;</body></html>",
    "Café naïve résumé façade Ångström crème brûlée",
    "e\u0301 combining: a\u0300 o\u0308 n\u0303 (decomposed forms)",
    "你好，世界！这是一个测试。日本語のテキストとカタカナ",
    "한국어 텍스트입니다",
    "مرحبا بالعالم، كيف حالك؟",
    "Россия и Україна — привет!",
    "Emoji: 😀👍🏽🇺🇸 family 👨‍👩‍👧‍👦 and ❤️ ZWJ",
    "   leading spaces and trailing spaces   ",
    "multiple   internal    spaces\tand\ttabs",
    "line one\nline two\r\nline three\n\n\nafter blank lines\n",
    "trailing newline and spaces \n  \n",
    " \t \n \u00a0nbsp\u3000ideographic space",
    "Numbers 12345 and 3.14159 and 1,000,000 and 007",
    "a  1 and  22 and   333",
    "long digits 31415926535897932384626433832795028841971693993751",
    "version v1.2.3-rc4, IPv4 192.168.0.1, hex 0xDEADbeef",
    "<|im_start|>user\nhi<|im_end|>\n",
    "text before<|endoftext|>text after",
    "nested <|im_start|><|im_end|> and partial <|im_sta and <|im_end",
    "Punctuation!!! ??? ... --- (parens) [brackets] {braces} ''quotes''",
    "Tabs\t\t\tand mixed \t \t whitespace",
    "x" * 200,
    "Ünïcödé ÀÉÎÕÜ ßtraße ﬁligature ＡＢＣ full-width",
    "math: ∑_{i=1}^{n} x_i² ≤ ∞, α β γ δ",
    "control \x04 chars \x13\x1d bell\x07 end",
    LONG_PARAGRAPH,
]

# Seeded "soup" texts: random strings over characters where regex engines tend to disagree
# (Unicode whitespace such as U+180E/U+2028/U+0085, digits and letters from recent Unicode
# versions, combining marks, ZWJ emoji, contractions in odd cases) mixed with special tokens.
SOUP_POOL = [
    " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\u0085", "\u2028",
    "\u180e", "\u1680", "\u000b", "\u000c", "a", "Z", "é", "e\u0301", "ß", "ﬁ", "ſ", "'s", "'S",
    "'ll", "'LL", "’s", "1", "23", "٣", "²", "½", "Ⅻ", "①", "߀", "𝟘", "你", "好", "ア", "ー", "한",
    "ع", "ב", "\u05b0", "ก", "\u0e31", "😀", "👍🏽", "👨‍👩‍👧", "🇺🇸", "❤️", "\ufe0f", "$", ".", ",",
    "!", "<", ">", "_", "-", "(", ")", "{", "\\", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<tool_call>", "x", "y", "hello", "world", " the", "\U00011de0", "\U00016ff4", "\U0001e5f1",
    "\U00010d4a", "\u0378", "\ue000", "\U0001f600",
]


def soup_texts(n=400, seed=7):
    rng = random.Random(seed)
    return ["".join(rng.choice(SOUP_POOL) for _ in range(rng.randint(1, 25))) for _ in range(n)]


CHATS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Write a haiku about code."},
      {"role": "assistant", "content": "Bits fall like rain\nloops hum"},
      {"role": "user", "content": "Another one, in 日本語 please 😀"}], True),
    ([{"role": "user", "content": "def f(x):\n    return x * 2\n"}], False),
]


def reference_tokenizer(gguf_name, pre):
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=gguf_name)
    note = "transformers from GGUF"
    if pre == "smollm":
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        note += ", pre_tokenizer = Sequence[Digits(individual), ByteLevel] (SmolLM2's own)"
    return tok, note


def gguf_pre(path):
    from gguf import GGUFReader
    field = GGUFReader(path).fields["tokenizer.ggml.pre"]
    return bytes(field.parts[-1]).decode()


def make(gguf_name, out_name, export_dir=None):
    path = os.path.join(MODELS, gguf_name)
    if not os.path.exists(path):
        print(f"skip {gguf_name}: not found (run scripts/fetch_models.sh)")
        return
    pre = gguf_pre(path)
    tok, note = reference_tokenizer(gguf_name, pre)
    if export_dir:
        tok.save_pretrained(os.path.join(export_dir, out_name[:-len(".json")]))
    texts = [{"text": t, "ids": tok.encode(t)} for t in TEXTS]
    soup = [{"text": t, "ids": tok.encode(t)} for t in soup_texts()]
    # Decoding: every prefix of a few multi-byte texts (prefixes end inside UTF-8 sequences,
    # which HF renders as U+FFFD), and special tokens with and without skip_special_tokens.
    decodes = []
    for t in ["Emoji: 😀👍🏽🇺🇸 family 👨‍👩‍👧‍👦", "你好，世界！", "Café crème", "<|im_start|>user\nhi<|im_end|>\n"]:
        ids = tok.encode(t)
        for k in range(1, len(ids) + 1):
            for skip in (False, True):
                decodes.append({"ids": ids[:k], "skip_special": skip,
                                "text": tok.decode(ids[:k], skip_special_tokens=skip)})
    chats = []
    for messages, gen in CHATS:
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        ids = tok.encode(rendered, add_special_tokens=False)
        chats.append({"messages": messages, "add_generation_prompt": gen,
                      "rendered": rendered, "ids": ids})
    fixture = {
        "model_file": gguf_name,
        "pre": pre,
        "reference": note,
        "vocab_size": len(tok),
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "texts": texts,
        "soup": soup,
        "decodes": decodes,
        "chats": chats,
    }
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, out_name)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
    print(f"wrote {out}: {len(texts)} texts, {len(soup)} soup texts, {len(chats)} chats, {os.path.getsize(out)} bytes")


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export-json", metavar="DIR", help="also save the reference tokenizer.json files")
    args = ap.parse_args()
    make("smollm2-135m-instruct.gguf", "smollm2.json", args.export_json)
    make("qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder.json", args.export_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
