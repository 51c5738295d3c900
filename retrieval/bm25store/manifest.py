"""A manifest: which segments (and which deletions) make a knowledge base's index at a version.

It also records every searchable document it reflects (id and ``document_stamp``) and the
analysis ``basis``, from which the next version is built as a delta (``build``), and per
segment how many deleted chunks hold each term (``dead``), so readers compose the view without
a pass over the postings (a manifest without them is read, and its readers count).

Stored as plain integer arrays behind a JSON header (``to_bytes``), never a pickle, signed like
a segment (``payload``) with the version in the label. Any other layout is unreadable: the
knowledge base is rebuilt from PostgreSQL, as every tier is a cache.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, replace

import numpy as np

from retrieval.bm25store.payload import (
    PayloadRejected,
    PayloadUnreadable,
    SignedPayload,
    manifest_label,
    open_raw,
    seal,
)
from retrieval.core.identity import Identity

MANIFEST_FORMAT = 2
_MAGIC = b"BM25MAN\x00"
_HEAD = struct.Struct("<8sI")  # magic, then the JSON header's length in bytes
# The integer types an array may be stored in (little-endian), and what each is read into.
_STORED_TYPES = frozenset({"|u1", "<u2", "<u4", "<u8", "<i4", "<i8"})
_ARRAYS = (
    ("deleted", np.int64),
    ("deleted_in", np.int32),
    ("doc_ids", np.int64),  # as differences, the first from 0
    ("doc_stamps", np.int64),  # less the header's "stamp_floor"
    ("dead_sizes", np.int64),
    ("dead_terms", np.int32),  # as differences within each segment's run, each from 0
    ("dead_counts", np.int32),
)


def analysis_basis(analyzer_version: int, user_words: list[str] | None) -> str:
    words = "\x1f".join(sorted(user_words or ()))
    return f"a{analyzer_version}:" + hashlib.sha256(words.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    version: int
    keys: tuple[str, ...]  # segment keys, in view order
    # Chunks no longer searchable: their ids and the position (in keys) of the segment each is
    # deleted from (a chunk edited in place may live on in a newer one).
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

    def folded(self, plan: list[int], key: str | None) -> Manifest:
        """This version with the segments at positions ``plan`` folded into segment ``key``
        (None when no chunk is live): one merge more, dead not yet recorded."""
        deletions = self.deletions()
        kept = [i for i in range(len(self.keys)) if i not in plan]
        return replace(
            self,
            keys=tuple(self.keys[i] for i in kept) + ((key,) if key else ()),
            deleted=np.concatenate([np.empty(0, np.int64), *(deletions[i] for i in kept)]),
            deleted_in=np.repeat(
                np.arange(len(kept), dtype=np.int32), [deletions[i].size for i in kept]
            ),
            merges=self.merges + 1,
            dead=None,
        )

    def to_bytes(self) -> bytes:
        """``_MAGIC``, the header's length, a JSON header (the scalars, the keys and each
        array's stored type and length), then the arrays' bytes one after another."""
        stamps = np.asarray(self.doc_stamps, dtype=np.int64)
        floor = int(stamps.min()) if stamps.size else 0
        arrays = {
            "deleted": _narrow(self.deleted),
            "deleted_in": _narrow(self.deleted_in),
            "doc_ids": _narrow(_differences(np.asarray(self.doc_ids, dtype=np.int64))),
            "doc_stamps": _narrow(stamps - floor),
        }
        if self.dead is not None:
            sizes, terms, counts = _check_dead(self.keys, self.dead)
            arrays["dead_sizes"] = _narrow(sizes)
            arrays["dead_terms"] = _narrow(_differences(np.asarray(terms, np.int64), sizes))
            arrays["dead_counts"] = _narrow(counts)
        arrays = {
            name: a.astype(a.dtype.newbyteorder("<"), copy=False) for name, a in arrays.items()
        }
        header = {
            "format": MANIFEST_FORMAT,
            "version": self.version,
            "merges": self.merges,
            "chunk_count": self.chunk_count,
            "build_seconds": self.build_seconds,
            "basis": self.basis,
            "keys": list(self.keys),
            "stamp_floor": floor,
            "arrays": [[name, a.dtype.str, int(a.size)] for name, a in arrays.items()],
        }
        head = json.dumps(header, separators=(",", ":")).encode()
        return b"".join(
            [_HEAD.pack(_MAGIC, len(head)), head, *(a.tobytes() for a in arrays.values())]
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        try:
            return cls._from_format_2(raw)
        except (KeyError, IndexError, TypeError, OSError, ValueError, struct.error) as exc:
            raise ValueError(f"not a BM25 manifest: {exc}") from exc

    @classmethod
    def _from_format_2(cls, raw: bytes) -> Manifest:
        magic, length = _HEAD.unpack_from(raw)
        if magic != _MAGIC:
            raise ValueError("no manifest magic")
        header = json.loads(raw[_HEAD.size : _HEAD.size + length])
        if header["format"] != MANIFEST_FORMAT:
            raise ValueError(f"manifest format {header['format']}, expected {MANIFEST_FORMAT}")
        types = dict(_ARRAYS)
        arrays: dict[str, np.ndarray] = {}
        offset = _HEAD.size + length
        for name, stored, count in header["arrays"]:
            if name not in types or stored not in _STORED_TYPES or name in arrays:
                raise ValueError(f"unexpected array {name!r} of {stored!r}")
            kind, count = np.dtype(stored), int(count)
            end = offset + kind.itemsize * count
            if count < 0 or end > len(raw):
                raise ValueError("truncated")
            arrays[name] = np.frombuffer(raw, kind, count, offset).astype(types[name])
            offset = end
        if offset != len(raw):
            raise ValueError("trailing bytes")
        keys = tuple(str(k) for k in header["keys"])
        dead = None
        if "dead_sizes" in arrays:
            sizes, terms, counts = _check_dead(
                keys, (arrays["dead_sizes"], arrays["dead_terms"], arrays["dead_counts"])
            )
            dead = (sizes, _sums(terms, sizes), counts)
        deleted_in = arrays["deleted_in"]
        if deleted_in.size != arrays["deleted"].size:
            raise ValueError("deletions of unequal lengths")
        if deleted_in.size and (deleted_in.min() < 0 or deleted_in.max() >= len(keys)):
            raise ValueError("a deletion names no segment")
        if arrays["doc_ids"].size != arrays["doc_stamps"].size:
            raise ValueError("documents of unequal lengths")
        return cls(
            version=int(header["version"]),
            merges=int(header["merges"]),
            chunk_count=int(header["chunk_count"]),
            keys=keys,
            deleted=arrays["deleted"],
            deleted_in=deleted_in,
            doc_ids=_sums(arrays["doc_ids"]),
            doc_stamps=arrays["doc_stamps"] + int(header["stamp_floor"]),
            basis=str(header["basis"]),
            build_seconds=float(header["build_seconds"]),
            dead=dead,
        )

    def seal(self, identity: Identity) -> SignedPayload:
        return seal(identity, manifest_label(self.version), self.to_bytes())


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integers in the narrowest unsigned type that holds them all (as given when one is
    negative or past 32 bits); readers convert each array to its own type."""
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


