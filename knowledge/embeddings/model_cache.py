"""A per-process cache of models built from their configuration.

Embedders and rerankers load large models (or open connection pools): each configuration is
built once per process and shared by every thread, and two threads asking at once never build
it twice (the build runs under the cache's lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ModelCache(Generic[K, V]):
    def __init__(self, build: Callable[[K], V]) -> None:
        self._build = build
        self._built: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        """The object for ``key``, built on first use."""
        with self._lock:
            value = self._built.get(key)
            if value is None:
                value = self._build(key)
                self._built[key] = value
            return value

    def forget(self, stale: Callable[[K], bool]) -> None:
        """Drop every entry whose key ``stale`` says is out of date (rebuilt on next use)."""
        with self._lock:
            for key in [k for k in self._built if stale(k)]:
                del self._built[key]
