"""A segmented BM25 view's query, by the compiled loops: per query term occurrence, in query
order (as rank_bm25 adds them), every contribution is added to its document's score in a pooled
buffer, read back into a heap of the k best; MaxScore reads the longest postings only where
they can change the top k (``Scorer._maxscore``). Deleted documents are dropped as read.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

import numpy as np

from retrieval.bm25 import kernels
from retrieval.bm25.layouts import Term
from retrieval.bm25.vocabulary import Composition

_MAXSCORE_RATIO = 4  # essential terms read at most this fraction of the others' postings
_GALLOP_COST = 12  # postings summed for the cost of galloping to one candidate (measured)
_ORDER_SLACK = 1e-12  # relative room for sums in another order (an ulp of tens of terms: 1e-14)
# "No deletions" and "no restriction" for the compiled loops.
_NO_DEAD = np.zeros(0, dtype=np.bool_)
_NO_ALLOWED = np.zeros(0, dtype=np.int64)

Heap = tuple[np.ndarray, np.ndarray, np.ndarray]  # scores, doc ids, positions


class _Split(NamedTuple):
    """A query's terms split for MaxScore (``Scorer._split``)."""

    distinct: list[Term]
    occurrences: list[int]  # per query occurrence, its distinct index
    essential: set[int]
    others: list[int]  # the other terms' occurrences, in query order
    alone: float  # the most they can add together


