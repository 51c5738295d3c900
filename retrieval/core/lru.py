"""ByteLRU: the one least-recently-used cache of ``retrieval``, bounded by the bytes it holds.

It holds a knowledge base's composed BM25 view (the BM25 store's L1) and its vector matrix (the
matrix cache), one per knowledge base, and inside a BM25 view its terms' layouts and
contributions (``retrieval.bm25.layouts``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _nbytes(value: Any) -> int:
    return value.nbytes


class _Entry(NamedTuple):
    key: Any
    value: Any
    version: int
    nbytes: int


class ByteLRU(Generic[K, V]):
    """A thread-safe LRU holding at most ``max_bytes`` of its values' sizes (``size_of``; by
    default a value's ``nbytes``), the least recently used dropped first. A value larger than
    the whole budget is not kept at all. Values are never written after they are put, so
    readers share them.

    Entries carry a version (0 unless given), and versions only move forward: a ``put`` never
    replaces an entry of a later version, and a ``get`` asking for at least ``min_version``
    drops an older entry (or leaves it, ``drop_older=False``).

    ``slot_of``: what an entry is held under (default: its key). Keys of one slot are lives of
    one thing: a knowledge base's identities are held in the slot of its id
    (``retrieval.core.identity.knowledge_base_slot``), so an entry of the same id in another
    life of the database is never returned, and is dropped on sight."""

    def __init__(
        self,
        max_bytes: int,
        size_of: Callable[[V], int] = _nbytes,
        slot_of: Callable[[K], Hashable] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._slot_of = slot_of
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()

    def get(self, key: K, min_version: int = 0, drop_older: bool = True) -> V | None:
        """The value held for ``key`` if its version is at least ``min_version``, marked as
        the most recently used; else None."""
        slot = key if self._slot_of is None else self._slot_of(key)
        with self._lock:
            entry = self._entries.get(slot)
            if entry is None:
                return None
            if entry.key == key and entry.version >= min_version:
                self._entries.move_to_end(slot)
                return entry.value
            if entry.key != key or drop_older:  # another life of the slot, or an older version
                self._remove(slot)
            return None

    def peek(self, key: K) -> V | None:
        """The value held for ``key`` whatever its version (not marked as used)."""
        slot = key if self._slot_of is None else self._slot_of(key)
        with self._lock:
            entry = self._entries.get(slot)
            return entry.value if entry is not None and entry.key == key else None

    def put(self, key: K, value: V, version: int = 0) -> None:
        """Hold ``value`` for ``key``, unless an entry of a later version is held for it. The
        entry it replaces goes even when ``value`` is too large to keep."""
        slot = key if self._slot_of is None else self._slot_of(key)
        nbytes = self._size_of(value)
        with self._lock:
            held = self._entries.get(slot)
            if held is not None:
                if held.key == key and held.version > version:
                    return
                self._remove(slot)
            if nbytes > self.max_bytes:
                return
            self._entries[slot] = _Entry(key, value, version, nbytes)
            self._nbytes += nbytes
            while self._nbytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def discard(self, slot: Hashable) -> None:
        """Drop the entry held in ``slot`` (a key, or a knowledge base's id), if any."""
        with self._lock:
            if slot in self._entries:
                self._remove(slot)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, slot: object) -> bool:
        return slot in self._entries

    def _remove(self, slot: Hashable) -> None:
        self._nbytes -= self._entries.pop(slot).nbytes
