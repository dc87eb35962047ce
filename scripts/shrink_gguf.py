#!/usr/bin/env python3
"""Shrink a llama-architecture GGUF file (SmolLM2-135M-Instruct) for the GPU pack.

The output keeps the GGUF header, every metadata key/value verbatim (plus one note key) and every
tensor info with its name, shape and type, in the original order, so loaders and tests that expect
e.g. 30 layers and 272 tensors still accept the file. Only the data changes:

  * the first K real transformer layers (0..K-1) are kept, placed at chosen layer slots
    (--slots, default "0,10": real layer 0 at slot 0, real layer 1 at slot 10);
  * every other slot is a no-op layer: its attn_output and ffn_down weights are all-zero blocks
    (for Q4_0/Q4_1/Q5_*/Q8_0/F16/F32/BF16 an all-zero byte string decodes to exactly 0.0), so the
    layer adds exactly 0 to the residual stream; its other tensors (norms, q/k/v, gate/up) point at
    the bytes of a real layer's tensors;
  * tensors share data where GGUF allows it: several tensor infos may carry the same data offset.
    All no-op slots share one zero block, sized for the largest zeroed tensor.

So the file computes exactly what the first K layers of the model compute (then output_norm and the
tied / separate output head), while every tensor name, shape and type is still there.

Why slot 10 by default: the device test's layer-subset draft drops slots 10, 13, 16, 19, 22 and the
CLI's layer_skip drafter is run with skip_layers=10, so with a real layer at slot 10 those drafts
disagree with the target (rejections happen), as with the full model.

Pure Python (struct only; no numpy/gguf needed):
  python3 scripts/shrink_gguf.py models/smollm2-135m-instruct.gguf out.gguf [--slots 0,10]
"""
import argparse
import os
import re
import struct
import sys

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types -> struct format (fixed-size scalars)
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
# ggml types: (block size in elements, bytes per block); only what we may need to size tensors
GGML_TYPES = {
    0: (1, 4),      # F32
    1: (1, 2),      # F16
    2: (32, 18),    # Q4_0
    3: (32, 20),    # Q4_1
    6: (32, 22),    # Q5_0
    7: (32, 24),    # Q5_1
    8: (32, 34),    # Q8_0
    9: (32, 36),    # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    30: (1, 2),     # BF16
}
# Types for which the all-zero byte string decodes to 0.0 in every element (scale d = 0 and, for
# the "_1" types, min m = 0). K-quants also decode to 0 with d = dmin = 0.
ZERO_OK = {0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 30}
NOOP_SUFFIXES = ("attn_output.weight", "ffn_down.weight")


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = bytes(self.b[self.p:self.p + n])
        self.p += n
        return s

    def skip_value(self, t):
        if t == STRING:
            self.string()
        elif t == ARRAY:
            et, n = self.take("I"), self.take("Q")
            if et in SCALAR:
                self.p += n * struct.calcsize("<" + SCALAR[et])
            else:
                for _ in range(n):
                    self.skip_value(et)
        else:
            self.p += struct.calcsize("<" + SCALAR[t])

    def value(self, t):
        if t == STRING:
            return self.string().decode("utf-8", "replace")
        if t in SCALAR:
            return self.take(SCALAR[t])
        self.skip_value(t)
        return None


