#!/usr/bin/env python3
"""Writes the tiny seed corpora of the io fuzzers (tests/fuzz/seeds_*/). Python stdlib
only; the seeds are committed (named *.seed so no tool takes them for model weights);
rerun this only to change them."""
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


if __name__ == "__main__":
    main()
