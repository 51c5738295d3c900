"""An immutable block of a segmented BM25 index: some documents' postings, no global statistics.

A segment holds its documents' ids (ascending) and token counts, its vocabulary (``terms``) and
CSR postings sorted by term then document: ``offsets`` (int64, one past each term's end),
``post_docs`` (int32 document positions) and ``post_tf`` (the narrowest unsigned type). N,
average length and idf are composed by ``SegmentedIndex`` over segments minus deletions.

Serialised form: an 8-byte magic, a format version, then a pickle (protocol 5) of numpy arrays
and the term list, ``post_docs`` as four byte planes (low bytes first: the high planes are long
runs zlib squeezes to almost nothing). ``from_bytes`` unpickles: only pass verified bytes.
"""

from __future__ import annotations

import pickle
import struct
import sys
from collections.abc import Iterable, Sequence
from functools import cached_property
from itertools import chain
from typing import NamedTuple

import numpy as np

SEGMENT_FORMAT_VERSION = 1
# A full-size segment's tokens, at most: its payload stays far below Redis's and bytea's limits.
MAX_SEGMENT_TOKENS = 16_000_000
MAX_PAIR_CELLS = 1 << 18  # a segment's pair grid's, at most (8 bytes each in every view)
_MAGIC = b"BM25SEG\x00"
_HEADER = struct.Struct("<8sH")
_TF_DTYPES = (np.uint8, np.uint16, np.uint32)


class PairGrid(NamedTuple):
    """The (term frequency, document length) pairs of a segment's postings (``pair_grid``)."""

    tf: np.ndarray  # float64, 1 .. the segment's largest term frequency: the grid's rows
    lengths: np.ndarray  # int64, the segment's distinct document lengths: its columns
    code_type: type  # of ``pair_codes``: uint16 for a grid of at most 65,536 cells, else int32


