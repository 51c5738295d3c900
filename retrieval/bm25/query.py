"""A segmented BM25 view's query: sum a query's term contributions (``retrieval.bm25.layouts``)
and select the top k.

Per query term occurrence, in query order (as rank_bm25 adds them), every contribution is added
to its document's score. Two ways sum them and select the top k, with the same result bit for
bit:

- the compiled loops (``retrieval.bm25.kernels``), once a process has loaded them: every
  occurrence added into a pooled buffer in query order and read back into a heap of the k
  best, or MaxScore when the query splits (``Scorer.compiled_search``);
- numpy until then: ``np.add.at`` into the pooled buffer in query order, read back by a scan or
  over the postings; the k-th best score among the rarest term's documents bounds the k-th
  best from below, so only documents reaching it are candidates; a strided sample bounds it
  again, a partition over what reaches it, then an exact sort by (-score, doc id); MaxScore
  when the query splits (``Scorer.search``, ``_maxscore``).

Deleted documents are dropped as they are read, so their postings cost time until a merge
removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np

from retrieval.bm25.layouts import AnyPart, Part, Term
from retrieval.bm25.vocabulary import Composition

_DENSE_FRACTION = 8  # read a sum back by a dense scan when the postings reach 1/8 of the docs
# Try MaxScore when the other terms read at most this fraction of the dominant term's postings.
_MAXSCORE_RATIO = 4
# Looking a candidate up by binary search costs about as much as adding this many postings to
# the dense buffer (the ratio of their measured costs per element: a search's branchy steps
# against a plain add), and a dense lookup about this many more (zeroing, its calls).
_LOOKUP_COST = 22
_DENSE_LOOKUP_OVERHEAD = 8192
# The compiled loops: finding a candidate in a term's postings by galloping (branchy steps)
# costs about as much as adding and reading back this many postings (a measured ratio).
_GALLOP_COST = 12
# Relative room for summing the same contributions in another order (a few units in the last
# place of a float64 sum of tens of terms is ~1e-14).
_ORDER_SLACK = 1e-12
# "No deletions" and "no restriction" for the compiled loops.
_NO_DEAD = np.zeros(0, dtype=np.bool_)
_NO_ALLOWED = np.zeros(0, dtype=np.int64)


class _Split(NamedTuple):
    """A query's terms split for MaxScore: its distinct parts, each occurrence's distinct
    index (query order), the essential ones, the others' occurrences (query order), each
    other's largest contribution and their sum over those occurrences."""

    distinct: list[Part]
    occurrences: list[int]
    essential: set[int]
    others: list[int]
    most: dict[int, float]
    alone: float


