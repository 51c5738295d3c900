"""Which documents a vector matrix reflects, and when each was last processed.

A matrix is brought up to date by comparing these stamps with the knowledge base's now
(``retrieval.vector.matrix.load``): every process does it after every change, over every ready
document (15k at 300k chunks), so they are two int64 arrays compared in numpy, read from
PostgreSQL as one value of packed bytes (``SELECT``, below). Read row by row as text and compared
in a dict, the same step took ~50 ms of a web process's CPU per change at 300k chunks, about as
much as the rest of the catch-up together.

A stamp is ``processed_at`` in microseconds since 1970 (UTC); a document without one gets
``NOT_PROCESSED``. Host files keep them in their JSON header as before (``{"id": "micros"}``), so
a file written by an older process is read, and an older process reads a newer one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from knowledge.selectors import searchable_document_sql
from retrieval.bm25store.manifest import processed_micros

NOT_PROCESSED = np.iinfo(np.int64).min
# PostgreSQL's binary timestamptz counts microseconds from 2000-01-01 UTC.
_POSTGRES_EPOCH_US = 946_684_800_000_000
_NULL_BYTES = "'\\x8000000000000000'::bytea"  # NOT_PROCESSED, big-endian
# A document's processed_at as 8 bytes (big-endian int64; ``micros_since_1970`` reads them).
PROCESSED_AT_BYTES = f"coalesce(timestamptz_send(processed_at), {_NULL_BYTES})"

# The searchable documents (knowledge.selectors) and their chunk count: each document's id and
# processed_at packed as two big-endian int64 (16 bytes, so they cannot come apart), in no
# particular order (sorting them here costs less than asking PostgreSQL to: 6 against 11 ms
# for 15k documents). An index-only scan (``document_searchable_stamps``).
SELECT = (
    "SELECT string_agg(int8send(id) || "  # noqa: S608
    f"{PROCESSED_AT_BYTES}, ''), "
    "coalesce(sum(chunk_count), 0) "
    "FROM knowledge_document d "
    f"WHERE tenant_id = %s AND knowledge_base_id = %s AND {searchable_document_sql('d')}"
)
_PACKED = np.dtype([("id", ">i8"), ("at", ">i8")])


def micros_since_1970(packed: np.ndarray) -> np.ndarray:
    """``PROCESSED_AT_BYTES`` values (as big-endian int64) as int64 microseconds since 1970,
    NOT_PROCESSED where unset."""
    at = packed.astype(np.int64)
    unset = at == NOT_PROCESSED
    at += _POSTGRES_EPOCH_US
    at[unset] = NOT_PROCESSED
    return at


@dataclass(frozen=True)
class Stamps:
    ids: np.ndarray  # int64, ascending
    at: np.ndarray  # int64, microseconds since 1970, NOT_PROCESSED when unset

    @classmethod
    def empty(cls) -> Stamps:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64))

    @classmethod
    def from_row(cls, packed: bytes | None) -> Stamps:
        """From ``SELECT``'s first column (None when there is no document)."""
        if not packed:
            return cls.empty()
        if len(packed) % _PACKED.itemsize:
            raise ValueError("packed document stamps of a partial length")
        rows = np.frombuffer(packed, dtype=_PACKED)
        order = np.argsort(rows["id"], kind="stable")
        return cls(rows["id"][order].astype(np.int64), micros_since_1970(rows["at"][order]))

    @classmethod
    def from_document_stamps(cls, ids: np.ndarray, document_stamps: np.ndarray) -> Stamps:
        """From a BM25 manifest's documents (ids ascending) and their ``document_stamp``s
        (``retrieval.bm25store.manifest``: processed_at in microseconds, shifted past the
        analyser version; 0 for a document never processed)."""
        at = processed_micros(document_stamps)
        return cls(np.asarray(ids, dtype=np.int64), np.where(at == 0, NOT_PROCESSED, at))

    @classmethod
    def from_mapping(cls, mapping: dict) -> Stamps:
        """From a host file's header: ``{"document id": "micros" or None}``."""
        if not mapping:
            return cls.empty()
        ids = np.fromiter((int(k) for k in mapping), np.int64, len(mapping))
        at = np.fromiter(
            (NOT_PROCESSED if v is None else int(v) for v in mapping.values()),
            np.int64,
            len(mapping),
        )
        order = np.argsort(ids, kind="stable")
        return cls(ids[order], at[order])

    def to_mapping(self) -> dict[str, str | None]:
        """For a host file's header (``from_mapping`` reads it)."""
        return {
            str(doc): None if at == NOT_PROCESSED else str(at)
            for doc, at in zip(self.ids.tolist(), self.at.tolist(), strict=True)
        }

    def __len__(self) -> int:
        return int(self.ids.size)

    def unchanged_since(self, held: Stamps) -> np.ndarray:
        """Per document here: whether ``held`` has it with the same stamp."""
        if not held.ids.size or not self.ids.size:
            return np.zeros(self.ids.size, bool)
        at = np.minimum(np.searchsorted(held.ids, self.ids), held.ids.size - 1)
        return (held.ids[at] == self.ids) & (held.at[at] == self.at)


@dataclass(frozen=True)
class KnownDocuments:
    """A knowledge base's searchable documents at ``version`` (ids ascending, their
    ``document_stamp``s) and its live chunks, as the BM25 manifest of that version records them
    (its writer read them in a snapshot of that version): a vector matrix catching up to the
    same version takes them from here instead of asking PostgreSQL
    (``retrieval.vector.matrix.load``)."""

    version: int
    ids: np.ndarray
    document_stamps: np.ndarray
    chunks: int

    @cached_property
    def stamps(self) -> Stamps:
        return Stamps.from_document_stamps(self.ids, self.document_stamps)
