"""A read-only BM25 view over a list of segments plus deletions, exact as rank_bm25 over the live
documents.

The reference is ``rank_bm25.BM25Okapi(live corpus).get_scores(query)`` (0.2.2): a document's
score sums, over the query's tokens (a repeated one once per occurrence), ``idf(t) * tf * (k1 +
1) / (tf + k1 * (1 - b + b * dl / avgdl))``, with ``idf(t) = log(N - n_t + 0.5) - log(n_t +
0.5)``; a negative idf is replaced by ``epsilon`` times the mean raw idf of the vocabulary
(itself negative when most terms are common: not clamped).

"Live" documents are those of every segment whose id is not in ``deleted`` (or, given
``deleted_per_segment``, not in that segment's own deletions: an id may be deleted from an
older segment and live in a newer one). The view composes its statistics once
(``retrieval.bm25.vocabulary``) and reads its terms (``retrieval.bm25.layouts``) with the
compiled loops (``retrieval.bm25.query``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

import numpy as np

from retrieval.bm25.layouts import LAYOUT_CACHE_BYTES, Postings
from retrieval.bm25.query import Scorer
from retrieval.bm25.segment import Segment
from retrieval.bm25.vocabulary import BM25Params, Dead, compose, dead_frequencies_of


class SegmentedIndex:
    """Immutable composed view: scores, search and the live vocabulary's statistics."""

    def __init__(
        self,
        segments: Sequence[Segment],
        deleted: np.ndarray | Sequence[int] = (),
        params: BM25Params | None = None,
        deleted_per_segment: Sequence[np.ndarray] | None = None,
        previous: SegmentedIndex | None = None,
        dead_frequencies: Sequence[Dead | None] | None = None,
        layout_cache_bytes: int = LAYOUT_CACHE_BYTES,
    ) -> None:
        """``previous``: the view this one follows (the same knowledge base one version
        before), whose composition for the segments still here is reused. ``dead_frequencies``:
        as ``dead_frequencies()`` of a view of the same segments and deletions reports (spares
        a pass over the postings). Terms' layouts are kept in an LRU of ``layout_cache_bytes``
        shared with ``previous``, this view's terms in another; neither counts in ``nbytes``."""
        self.params = params = params or BM25Params()
        self.segments = tuple(segments)
        self.deleted = np.unique(np.asarray(deleted, dtype=np.int64))
        self._composition = composition = compose(
            self.segments,
            self.deleted,
            deleted_per_segment,
            dead_frequencies,
            params.epsilon,
            previous._composition if previous is not None else None,
        )
        self._postings = Postings(
            composition,
            params,
            previous._postings if previous is not None and composition.follows else None,
            layout_cache_bytes,
        )
        self._scorer = Scorer(composition)

    def dead_frequencies(self) -> list[Dead]:
        """Per segment, (local term ids, how many of its deleted documents hold each)."""
        return dead_frequencies_of(self._composition)

    def __len__(self) -> int:
        """Live documents."""
        return self._composition.n

    @cached_property
    def doc_ids(self) -> np.ndarray:
        """Live document ids, in the order ``get_scores`` reports them (segment order)."""
        ids, dead = self._composition.ids, self._composition.dead
        return ids if dead is None else ids[~dead]

    def terms(self) -> Iterator[str]:
        """The live vocabulary: every term some live document holds."""
        df = self._composition.df
        return (t for t, term_id in self._composition.vocab.items() if df[term_id] > 0)

    def __contains__(self, term: object) -> bool:
        """Whether some live document holds the term."""
        term_id = self._composition.vocab.get(term)  # type: ignore[arg-type]
        return term_id is not None and self._composition.df[term_id] > 0

    def document_frequency(self, term: str) -> int:
        """How many live documents hold the term (0 for an unknown one)."""
        term_id = self._composition.vocab.get(term)
        return 0 if term_id is None else int(self._composition.df[term_id])

    def idf(self, term: str) -> float | None:
        """The idf used in scoring, or None for a term no live document holds."""
        term_id = self._composition.vocab.get(term)
        if term_id is None or self._composition.df[term_id] == 0:
            return None
        return float(self._composition.idf_of(term_id))

    @cached_property
    def nbytes(self) -> int:
        """Footprint of the view itself (the segments count on their own, see ``total_nbytes``)."""
        c = self._composition
        arrays = [c.ids, c.lengths, c.df, c.idf_by_df, self.deleted]
        arrays += c.local_to_global + c.df_parts
        arrays += [live for live in c.lives if live is not None]
        arrays += [d for d in c.segment_deleted if d is not self.deleted]
        if c.dead is not None:
            arrays.append(c.dead)
        vocab = c.vocab.nbytes
        # One pooled score buffer (each further concurrent search holds one more).
        buffer = 8 * c.ids.size
        return sum(a.nbytes for a in arrays) + vocab + buffer

    @property
    def total_nbytes(self) -> int:
        return self.nbytes + sum(s.nbytes for s in self.segments)

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every live document, in ``doc_ids`` order (float64)."""
        scores = self._scorer.scores(self._postings.terms(query, []))
        dead = self._composition.dead
        return scores if dead is None else scores[~dead]

    def search(
        self, query: Sequence[str], top_k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to `top_k` (doc_id, score) with a non-zero score, best first, ties by doc_id.

        A document scoring below 0 while matching (a negative epsilon floor, as in a knowledge
        base of one or two documents) stays a candidate, ranked after every positive one.
        `allowed` (doc ids) restricts the candidates; scores are those of the whole view."""
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_k == 0:
            return []
        term_ids: list[int] = []
        terms = self._postings.terms(query, term_ids)
        if not terms:
            return []
        return self._scorer.search(terms, term_ids, top_k, allowed)
