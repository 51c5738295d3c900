"""A compact BM25 inverted index that scores exactly like `rank_bm25.BM25Okapi` (0.2.2).

Semantics (the reference is `BM25Okapi(corpus).get_scores(query)`; we match it within 1e-6):

- N documents, `dl` a document's token count, `avgdl = total tokens / N`.
- `idf(t) = log(N - n_t + 0.5) - log(n_t + 0.5)`, `n_t` the number of documents holding t.
  This goes negative for terms in more than half the documents. Such terms get the epsilon
  floor `epsilon * average_idf`, where `average_idf` is the mean of the *raw* idfs of all
  vocabulary terms (taken before any replacement). The floor is not clamped: when most terms
  are common, `average_idf` and therefore the floor are negative too. An idf of exactly 0 is
  not negative and stays 0.
- `score(d, q) = sum over query tokens t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b *
  dl / avgdl))`, with `tf` the count of t in d. A repeated query token contributes once per
  occurrence; an unknown token contributes 0.
- Where `rank_bm25` divides by zero (an empty corpus, or a corpus with no tokens) we return an
  index that scores nothing instead.

Representation (why it is fast and small):

- `vocab`: dict term -> term id (ids in insertion order, so `list(vocab)` is the id -> term map).
- CSR postings sorted by term then document: `offsets` (int64, one past each term's end),
  `post_docs` (int32 document positions) and `post_tf` (uint8, widened to uint16 or uint32
  only when some term repeats more often than that in one document).
- `norm` (float64 per document) = `k1 * (1 - b + b * dl / avgdl)` and `idf` (float64 per term,
  floor already applied).

A query reads only the postings of its terms: term weights are computed vectorised in float64
at query time (precomputed float32 weights would drift past 1e-6, float64 ones would double the
footprint), accumulated into a per-call score array, and the top k is picked with a partition
over the touched documents only, then sorted exactly by (-score, doc_id).

Serialised form (`to_bytes`): an 8-byte magic, a format version, then a pickle (protocol 5) of
plain numpy arrays, floats and the term list. `post_docs` is stored as four byte planes (all
low bytes, then all second bytes, ...): within a term the positions ascend, so the high planes
are long runs that zlib squeezes to almost nothing and inflates at memcpy speed: a smaller
payload that inflates faster, for a short re-interleaving on load (docs/performance.md).
`from_bytes` unpickles, so it must only be given bytes whose HMAC the caller has verified (see
BM25Store); it refuses other format versions before unpickling anything.
"""

from __future__ import annotations

import pickle
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

FORMAT_VERSION = 1
_MAGIC = b"BM25IDX\x00"
_HEADER = struct.Struct("<8sH")
_TF_DTYPES = (np.uint8, np.uint16, np.uint32)


@dataclass(frozen=True)
class BM25Params:
    """BM25 Okapi tuning; the defaults are rank_bm25's."""

    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25

    def __post_init__(self) -> None:
        # Outside these ranges the length normaliser can reach 0 or go negative and a score
        # divides by zero.
        if not self.k1 >= 0 or not 0 <= self.b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got {self}")


