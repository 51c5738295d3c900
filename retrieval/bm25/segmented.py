"""A read-only BM25 view over a list of segments plus deletions, exact as rank_bm25 over the live
documents.

"Live" documents are those of every segment whose id is not in ``deleted`` (or, given
``deleted_per_segment``, not in that segment's own deletions: a document id may then be deleted
from an older segment and live in a newer one, as when a chunk edited in place is re-added with
its id). ``SegmentedIndex`` ties together three parts, each a module of its own concern:

- ``retrieval.bm25.vocabulary``: what the view composes once when it is made (not per query):
  N, avgdl, the vocabulary, every term's live document frequency and idf with the epsilon
  floor, reusing what the view before composed for the segments still here;
- ``retrieval.bm25.layouts``: its terms as the query reads them, their postings' layouts shared
  with the views that follow one another, and the per-view caches of their contributions;
- ``retrieval.bm25.query``: summing a query's contributions in query order and selecting the
  top k, by the compiled loops (``retrieval.bm25.kernels``) once a process has loaded them, by
  numpy until then, with the same result bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

import numpy as np

from retrieval.bm25 import kernels
from retrieval.bm25.index import BM25Params
from retrieval.bm25.layouts import (
    CACHE_MIN_POSTINGS,
    LAYOUT_CACHE_BYTES,
    WEIGHT_CACHE_BYTES,
    Postings,
)
from retrieval.bm25.query import Scorer
from retrieval.bm25.segment import Segment
from retrieval.bm25.vocabulary import Dead, compose, dead_frequencies_of


class SegmentedIndex:
    """Immutable composed view; the public API of ``BM25Index`` plus the vocabulary."""

    def __init__(
        self,
        segments: Sequence[Segment],
        deleted: np.ndarray | Sequence[int] = (),
        params: BM25Params | None = None,
        weight_cache_bytes: int = WEIGHT_CACHE_BYTES,
        deleted_per_segment: Sequence[np.ndarray] | None = None,
        previous: SegmentedIndex | None = None,
        dead_frequencies: Sequence[Dead | None] | None = None,
        layout_cache_bytes: int = LAYOUT_CACHE_BYTES,
        cache_min_postings: int = CACHE_MIN_POSTINGS,
    ) -> None:
        """``previous``: a view this one follows (the same knowledge base one version before).
        When every segment of it is still here (a delta: segments only added, deletions only
        grown), its vocabulary and per-segment term ids and document frequencies are reused
        instead of composed again, which is most of the cost of composing a view (paid by every
        process after every change). After a merge the segments still here are reused the same
        way; terms only the folded-away segments held stay in the vocabulary with no live
        document (never scored, not in ``terms()``), until they are a quarter of it and the view
        is composed afresh.

        ``dead_frequencies``: per segment, (local term ids, how many of the segment's deleted
        documents hold each), as ``dead_frequencies()`` of a view of the same segments and
        deletions reports (the manifest carries them, see ``retrieval.bm25store.manifest``).
        A segment whose deletions changed then has its document frequencies from its own
        postings counts minus those, instead of one pass over all its postings (up to
        ``MAX_SEGMENT_TOKENS`` of them, paid by every process at every change). Without
        that record (the writer of a version, which records it), a view composed on
        ``previous`` takes that view's counts minus the documents deleted since, found in
        each term's postings (``retrieval.bm25.vocabulary.live_counts``).

        Terms' layouts (positions and pair codes, see ``retrieval.bm25.layouts``) are kept in
        an LRU of ``layout_cache_bytes`` that a view composed on ``previous`` shares with it;
        the compiled loops' terms of this view in another of the same bound. The numpy path
        keeps the contributions of terms with at least ``cache_min_postings`` postings in an
        LRU of ``weight_cache_bytes`` per view. None is counted in ``nbytes``."""
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
            weight_cache_bytes,
            cache_min_postings,
        )
        self._scorer = Scorer(composition)

    def dead_frequencies(self) -> list[Dead]:
        """Per segment, (local term ids, how many of its deleted documents hold each): what a
        later view of the same segments and deletions takes as ``dead_frequencies``."""
        return dead_frequencies_of(self._composition)

    # ------------------------------------------------------------------ statistics

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
        """The idf used in scoring (epsilon floor applied), or None for a term no live
        document holds."""
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
        # One pooled score buffer (8 bytes per stored document), which the first search of
        # several terms allocates; each further concurrent search holds one more.
        buffer = 8 * c.ids.size
        return sum(a.nbytes for a in arrays) + vocab + buffer

    @property
    def total_nbytes(self) -> int:
        return self.nbytes + sum(s.nbytes for s in self.segments)

    # ------------------------------------------------------------------ scoring

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every live document, in ``doc_ids`` order (float64)."""
        parts = self._postings.occurrences(query)
        ids, dead = self._composition.ids, self._composition.dead
        scores = np.zeros(ids.size)
        if parts:
            docs = np.concatenate([d for d, _ in parts])
            weights = np.concatenate([w for _, w in parts])
            scores = np.bincount(docs, weights, minlength=ids.size)
        return scores if dead is None else scores[~dead]

    def search(
        self, query: Sequence[str], top_k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to `top_k` (doc_id, score) with a non-zero score, best first, ties by doc_id;
        `allowed` (doc ids) restricts the candidates without changing scores. Same contract
        as ``BM25Index.search``: by the compiled loops once the process has them
        (``Scorer.compiled_search``), else by numpy (``Scorer.search``)."""
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_k == 0:
            return []
        term_ids: list[int] = []
        compiled = kernels.get()
        if compiled is not None:
            terms = self._postings.compiled_terms(query, term_ids)
            if not terms:
                return []
            return self._scorer.compiled_search(compiled, terms, term_ids, top_k, allowed)
        parts = self._postings.occurrences(query, term_ids)
        if not parts:
            return []
        return self._scorer.search(parts, term_ids, top_k, allowed)