class Segment:
    """Immutable postings of a set of documents (chunks)."""

    def __init__(
        self,
        *,
        doc_ids: np.ndarray,
        lengths: np.ndarray,
        terms: list[str],
        offsets: np.ndarray,
        post_docs: np.ndarray,
        post_tf: np.ndarray,
        groups: np.ndarray | None = None,
    ) -> None:
        """Assemble a segment from its arrays; use `build`, `merge` or `from_bytes` instead."""
        self.doc_ids = doc_ids
        self.groups = groups  # each document's owner (a chunk's document id), when given
        self.lengths = lengths
        self.terms = terms
        self.vocab = dict(zip(terms, range(len(terms)), strict=True))
        self.offsets = offsets
        self.post_docs = post_docs
        self.post_tf = post_tf

    @classmethod
    def build(
        cls,
        doc_ids: Sequence[int],
        corpus: Iterable[Sequence[str]],
        groups: Sequence[int] | None = None,
    ) -> Segment:
        """A segment of `corpus` (token lists), document i being `doc_ids[i]` (owned by
        `groups[i]`, when given)."""
        docs = corpus if isinstance(corpus, list) else list(corpus)
        term_ids, lengths, vocab = to_term_ids(docs)
        return cls.from_term_ids(doc_ids, term_ids, lengths, list(vocab), groups)

    @classmethod
    def from_term_ids(
        cls,
        doc_ids: Sequence[int] | np.ndarray,
        term_ids: np.ndarray,
        lengths: Sequence[int] | np.ndarray,
        terms: list[str],
        groups: Sequence[int] | np.ndarray | None = None,
    ) -> Segment:
        """A segment of documents given as term ids (``invert_ids``; ``terms[i]`` is term i):
        document i is `doc_ids[i]`, `lengths[i]` tokens long (owned by `groups[i]`, when
        given), stored in ascending id order. Numpy only: a thread runs it beside a fetch."""
        ids = np.asarray(doc_ids, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.shape != ids.shape:
            raise ValueError(f"{ids.size} doc ids for {lengths.size} documents")
        if int(lengths.sum()) != term_ids.size:
            raise ValueError(f"{term_ids.size} term ids for {int(lengths.sum())} tokens")
        owners = None if groups is None else np.asarray(groups, dtype=np.int64)
        if owners is not None and owners.shape != ids.shape:
            raise ValueError(f"{owners.size} groups for {ids.size} documents")
        positions = None
        if ids.size and np.any(ids[1:] <= ids[:-1]):
            order = np.argsort(ids, kind="stable")
            if np.any(np.diff(ids[order]) == 0):
                raise ValueError("doc ids must be unique within a segment")
            positions = np.empty_like(order)
            positions[order] = np.arange(order.size)
            ids = ids[order]
            owners = None if owners is None else owners[order]
        lengths, offsets, post_docs, post_tf = invert_ids(term_ids, lengths, positions)
        if offsets.size - 1 != len(terms):
            raise ValueError(f"{len(terms)} terms, {offsets.size - 1} of them in use")
        return cls(
            doc_ids=ids,
            lengths=lengths,
            terms=terms,
            offsets=offsets,
            post_docs=post_docs,
            post_tf=post_tf,
            groups=owners,
        )

    @classmethod
    def merge(
        cls, segments: Sequence[Segment], deleted_per_segment: Sequence[np.ndarray]
    ) -> Segment:
        """One segment holding the live documents of `segments` (less each one's
        `deleted_per_segment` entry), scoring as they did. ValueError on an id two hold alive."""
        if len(deleted_per_segment) != len(segments):
            raise ValueError("deleted_per_segment needs one array per segment")
        vocab: dict[str, int] = {}
        grouped = bool(segments) and all(s.groups is not None for s in segments)
        group_parts = []
        ids_parts, length_parts, term_parts, doc_parts, tf_parts = [], [], [], [], []
        for segment, deleted in zip(segments, deleted_per_segment, strict=True):
            live = ~np.isin(segment.doc_ids, deleted)
            ids_parts.append(segment.doc_ids[live])
            length_parts.append(segment.lengths[live])
            if grouped:
                group_parts.append(segment.groups[live])
            global_term = np.fromiter(
                (vocab.setdefault(t, len(vocab)) for t in segment.terms),
                dtype=np.int64,
                count=len(segment.terms),
            )
            term_of_posting = np.repeat(global_term, np.diff(segment.offsets))
            kept = live[segment.post_docs]
            term_parts.append(term_of_posting[kept])
            doc_parts.append(segment.doc_ids[segment.post_docs[kept]])
            tf_parts.append(segment.post_tf[kept].astype(np.uint32))
        ids = np.concatenate(ids_parts) if ids_parts else np.empty(0, np.int64)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        if ids.size and np.any(ids[1:] == ids[:-1]):
            raise ValueError("two segments hold the same doc id")
        lengths = np.concatenate(length_parts)[order] if length_parts else np.empty(0, np.int64)
        post_terms = np.concatenate(term_parts) if term_parts else np.empty(0, np.int64)
        post_ids = np.concatenate(doc_parts) if doc_parts else np.empty(0, np.int64)
        post_tf = np.concatenate(tf_parts) if tf_parts else np.empty(0, np.uint32)
        post_docs = np.searchsorted(ids, post_ids)
        keys = post_terms * max(ids.size, 1) + post_docs
        by_key = np.argsort(keys, kind="stable")
        post_terms, post_docs, post_tf = post_terms[by_key], post_docs[by_key], post_tf[by_key]
        # Terms left without a live posting are not in the merged vocabulary.
        df = np.bincount(post_terms, minlength=len(vocab))
        present = df > 0
        terms = [t for t, keep in zip(vocab, present.tolist(), strict=True) if keep]
        offsets = np.append(0, np.cumsum(df[present])).astype(np.int64)
        return cls(
            doc_ids=ids,
            lengths=lengths.astype(np.int64),
            terms=terms,
            offsets=offsets,
            post_docs=post_docs.astype(np.int32),
            post_tf=narrow_tf(post_tf),
            groups=np.concatenate(group_parts)[order] if grouped else None,
        )

    def __len__(self) -> int:
        return int(self.doc_ids.size)

    @property
    def postings(self) -> int:
        return int(self.post_docs.size)

    @cached_property
    def _ids_ascending(self) -> bool:
        return bool(self.doc_ids.size < 2 or (np.diff(self.doc_ids) > 0).all())

    def holds(self, ids: np.ndarray) -> np.ndarray:
        """Per document of this segment, whether its id is in ``ids`` (sorted, unique)."""
        if not self._ids_ascending:
            return np.isin(self.doc_ids, ids)
        found = np.zeros(self.doc_ids.size, dtype=bool)
        at = np.searchsorted(self.doc_ids, ids)
        inside = at < self.doc_ids.size
        at = at[inside]
        found[at[self.doc_ids[at] == ids[inside]]] = True
        return found

    def document_frequencies(self, live: np.ndarray | None = None) -> np.ndarray:
        """Per local term, how many of this segment's documents hold it (only those where
        `live` is True, when given)."""
        df = np.diff(self.offsets)
        if live is None:
            return df
        # The deleted documents' postings (few) subtracted, not the live ones (all) counted.
        dead_postings = np.flatnonzero((~live)[self.post_docs])
        if not dead_postings.size:
            return df
        terms = np.searchsorted(self.offsets, dead_postings, side="right") - 1
        return df - np.bincount(terms, minlength=len(self.terms))

    @cached_property
    def length_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct document lengths, ascending; per document the index of its length
        among them, int32)."""
        distinct, ranks = np.unique(self.lengths, return_inverse=True)
        return distinct, ranks.astype(np.int32).reshape(-1)

    @cached_property
    def pair_grid(self) -> PairGrid | None:
        """Every (term frequency, document length) pair a posting can have, as a grid: term
        frequencies 1 .. the largest, by the distinct lengths. None when it would pass
        ``MAX_PAIR_CELLS`` (contributions are then computed per posting)."""
        lengths, _ = self.length_ranks
        largest = int(self.post_tf.max()) if self.post_tf.size else 0
        if not largest or largest * lengths.size > MAX_PAIR_CELLS:
            return None
        code_type = np.uint16 if largest * lengths.size <= 1 << 16 else np.int32
        return PairGrid(np.arange(1, largest + 1, dtype=np.float64), lengths, code_type)

    def pair_codes(self, term_id: int) -> np.ndarray:
        """Per posting of a local term, its cell in ``pair_grid`` (row-major), which must not
        be None."""
        grid = self.pair_grid
        if grid is None:
            raise ValueError("this segment has no pair grid: compute per posting")
        start, end = self.offsets[term_id], self.offsets[term_id + 1]
        _, ranks = self.length_ranks
        codes = self.post_tf[start:end].astype(np.int32)
        codes -= 1
        codes *= grid.lengths.size
        codes += ranks.take(self.post_docs[start:end])
        return codes.astype(grid.code_type, copy=False)

    @cached_property
    def nbytes(self) -> int:
        """In-memory footprint: arrays plus an estimate of the vocabulary's objects."""
        arrays = (self.doc_ids, self.lengths, self.offsets, self.post_docs, self.post_tf)
        if self.groups is not None:
            arrays += (self.groups,)
        vocab = sys.getsizeof(self.vocab) + sys.getsizeof(self.terms)
        vocab += sum(sys.getsizeof(term) + 28 for term in self.terms)
        return sum(a.nbytes for a in arrays) + vocab

    def to_bytes(self) -> bytes:
        """Uncompressed payload; the caller compresses and signs it."""
        state = {
            "doc_ids": self.doc_ids,
            "lengths": self.lengths,
            "terms": self.terms,
            "offsets": self.offsets,
            "post_docs": _to_byte_planes(self.post_docs),
            "post_tf": self.post_tf,
        }
        if self.groups is not None:
            state["groups"] = self.groups
        return _HEADER.pack(_MAGIC, SEGMENT_FORMAT_VERSION) + pickle.dumps(state, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> Segment:
        """Load a `to_bytes` payload. Only pass bytes whose HMAC was verified: this unpickles."""
        if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != _MAGIC:
            raise ValueError("not a BM25 segment payload")
        version = _HEADER.unpack_from(data)[1]
        if version != SEGMENT_FORMAT_VERSION:
            raise ValueError(f"BM25 segment format {version}, expected {SEGMENT_FORMAT_VERSION}")
        state = pickle.loads(memoryview(data)[_HEADER.size :])  # noqa: S301 -- HMAC-verified
        return cls(post_docs=_from_byte_planes(state.pop("post_docs")), **state)


def plan_segments(lengths: Sequence[int], max_tokens: int = MAX_SEGMENT_TOKENS) -> list[slice]:
    """Consecutive slices of documents (of these token counts) holding at most `max_tokens`
    tokens each (a longer single document gets a slice of its own)."""
    if max_tokens < 1:
        raise ValueError("a segment must be allowed at least one token")
    slices, start, held = [], 0, 0
    for i, length in enumerate(lengths):
        if held and held + length > max_tokens:
            slices.append(slice(start, i))
            start, held = i, 0
        held += length
    if start < len(lengths) or not slices:
        slices.append(slice(start, len(lengths)))
    return slices


class TermIds(dict):
    """term -> id, ids in first-seen order: looking up a new term gives it the next id."""

    def __missing__(self, term):
        term_id = self[term] = len(self)
        return term_id


def to_term_ids(docs: list[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, TermIds]:
    """`docs` (token lists) as `invert_ids` takes them: every token's term id back to back
    (int64), each document's length, and the vocabulary (ids in first-seen order)."""
    lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    vocab = TermIds()
    term_ids = np.fromiter(
        map(vocab.__getitem__, chain.from_iterable(docs)),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    return term_ids, lengths, vocab


def invert_ids(
    term_ids: np.ndarray, lengths: np.ndarray, positions: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Postings of documents given as term ids: ``term_ids`` holds every document's tokens back
    to back (document i has ``lengths[i]``) as ids 0..V-1, each occurring; document i is stored
    at position ``positions[i]`` (default i). Returns the lengths by position, offsets,
    post_docs and post_tf, terms by id. ``term_ids`` is overwritten when it is int64."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    total = term_ids.size
    # One key per token, term-major: sorted, runs of equal keys are the postings' tfs.
    keys = term_ids.astype(np.int64, copy=False)
    keys *= n
    if positions is None:
        keys += np.repeat(np.arange(n, dtype=np.int64), lengths)
    else:
        keys += np.repeat(np.asarray(positions, dtype=np.int64), lengths)
        by_position = np.empty_like(lengths)
        by_position[positions] = lengths
        lengths = by_position
    keys.sort()
    starts = _run_starts(keys)
    tf = np.diff(starts, append=total)
    term_of, post_docs = np.divmod(keys[starts], max(n, 1))
    del keys
    offsets = np.append(_run_starts(term_of), term_of.size)
    return lengths, offsets, post_docs.astype(np.int32), narrow_tf(tf)


def narrow_tf(tf: np.ndarray) -> np.ndarray:
    """Term frequencies in the smallest unsigned type that holds them."""
    max_tf = int(tf.max()) if tf.size else 0
    return tf.astype(next(t for t in _TF_DTYPES if max_tf <= np.iinfo(t).max))


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Positions where a run of equal values begins (a bool compare: no int64 temporaries)."""
    changes = np.empty(sorted_values.size, dtype=np.bool_)
    changes[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=changes[1:])
    return np.flatnonzero(changes)


def _to_byte_planes(values: np.ndarray) -> np.ndarray:
    """int32 values -> (4, n) uint8, little-endian byte planes (see the module docstring)."""
    return np.ascontiguousarray(values.astype("<i4", copy=False).view(np.uint8).reshape(-1, 4).T)


def _from_byte_planes(planes: np.ndarray) -> np.ndarray:
    interleaved = np.empty((planes.shape[1], 4), dtype=np.uint8)
    for byte, plane in enumerate(planes):  # four contiguous row copies beat one transpose
        interleaved[:, byte] = plane
    return interleaved.view("<i4").ravel().astype(np.int32, copy=False)
