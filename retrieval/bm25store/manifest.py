"""A manifest: which segments (and which deletions) make a knowledge base's index at a version.

Besides the segment keys and the deleted chunk ids it records the state of every searchable
document it reflects, ``(id, processed_at, analyzer_version)`` packed as one int64 stamp, and
the ``basis`` (analyser version and the knowledge base's user words) its tokens were analysed
under. The next version's manifest is made from it by a delta (``retrieval.bm25store.build``):
documents whose stamp changed or that are gone have their chunks deleted, documents new or
changed become one small segment. A different basis means every token may differ: full build.

It also records, per segment with deletions, how many of its deleted chunks hold each of its
terms (``dead``): every search process composing the version then has the segment's live
document frequencies from those counts instead of a pass over its postings. The writer takes
them from the view it composed (``SegmentedIndex.dead_frequencies``); a manifest without them
(an older writer's) is still read, and its readers count.

Stored as numpy arrays (``np.savez``, read with ``allow_pickle=False``: never a pickle), signed
like a segment (``payload``) with the version in the label. Integer arrays are written in the
narrowest unsigned type that holds them (``_narrow``) and read into the types above.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, replace

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


def processed_micros(stamps: np.ndarray) -> np.ndarray:
    """The processed_at (microseconds since 1970, 0 when never processed) of
    ``document_stamp``s."""
    return np.asarray(stamps, dtype=np.int64) >> _STAMP_ANALYZER_BITS


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
    # (entries per segment, local term ids, deleted chunks holding each), the segments' entries
    # one after another in ``keys`` order; None when not recorded.
    dead: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def deletions(self) -> list[np.ndarray]:
        """Deleted chunk ids per segment, aligned with ``keys``."""
        return [self.deleted[self.deleted_in == i] for i in range(len(self.keys))]

    def dead_frequencies(self) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per segment (aligned with ``keys``), its local term ids held by deleted chunks and
        how many of them hold each; None when the manifest does not record them."""
        if self.dead is None:
            return None
        sizes, terms, counts = self.dead
        if not sizes.size:
            return []
        cuts = np.cumsum(sizes)[:-1]
        return list(zip(np.split(terms, cuts), np.split(counts, cuts), strict=True))

    def with_dead(self, per_segment: list[tuple[np.ndarray, np.ndarray]]) -> Manifest:
        """This manifest recording ``per_segment`` (as ``dead_frequencies`` returns them)."""
        if len(per_segment) != len(self.keys):
            raise ValueError("dead frequencies need one entry per segment")
        return replace(
            self,
            dead=(
                np.array([terms.size for terms, _ in per_segment], dtype=np.int64),
                np.concatenate([np.empty(0, np.int32), *(t for t, _ in per_segment)]),
                np.concatenate([np.empty(0, np.int32), *(c for _, c in per_segment)]),
            ),
        )

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            format=np.array([MANIFEST_FORMAT, self.version, self.merges, self.chunk_count]),
            keys=np.array(self.keys, dtype="U32"),
            deleted=_narrow(self.deleted),
            deleted_in=_narrow(self.deleted_in),
            doc_ids=_narrow(self.doc_ids),
            doc_stamps=np.asarray(self.doc_stamps, dtype=np.int64),
            basis=np.array([self.basis]),
            build_seconds=np.array([self.build_seconds]),
            **(
                {}
                if self.dead is None
                else {
                    "dead_sizes": _narrow(self.dead[0]),
                    "dead_terms": _narrow(self.dead[1]),
                    "dead_counts": _narrow(self.dead[2]),
                }
            ),
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
                dead = None
                if "dead_sizes" in arrays.files:
                    dead = (
                        arrays["dead_sizes"].astype(np.int64),
                        arrays["dead_terms"].astype(np.int32),
                        arrays["dead_counts"].astype(np.int32),
                    )
                    sizes, terms, counts = dead
                    if sizes.size != len(keys) or (sizes.size and sizes.min() < 0):
                        raise ValueError("dead frequencies not one entry per segment")
                    if not int(sizes.sum()) == terms.size == counts.size:
                        raise ValueError("dead frequencies of unequal lengths")
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
                    dead=dead,
                )
        except (KeyError, IndexError, OSError, ValueError) as exc:
            raise ValueError(f"not a BM25 manifest: {exc}") from exc

    def seal(self, identity: Identity) -> SignedPayload:
        return seal(identity, manifest_label(self.version), self.to_bytes())


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integers in the narrowest unsigned type that holds them all (as given when one is
    negative): the reader converts every array to its own type (``from_bytes``), so this is
    the same manifest to any reader, in fewer bytes to compress, store and read. The writer
    seals a manifest twice a change; at 300k chunks with 13.7k chunks deleted its arrays were
    1.1 MB, most of them dead frequencies (local term ids under 65,536, counts under 256 or
    65,536, as int32) and ids under 2**32 (as int64)."""
    values = np.asarray(values)
    if not values.size:
        return values.astype(np.uint8)
    low, high = int(values.min()), int(values.max())
    if low < 0:
        return values
    for kind in (np.uint8, np.uint16, np.uint32):
        if high <= np.iinfo(kind).max:
            return values.astype(kind)
    return values


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
