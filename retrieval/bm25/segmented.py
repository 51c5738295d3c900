"""A read-only BM25 view over a list of segments plus deletions, exact as rank_bm25 over the live
documents.

"Live" documents are those of every segment whose id is not in ``deleted`` (or, given
``deleted_per_segment``, not in that segment's own deletions: a document id may then be deleted
from an older segment and live in a newer one, as when a chunk edited in place is re-added with
its id). The view composes,
once when it is made (not per query), what BM25Okapi computes over its corpus:

- N = live documents and avgdl = their tokens / N (a document's length norm
  ``k1 * (1 - b + b * dl / avgdl)`` is computed where a posting needs it, from the stored
  lengths, by the same expression: a norm per stored document would be a pass over all of them
  in every view composed, every process, every change);
- the global document frequency of every term = the sum over segments of its live postings
  (a segment without deletions contributes its postings count per term; one with deletions
  counts its live postings only), so a deleted document stops counting exactly;
- the idf of every term with a live posting and the epsilon floor, ``epsilon * mean raw idf``
  over that live vocabulary (a term whose documents are all deleted is not in it), kept per
  document frequency (a few thousand values) and read for a query's terms.

The composed vocabulary is one dict (term -> global term id) built from the segments' term
lists; each segment keeps an array mapping its local term ids to global ones, so a query looks a
term up once and reads its postings segment by segment.

Query path: per query term occurrence (query order, as rank_bm25 adds them), each segment's
postings give global document positions (segment base + local position, int32) and float64
contributions ``idf * tf * (k1 + 1) / (tf + norm)``. A term's postings are kept as its layout
(``_Layout``): a few pieces (``_Piece``), each the positions of a run of the segments holding it
and, per posting, its code in its segment's grid of (term frequency, document length) pairs
(``Segment.pair_grid``). Those depend on the segments only, so the views that follow one
another after changes share them in an LRU; after a change only the new segments' postings
make a new piece. A view computes ``tf * (k1 + 1) / (tf + norm(dl))`` once per grid cell of
every segment (``_view_table``), and the compiled loops compute a posting's contribution where
they read it, ``table[offset + code] * idf``: the same operations on the same values as per
posting, so the same bits, and a new view (a new average length and new idfs) weighs nothing
again. (Weighing a query's terms again would be a pass over their postings in every process
after every change.) The numpy path gathers the same table by code into weights, kept per view
in an LRU for common terms (``cache_min_postings``), and computes rarer terms' per posting, kept
in a smaller LRU.

Two ways sum them and select the top k, with the same result bit for bit:

- the compiled loops (``retrieval.bm25.kernels``), once a process has loaded them: every
  occurrence added into a pooled buffer in query order and read back into a heap of the k
  best, or MaxScore when the query splits (``_compiled_search``);
- numpy until then: ``np.add.at`` into the pooled buffer in query order, read back by a scan or
  over the postings; the k-th best score among the rarest term's documents bounds the k-th
  best from below, so only documents reaching it are candidates; a strided sample bounds it
  again, a partition over what reaches it, then an exact sort by (-score, doc id); MaxScore
  when the query splits (``_maxscore``).

Deleted documents are dropped as they are read, so their postings cost time until a merge
removes them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from types import ModuleType
from typing import NamedTuple, TypeVar, cast

import numpy as np

from retrieval.bm25 import kernels
from retrieval.bm25.index import BM25Params
from retrieval.bm25.segment import PairGrid, Segment
from retrieval.core.lru import ByteLRU

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
# The numpy path's term contributions kept per view (bytes), and the shortest postings worth
# keeping: a query of common terms then reads its float64 weights instead of recomputing them.
# (The compiled loops weigh each posting where they read it: see ``_Term``.)
WEIGHT_CACHE_BYTES = 64 * 1024 * 1024
_CACHE_MIN_POSTINGS = 2048
# Terms' pieces (global positions and pair codes), shared by the views of one knowledge base
# that follow one another (bytes): a new view reads them with its own pair table and idfs,
# nothing recomputed per posting; the compiled path's terms of a view hold them too. At 6 bytes
# a posting, the common terms of a 300k-chunk knowledge base's queries fit (~10M postings).
LAYOUT_CACHE_BYTES = 128 * 1024 * 1024
RARE_CACHE_BYTES = 8 * 1024 * 1024
_ENTRY_OVERHEAD = 256  # two array headers and the LRU's slot, roughly
# A term's postings are kept in pieces (``_Layout``): a new last piece at least this fraction
# of the one before is joined to it, and a term has at most this many.
_PIECE_RATIO = 4
_MAX_PIECES = 6
_Part = tuple[np.ndarray, np.ndarray]  # a term's global positions (ascending), contributions
_Dead = tuple[np.ndarray, np.ndarray]  # a segment's local term ids, deleted documents holding each
# "No deletions" and "no restriction" for the compiled loops.
_NO_DEAD = np.zeros(0, dtype=np.bool_)
_NO_ALLOWED = np.zeros(0, dtype=np.int64)
_MAX_STALE_FRACTION = 0.25  # of the vocabulary, before a view stops reusing the one before


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
        dead_frequencies: Sequence[_Dead | None] | None = None,
        layout_cache_bytes: int = LAYOUT_CACHE_BYTES,
        cache_min_postings: int = _CACHE_MIN_POSTINGS,
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
        each term's postings (``_live_counts``).

        Terms' layouts (positions and pair codes, see ``_layout``) are kept in an LRU of
        ``layout_cache_bytes`` that a view composed on ``previous`` shares with it; the compiled
        loops' terms of this view in another of the same bound. The numpy path keeps the
        contributions of terms with at least ``cache_min_postings`` postings in an LRU of
        ``weight_cache_bytes`` per view. None is counted in ``nbytes``."""
        self.params = params = params or BM25Params()
        self.segments = tuple(segments)
        self.deleted = np.unique(np.asarray(deleted, dtype=np.int64))
        if deleted_per_segment is not None and len(deleted_per_segment) != len(self.segments):
            raise ValueError("deleted_per_segment needs one array per segment")
        # Ids deleted from each segment (sorted, unique): the view's and the segment's own.
        self._segment_deleted = [
            self.deleted
            if deleted_per_segment is None
            or (not len(deleted_per_segment[i]) and not self.deleted.size)
            else np.union1d(self.deleted, deleted_per_segment[i])
            for i in range(len(self.segments))
        ]
        sizes = [len(s) for s in self.segments]
        self._bases = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._base_list = self._bases.tolist()
        # Global document positions as int32 (half the memory and bandwidth of int64) while
        # they fit, which is any index this service holds.
        self._position_type = np.int32 if self._bases[-1] < 2**31 else np.int64
        self._all_ids = (
            np.concatenate([s.doc_ids for s in self.segments])
            if self.segments
            else np.empty(0, np.int64)
        )
        if dead_frequencies is not None and len(dead_frequencies) != len(self.segments):
            raise ValueError("dead_frequencies needs one entry per segment")
        reused = _reusable(previous, self.segments, self._segment_deleted)
        lives, dfs = [], []
        for i, segment in enumerate(self.segments):
            kept = reused.get(i)
            counts = kept.counts if kept is not None and kept.same else None
            if counts is None:
                live = self._live_of(segment, i)
                dead = dead_frequencies[i] if dead_frequencies is not None else None
                before = kept.counts if kept is not None else None
                counts = (live, _live_counts(segment, live, dead, before))
            lives.append(counts[0])
            dfs.append(counts[1])
        self._dead: np.ndarray | None = None
        if any(live is not None for live in lives):
            self._dead = np.concatenate(
                [
                    np.zeros(len(s), bool) if live is None else ~live
                    for s, live in zip(self.segments, lives, strict=True)
                ]
            )
        lengths = (
            np.concatenate([s.lengths for s in self.segments])
            if self.segments
            else np.empty(0, np.int64)
        )
        # The live documents' count and total length, without copying the live lengths out
        # (integer sums: exact in any order).
        total = int(lengths.sum())
        self._n = int(lengths.size)
        if self._dead is not None:
            total -= int(lengths[self._dead].sum())
            self._n -= int(np.count_nonzero(self._dead))
        # A document's length norm is computed where a posting needs it (``_per_posting``,
        # ``_view_table``), from the stored lengths (deleted ones too: never scored) and the
        # live average length; no tokens means no postings, so the norm is never read.
        # Computing all of them here would be a pass over every document in every view composed
        # (every process, after every change), for the few postings that read one.
        avgdl = total / self._n if total else 1.0
        self._lengths = lengths
        # The previous view's vocabulary grown by this one's new terms (``_Vocabulary``: the
        # previous view may be serving searches in other threads, so nothing it reads changes).
        self._vocab = previous._vocab.successor() if reused else _Vocabulary()
        self._local_to_global: list[np.ndarray] = []
        self._df_parts: list[np.ndarray] = []
        for i, (segment, df) in enumerate(zip(self.segments, dfs, strict=True)):
            local_to_global = reused[i].local_to_global if i in reused else None
            if local_to_global is None:
                local_to_global = self._vocab.ids_of(segment.terms)
            self._local_to_global.append(local_to_global)
            self._df_parts.append(df)
        self._lives = lives
        self._df = _document_frequencies(
            len(self._vocab), self._local_to_global, self._df_parts, previous, reused
        )
        # Vocabulary entries no live document holds (terms of folded-away segments kept by
        # reuse, or of deleted documents): past a quarter of it the next view starts afresh.
        self._stale_terms = int(np.count_nonzero(self._df == 0))
        # idf per document frequency (``_idf_of``): a term's idf is read only for the terms of
        # a query, and an array over the whole vocabulary would be computed in every view
        # composed, where this one has an entry per distinct document frequency.
        self._idf_by_df = _floored_idf_by_df(self._df, self._n, params.epsilon)
        # The numpy path's contributions of terms kept as weights (see ``_term_contributions``),
        # and the compiled path's terms (``_Term``: their layouts' pieces and idf).
        self._weights: ByteLRU[int, _Part] = ByteLRU(weight_cache_bytes, _part_bytes)
        self._terms: ByteLRU[int, _Term] = ByteLRU(layout_cache_bytes, _term_bytes)
        # Rarer terms' positions and contributions, in their own LRU so that they never push
        # a common term out: computing one costs several numpy calls, reading it one lookup.
        self._rare: ByteLRU[int, _Part] = ByteLRU(RARE_CACHE_BYTES, _part_bytes)
        self._cache_min_postings = cache_min_postings
        # Layouts are keyed by global term id, so only views that kept the vocabulary share;
        # versioned by the generation of the view that made them.
        self._layouts: ByteLRU[int, _Layout] = (
            previous._layouts if reused else ByteLRU(layout_cache_bytes, _layout_bytes)
        )
        self._generation = previous._generation + 1 if reused else 0
        # Every segment's pair table under this view's average length, concatenated in view
        # order, and each segment's offset in it (``_view_table``; made on first use).
        self._table: tuple[np.ndarray, list[int]] | None = None
        self._avgdl = avgdl
        # Zeroed float64 score buffers, one per document, for searches of several terms: a
        # search pops one (or allocates it) and appends it back zeroed, so concurrent searches
        # each hold their own (list.pop and list.append are atomic).
        self._buffers: list[np.ndarray] = []
        # A term's largest contribution (8 bytes per term that was a MaxScore candidate).
        self._max_weight: dict[int, float] = {}

    def _idf_of(self, term_id: int) -> np.float64:
        """The idf used in scoring of a term some live document holds."""
        return self._idf_by_df[self._df[term_id]]

    def _live_of(self, segment: Segment, position: int) -> np.ndarray | None:
        deleted = self._segment_deleted[position]
        if not deleted.size or not len(segment):
            return None
        live = ~segment.holds(deleted)
        return None if live.all() else live

    def dead_frequencies(self) -> list[_Dead]:
        """Per segment, (local term ids, how many of its deleted documents hold each): what a
        later view of the same segments and deletions takes as ``dead_frequencies``."""
        found = []
        for segment, df in zip(self.segments, self._df_parts, strict=True):
            dead = np.diff(segment.offsets) - df
            terms = np.flatnonzero(dead)
            found.append((terms.astype(np.int32), dead[terms].astype(np.int32)))
        return found

    # ------------------------------------------------------------------ statistics

    def __len__(self) -> int:
        """Live documents."""
        return self._n

    @cached_property
    def doc_ids(self) -> np.ndarray:
        """Live document ids, in the order ``get_scores`` reports them (segment order)."""
        return self._all_ids if self._dead is None else self._all_ids[~self._dead]

    def terms(self) -> Iterator[str]:
        """The live vocabulary: every term some live document holds."""
        return (t for t, term_id in self._vocab.items() if self._df[term_id] > 0)

    def __contains__(self, term: object) -> bool:
        """Whether some live document holds the term."""
        term_id = self._vocab.get(term)  # type: ignore[arg-type]
        return term_id is not None and self._df[term_id] > 0

    def document_frequency(self, term: str) -> int:
        """How many live documents hold the term (0 for an unknown one)."""
        term_id = self._vocab.get(term)
        return 0 if term_id is None else int(self._df[term_id])

    def idf(self, term: str) -> float | None:
        """The idf used in scoring (epsilon floor applied), or None for a term no live
        document holds."""
        term_id = self._vocab.get(term)
        if term_id is None or self._df[term_id] == 0:
            return None
        return float(self._idf_of(term_id))

    @cached_property
    def nbytes(self) -> int:
        """Footprint of the view itself (the segments count on their own, see ``total_nbytes``)."""
        arrays = [self._all_ids, self._lengths, self._df, self._idf_by_df, self.deleted]
        arrays += self._local_to_global + self._df_parts
        arrays += [live for live in self._lives if live is not None]
        arrays += [d for d in self._segment_deleted if d is not self.deleted]
        if self._dead is not None:
            arrays.append(self._dead)
        vocab = self._vocab.nbytes
        # One pooled score buffer (8 bytes per stored document), which the first search of
        # several terms allocates; each further concurrent search holds one more.
        buffer = 8 * self._all_ids.size
        return sum(a.nbytes for a in arrays) + vocab + buffer

    @property
    def total_nbytes(self) -> int:
        return self.nbytes + sum(s.nbytes for s in self.segments)

    # ------------------------------------------------------------------ scoring

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every live document, in ``doc_ids`` order (float64)."""
        parts = self._occurrences(query)
        scores = np.zeros(self._all_ids.size)
        if parts:
            docs = np.concatenate([d for d, _ in parts])
            weights = np.concatenate([w for _, w in parts])
            scores = np.bincount(docs, weights, minlength=self._all_ids.size)
        return scores if self._dead is None else scores[~self._dead]

    def search(
        self, query: Sequence[str], top_k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to `top_k` (doc_id, score) with a non-zero score, best first, ties by doc_id;
        `allowed` (doc ids) restricts the candidates without changing scores. Same contract
        as ``BM25Index.search``."""
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_k == 0:
            return []
        term_ids: list[int] = []
        compiled = kernels.get()
        if compiled is not None:
            terms = self._compiled_terms(query, term_ids)
            if not terms:
                return []
            return self._compiled_search(compiled, terms, term_ids, top_k, allowed)
        parts = self._occurrences(query, term_ids)
        if not parts:
            return []
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

    def _compiled_search(
        self,
        compiled: ModuleType,
        terms: list[_Term],
        term_ids: list[int],
        top_k: int,
        allowed: np.ndarray | None,
    ) -> list[tuple[int, float]]:
        """``search`` by the compiled loops (``retrieval.bm25.kernels``): the same ids and
        scores, bit for bit, in the same order.

        Each term's contributions are computed where they are read, from its postings' pair
        codes (``_Term``): nothing is weighed per view. One term: its contributions are the
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
        terms: list[_Term],
        term_ids: list[int],
        dead: np.ndarray,
        allowed: np.ndarray,
        heap: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> int | None:
        """MaxScore by the compiled loops (see ``_compiled_search``): how many of the top k
        it left in `heap`, or None (the heap to be refilled from empty) when the query has no
        split or the split would not pay: a low guess of theta, theta itself below what the
        other terms can add, or more candidates than galloping beats summing for."""
        split = self._split(terms, term_ids, _Term.postings)
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
        self, parts: list[_Part], top_k: int, allowed: np.ndarray | None, floor: float = 0.0
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
        self, parts: list[_Part], term_ids: list[int], top_k: int, allowed: np.ndarray | None
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
        parts: Sequence[_AnyPart],
        term_ids: list[int],
        size: Callable[[_AnyPart], int] = lambda part: part[0].size,
    ) -> _Split | None:
        """MaxScore's split of a query's distinct terms (see ``_maxscore``), or None when it
        has none: fewer than two distinct terms, no term short enough against the others, or
        a non-essential term with a negative idf. `parts` are the numpy path's (positions,
        weights) or the compiled path's ``_Term``s, a repeated token's the same object;
        `size` gives a part's postings."""
        slot: dict[int, int] = {}  # id() of a term's part -> its distinct index
        distinct: list[_AnyPart] = []
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
        if any(self._idf_of(ids_of[id(distinct[i])]) < 0 for i in others):
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
        distinct: list[_Part],
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
        parts: list[_Part],
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

    def _looked_up(self, part: _Part, touched: np.ndarray) -> np.ndarray:
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

    def _most(self, part: _AnyPart, term_id: int) -> float:
        """The term's largest contribution in this view (kept: 8 bytes per term asked). Of a
        ``_Term``: the largest value of the table cells its postings use, times idf (idf >= 0
        here, and rounding is monotonic, so that is the largest product)."""
        most = self._max_weight.get(term_id)
        if most is None:
            if isinstance(part, _Term):
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

    def _occurrences(self, query: Sequence[str], term_ids: list[int] | None = None) -> list[_Part]:
        """(global document positions, float64 contributions) of every known query token
        occurrence, in query order (a repeated token's parts are the same object); their term
        ids appended to `term_ids` when given. The numpy path's (see ``_compiled_terms``)."""
        return self._each_known(query, self._term_contributions, term_ids)

    def _compiled_terms(self, query: Sequence[str], term_ids: list[int]) -> list[_Term]:
        """``_occurrences`` for the compiled loops: each known occurrence's ``_Term``."""
        return self._each_known(query, self._term, term_ids)

    def _each_known(
        self,
        query: Sequence[str],
        lookup: Callable[[str], _AnyPart | None],
        term_ids: list[int] | None,
    ) -> list[_AnyPart]:
        """`lookup` of every known query token occurrence, in query order (a repeated token's
        the same object), their term ids appended to `term_ids` when given."""
        if isinstance(query, str):
            raise TypeError("query must be a sequence of tokens, not a string")
        cache: dict[str, _AnyPart | None] = {}
        parts = []
        for token in query:
            if token not in cache:
                cache[token] = lookup(token)
            found = cache[token]
            if found is not None:
                parts.append(found)
                if term_ids is not None:
                    term_ids.append(self._vocab[token])
        return parts

    def _term(self, token: str) -> _Term | None:
        """The token's postings as the compiled loops read them: its layout's pieces with the
        view's pair table and its idf, so that a new view (a new average length, new idfs)
        weighs nothing again; or, when a segment holding it has no pair grid, its weights
        computed per posting (``_computed``) as a table of their own."""
        term_id = self._vocab.get(token)
        if term_id is None or not self._df[term_id]:
            return None
        found = self._terms.get(term_id)
        if found is not None:
            return found
        holders = self._holders(token)
        if all(h.segment.pair_grid is not None for h in holders):
            layout = self._layout(term_id, holders)
            table = self._view_table()[0]
            term = _Term(layout.pieces, table, float(self._idf_of(term_id)))
        else:
            positions, weights = self._computed(holders, self._idf_of(term_id))
            term = _Term((_Piece.of_weights(positions),), weights, 1.0)
        self._terms.put(term_id, term)
        return term

    def _term_contributions(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The numpy path's (positions, contributions) of a term: from its layout for a term
        of at least ``cache_min_postings`` postings whose segments all have pair grids (kept
        per view), else per posting (kept in a smaller LRU)."""
        term_id = self._vocab.get(term)
        if term_id is None or not self._df[term_id]:
            return None
        cached = self._weights.get(term_id) or self._rare.get(term_id)
        if cached is not None:
            return cached
        holders = self._holders(term)
        small = sum(h.postings for h in holders) < self._cache_min_postings
        if small or not all(h.segment.pair_grid is not None for h in holders):
            computed = self._computed(holders, self._idf_of(term_id))
        else:
            layout = self._layout(term_id, holders)
            pieces = layout.pieces
            positions = (
                pieces[0].positions
                if len(pieces) == 1
                else np.concatenate([p.positions for p in pieces], dtype=self._position_type)
            )
            computed = positions, self._weighed(layout, self._idf_of(term_id))
        (self._rare if small else self._weights).put(term_id, computed)
        return computed

    def _holders(self, term: str) -> list[_Holder]:
        """Each segment holding the term, in view order."""
        found = []
        for index, (base, segment) in enumerate(zip(self._base_list, self.segments, strict=False)):
            local = segment.vocab.get(term)
            if local is not None:
                postings = int(segment.offsets[local + 1] - segment.offsets[local])
                found.append(_Holder(segment, base, local, postings, index))
        return found

    def _positions(self, holders: Sequence[_Holder]) -> np.ndarray:
        """The global document positions of the holders' postings, ascending: a segment's own
        array (no copy) when it is the only holder and starts the view."""
        parts = []
        for segment, base, local, _, _ in holders:
            start, end = segment.offsets[local], segment.offsets[local + 1]
            docs = segment.post_docs[start:end]
            parts.append(docs if base == 0 else docs + self._position_type(base))
        if len(parts) == 1:
            return parts[0].astype(self._position_type, copy=False)
        return np.concatenate(parts, dtype=self._position_type)

    def _computed(self, holders: list[_Holder], idf: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions and contributions straight from the postings (a term of few postings)."""
        docs = self._positions(holders)
        tf_parts = [s.post_tf[s.offsets[t] : s.offsets[t + 1]] for s, _, t, _, _ in holders]
        weights = self._per_posting(np.concatenate(tf_parts, dtype=np.float64), docs)
        weights *= idf
        return docs, weights

    def _per_posting(self, tf: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``tf * (k1 + 1) / (tf + norm)`` per posting as rank_bm25 evaluates it, in place in
        ``tf`` (float64), the norms those of the documents at ``positions``."""
        denominator = _length_norm(self._lengths.take(positions), self._avgdl, self.params)
        denominator += tf
        tf *= self.params.k1 + 1
        tf /= denominator
        return tf

    def _layout(self, term_id: int, holders: list[_Holder]) -> _Layout:
        """The term's pieces (global positions and pair codes, ``_Piece``), from the views'
        shared cache when its holders are the same segments at the same bases and table
        offsets; else made again from the pieces whose holders it still has in front (after
        a change, only the new segments' postings make a new piece) and the codes of the
        segments it still shares. A new last piece at least a ``_PIECE_RATIO``-th of the one
        before is joined to it, so a term keeps O(log n) pieces, each posting copied O(log n)
        times as segments arrive."""
        offsets = self._view_table()[1]
        key = tuple((h.segment, h.base, offsets[h.index]) for h in holders)
        found = self._layouts.get(term_id)
        if found is not None and found.holders == key:
            return found
        pieces: list[_Piece] = []
        used = 0  # holders of `key` covered by the pieces kept
        known: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(segment) -> codes, cells
        if found is not None:
            at = 0
            for piece in found.pieces:
                span = found.holders[at : at + piece.holders]
                if used == at and span == key[at : at + piece.holders]:
                    pieces.append(piece)
                    used += piece.holders
                else:
                    for j, (segment, _, offset) in enumerate(span):
                        known[id(segment)] = piece.holder_codes(j, offset)
                at += piece.holders
        if used < len(holders):
            rest = holders[used:]
            pieces.append(self._piece(rest, [offsets[h.index] for h in rest], known))
        while len(pieces) > 1 and (
            pieces[-1].size * _PIECE_RATIO >= pieces[-2].size or len(pieces) > _MAX_PIECES
        ):
            pieces[-2:] = [_joined(pieces[-2], pieces[-1], self._position_type)]
        layout = _Layout(key, tuple(pieces), self._generation)
        # An older view still serving a search does not take the entry back from a newer one.
        self._layouts.put(term_id, layout, layout.generation)
        return layout

    def _piece(
        self,
        holders: list[_Holder],
        offsets: list[int],
        known: dict[int, tuple[np.ndarray, np.ndarray]],
    ) -> _Piece:
        """One piece of the holders' postings: codes and cells used from `known` (by segment)
        or computed."""
        codes, cells = [], []
        for holder, offset in zip(holders, offsets, strict=True):
            got = known.get(id(holder.segment))
            if got is None:
                local = holder.segment.pair_codes(holder.local)
                got = local, _largest_cells(local, cast(PairGrid, holder.segment.pair_grid))
            codes.append(got[0])
            cells.append(got[1] + offset)
        bounds = np.zeros(len(holders) + 1, dtype=np.int64)
        np.cumsum([c.size for c in codes], out=bounds[1:])
        used = np.zeros(len(holders) + 1, dtype=np.int64)
        np.cumsum([c.size for c in cells], out=used[1:])
        return _Piece(
            self._positions(holders),
            codes[0] if len(codes) == 1 else np.concatenate(codes, dtype=np.result_type(*codes)),
            bounds,
            np.array(offsets, dtype=np.int64),
            np.concatenate(cells).astype(np.int64, copy=False),
            used,
        )

    def _weighed(self, layout: _Layout, idf: float) -> np.ndarray:
        """The numpy path's contributions of a layout's postings: rank_bm25's
        ``tf * (k1 + 1) / (tf + norm(dl))`` gathered from the view's pair table by code, then
        times idf; bit for bit what ``_computed`` gives, and what the compiled loops compute
        where they read a posting (``_Term``)."""
        table = self._view_table()[0]
        weights = np.empty(sum(piece.size for piece in layout.pieces))
        at = 0
        for piece in layout.pieces:
            for h in range(piece.holders):
                start, end = piece.bounds[h], piece.bounds[h + 1]
                cells = piece.codes[start:end].astype(np.int64)
                cells += piece.offsets[h]
                table.take(cells, out=weights[at + start : at + end])
            at += piece.size
        weights *= idf
        return weights

    def _view_table(self) -> tuple[np.ndarray, list[int]]:
        """``tf * (k1 + 1) / (tf + norm(dl))`` over every segment's pair grid (row-major),
        under this view's average length, concatenated in view order, and each segment's
        offset in it (a segment without a grid has no cells). Made once per view, on first
        use (two threads may both make it: the same values): a few hundred thousand cells at
        most per full-size segment."""
        found = self._table
        if found is None:
            tables, offsets, at = [], [], 0
            for segment in self.segments:
                offsets.append(at)
                grid = segment.pair_grid
                if grid is not None:
                    tf = grid.tf[:, np.newaxis]
                    table = tf * (self.params.k1 + 1)
                    table = table / (_length_norm(grid.lengths, self._avgdl, self.params) + tf)
                    tables.append(table.reshape(-1))
                    at += tables[-1].size
            table = np.concatenate(tables) if tables else np.zeros(0)
            found = self._table = (table, offsets)
        return found


def _searched(keys: int, postings: int) -> bool:
    """Whether `keys` documents are looked up in `postings` sorted ones by binary search (or
    through the dense buffer)."""
    return keys * _LOOKUP_COST < postings + _DENSE_LOOKUP_OVERHEAD


def _reusable(
    previous: SegmentedIndex | None,
    segments: tuple[Segment, ...],
    segment_deleted: list[np.ndarray],
) -> dict[int, _Reused]:
    """Per position of ``segments``, what ``previous`` composed for the same segment object:
    its local-to-global term ids, and its (live mask, document frequencies), ``same`` when the
    segment's deletions are the same (else they are a base to count from, ``_live_counts``).
    The new view keeps ``previous``'s vocabulary and ids (segments it had and this one has not
    leave terms without a live document behind). Empty when no segment is shared, or when a
    quarter of ``previous``'s vocabulary is such terms already: the view is then composed
    afresh."""
    if previous is None or not previous.segments:
        return {}
    if previous._stale_terms > _MAX_STALE_FRACTION * len(previous._vocab):
        return {}
    at = {id(segment): i for i, segment in enumerate(previous.segments)}
    reused = {}
    for position, segment in enumerate(segments):
        before = at.get(id(segment))
        if before is None:
            continue
        same = np.array_equal(segment_deleted[position], previous._segment_deleted[before])
        counts = (previous._lives[before], previous._df_parts[before])
        reused[position] = _Reused(previous._local_to_global[before], counts, same, before)
    return reused


class _Reused(NamedTuple):
    """What a view composed on ``previous`` takes from it for one segment (``_reusable``)."""

    local_to_global: np.ndarray
    counts: tuple[np.ndarray | None, np.ndarray]  # previous's live mask and frequencies
    same: bool  # the segment's deletions are previous's: ``counts`` are this view's too
    before: int  # the segment's position in ``previous``


class _Vocabulary:
    """Term -> global term id, grown along the views that follow one another (``successor``):
    a dict no view changes once it is made (``base``), shared by them, plus the terms added
    since, copied by each view. Copying the whole dict (tens of thousands of terms) for every
    view would be O(vocabulary) in every process after every change; the terms added since are a
    few hundred a change, folded into a new base once they pass an eighth of it.

    Ids are given in order of first sight, so iterating yields the terms by id."""

    __slots__ = ("_added", "_base")
    FOLD_FRACTION = 8

    def __init__(self, base: dict[str, int] | None = None, added: dict[str, int] | None = None):
        self._base: dict[str, int] = {} if base is None else base
        self._added: dict[str, int] = {} if added is None else added

    def successor(self) -> _Vocabulary:
        """A vocabulary with the same ids, which the next view grows. (A vocabulary's dicts
        change only while its own view is made: the terms it added can be a base.)"""
        if not self._base:
            return _Vocabulary(self._added)
        if len(self._added) > len(self._base) // self.FOLD_FRACTION:
            return _Vocabulary({**self._base, **self._added})
        return _Vocabulary(self._base, self._added.copy())

    def ids_of(self, terms: Sequence[str]) -> np.ndarray:
        """The id of each term, adding the ones not here yet (int64)."""
        base, added = self._base.get, self._added
        size = len(self)
        ids = []
        for term in terms:
            found = base(term)
            if found is None:
                found = added.setdefault(term, size)
                if found == size:  # a new term
                    size += 1
            ids.append(found)
        return np.array(ids, dtype=np.int64)

    def get(self, term: str) -> int | None:
        found = self._base.get(term)
        return self._added.get(term) if found is None else found

    def __getitem__(self, term: str) -> int:
        found = self.get(term)
        if found is None:
            raise KeyError(term)
        return found

    def __len__(self) -> int:
        return len(self._base) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from self._added

    def items(self) -> Iterator[tuple[str, int]]:
        yield from self._base.items()
        yield from self._added.items()

    @property
    def nbytes(self) -> int:
        """Both dicts' tables and their entries' ints (the terms' strings are the segments')."""
        return sys.getsizeof(self._base) + sys.getsizeof(self._added) + 28 * len(self)


def _document_frequencies(
    size: int,
    local_to_global: list[np.ndarray],
    parts: list[np.ndarray],
    previous: SegmentedIndex | None,
    reused: dict[int, _Reused],
) -> np.ndarray:
    """Per global term id, how many live documents hold it: the sum of the segments' parts.
    A view composed on ``previous`` (``reused`` not empty) starts from its sums, takes away
    the parts that changed or went and adds the new ones: a few segments' parts instead of
    all of them (integers: the same sums either way)."""
    df = np.zeros(size, dtype=np.int64)
    if not reused:
        for ids, part in zip(local_to_global, parts, strict=True):
            df[ids] += part  # ids are unique within a segment
        return df
    previous = cast(SegmentedIndex, previous)
    df[: previous._df.size] = previous._df
    kept = {r.before for position, r in reused.items() if parts[position] is r.counts[1]}
    for before, (ids, part) in enumerate(
        zip(previous._local_to_global, previous._df_parts, strict=True)
    ):
        if before not in kept:
            df[ids] -= part
    for position, (ids, part) in enumerate(zip(local_to_global, parts, strict=True)):
        found = reused.get(position)
        if found is None or found.before not in kept:
            df[ids] += part
    return df


def _live_counts(
    segment: Segment,
    live: np.ndarray | None,
    dead: _Dead | None,
    before: tuple[np.ndarray | None, np.ndarray] | None,
) -> np.ndarray:
    """``_live_frequencies``, or, without a record of the dead (``dead``), from ``before`` (a
    previous view's live mask and frequencies of the same segment) when that view's deletions
    are all still deleted and the documents deleted since are few: its frequencies minus the
    terms those documents hold, found in each term's postings by the compiled loops
    (``holders_by_term``). That is the writer of a change (the Celery worker): one pass reads
    every posting of a segment of up to ``MAX_SEGMENT_TOKENS`` at each change, where finding a
    small document's chunks takes, per term, one binary search and a short gallop per chunk
    (the bound in ``_minus_deleted_since`` chooses). Integer counts: the same whichever way."""
    if dead is None and before is not None and live is not None:
        counted = _minus_deleted_since(segment, live, *before)
        if counted is not None:
            return counted
    return _live_frequencies(segment, live, dead)


def _minus_deleted_since(
    segment: Segment, live: np.ndarray, live_before: np.ndarray | None, df_before: np.ndarray
) -> np.ndarray | None:
    if live_before is not None and np.any(live & ~live_before):
        return None  # a document deleted before is live again: not this view's predecessor
    since = np.flatnonzero(~live if live_before is None else live_before & ~live)
    if not since.size:
        return df_before
    compiled = kernels.get()
    if compiled is None or segment.post_docs.dtype != np.int32:
        return None
    terms, postings = len(segment.terms), segment.post_docs.size
    # The searches cost ~terms x (log2(postings per term) + documents) steps at worst
    # (``holders_by_term``); the pass, one per posting.
    steps = terms * (float(np.log2(max(2.0, postings / max(terms, 1)))) + since.size)
    if steps > postings:
        return None
    holding = np.empty(terms, dtype=np.int64)
    offsets = np.asarray(segment.offsets, dtype=np.int64)
    compiled.holders_by_term(offsets, segment.post_docs, since.astype(np.int64), holding)
    return df_before - holding


class _Split(NamedTuple):
    """A query's terms split for MaxScore: its distinct parts, each occurrence's distinct
    index (query order), the essential ones, the others' occurrences (query order), each
    other's largest contribution and their sum over those occurrences."""

    distinct: list[_Part]
    occurrences: list[int]
    essential: set[int]
    others: list[int]
    most: dict[int, float]
    alone: float


class _Holder(NamedTuple):
    """A segment holding a term: where it sits in the view and the term's id in it."""

    segment: Segment
    base: int
    local: int
    postings: int
    index: int  # the segment's position in the view


class _Piece(NamedTuple):
    """Postings of a run of a term's holders, as the compiled loops read them: a posting's
    contribution is ``table[offsets[h] + codes[i]] * idf`` for the holder h whose run
    ``bounds[h]:bounds[h + 1]`` holds it. Immutable, shared by the views that hold its
    segments at the same bases and table offsets."""

    positions: np.ndarray  # global document positions, ascending
    codes: np.ndarray  # per posting, its cell in its segment's pair grid (uint16 or int32)
    bounds: np.ndarray  # int64, holders + 1: each holder's run of postings
    offsets: np.ndarray  # int64, per holder, its segment's offset in the view's table
    # int64, view-table cells holding the largest value the postings read (``_largest_cells``;
    # None: the whole table)
    cells: np.ndarray | None
    cell_bounds: np.ndarray | None  # int64, holders + 1: each holder's run of ``cells``

    @classmethod
    def of_weights(cls, positions: np.ndarray) -> _Piece:
        """The piece of a term read from its own weights (the table): identity codes."""
        bounds = np.array([0, positions.size], dtype=np.int64)
        return cls(positions, _identity(positions.size), bounds, np.zeros(1, np.int64), None, None)

    @property
    def size(self) -> int:
        return self.positions.size

    @property
    def holders(self) -> int:
        return self.offsets.size

    def holder_codes(self, h: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Holder h's codes and its ``_largest_cells`` in its own grid (its table `offset`
        taken off), to make another piece of."""
        used, bounds = cast(np.ndarray, self.cells), cast(np.ndarray, self.cell_bounds)
        cells = used[bounds[h] : bounds[h + 1]] - offset
        return self.codes[self.bounds[h] : self.bounds[h + 1]], cells


class _Layout(NamedTuple):
    """A term's postings over a view's segments, the part of its contributions that stays the
    same from one view to the next: immutable, shared by the views that hold its segments."""

    holders: tuple[tuple[Segment, int, int], ...]  # (segment, base, table offset), view order
    pieces: tuple[_Piece, ...]
    generation: int  # of the view that made it


class _Term(NamedTuple):
    """A query term as the compiled loops read it in one view: its pieces, the table their
    codes index and its idf (a term computed per posting: its weights, identity codes, 1.0)."""

    pieces: tuple[_Piece, ...]
    table: np.ndarray
    idf: float

    def postings(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def most_cell(self, piece: _Piece) -> float:
        """The largest table value the piece's postings read (of the cells that can hold it)."""
        return self.table.max() if piece.cells is None else self.table.take(piece.cells).max()

    def add_to(self, compiled: ModuleType, buffer: np.ndarray) -> None:
        """Add every contribution into `buffer` at its position."""
        for piece in self.pieces:
            compiled.scatter_add(buffer, *piece[:4], self.table, self.idf)


def _largest_cells(codes: np.ndarray, grid: PairGrid) -> np.ndarray:
    """Of the grid cells `codes` use, those that can hold their largest value in any view: per
    term frequency used, the cell of the shortest document among its postings. A cell's value
    ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` never grows with dl (each float
    operation is monotonic in its operands), so each row's largest used value is there; a
    handful of cells per term instead of every cell used."""
    columns = grid.lengths.size
    used = np.bincount(codes, minlength=grid.tf.size * columns).reshape(-1, columns) > 0
    rows = np.flatnonzero(used.any(axis=1))
    return rows * columns + used[rows].argmax(axis=1)


def _joined(first: _Piece, second: _Piece, position_type: type) -> _Piece:
    """One piece of two consecutive ones (of layouts: with their cells)."""
    cells = cast(np.ndarray, first.cells), cast(np.ndarray, second.cells)
    cell_bounds = cast(np.ndarray, first.cell_bounds), cast(np.ndarray, second.cell_bounds)
    return _Piece(
        np.concatenate([first.positions, second.positions], dtype=position_type),
        np.concatenate(
            [first.codes, second.codes], dtype=np.result_type(first.codes, second.codes)
        ),
        np.concatenate([first.bounds, second.bounds[1:] + first.size]),
        np.concatenate([first.offsets, second.offsets]),
        np.concatenate(cells),
        np.concatenate([cell_bounds[0], cell_bounds[1][1:] + cells[0].size]),
    )


_IDENTITY = np.arange(1 << 16, dtype=np.int32)


def _identity(n: int) -> np.ndarray:
    """``arange(n)`` as int32 codes (a view of a shared array, grown when too short)."""
    global _IDENTITY
    identity = _IDENTITY
    if identity.size < n:
        identity = _IDENTITY = np.arange(max(n, 2 * identity.size), dtype=np.int32)
    return identity[:n]


_AnyPart = TypeVar("_AnyPart", tuple[np.ndarray, np.ndarray], "_Term")


def _part_bytes(part: _Part) -> int:
    return part[0].nbytes + part[1].nbytes + _ENTRY_OVERHEAD


def _piece_bytes(piece: _Piece) -> int:
    # Positions that are a view of a segment's postings (one holder starting the view) are
    # the segment's.
    arrays = [piece.codes, piece.bounds, piece.offsets, piece.cells, piece.cell_bounds]
    if piece.positions.base is None:
        arrays.append(piece.positions)
    return sum(a.nbytes for a in arrays if a is not None) + _ENTRY_OVERHEAD


def _layout_bytes(layout: _Layout) -> int:
    return sum(_piece_bytes(piece) for piece in layout.pieces) + _ENTRY_OVERHEAD


def _term_bytes(term: _Term) -> int:
    """A term's pieces (its layout's: counted again, since the term keeps them alive after
    the layout cache lets them go) and a per-posting term's weights."""
    own = term.table.nbytes if term.pieces[0].cells is None else 0
    return sum(_piece_bytes(piece) for piece in term.pieces) + own + _ENTRY_OVERHEAD


def _length_norm(lengths: np.ndarray, avgdl: float, params: BM25Params) -> np.ndarray:
    """``k1 * (1 - b + b * dl / avgdl)`` per length, as rank_bm25 evaluates it: the same
    expression wherever a view needs it, so every path gives the same bits."""
    return params.k1 * (1 - params.b + params.b * lengths / avgdl)


def _live_frequencies(segment: Segment, live: np.ndarray | None, dead: _Dead | None) -> np.ndarray:
    """Per local term of ``segment``, how many of its documents marked ``live`` hold it; from
    ``dead`` (local term ids, deleted documents holding each) when given and consistent, else
    by a pass over the postings."""
    df = np.diff(segment.offsets)
    if live is None:
        return df
    if dead is not None:
        terms, counts = dead
        # A record that cannot be this segment's (ids out of range, more deleted documents
        # holding a term than are deleted, a negative count) is ignored: count instead.
        deleted = int(live.size - np.count_nonzero(live))
        if terms.size == 0 or (
            terms.min() >= 0
            and terms.max() < df.size
            and counts.min() > 0
            and counts.max() <= deleted
        ):
            df = df.copy()
            df[terms] -= counts  # term ids are unique
            if not df.size or df.min() >= 0:
                return df
    return segment.document_frequencies(live)


def _floored_idf_by_df(df: np.ndarray, n: int, epsilon: float) -> np.ndarray:
    """rank_bm25's idf over the terms with a live posting (df > 0), per document frequency:
    entry d is the idf of a term d live documents hold (raw idf, a negative one replaced by
    epsilon * the mean raw idf of those terms); entry 0 is never read.

    The mean is summed per distinct document frequency, in ascending order, not term by term:
    the same to the last bit whatever order the vocabulary is in, so views of the same
    documents composed along different paths (afresh, on a previous view, after a merge) score
    identically. Summed term by term, a view composed on the one before after a merge (whose
    vocabulary keeps the order it grew in) could differ from a fresh one by an ulp, which the
    stateful exactness test, comparing them bit for bit, catches."""
    terms_with = np.bincount(df) if df.size else np.zeros(1, np.int64)
    terms_with[0] = 0  # terms without a live posting: not in the mean, never read
    distinct = np.flatnonzero(terms_with > 0)  # on booleans: numpy's fastest nonzero
    by_df = np.zeros(terms_with.size, dtype=np.float64)
    if not distinct.size:
        return by_df
    by_df[distinct] = np.log(n - distinct + 0.5) - np.log(distinct + 0.5)
    present = terms_with[distinct]
    mean = float((by_df[distinct] * present).sum()) / int(present.sum())
    # Only the distinct frequencies are read: the table is as long as the largest document
    # frequency (every chunk, for a word each one holds), and passes over it cost.
    negative = distinct[by_df[distinct] < 0]
    by_df[negative] = epsilon * mean
    return by_df
