"""Numba-compiled loops of a module, loaded once per process and never waited for.

Numba costs a process time to import and to load cached machine code (far more for the first
compile on a machine, written to ``__pycache__`` or numba's user cache), and private memory
(LLVM) plus shared library pages (figures: docs/performance.md, "Query paths: compiled and
numpy"). So compiled loops are loaded by the warm-up (``retrieval.warmup``) or, in a process
without it, in a background thread started by the first search that could use them; until then
searches take their numpy path, which answers the same. Numba missing or broken leaves the numpy
path in use (logged once).

Users: BM25's query loops (``retrieval.bm25.kernels``) and the vector leg's scoring of an IVF's
int8 codes (``retrieval.vector.kernels``).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from contextlib import contextmanager
from types import ModuleType

logger = logging.getLogger(__name__)


class Loops:
    """The loops of ``module``; ``warm(module)`` calls each with every argument type searches
    pass, so that no search pays for a compile."""

    def __init__(self, module: str, warm: Callable[[ModuleType], None], name: str) -> None:
        self.module = module
        self.warm = warm
        self.name = name  # of the loading thread, and in the log
        self._lock = threading.Lock()
        self._loaded: ModuleType | None = None
        self._tried = False
        self._suspended = 0  # > 0 while ``numpy_only()`` is active

    def get(self) -> ModuleType | None:
        """The compiled loops if loaded (and not suspended), else None: never loads or waits."""
        return self._loaded if not self._suspended else None

    def load(self) -> bool:
        """Import and compile (or load from numba's cache) the loops, once per process;
        whether they are available. Concurrent callers wait for the one loading."""
        with self._lock:
            if self._tried:
                return self._loaded is not None
            try:
                module = importlib.import_module(self.module)
                self.warm(module)
            except Exception:  # numba missing or broken: the numpy path serves
                logger.warning("%s loops unavailable; numpy path", self.name, exc_info=True)
                self._loaded = None
            else:
                self._loaded = module
            self._tried = True
            return self._loaded is not None

    def start_loading(self) -> threading.Thread | None:
        """``load`` in a daemon thread, unless already loaded or tried (then None)."""
        if self._tried or self._lock.locked():
            return None
        thread = threading.Thread(target=self.load, name=self.name, daemon=True)
        thread.start()
        return thread

    @contextmanager
    def numpy_only(self):
        """Searches inside take the numpy path (tests comparing the two, benchmarks)."""
        self._suspended += 1
        try:
            yield
        finally:
            self._suspended -= 1
