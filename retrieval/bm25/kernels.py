"""Compiled loops for the BM25 query path, loaded once per process, never waited for.

``SegmentedIndex.search`` sums a query's term contributions and selects its top k. In numpy
that is a sequence of calls (``np.add.at``, gathers, partitions), each ~1.6-2 ns a posting plus
microseconds of Python; bm25s, the fastest peer, runs one numba loop at ~1 ns a posting. The
loops in ``retrieval.bm25._compiled`` do the same work as ours in numba: the same float64
additions in the same order (so the same bits as rank_bm25), a heap for the top k, MaxScore's
candidates looked up by galloping. Measured at 100k documents (``bench bm25``, 2-core VM):
query p50 ~0.2 ms numpy, ~0.11 ms compiled.

Numba costs a process ~0.3 s to import and ~0.5 s to load the cached machine code (the first
compile on a machine, written to ``__pycache__`` or numba's user cache, ~5-10 s), and ~50 MB of
private memory (LLVM) plus ~80 MB of shared library pages. So the loops are loaded by the warm-up
(``retrieval.warmup``) or, in a process without it, in a background thread started by the first
search; until they are, searches take the numpy path, which answers the same ids and scores bit
for bit. ``BM25_COMPILED=false`` (setting) keeps a process on numpy; numba missing has the same
effect (logged once).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from types import ModuleType

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: ModuleType | None = None
_tried = False
_suspended = 0  # > 0 while ``numpy_only()`` is active


def get() -> ModuleType | None:
    """The compiled loops if loaded (and not suspended), else None: never loads or waits."""
    return _loaded if not _suspended else None


def load() -> bool:
    """Import and compile (or load from numba's cache) the loops, once per process; whether
    they are available. Concurrent callers wait for the one loading."""
    global _loaded, _tried
    with _lock:
        if _tried:
            return _loaded is not None
        try:
            from retrieval.bm25 import _compiled

            _warm(_compiled)
        except Exception:  # numba missing or broken: the numpy path serves
            logger.warning("BM25 compiled loops unavailable; numpy path", exc_info=True)
            _loaded = None
        else:
            _loaded = _compiled
        _tried = True
        return _loaded is not None


def start_loading() -> threading.Thread | None:
    """``load`` in a daemon thread, unless already loaded or tried (then None)."""
    if _tried or _lock.locked():
        return None
    thread = threading.Thread(target=load, name="bm25-compiled", daemon=True)
    thread.start()
    return thread


@contextmanager
def numpy_only():
    """Searches inside take the numpy path (tests comparing the two, benchmarks)."""
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def _warm(compiled: ModuleType) -> None:
    """Call every loop with each argument type searches pass (int32 or int64 positions), so
    that no search pays for a compile."""
    import numpy as np

    ids = np.arange(4, dtype=np.int64)
    none_dead, none_allowed = np.zeros(0, dtype=np.bool_), np.zeros(0, dtype=np.int64)
    dead = np.zeros(4, dtype=np.bool_)
    for position_type in (np.int32, np.int64):
        positions = np.array([1, 3], dtype=position_type)
        weights = np.array([0.5, 0.25])
        buffer = np.zeros(4)
        compiled.scatter_add(buffer, positions, weights)
        heap = np.empty(2), np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64)
        for dead_arg, allowed_arg in ((none_dead, none_allowed), (dead, ids)):
            out = np.empty(2, dtype=position_type), np.empty(2)
            compiled.collect(buffer, positions, ids, dead_arg, allowed_arg, *heap, 0)
            compiled.collect_recording(
                buffer, positions, ids, dead_arg, allowed_arg, *heap, 0, *out, 0, 0.5, 1.0
            )
            compiled.best_of(weights, positions, ids, dead_arg, allowed_arg, *heap)
        compiled.reaching(positions.copy(), weights.copy(), 2, 0.3)
        compiled.add_found(buffer, positions, positions, weights)
        compiled.zero_at(buffer, positions)
    compiled.largest(np.array([0.5, 0.25, 1.0]), np.empty(2), 0)
