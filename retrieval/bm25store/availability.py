"""Whether keyword (BM25) search can run in this deployment."""

from __future__ import annotations

import importlib
import logging
import threading

logger = logging.getLogger(__name__)

_REQUIRED = ("rank_bm25", "jieba")  # the scores' reference; the Chinese analyser
# The line operators grep for, exactly as the system this one replaces logged it.
UNAVAILABLE_MESSAGE = "⚠️ BM25 dependencies unavailable, using vector-only search mode"
_available: bool | None = None
_lock = threading.Lock()


def bm25_available() -> bool:
    """True when BM25's dependencies import (checked once per process, logged once if not)."""
    global _available
    if _available is None:
        with _lock:
            if _available is None:
                missing = [name for name in _REQUIRED if not _importable(name)]
                if missing:
                    logger.warning("%s\ncannot import %s", UNAVAILABLE_MESSAGE, ", ".join(missing))
                _available = not missing
    return _available


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
