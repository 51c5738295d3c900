"""BM25's query loops (``retrieval.bm25._compiled``), compiled once per process by the warm-up
or by the first search, which waits for them (``retrieval.compiled``)."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from retrieval.compiled import Loops


def _warm(compiled: ModuleType) -> None:
    """Call every loop with each argument type searches pass (int32 or int64 positions, uint16
    or int32 codes: ``PairGrid.code_type``), so that no search pays for a compile."""
    ids = np.arange(4, dtype=np.int64)
    none_dead, none_allowed = np.zeros(0, dtype=np.bool_), np.zeros(0, dtype=np.int64)
    dead = np.zeros(4, dtype=np.bool_)
    table = np.array([0.5, 0.25])
    bounds, offsets = np.array([0, 2], dtype=np.int64), np.zeros(1, dtype=np.int64)
    for position_type in (np.int32, np.int64):
        positions = np.array([1, 3], dtype=position_type)
        buffer = np.zeros(4)
        heap = np.empty(2), np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64)
        for code_type in (np.uint16, np.int32):
            piece = positions, np.array([1, 0], dtype=code_type), bounds, offsets
            compiled.scatter_add(buffer, *piece, table, 2.0)
            compiled.add_found(buffer, positions, *piece, table, 2.0)
            for dead_arg, allowed_arg in ((none_dead, none_allowed), (dead, ids)):
                compiled.best_of(*piece, table, 2.0, ids, dead_arg, allowed_arg, *heap, 0)
            if position_type is np.int32:
                compiled.largest(*piece[1:], table, 2.0, np.empty(2), 0)
        for dead_arg, allowed_arg in ((none_dead, none_allowed), (dead, ids)):
            out = np.empty(2, dtype=position_type), np.empty(2)
            compiled.collect(buffer, positions, ids, dead_arg, allowed_arg, *heap, 0)
            compiled.collect_recording(
                buffer, positions, ids, dead_arg, allowed_arg, *heap, 0, *out, 0, 0.5, 1.0
            )
        compiled.reaching(positions.copy(), table.copy(), 2, 0.3)
        compiled.zero_at(buffer, positions)
    docs = np.array([1, 3], dtype=np.int64)
    compiled.holders_by_term(bounds, docs.astype(np.int32), docs, np.empty(1, dtype=np.int64))


LOOPS = Loops("retrieval.bm25._compiled", _warm, "bm25-compiled")
get = LOOPS.get
