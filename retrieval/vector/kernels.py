"""Compiled loops of the vector leg (``retrieval.vector._compiled``), loaded once per process
by the warm-up or the first search that needs them (``retrieval.compiled``)."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from retrieval.compiled import Loops


def _warm(compiled: ModuleType) -> None:
    codes = np.ones((3, 2), dtype=np.int8)
    starts, stops = np.array([0], dtype=np.int64), np.array([3], dtype=np.int64)
    rows, bounds = np.empty(3, dtype=np.int64), np.empty(3, dtype=np.float32)
    query = np.ones(2, dtype=np.float32)
    scales = np.ones(3, dtype=np.float32)
    for live in (np.zeros(0, dtype=np.bool_), np.ones(3, dtype=np.bool_)):
        slack = np.float32(1.0)
        compiled.upper_bounds(codes, scales, query, slack, starts, stops, live, rows, bounds)


LOOPS = Loops("retrieval.vector._compiled", _warm, "vector-compiled")
get = LOOPS.get