def _check_dead(keys: tuple[str, ...], dead: tuple[np.ndarray, np.ndarray, np.ndarray]):
    """``dead`` when it is one entry per segment of ``keys`` and its arrays agree."""
    sizes, terms, counts = (np.asarray(a) for a in dead)
    if sizes.size != len(keys) or (sizes.size and sizes.min() < 0):
        raise ValueError("dead frequencies not one entry per segment")
    if not int(sizes.sum()) == terms.size == counts.size:
        raise ValueError("dead frequencies of unequal lengths")
    return sizes, terms, counts


def _differences(values: np.ndarray, runs: np.ndarray | None = None) -> np.ndarray:
    """Each value less the one before it (the first of each run less 0). ``runs``: run
    lengths summing to the size (one run when None). ``_sums`` inverts it."""
    differences = np.diff(values, prepend=0)
    if runs is not None and values.size:
        starts = (np.cumsum(runs) - runs)[runs > 0]
        differences[starts] = values[starts]
    return differences


def _sums(differences: np.ndarray, runs: np.ndarray | None = None) -> np.ndarray:
    """The values ``_differences`` was given, in the type of ``differences``."""
    sums = np.cumsum(differences, dtype=np.int64)
    if runs is not None and differences.size:
        starts, lengths = (np.cumsum(runs) - runs)[runs > 0], runs[runs > 0]
        before = sums[starts] - differences[starts]  # the sum of the runs before each
        sums -= np.repeat(before, lengths)
    return sums.astype(differences.dtype)


def open_manifest(identity: Identity, version: int, payload: SignedPayload) -> Manifest:
    """Verify (as this KB's manifest of ``version``), then load. Raises PayloadRejected or
    PayloadUnreadable (any layout but this one's)."""
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