def parse(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(min(size, 64 << 20))   # header + metadata (tokenizer: ~2 MB) fit easily
    r = Reader(head)
    if r.b[:4] != GGUF_MAGIC:
        sys.exit(f"{path}: not a GGUF file")
    r.p = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version not in (2, 3):
        sys.exit(f"{path}: GGUF version {version} not supported")
    kv_start = r.p
    kv = {}
    for _ in range(n_kv):
        key = r.string().decode()
        t = r.take("I")
        start = r.p
        val = r.value(t) if t != ARRAY else None
        if t == ARRAY:
            r.p = start
            r.skip_value(t)
        kv[key] = val
    kv_bytes = bytes(head[kv_start:r.p])
    tensors = []
    for _ in range(n_tensors):
        name = r.string().decode()
        nd = r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        ty = r.take("I")
        off = r.take("Q")
        tensors.append({"name": name, "dims": dims, "type": ty, "offset": off})
    align = int(kv.get("general.alignment") or 32)
    data_start = (r.p + align - 1) // align * align
    for t in tensors:
        if t["type"] not in GGML_TYPES:
            sys.exit(f"{path}: tensor {t['name']} has ggml type {t['type']}, unknown to this script")
        bs, bb = GGML_TYPES[t["type"]]
        n = 1
        for d in t["dims"]:
            n *= d
        if n % bs:
            sys.exit(f"{path}: tensor {t['name']}: {n} elements, not a multiple of block {bs}")
        t["nbytes"] = n // bs * bb
        if data_start + t["offset"] + t["nbytes"] > size:
            sys.exit(f"{path}: tensor {t['name']} runs past the end of the file")
    return {"version": version, "n_kv": n_kv, "kv": kv, "kv_bytes": kv_bytes, "tensors": tensors,
            "align": align, "data_start": data_start, "size": size}


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--slots", default="0,10",
                    help="slot of each kept real layer, in order: real layer i goes to the i-th slot "
                         "(default 0,10: layers 0 and 1 of the model, at slots 0 and 10)")
    ap.add_argument("--no-note", action="store_true", help="add no 'specdec.shrunk' metadata key")
    a = ap.parse_args()

    g = parse(a.src)
    arch = g["kv"].get("general.architecture")
    n_layers = g["kv"].get(f"{arch}.block_count")
    if not isinstance(n_layers, int):
        sys.exit(f"{a.src}: no {arch}.block_count")
    slots = [int(s) for s in a.slots.split(",") if s.strip()]
    if not slots or len(set(slots)) != len(slots) or min(slots) < 0 or max(slots) >= n_layers:
        sys.exit(f"--slots {a.slots}: distinct slots in 0..{n_layers - 1} expected")
    slot_to_real = {s: i for i, s in enumerate(slots)}
    donor = len(slots) - 1          # the real layer whose bytes no-op slots alias
    by_name = {t["name"]: t for t in g["tensors"]}
    blk = re.compile(r"^blk\.(\d+)\.(.+)$")

    # ---- plan the data section: unique blobs, each aligned --------------------------------
    blobs = []          # (key, source offset or None for zeros, nbytes)
    where = {}          # key -> offset in the new data section
    end = 0

    def add(key, src_off, nbytes):
        nonlocal end
        if key in where:
            return where[key]
        off = (end + g["align"] - 1) // g["align"] * g["align"]
        blobs.append((off, src_off, nbytes))
        where[key] = off
        end = off + nbytes
        return off

    # one zero blob, as large as the largest tensor that gets zeroed
    zero_size = 0
    for t in g["tensors"]:
        m = blk.match(t["name"])
        if m and int(m.group(1)) not in slot_to_real and m.group(2) in NOOP_SUFFIXES:
            if t["type"] not in ZERO_OK:
                sys.exit(f"{t['name']}: type {t['type']} has no all-zero encoding known here")
            zero_size = max(zero_size, t["nbytes"])

    new_off = []
    for t in g["tensors"]:
        m = blk.match(t["name"])
        if not m:
            off = add(t["name"], t["offset"], t["nbytes"])
        else:
            slot, suffix = int(m.group(1)), m.group(2)
            if slot in slot_to_real:
                real = slot_to_real[slot]
            elif suffix in NOOP_SUFFIXES:
                new_off.append(add("<zeros>", None, zero_size))
                continue
            else:
                real = donor
            src = by_name.get(f"blk.{real}.{suffix}")
            if src is None or src["dims"] != t["dims"] or src["type"] != t["type"]:
                sys.exit(f"{t['name']}: blk.{real}.{suffix} missing or of another shape/type")
            off = add(f"blk.{real}.{suffix}", src["offset"], src["nbytes"])
        new_off.append(off)

    # ---- header: magic, version, counts, metadata verbatim (+ note), tensor infos ------------
    kv_bytes, n_kv = g["kv_bytes"], g["n_kv"]
    if not a.no_note:
        note = (f"shrunk by specdec scripts/shrink_gguf.py: real layers 0-{len(slots) - 1} at slots "
                f"{','.join(map(str, slots))}; the other {n_layers - len(slots)} slots are no-op layers "
                f"(zero attn_output/ffn_down; other tensors alias layer {donor}'s bytes)")
        kv_bytes += gguf_string("specdec.shrunk") + struct.pack("<I", STRING) + gguf_string(note)
        n_kv += 1
    infos = b""
    for t, off in zip(g["tensors"], new_off):
        infos += gguf_string(t["name"]) + struct.pack("<I", len(t["dims"]))
        infos += b"".join(struct.pack("<Q", d) for d in t["dims"])
        infos += struct.pack("<I", t["type"]) + struct.pack("<Q", off)
    head = GGUF_MAGIC + struct.pack("<IQQ", g["version"], len(g["tensors"]), n_kv) + kv_bytes + infos
    head += b"\0" * ((-len(head)) % g["align"])

    tmp = a.dst + ".tmp"
    with open(a.src, "rb") as fin, open(tmp, "wb") as fout:
        fout.write(head)
        pos = 0
        for off, src_off, nbytes in blobs:
            fout.write(b"\0" * (off - pos))
            if src_off is None:
                fout.write(b"\0" * nbytes)
            else:
                fin.seek(g["data_start"] + src_off)
                left = nbytes
                while left:
                    chunk = fin.read(min(left, 8 << 20))
                    if not chunk:
                        sys.exit(f"{a.src}: short read")
                    fout.write(chunk)
                    left -= len(chunk)
            pos = off + nbytes
    os.replace(tmp, a.dst)

    # ---- check what was written: same names/shapes/types, offsets in range --------------------
    h = parse(a.dst)
    assert [(t["name"], t["dims"], t["type"]) for t in h["tensors"]] == \
           [(t["name"], t["dims"], t["type"]) for t in g["tensors"]]
    assert all(h["kv"].get(k) == v for k, v in g["kv"].items() if v is not None)
    assert set(g["kv"]) <= set(h["kv"])
    print(f"{a.dst}: {h['size']} bytes (from {g['size']}), {len(h['tensors'])} tensors, {h['n_kv']} "
          f"metadata keys, {arch}.block_count {n_layers}; real layers 0-{len(slots) - 1} at slots "
          f"{a.slots}, {n_layers - len(slots)} no-op slots")


if __name__ == "__main__":
    main()
