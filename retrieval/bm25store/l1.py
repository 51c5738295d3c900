"""L1: this process's most recently used indexes, bounded by their in-memory size."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from retrieval.bm25store.payload import Identity


class _Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


T = TypeVar("T", bound=_Sized)


@dataclass(frozen=True)
class _Entry(Generic[T]):
    epoch: int
    version: int
    index: T
    nbytes: int


class ByteLRU(Generic[T]):
    """A thread-safe LRU of one value per knowledge base (a BM25 index; a vector matrix in
    ``retrieval.vector.matrix``), holding at most ``max_bytes`` of their ``nbytes``. A value
    larger than the whole budget is not kept at all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()

    def get(
        self, identity: Identity, min_version: int, drop_older: bool = True
    ) -> tuple[int, T] | None:
        """The entry if its version is at least ``min_version``; an older one is dropped
        (kept, with ``drop_older=False``: the BM25 store builds the newer view from its
        segments and replaces it then)."""
        kb_id = identity.knowledge_base_id
        with self._lock:
            entry = self._entries.get(kb_id)
            if entry is None:
                return None
            if entry.epoch != identity.epoch:
                self._remove(kb_id)
                return None
            if entry.version < min_version:
                if drop_older:
                    self._remove(kb_id)
                return None
            self._entries.move_to_end(kb_id)
            return entry.version, entry.index

    def peek(self, identity: Identity) -> T | None:
        """The entry of this knowledge base whatever its version (not marked as used)."""
        with self._lock:
            entry = self._entries.get(identity.knowledge_base_id)
            if entry is None or entry.epoch != identity.epoch:
                return None
            return entry.index

    def put(self, identity: Identity, version: int, index: T) -> None:
        kb_id = identity.knowledge_base_id
        with self._lock:
            current = self._entries.get(kb_id)
            if current is not None:
                if current.epoch == identity.epoch and current.version > version:
                    return
                self._remove(kb_id)
            nbytes = index.nbytes
            if nbytes > self.max_bytes:
                return
            self._entries[kb_id] = _Entry(identity.epoch, version, index, nbytes)
            self._nbytes += nbytes
            while self._nbytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def discard(self, knowledge_base_id: int) -> None:
        with self._lock:
            if knowledge_base_id in self._entries:
                self._remove(knowledge_base_id)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, knowledge_base_id: object) -> bool:
        return knowledge_base_id in self._entries

    def _remove(self, knowledge_base_id: int) -> None:
        self._nbytes -= self._entries.pop(knowledge_base_id).nbytes