class Scorer:
    """A view's query path. Its zeroed score buffers are popped by a search and appended back
    zeroed, so concurrent searches each hold their own (list.pop and list.append are atomic)."""

    def __init__(self, composition: Composition) -> None:
        self._composition = composition
        self._all_ids = composition.ids
        self._dead = composition.dead if composition.dead is not None else _NO_DEAD
        self._buffers: list[np.ndarray] = []
        self._max_weight: dict[int, float] = {}

    def search(
        self, terms: list[Term], term_ids: list[int], top_k: int, allowed: np.ndarray | None
    ) -> list[tuple[int, float]]:
        """``SegmentedIndex.search`` of a query's known occurrences' `terms` (not empty) and
        their `term_ids`; `top_k` > 0."""
        compiled = kernels.get()
        ids, k = self._all_ids, min(top_k, self._all_ids.size)
        if allowed is None:
            allowed = _NO_ALLOWED
        else:
            allowed = np.asarray(allowed, dtype=np.int64)
            if not allowed.size:  # nothing allowed (the loops read an empty array as "all")
                return []
            if allowed.size > 1 and (allowed[1:] < allowed[:-1]).any():
                allowed = np.sort(allowed)
        heap = np.empty(k), np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
        dead = self._dead
        if len(terms) == 1:
            term, n = terms[0], 0
            for piece in term.pieces:
                n = compiled.best_of(*piece[:4], term.table, term.idf, ids, dead, allowed, *heap, n)
        else:
            n = self._maxscore(compiled, terms, term_ids, allowed, heap)
            if n is None:
                n = self._summed(compiled, terms, allowed, heap)
        scores, found = heap[0][:n], heap[1][:n]
        order = np.lexsort((found, -scores))
        return list(zip(found[order].tolist(), scores[order].tolist(), strict=True))

    def scores(self, terms: list[Term]) -> np.ndarray:
        """Every stored document's score (deleted ones too)."""
        buffer = np.zeros(self._all_ids.size)
        compiled = kernels.get()
        for term in terms:
            term.add_to(compiled, buffer)
        return buffer

    def _summed(
        self, compiled: ModuleType, terms: list[Term], allowed: np.ndarray, heap: Heap
    ) -> int:
        """Every occurrence summed, then read back into the empty `heap`; how many it holds."""
        buffer = self._borrowed()
        for term in terms:
            term.add_to(compiled, buffer)
        n = 0
        for term in {id(t): t for t in terms}.values():
            for piece in term.pieces:
                n = compiled.collect(
                    buffer, piece.positions, self._all_ids, self._dead, allowed, *heap, n
                )
        self._buffers.append(buffer)  # zeroed as it was read
        return n

    def _maxscore(
        self,
        compiled: ModuleType,
        terms: list[Term],
        term_ids: list[int],
        allowed: np.ndarray,
        heap: Heap,
    ) -> int | None:
        """MaxScore: how many of the top k it left in `heap`, or None (the heap to be refilled
        from empty) when the query has no split or the split would not pay.

        The essential terms' sums give theta, the k-th best partial score, at most the k-th
        best final one (the others add nothing negative). If what the others can add
        (``alone``) is below theta, only documents whose partial score plus it reaches theta are
        candidates, summed again over every occurrence in query order (rank_bm25's bits), the
        other terms' contributions found by galloping. Theta is lowered by ``_ORDER_SLACK``
        (sums in another order differ by a few ulps) before it excludes anything."""
        split = self._split(terms, term_ids)
        if split is None:
            return None
        distinct, occurrences, essential, others, alone = split
        if not self._worth_it(compiled, split, heap[0].size):
            return None
        partial, m, theta = self._partial_scores(compiled, terms, split, allowed, heap)
        if not alone < theta:
            return None
        kept = compiled.reaching(*partial, m, theta - alone)
        if kept * len(others) * _GALLOP_COST >= sum(distinct[i].postings() for i in others):
            return None
        candidates = np.sort(partial[0][:kept])
        buffer = self._borrowed()
        for term, index in zip(terms, occurrences, strict=True):
            if index in essential:
                term.add_to(compiled, buffer)
            else:
                for piece in term.pieces:
                    compiled.add_found(buffer, candidates, *piece[:4], term.table, term.idf)
        n = compiled.collect(buffer, candidates, self._all_ids, self._dead, allowed, *heap, 0)
        for index in essential:
            for piece in distinct[index].pieces:
                compiled.zero_at(buffer, piece.positions)
        self._buffers.append(buffer)
        return n

    def _worth_it(self, compiled: ModuleType, split: _Split, k: int) -> bool:
        """Whether the k-th best of the essential terms' contributions is above ``alone`` (a
        guess at theta: a document holding two of them counts twice)."""
        best, n = np.empty(k), 0
        for index in split.essential:
            term = split.distinct[index]
            for piece in term.pieces:
                n = compiled.largest(*piece[1:4], term.table, term.idf, best, n)
        return n == k and best[0] * (1 - _ORDER_SLACK) > split.alone

    def _partial_scores(
        self,
        compiled: ModuleType,
        terms: list[Term],
        split: _Split,
        allowed: np.ndarray,
        heap: Heap,
    ) -> tuple[tuple[np.ndarray, np.ndarray], int, float]:
        """The essential terms summed and read back into the empty `heap`: (positions,
        partial scores) of the documents that may be candidates, how many, and theta (0 when
        fewer than k documents are eligible)."""
        distinct, essential = split.distinct, split.essential
        buffer = self._borrowed()
        for term, index in zip(terms, split.occurrences, strict=True):
            if index in essential:
                term.add_to(compiled, buffer)
        size = sum(distinct[index].postings() for index in essential)
        partial = np.empty(size, dtype=self._composition.position_type), np.empty(size)
        n = m = 0
        for index in essential:
            for piece in distinct[index].pieces:
                n, m = compiled.collect_recording(
                    buffer,
                    piece.positions,
                    self._all_ids,
                    self._dead,
                    allowed,
                    *heap,
                    n,
                    *partial,
                    m,
                    split.alone,
                    1 - _ORDER_SLACK,
                )
        self._buffers.append(buffer)  # zeroed as it was read
        k = heap[0].size
        return partial, m, heap[0][0] * (1 - _ORDER_SLACK) if n == k else 0.0

    def _split(self, terms: list[Term], term_ids: list[int]) -> _Split | None:
        """MaxScore's split of a query's distinct terms, or None (no term short enough, or a
        non-essential term with a negative idf). The shortest terms are *essential*, as many as
        the others still outnumber ``_MAXSCORE_RATIO`` times in postings."""
        slot: dict[int, int] = {}  # id() of a term -> its distinct index
        distinct: list[Term] = []
        occurrences: list[int] = []  # per query occurrence, its distinct index
        for term in terms:
            index = slot.setdefault(id(term), len(distinct))
            if index == len(distinct):
                distinct.append(term)
            occurrences.append(index)
        if len(distinct) < 2:
            return None
        sizes = [term.postings() for term in distinct]
        read = [0] * len(distinct)  # postings read per distinct term, over its occurrences
        for index in occurrences:
            read[index] += sizes[index]
        essential: set[int] = set()
        kept, total = 0, sum(read)
        for index in sorted(range(len(distinct)), key=sizes.__getitem__)[:-1]:
            if _MAXSCORE_RATIO * (kept + read[index]) > total - kept - read[index]:
                break
            essential.add(index)
            kept += read[index]
        if not essential:
            return None
        others = [index for index in occurrences if index not in essential]  # in query order
        ids_of = {id(term): term_id for term, term_id in zip(terms, term_ids, strict=True)}
        if any(self._composition.idf_of(ids_of[id(distinct[i])]) < 0 for i in others):
            return None
        alone = 0.0
        for index in others:
            alone += self._most(distinct[index], ids_of[id(distinct[index])])
        return _Split(distinct, occurrences, essential, others, alone)

    def _most(self, term: Term, term_id: int) -> float:
        """The term's largest contribution in this view (idf >= 0 here: the largest cell's
        value times idf)."""
        most = self._max_weight.get(term_id)
        if most is None:
            most = max(term.most_cell(piece) for piece in term.pieces) * term.idf
            most = self._max_weight[term_id] = float(most)
        return most

    def _borrowed(self) -> np.ndarray:
        """A zeroed score buffer, one per stored document, from the view's pool (or new)."""
        return self._buffers.pop() if self._buffers else np.zeros(self._all_ids.size)
