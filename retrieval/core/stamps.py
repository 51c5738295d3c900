"""Which documents a version of a knowledge base reflects, and when each was last processed.

Two forms of the same fact. A BM25 manifest records each searchable document's
``document_stamp``: ``processed_at`` in microseconds since 1970 (UTC) shifted past the analyser
version, one int64 that changes whenever the document's searchable chunks may have (processed
or curated again, or re-analysed). A vector matrix keeps ``Stamps``: the documents' ids and
their ``processed_at`` alone (a matrix does not depend on the analyser), ``NOT_PROCESSED`` for a
document without one; ``KnownDocuments`` is a manifest's set as a matrix catching up to the same
version reads it (``retrieval.vector.matrix.load``).

A matrix is brought up to date by comparing its stamps with the knowledge base's now: every
process does it after every change, over every ready document, so they are two int64 arrays
compared in numpy, read from PostgreSQL as one value of packed bytes (``SELECT``, below), not
row by row. Host files keep them in their JSON header (``{"id": "micros"}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property

import numpy as np

from knowledge.selectors import searchable_document_sql

NOT_PROCESSED = np.iinfo(np.int64).min
_STAMP_ANALYZER_BITS = 8
# PostgreSQL's binary timestamptz counts microseconds from PostgreSQL's own epoch, the start of
# the year 2000 in UTC; this is that epoch's distance from Unix's.
_POSTGRES_EPOCH_US = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
_NULL_BYTES = "'\\x8000000000000000'::bytea"  # NOT_PROCESSED, big-endian
# A document's processed_at as 8 bytes (big-endian int64; ``micros_since_1970`` reads them).
PROCESSED_AT_BYTES = f"coalesce(timestamptz_send(processed_at), {_NULL_BYTES})"

# The searchable documents (knowledge.selectors) and their chunk count: each document's id and
# processed_at packed as two big-endian int64 (16 bytes, so they cannot come apart), in no
# particular order (numpy sorts the unpacked ids for less than an ordered aggregate costs
# PostgreSQL, the server every process shares). An index-only scan
# (``document_searchable_stamps``).
SELECT = (
    "SELECT string_agg(int8send(id) || "  # noqa: S608
    f"{PROCESSED_AT_BYTES}, ''), "
    "coalesce(sum(chunk_count), 0) "
    "FROM knowledge_document d "
    f"WHERE tenant_id = %s AND knowledge_base_id = %s AND {searchable_document_sql('d')}"
)
_PACKED = np.dtype([("id", ">i8"), ("at", ">i8")])


def document_stamp(processed_at_us: np.ndarray, analyzer_version: np.ndarray) -> np.ndarray:
    """One int64 per document that changes whenever its searchable chunks may have: processed
    (or curated) again, or re-analysed."""
    return (processed_at_us.astype(np.int64) << _STAMP_ANALYZER_BITS) | analyzer_version.astype(
        np.int64
    )


def processed_micros(stamps: np.ndarray) -> np.ndarray:
    """The processed_at (microseconds since 1970, 0 when never processed) of
    ``document_stamp``s."""
    return np.asarray(stamps, dtype=np.int64) >> _STAMP_ANALYZER_BITS


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
        """From a BM25 manifest's documents (ids ascending) and their ``document_stamp``s (0 for
        a document never processed)."""
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