class Scorer:
    """A view's query path over its composition: the top k of a query's parts, by the compiled
    loops or numpy. It keeps zeroed float64 score buffers, one per document, for searches of
    several terms: a search pops one (or allocates it) and appends it back zeroed, so concurrent
    searches each hold their own (list.pop and list.append are atomic); and a term's largest
    contribution (8 bytes per term that was a MaxScore candidate)."""

    def __init__(self, composition: Composition) -> None:
        self._composition = composition
        self._all_ids = composition.ids
        self._dead = composition.dead
        self._position_type = composition.position_type
        self._buffers: list[np.ndarray] = []
        self._max_weight: dict[int, float] = {}

    def search(
        self, parts: list[Part], term_ids: list[int], top_k: int, allowed: np.ndarray | None
    ) -> list[tuple[int, float]]:
        """``SegmentedIndex.search`` by numpy, of a query's known occurrences' `parts` (not
        empty) and their `term_ids`; `top_k` > 0."""
        if len(parts) == 1:  # one known token: its postings are the scores, no summing
            touched, hits = parts[0]
        else:
            found = self._maxscore(parts, term_ids, top_k, allowed)
            touched, hits = found if found is not None else self._summed(parts, top_k, allowed)
        keep = hits != 0
        if self._dead is not None:
            keep &= ~self._dead[touched]
        if allowed is not None:
            keep &= np.isin(self._all_ids[touched], allowed)
        keep = keep.nonzero()[0]
        touched, hits = touched[keep], hits[keep]
        if hits.size > top_k:
            # np.partition costs more per element than a comparison: first drop what scores
            # below the k-th best of a strided sample (a subset, so that is at most the k-th
            # best overall), keeping about 16 k candidates, then partition those.
            step = hits.size // (16 * top_k)
            if step >= 2:
                sample = hits[::step]
                floor = np.partition(sample, sample.size - top_k)[sample.size - top_k]
                keep = (hits >= floor).nonzero()[0]
                touched, hits = touched[keep], hits[keep]
            # Keep every document tied with the k-th best so the doc_id tie-break stays exact.
            kth = np.partition(hits, hits.size - top_k)[hits.size - top_k]
            keep = (hits >= kth).nonzero()[0]
            touched, hits = touched[keep], hits[keep]
        ids = self._all_ids[touched]
        order = np.lexsort((ids, -hits))[:top_k]
        return list(zip(ids[order].tolist(), hits[order].tolist(), strict=True))

    def compiled_search(
        self,
        compiled: ModuleType,
        terms: list[Term],
        term_ids: list[int],
        top_k: int,
        allowed: np.ndarray | None,
    ) -> list[tuple[int, float]]:
        """``search`` by the compiled loops (``retrieval.bm25.kernels``): the same ids and
        scores, bit for bit, in the same order.

        Each term's contributions are computed where they are read, from its postings' pair
        codes (``Term``): nothing is weighed per view. One term: its contributions are the
        scores; the heap keeps the top k. Several: MaxScore when the query splits
        (``_split``): the essential terms are added into the pooled buffer in query order and
        read back (zeroing it) into the heap, which gives theta, and into a list of every
        eligible document's partial score; if what the other terms can add (``alone``) is
        below theta, only documents whose partial score plus it reaches theta are candidates,
        and their scores are added again over every occurrence in query order, each term's
        contribution found by galloping through its sorted postings. Otherwise (no split, or
        theta too low) every occurrence is added into the buffer and read back into the heap:
        one step a posting each way."""
        ids, k = self._all_ids, min(top_k, self._all_ids.size)
        dead = self._dead if self._dead is not None else _NO_DEAD
        if allowed is None:
            allowed = _NO_ALLOWED
        else:
            allowed = np.asarray(allowed, dtype=np.int64)
            if not allowed.size:  # nothing allowed (the loops read an empty array as "all")
                return []
            if allowed.size > 1 and (allowed[1:] < allowed[:-1]).any():
                allowed = np.sort(allowed)
        heap = np.empty(k), np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
        if len(terms) == 1:
            term, n = terms[0], 0
            for piece in term.pieces:
                n = compiled.best_of(*piece[:4], term.table, term.idf, ids, dead, allowed, *heap, n)
        else:
            n = self._compiled_maxscore(compiled, terms, term_ids, dead, allowed, heap)
            if n is None:
                buffer = self._borrowed()
                for term in terms:
                    term.add_to(compiled, buffer)
                n = 0
                for term in {id(t): t for t in terms}.values():
                    for piece in term.pieces:
                        n = compiled.collect(buffer, piece.positions, ids, dead, allowed, *heap, n)
                self._buffers.append(buffer)  # zeroed as it was read
        scores, found = heap[0][:n], heap[1][:n]
        order = np.lexsort((found, -scores))
        return list(zip(found[order].tolist(), scores[order].tolist(), strict=True))

    def _compiled_maxscore(
        self,
        compiled: ModuleType,
        terms: list[Term],
        term_ids: list[int],
        dead: np.ndarray,
        allowed: np.ndarray,
        heap: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> int | None:
        """MaxScore by the compiled loops (see ``compiled_search``): how many of the top k
        it left in `heap`, or None (the heap to be refilled from empty) when the query has no
        split or the split would not pay: a low guess of theta, theta itself below what the
        other terms can add, or more candidates than galloping beats summing for."""
        split = self._split(terms, term_ids, Term.postings)
        if split is None:
            return None
        distinct, occurrences, essential, others, _, alone = split
        # Worth summing the essential terms only if theta is likely to pass `alone`: when the
        # k-th best of their contributions does (a guess, as in ``_maxscore``).
        best, n = np.empty(heap[0].size), 0
        for index in essential:
            term = distinct[index]
            for piece in term.pieces:
                n = compiled.largest(*piece[1:4], term.table, term.idf, best, n)
        if n < best.size or not best[0] * (1 - _ORDER_SLACK) > alone:
            return None
        buffer = self._borrowed()
        for term, index in zip(terms, occurrences, strict=True):
            if index in essential:
                term.add_to(compiled, buffer)
        size = sum(distinct[index].postings() for index in essential)
        partial = np.empty(size, dtype=self._position_type), np.empty(size)
        n = m = 0
        for index in essential:
            for piece in distinct[index].pieces:
                n, m = compiled.collect_recording(
                    buffer,
                    piece.positions,
                    self._all_ids,
                    dead,
                    allowed,
                    *heap,
                    n,
                    *partial,
                    m,
                    alone,
                    1 - _ORDER_SLACK,
                )
        self._buffers.append(buffer)  # zeroed as it was read
        theta = heap[0][0] * (1 - _ORDER_SLACK) if n == heap[0].size else 0.0
        if not alone < theta:
            return None
        kept = compiled.reaching(*partial, m, theta - alone)
        # Galloping costs about as much a candidate as summing _GALLOP_COST postings does.
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
        n = compiled.collect(buffer, candidates, self._all_ids, dead, allowed, *heap, 0)
        for index in essential:
            for piece in distinct[index].pieces:
                compiled.zero_at(buffer, piece.positions)
        self._buffers.append(buffer)
        return n

    def _summed(
        self, parts: list[Part], top_k: int, allowed: np.ndarray | None, floor: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the touched documents that may be in the top k.

        Every part is added with ``np.add.at`` (a fast path since numpy 1.25; positions are
        unique within a part), in order, into a zeroed dense buffer from the view's pool, so
        each document's contributions are added in the parts' order. The k-th best score among
        the rarest part's eligible documents bounds the k-th best overall from below, as does
        `floor` when given, so only documents scoring at least the larger are candidates.
        They are read back one of two ways, whichever reads less (a dense scan and refill costs
        less per document than a gather and a scatter of zeros per posting):

        - postings covering a good part of the documents (``_DENSE_FRACTION``): one scan of
          the buffer for the candidates, then ``fill(0)``;
        - fewer: term by term over the postings, zeroing what was read, so a document held by
          several terms is read at its first term only (later ones read 0). No sort.

        The buffer goes back to the pool zeroed (an exception drops it)."""
        rarest = min((p for p, _ in parts), key=len)
        buffer = self._borrowed()
        for positions, weights in parts:
            np.add.at(buffer, positions, weights)
        bound = max(floor, self._lower_bound(buffer, rarest, top_k, allowed))
        if sum(p.size for p, _ in parts) * _DENSE_FRACTION >= buffer.size:
            touched = np.flatnonzero(buffer >= bound if bound > 0 else buffer != 0)
            hits = buffer[touched]
            self._returned(buffer, [p for p, _ in parts])
            return touched, hits
        touched_parts, hit_parts, seen = [], [], set()
        for positions, _ in parts:
            if id(positions) in seen:  # a repeated token: the same arrays, already read
                continue
            seen.add(id(positions))
            at = positions.astype(np.intp)  # numpy indexes with intp: int32 converts per call
            scores = buffer[at]
            buffer[at] = 0.0
            keep = (scores >= bound if bound > 0 else scores != 0).nonzero()[0]
            touched_parts.append(positions[keep])
            hit_parts.append(scores[keep])
        self._buffers.append(buffer)  # zeroed as it was read
        return np.concatenate(touched_parts), np.concatenate(hit_parts)

    def _maxscore(
        self, parts: list[Part], term_ids: list[int], top_k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(positions, scores) of the candidates for the top k, reading the longest postings
        only where they can change it (MaxScore), or None when the query has no such split.

        The query's distinct terms are split by length of postings: the shortest are
        *essential*, as many as the others still outnumber ``_MAXSCORE_RATIO`` times in
        postings (more essential terms only raise theta and lower the bound below, fewer
        would leave more candidates). The essential terms are summed, giving partial scores;
        theta, the k-th best partial score of an eligible document, is at most the k-th best
        final score, since the *non-essential* terms add nothing negative (their idf >= 0
        here, or there is no split). If the most they can add together (the sum, in query
        order, of each occurrence's largest contribution, kept per term and view) is below
        theta, a document holding only them cannot reach the top k, and of the others only
        those whose partial score plus what the non-essential terms can still add reaches
        theta stay candidates: the non-essential terms are looked up one by one, largest
        contribution first, each narrowing the candidates before the next. A term is looked
        up by binary search in its sorted postings when the candidates are few against them,
        otherwise through the dense buffer.

        The candidates' scores are then added again in query order, as rank_bm25 adds them,
        so they are its bits and ties break by doc id as in one index. Float addition is
        monotonic, so a bound computed in another order can differ from the query order's by
        a few units in the last place: theta is lowered by ``_ORDER_SLACK`` (relative) before
        it excludes anything, and an excluded document scores strictly below the k-th best.
        When the split cannot prune, the whole query is summed (``_summed``) with theta as
        its floor."""
        split = self._split(parts, term_ids)
        if split is None:
            return None
        distinct, occurrences, essential, others, most, alone = split
        rest = [parts[i] for i, index in enumerate(occurrences) if index in essential]
        if len(rest) > 1:  # (one part is its own partial scores: theta costs no more)
            # Worth summing the essential terms only if theta is likely to pass `alone`: when
            # the k-th best of their contributions does (a guess: a document holding two of
            # them counts twice; theta itself is exact).
            guess = np.concatenate([distinct[i][1] for i in essential])
            if not self._kth_best(guess, None, top_k, None) * (1 - _ORDER_SLACK) > alone:
                return None
        touched, hits = self._summed(rest, 0, None) if len(rest) > 1 else rest[0]
        theta = self._kth_best(hits, touched, top_k, allowed) * (1 - _ORDER_SLACK)
        if alone < theta:
            pruned = self._pruned(touched, hits, theta, distinct, others, most)
            if pruned is not None:
                touched, known = pruned
                return touched, self._in_query_order(touched, known, parts, occurrences, essential)
        return self._summed(parts, top_k, allowed, floor=theta)

    def _split(
        self,
        parts: Sequence[AnyPart],
        term_ids: list[int],
        size: Callable[[AnyPart], int] = lambda part: part[0].size,
    ) -> _Split | None:
        """MaxScore's split of a query's distinct terms (see ``_maxscore``), or None when it
        has none: fewer than two distinct terms, no term short enough against the others, or
        a non-essential term with a negative idf. `parts` are the numpy path's (positions,
        weights) or the compiled path's ``Term``s, a repeated token's the same object;
        `size` gives a part's postings."""
        slot: dict[int, int] = {}  # id() of a term's part -> its distinct index
        distinct: list[AnyPart] = []
        occurrences: list[int] = []  # per query occurrence, its distinct index
        for part in parts:
            index = slot.setdefault(id(part), len(distinct))
            if index == len(distinct):
                distinct.append(part)
            occurrences.append(index)
        if len(distinct) < 2:
            return None
        sizes = [size(part) for part in distinct]
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
        ids_of = {id(part): term_id for part, term_id in zip(parts, term_ids, strict=True)}
        idf_of = self._composition.idf_of
        if any(idf_of(ids_of[id(distinct[i])]) < 0 for i in others):
            return None
        most = {i: self._most(distinct[i], ids_of[id(distinct[i])]) for i in others}
        alone = 0.0
        for index in others:
            alone += most[index]
        return _Split(distinct, occurrences, essential, others, most, alone)

    def _pruned(
        self,
        touched: np.ndarray,
        hits: np.ndarray,
        theta: float,
        distinct: list[Part],
        others: list[int],
        most: dict[int, float],
    ) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
        """MaxScore's second half (see ``_maxscore``): the positions of the candidates among
        the essential terms' documents (`touched`, partial scores `hits`) and the contributions
        of the non-essential terms looked up so far, or None when looking them up would read
        what summing them does."""
        reach = hits
        for index in others:
            reach = reach + most[index]
        keep = (reach >= theta).nonzero()[0]
        touched, hits = touched[keep], hits[keep]
        if not any(_searched(touched.size, distinct[i][0].size) for i in most):
            return None
        known: dict[int, np.ndarray] = {}
        for index in sorted(most, key=most.__getitem__, reverse=True)[:-1]:
            known[index] = self._looked_up(distinct[index], touched)
            reach = hits  # what the terms looked up add instead of their most
            for other in others:
                reach = reach + (known[other] if other in known else most[other])
            keep = (reach >= theta).nonzero()[0]
            if keep.size < touched.size:
                touched, hits = touched[keep], hits[keep]
                known = {i: extra[keep] for i, extra in known.items()}
        return touched, known

    def _in_query_order(
        self,
        touched: np.ndarray,
        known: dict[int, np.ndarray],
        parts: list[Part],
        occurrences: list[int],
        essential: set[int],
    ) -> np.ndarray:
        """The scores of the documents at `touched` (unique), every occurrence's contribution
        added in query order into the dense buffer: the essential terms' postings whole, the
        others' for `touched` only (`known` by distinct index, or looked up now)."""
        buffer = self._borrowed()
        for part, index in zip(parts, occurrences, strict=True):
            if index in essential:
                np.add.at(buffer, part[0], part[1])
            else:
                if index not in known:
                    known[index] = self._looked_up(part, touched)
                np.add.at(buffer, touched, known[index])
        scores = buffer.take(touched)
        # The candidates are essential terms' documents: zeroing those postings zeroes them.
        self._returned(
            buffer,
            [part[0] for part, index in zip(parts, occurrences, strict=True) if index in essential],
        )
        return scores

    def _looked_up(self, part: Part, touched: np.ndarray) -> np.ndarray:
        """The term's contribution to each of the documents at `touched` (0 where absent)."""
        docs, weights = part
        if _searched(touched.size, docs.size):
            at = np.minimum(np.searchsorted(docs, touched), docs.size - 1)
            return np.where(docs[at] == touched, weights[at], 0.0)
        buffer = self._borrowed()
        np.add.at(buffer, docs, weights)  # into zeros: the weights themselves
        found = buffer.take(touched)
        self._returned(buffer, [docs])
        return found

    def _borrowed(self) -> np.ndarray:
        """A zeroed float64 score buffer, one per document, from the view's pool (or new)."""
        return self._buffers.pop() if self._buffers else np.zeros(self._all_ids.size)

    def _returned(self, buffer: np.ndarray, written: Sequence[np.ndarray]) -> None:
        """Zero a borrowed buffer where `written` (positions) and put it back in the pool: one
        ``fill`` when they cover an eighth of the documents, else a scatter of zeros with the
        positions converted to intp once (``np.put`` with int32 positions converts them on every
        call). A buffer dropped by an exception before this never returns unzeroed."""
        if sum(w.size for w in written) * _DENSE_FRACTION >= buffer.size:
            buffer.fill(0.0)
        else:
            for positions in written:
                buffer[positions.astype(np.intp)] = 0.0
        self._buffers.append(buffer)

    def _most(self, part: AnyPart, term_id: int) -> float:
        """The term's largest contribution in this view (kept: 8 bytes per term asked). Of a
        ``Term``: the largest value of the table cells its postings use, times idf (idf >= 0
        here, and rounding is monotonic, so that is the largest product)."""
        most = self._max_weight.get(term_id)
        if most is None:
            if isinstance(part, Term):
                most = max(part.most_cell(piece) for piece in part.pieces) * part.idf
            else:
                most = part[1].max()
            most = self._max_weight[term_id] = float(most)
        return most

    def _lower_bound(
        self, scores: np.ndarray, rarest: np.ndarray, top_k: int, allowed: np.ndarray | None
    ) -> float:
        """The k-th best score among the rarest query term's eligible documents (a lower bound
        of the k-th best overall, so the top k scores at least that), or 0 when it has fewer
        than k of them."""
        return self._kth_best(scores.take(rarest), rarest, top_k, allowed)

    def _kth_best(
        self,
        scores: np.ndarray,
        positions: np.ndarray | None,
        top_k: int,
        allowed: np.ndarray | None,
    ) -> float:
        """The k-th best positive score of an eligible document (`scores` of the documents at
        `positions`; of any document without them), or 0 when fewer than k have one.

        ``np.partition`` costs more per element than a comparison: of many, the k-th best of a
        strided subset of about 16 k (at most the k-th best of all) first drops what scores below
        it."""
        if not top_k or scores.size < top_k:
            return 0.0
        step = scores.size // (16 * top_k)
        if step >= 2:
            sampled = None if positions is None else positions[::step]
            floor = self._kth_best(scores[::step], sampled, top_k, allowed)
            if floor > 0:
                keep = (scores >= floor).nonzero()[0]
                scores = scores[keep]
                positions = None if positions is None else positions[keep]
        eligible = scores > 0
        if positions is not None and self._dead is not None:
            eligible &= ~self._dead[positions]
        if positions is not None and allowed is not None:
            eligible &= np.isin(self._all_ids[positions], allowed)
        sample = scores[eligible]
        if sample.size < top_k:
            return 0.0
        return float(np.partition(sample, sample.size - top_k)[sample.size - top_k])


def _searched(keys: int, postings: int) -> bool:
    """Whether `keys` documents are looked up in `postings` sorted ones by binary search (or
    through the dense buffer)."""
    return keys * _LOOKUP_COST < postings + _DENSE_LOOKUP_OVERHEAD
