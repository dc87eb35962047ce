#!/usr/bin/env python3
"""The include graph of a source folder, from its files' #include "..." lines.

  scripts/include_graph.py src/speculative            # edges between the folder's files
  scripts/include_graph.py src/speculative --outside  # and the headers they include elsewhere
  scripts/include_graph.py src/strategies --merge=drafters  # drafters.h, .cpp and drafters/ as one

Each header and its .cpp count as one node (proposer.h + proposer.cpp = proposer); a subfolder's
files are one node each. An edge a -> b means a includes b. It prints the edges and, for the
folder's own nodes, any cycle (a back arrow), and exits 1 when there is one.
"""
import os
import re
import sys


MERGE = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--merge=")]


def node(path, root):
    rel = os.path.splitext(os.path.relpath(path, root))[0]
    for prefix in MERGE:
        if rel == prefix or rel.startswith(prefix + "/"):
            return prefix + "*"
    return rel


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    outside = "--outside" in sys.argv
    folder = args[0].rstrip("/")
    src = os.path.dirname(folder)  # includes are relative to src/
    edges = set()
    nodes = set()
    for dirpath, _, files in os.walk(folder):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, f)
            a = node(path, folder)
            nodes.add(a)
            for line in open(path, encoding="utf-8"):
                m = re.match(r'#include "([^"]+)"', line)
                if not m:
                    continue
                inc = os.path.join(src, m.group(1))
                if os.path.commonpath([os.path.abspath(inc), os.path.abspath(folder)]) == os.path.abspath(folder):
                    b = node(inc, folder)
                    if a != b:
                        edges.add((a, b))
                elif outside:
                    edges.add((a, m.group(1)))
    for a, b in sorted(edges):
        print(f"{a} -> {b}")
    # cycles among the folder's own nodes (Tarjan's strongly connected components)
    inner = {n: [b for a, b in edges if a == n and b in nodes] for n in nodes}
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in inner[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    for c in sccs:
        print("cycle (a back arrow):", " <-> ".join(c))
    return 1 if sccs else 0


if __name__ == "__main__":
    sys.exit(main())