class BM25Index:
    """Immutable BM25 index over a corpus of token lists, one per document (chunk)."""

    def __init__(
        self,
        *,
        params: BM25Params,
        doc_ids: np.ndarray,
        vocab: dict[str, int],
        offsets: np.ndarray,
        post_docs: np.ndarray,
        post_tf: np.ndarray,
        norm: np.ndarray,
        idf: np.ndarray,
    ) -> None:
        """Assemble an index from its arrays; use `build` or `from_bytes` instead."""
        self.params = params
        self.doc_ids = doc_ids
        self._vocab = vocab
        self._offsets = offsets
        self._post_docs = post_docs
        self._post_tf = post_tf
        self._norm = norm
        self._idf = idf

    @classmethod
    def build(
        cls,
        doc_ids: Sequence[int],
        corpus: Iterable[Sequence[str]],
        params: BM25Params = BM25Params(),
    ) -> BM25Index:
        """Index `corpus` (token lists), document i being identified by `doc_ids[i]`."""
        docs = corpus if isinstance(corpus, list) else list(corpus)
        ids = np.asarray(doc_ids, dtype=np.int64)
        if ids.shape != (len(docs),):
            raise ValueError(f"{ids.size} doc ids for {len(docs)} documents")
        inverted = invert(docs)
        return cls(
            params=params,
            doc_ids=ids,
            vocab=inverted.vocab,
            offsets=inverted.offsets,
            post_docs=inverted.post_docs,
            post_tf=inverted.post_tf,
            norm=_length_norm(inverted.lengths, int(inverted.lengths.sum()), params),
            idf=_floored_idf(np.diff(inverted.offsets), len(docs), params.epsilon),
        )

    def __len__(self) -> int:
        return int(self.doc_ids.size)

    def idf(self, term: str) -> float | None:
        """The idf used in scoring (epsilon floor applied), or None for an unknown term."""
        term_id = self._vocab.get(term)
        return None if term_id is None else float(self._idf[term_id])

    def document_frequency(self, term: str) -> int:
        """How many documents hold ``term`` (0 for an unknown term)."""
        term_id = self._vocab.get(term)
        if term_id is None:
            return 0
        return int(self._offsets[term_id + 1] - self._offsets[term_id])

    def terms(self) -> Iterable[str]:
        """The vocabulary (every term some document holds), in no particular order."""
        return self._vocab.keys()

    def __contains__(self, term: object) -> bool:
        return term in self._vocab

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every document, in build order (float64, as rank_bm25 returns)."""
        return self._accumulate(query)[0]

    def search(
        self, query: Sequence[str], top_k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to `top_k` (doc_id, score) with a non-zero score, best first, ties by doc_id.

        A document scoring 0 matched nothing, so it is not a candidate. A document can score
        below 0 while matching (rank_bm25's epsilon floor is negative when the average idf is,
        as in a knowledge base of one or two documents); it stays a candidate, ranked after
        every positive one, so small knowledge bases still answer keyword searches.
        `allowed` (doc ids) restricts the candidates, for filtered searches; scores are
        unchanged (idf stays that of the whole index).
        """
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_k == 0:
            return []
        scores, touched = self._accumulate(query)
        hits = scores[touched]
        matched = hits != 0
        if allowed is not None:
            matched &= np.isin(self.doc_ids[touched], allowed)
        touched, hits = touched[matched], hits[matched]
        if touched.size > top_k:
            # Keep every document tied with the k-th best so the doc_id tie-break stays exact.
            kth = np.partition(hits, touched.size - top_k)[touched.size - top_k]
            keep = hits >= kth
            touched, hits = touched[keep], hits[keep]
        ids = self.doc_ids[touched]
        order = np.lexsort((ids, -hits))[:top_k]
        return list(zip(ids[order].tolist(), hits[order].tolist(), strict=True))

    def _accumulate(self, query: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Dense scores plus candidate positions (a superset of the non-zero-scoring ones)."""
        if isinstance(query, str):
            raise TypeError("query must be a sequence of tokens, not a string")
        scores = np.zeros(len(self), dtype=np.float64)
        term_ids = [t for t in map(self._vocab.get, query) if t is not None]
        postings: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for term_id in term_ids:  # query order, once per occurrence, as rank_bm25 adds them
            if term_id not in postings:
                postings[term_id] = self._term_weights(term_id)
            docs, weights = postings[term_id]
            np.add.at(scores, docs, weights)
        if not postings:
            return scores, np.empty(0, dtype=np.int32)
        if len(postings) == 1:
            return scores, docs
        if sum(docs.size for docs, _ in postings.values()) * 4 >= len(self):
            # The postings cover a good part of the corpus: one scan of the scores is cheaper
            # than a union, and still bounded by a few times the postings read.
            return scores, np.flatnonzero(scores)
        # Union of the postings without sorting: keep each term's documents not seen before.
        seen = np.zeros(len(self), dtype=np.bool_)
        parts = []
        for docs, _ in postings.values():
            parts.append(docs[~seen[docs]])
            seen[docs] = True
        return scores, np.concatenate(parts)

    def _term_weights(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        """A term's posting documents and their BM25 contributions, computed in float64."""
        start, end = self._offsets[term_id], self._offsets[term_id + 1]
        docs = self._post_docs[start:end]
        tf = self._post_tf[start:end].astype(np.float64)
        # idf * (tf * (k1 + 1) / (tf + norm)) as rank_bm25 evaluates it, in place to spare
        # temporaries (IEEE addition and multiplication commute exactly).
        denominator = self._norm[docs]
        denominator += tf
        tf *= self.params.k1 + 1
        tf /= denominator
        tf *= self._idf[term_id]
        return docs, tf

    @cached_property
    def nbytes(self) -> int:
        """In-memory footprint: arrays plus an estimate of the vocabulary dict's objects."""
        arrays = (self.doc_ids, self._offsets, self._post_docs, self._post_tf, self._norm)
        vocab = sys.getsizeof(self._vocab) + sum(
            sys.getsizeof(term) + sys.getsizeof(term_id) for term, term_id in self._vocab.items()
        )
        return sum(a.nbytes for a in arrays) + self._idf.nbytes + vocab

    def to_bytes(self) -> bytes:
        """Uncompressed payload; the caller compresses and signs it."""
        state = {
            "params": (self.params.k1, self.params.b, self.params.epsilon),
            "doc_ids": self.doc_ids,
            "terms": list(self._vocab),
            "offsets": self._offsets,
            "post_docs": _to_byte_planes(self._post_docs),
            "post_tf": self._post_tf,
            "norm": self._norm,
            "idf": self._idf,
        }
        return _HEADER.pack(_MAGIC, FORMAT_VERSION) + pickle.dumps(state, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> BM25Index:
        """Load a `to_bytes` payload. Only pass bytes whose HMAC was verified: this unpickles."""
        body = payload_body(data, _MAGIC, FORMAT_VERSION, "BM25 index")
        state = pickle.loads(body)  # noqa: S301 -- HMAC-verified
        terms = state.pop("terms")
        return cls(
            params=BM25Params(*state.pop("params")),
            vocab=dict(zip(terms, range(len(terms)), strict=True)),
            post_docs=_from_byte_planes(state.pop("post_docs")),
            **state,
        )


@dataclass(frozen=True)
class Inverted:
    """A corpus turned into CSR postings (see the module docstring for the layout)."""

    vocab: dict[str, int]
    lengths: np.ndarray  # int64 token count per document
    offsets: np.ndarray  # int64, one past each term's last posting
    post_docs: np.ndarray  # int32 document positions, ascending within a term
    post_tf: np.ndarray  # uint8/16/32 term frequencies


class TermIds(dict):
    """term -> id, ids given in first-seen order: looking up a term not seen yet gives it the
    next id (one C-level lookup per token; Python runs once per distinct term)."""

    def __missing__(self, term):
        term_id = self[term] = len(self)
        return term_id


def invert(docs: list[Sequence[str]]) -> Inverted:
    """Postings of `docs` (token lists), sorted by term (in first-seen order) then document."""
    term_ids, lengths, vocab = to_term_ids(docs)
    lengths, offsets, post_docs, post_tf = invert_ids(term_ids, lengths)
    return Inverted(dict(vocab), lengths, offsets, post_docs, post_tf)


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
    to back (document i has ``lengths[i]`` of them) as ids 0..V-1, each id occurring at least
    once; document i is stored at position ``positions[i]`` (default i). Returns the lengths
    by position, then offsets, post_docs and post_tf as in `Inverted`, terms ordered by id.
    Numpy only (the sort releases the GIL); ``term_ids`` is overwritten when it is int64."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    total = term_ids.size
    # One sortable key per token, term-major (< V * n <= tokens * docs, far from int64's
    # limit): sorting groups postings by term then document, and runs of equal keys are the tfs.
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


def payload_body(data: bytes, magic: bytes, version: int, what: str) -> memoryview:
    """The pickled part of a `to_bytes` payload after its header (magic, format version), or a
    ValueError naming what was expected."""
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != magic:
        raise ValueError(f"not a {what} payload")
    found = _HEADER.unpack_from(data)[1]
    if found != version:
        raise ValueError(f"{what} format {found}, expected {version}")
    return memoryview(data)[_HEADER.size :]


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Positions where a run of equal values begins (a bool compare: no int64 temporaries)."""
    changes = np.empty(sorted_values.size, dtype=np.bool_)
    changes[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=changes[1:])
    return np.flatnonzero(changes)


def _length_norm(lengths: np.ndarray, total: int, params: BM25Params) -> np.ndarray:
    """k1 * (1 - b + b * dl / avgdl), written as rank_bm25 evaluates it."""
    if total == 0:
        # No tokens means no postings: the normaliser is never read, so avoid 0 / 0.
        return np.full(lengths.size, params.k1, dtype=np.float64)
    avgdl = total / lengths.size
    return params.k1 * (1 - params.b + params.b * lengths / avgdl)


def _floored_idf(df: np.ndarray, n: int, epsilon: float) -> np.ndarray:
    """Raw idf, with negative values replaced by epsilon * mean raw idf (rank_bm25's floor)."""
    idf = np.log(n - df + 0.5) - np.log(df + 0.5)
    if idf.size:
        idf[idf < 0] = epsilon * idf.mean()
    return idf


def _to_byte_planes(values: np.ndarray) -> np.ndarray:
    """int32 values -> (4, n) uint8, little-endian byte planes (see the module docstring)."""
    return np.ascontiguousarray(values.astype("<i4", copy=False).view(np.uint8).reshape(-1, 4).T)


def _from_byte_planes(planes: np.ndarray) -> np.ndarray:
    interleaved = np.empty((planes.shape[1], 4), dtype=np.uint8)
    for byte, plane in enumerate(planes):  # four contiguous row copies beat one transpose
        interleaved[:, byte] = plane
    return interleaved.view("<i4").ravel().astype(np.int32, copy=False)
