"""Numba-compiled loops of a module, loaded once per process.

Numba costs a process time to import and to load cached machine code (far more for the first
compile on a machine, which writes it to ``__pycache__``; ``make install`` runs that compile,
``python -m retrieval.precompile``), and private memory (LLVM) plus shared library pages
(figures: docs/performance.md). The warm-up (``retrieval.warmup``) loads them at process start;
a caller needing them before that loads them itself, and concurrent callers wait for the one
loading. Numba is a required dependency: missing or broken, loading raises
``LoopsUnavailable`` (every time it is asked, without trying again).

Users: BM25's query loops (``retrieval.bm25.kernels``) and the vector leg's scoring of an IVF's
int8 codes (``retrieval.vector.kernels``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType


class LoopsUnavailable(RuntimeError):
    """The compiled loops cannot be loaded: numba is missing or broken."""


class Loops:
    """The loops of ``module``; ``warm(module)`` calls each with every argument type callers
    pass, so that no caller pays for a compile."""

    def __init__(self, module: str, warm: Callable[[ModuleType], None], name: str) -> None:
        self.module = module
        self.warm = warm
        self.name = name
        self._lock = threading.Lock()
        self._loaded: ModuleType | None = None
        self._failed: LoopsUnavailable | None = None

    def get(self) -> ModuleType:
        """The compiled loops, imported and compiled (or loaded from numba's cache) by the first
        caller in this process; the others wait for it."""
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._loaded is None:
                if self._failed is None:
                    self._load()
                if self._failed is not None:
                    raise self._failed
            return self._loaded

    def _load(self) -> None:
        try:
            module = importlib.import_module(self.module)
            self.warm(module)
        except Exception as exc:
            self._failed = LoopsUnavailable(
                f"{self.name}: the numba loops of {self.module} cannot be loaded "
                f"({type(exc).__name__}: {exc}); numba is a required dependency "
                "(requirements.txt): reinstall with `make install`"
            )
            self._failed.__cause__ = exc
        else:
            self._loaded = module
