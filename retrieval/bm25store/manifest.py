"""A manifest: which segments (and which deletions) make a knowledge base's index at a version.

Besides the segment keys and the deleted chunk ids it records the state of every searchable
document it reflects, ``(id, processed_at, analyzer_version)`` packed as one int64 stamp, and
the ``basis`` (analyser version and the knowledge base's user words) its tokens were analysed
under. The next version's manifest is made from it by a delta (``retrieval.bm25store.build``):
documents whose stamp changed or that are gone have their chunks deleted, documents new or
changed become one small segment. A different basis means every token may differ: full build.

Stored as numpy arrays (``np.savez``, read with ``allow_pickle=False``: never a pickle), signed
like a segment (``payload``) with the version in the label.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np

from retrieval.bm25store.payload import (
    Identity,
    PayloadRejected,
    PayloadUnreadable,
    SignedPayload,
    manifest_label,
    open_raw,
    seal,
)

MANIFEST_FORMAT = 1
_STAMP_ANALYZER_BITS = 8


def document_stamp(processed_at_us: np.ndarray, analyzer_version: np.ndarray) -> np.ndarray:
    """One int64 per document that changes whenever its searchable chunks may have: processed
    (or curated) again, or re-analysed."""
    return (processed_at_us.astype(np.int64) << _STAMP_ANALYZER_BITS) | analyzer_version.astype(
        np.int64
    )


def analysis_basis(analyzer_version: int, user_words: list[str] | None) -> str:
    words = "\x1f".join(sorted(user_words or ()))
    return f"a{analyzer_version}:" + hashlib.sha256(words.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    version: int
    keys: tuple[str, ...]  # segment keys, in view order
    # Chunks of those segments no longer searchable: their ids and the position (in keys) of
    # the segment each is deleted from (a chunk edited in place keeps its id: deleted from
    # its old segment, alive in a newer one).
    deleted: np.ndarray  # int64
    deleted_in: np.ndarray  # int32
    doc_ids: np.ndarray  # int64, ascending: the searchable documents it reflects
    doc_stamps: np.ndarray  # int64, their document_stamp
    basis: str
    merges: int = 0
    chunk_count: int = 0  # live chunks
    build_seconds: float = 0.0  # of the last full build

    def deletions(self) -> list[np.ndarray]:
        """Deleted chunk ids per segment, aligned with ``keys``."""
        return [self.deleted[self.deleted_in == i] for i in range(len(self.keys))]

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            format=np.array([MANIFEST_FORMAT, self.version, self.merges, self.chunk_count]),
            keys=np.array(self.keys, dtype="U32"),
            deleted=np.asarray(self.deleted, dtype=np.int64),
            deleted_in=np.asarray(self.deleted_in, dtype=np.int32),
            doc_ids=np.asarray(self.doc_ids, dtype=np.int64),
            doc_stamps=np.asarray(self.doc_stamps, dtype=np.int64),
            basis=np.array([self.basis]),
            build_seconds=np.array([self.build_seconds]),
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as arrays:
                head = arrays["format"]
                if int(head[0]) != MANIFEST_FORMAT:
                    raise ValueError(f"manifest format {int(head[0])}, expected {MANIFEST_FORMAT}")
                keys = tuple(str(k) for k in arrays["keys"])
                deleted_in = arrays["deleted_in"]
                if deleted_in.size and (deleted_in.min() < 0 or deleted_in.max() >= len(keys)):
                    raise ValueError("a deletion names no segment")
                return cls(
                    version=int(head[1]),
                    merges=int(head[2]),
                    chunk_count=int(head[3]),
                    keys=keys,
                    deleted=arrays["deleted"].astype(np.int64),
                    deleted_in=arrays["deleted_in"].astype(np.int32),
                    doc_ids=arrays["doc_ids"].astype(np.int64),
                    doc_stamps=arrays["doc_stamps"].astype(np.int64),
                    basis=str(arrays["basis"][0]),
                    build_seconds=float(arrays["build_seconds"][0]),
                )
        except (KeyError, IndexError, OSError, ValueError) as exc:
            raise ValueError(f"not a BM25 manifest: {exc}") from exc

    def seal(self, identity: Identity) -> SignedPayload:
        return seal(identity, manifest_label(self.version), self.to_bytes())


def open_manifest(identity: Identity, version: int, payload: SignedPayload) -> Manifest:
    """Verify (as this KB's manifest of ``version``), then load. Raises PayloadRejected or
    PayloadUnreadable."""
    if payload.label != manifest_label(version):
        raise PayloadRejected
    raw = open_raw(identity, payload)
    try:
        manifest = Manifest.from_bytes(raw)
    except ValueError as exc:
        raise PayloadUnreadable(str(exc)) from exc
    if manifest.version != version:
        raise PayloadRejected
    return manifest
