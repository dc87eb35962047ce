"""Drafters written in Python, as examples to start from (docs/python.md, "Drafters in Python").

NgramDrafter is a port of the C++ `ngram` drafter (src/speculative/drafters/ngram.cpp, prompt
lookup): tests/python/test_drafters.py checks that it equals the C++ drafter round for round,
and scripts/python_boundary.py times it against it.
"""
import numpy as np

from . import Drafter


class NgramDrafter(Drafter):
    """Python port of src/speculative/drafters/ngram.cpp (prompt lookup)."""

    def __init__(self, ctx):
        self.lo = int(ctx["params"]["ngram_min"])
        self.hi = int(ctx["params"]["ngram_max"])

    def propose(self, context, max_depth):
        seq = context.tolist()
        n = len(seq)
        for length in range(min(self.hi, n - 1), self.lo - 1, -1):
            suffix = seq[n - length:]
            for j in range(n - length - 1, -1, -1):  # most recent earlier match first
                if seq[j:j + length] == suffix:
                    start = j + length
                    return np.asarray(seq[start:min(n, start + max_depth)], dtype=np.int32)
        return np.empty(0, dtype=np.int32)
