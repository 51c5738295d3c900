"""Compiled loops of the vector leg, loaded once per process, never waited for
(``retrieval.compiled``).

``upper_bounds`` scores the probed lists of an IVF base on their int8 codes
(``retrieval.vector.ivf.quantize``): a quarter of the float32 rows' bytes, which is what bounds
the scan (~14k rows, 21 MB of float32 a query at 300k chunks), and a filtered search's allowed
rows of such a base. Until the loops are loaded, or without numba, or with
``VECTOR_IVF_CODES=false``, every probed (or allowed) row is scored on the stored rows; both
give the same top ids (``Part.probed``, ``Part.scored``). With float16 rows
(``VECTOR_IVF_FLOAT16``) that costs several times a float32 product (numpy converts each
row).
"""

from __future__ import annotations

from types import ModuleType

from retrieval.compiled import Loops


def _warm(compiled: ModuleType) -> None:
    import numpy as np

    codes = np.ones((3, 2), dtype=np.int8)
    starts, stops = np.array([0], dtype=np.int64), np.array([3], dtype=np.int64)
    rows, bounds = np.empty(3, dtype=np.int64), np.empty(3, dtype=np.float32)
    query = np.ones(2, dtype=np.float32)
    scales = np.ones(3, dtype=np.float32)
    for live in (np.zeros(0, dtype=np.bool_), np.ones(3, dtype=np.bool_)):
        slack = np.float32(1.0)
        compiled.upper_bounds(codes, scales, query, slack, starts, stops, live, rows, bounds)


LOOPS = Loops("retrieval.vector._compiled", _warm, "vector-compiled")
get, load, start_loading, numpy_only = LOOPS.get, LOOPS.load, LOOPS.start_loading, LOOPS.numpy_only
