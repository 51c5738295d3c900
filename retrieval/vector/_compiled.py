"""The vector leg's loops, compiled by numba (imported by ``retrieval.vector.kernels`` only)."""

from __future__ import annotations

import numpy as np
from numba import njit


# fastmath: the float32 sum may be reassociated; its rounding is inside ``ivf.SLACK_PER_L1``.
@njit(cache=True, nogil=True, fastmath=True, boundscheck=False, error_model="numpy")
def upper_bounds(codes, scales, query, slack, starts, stops, live, rows, bounds):
    """For each live row ``i`` of the runs ``starts[r]:stops[r]``, in order: ``rows[n] = i`` and
    ``bounds[n] = scales[i] * (query . codes[i] + slack)``, an upper bound of its cosine with
    ``query``. ``live`` empty: every row is live. Returns how many were written."""
    n = 0
    dimensions = query.size
    for r in range(starts.size):
        for i in range(starts[r], stops[r]):
            if live.size and not live[i]:
                continue
            total = np.float32(0.0)
            for j in range(dimensions):
                total += query[j] * np.float32(codes[i, j])
            rows[n] = i
            bounds[n] = scales[i] * (total + slack)
            n += 1
    return n
