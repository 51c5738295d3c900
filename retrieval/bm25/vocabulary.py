"""What a segmented BM25 view composes over its segments minus deletions, once when it is made:
N and avgdl of the live documents, every term's live document frequency, and the idfs with
rank_bm25's epsilon floor, per document frequency.

The vocabulary maps terms to global ids (``Vocabulary``); each segment keeps an array mapping
its local term ids to global ones. A view composed on the one before reuses what that one
composed for the segments still here (``reusable``). Integer counts throughout: the same sums
whichever way they are reached.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from retrieval.bm25 import kernels
from retrieval.bm25.segment import Segment

Dead = tuple[np.ndarray, np.ndarray]  # a segment's local term ids, deleted documents holding each
MAX_STALE_FRACTION = 0.25  # of the vocabulary, before a view stops reusing the one before


@dataclass(frozen=True)
class BM25Params:
    """BM25 Okapi tuning; the defaults are rank_bm25's."""

    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25

    def __post_init__(self) -> None:
        # Outside these ranges the length normaliser can reach 0 and a score divide by zero.
        if not self.k1 >= 0 or not 0 <= self.b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got {self}")


class Composition(NamedTuple):
    """What a view composed over its segments and their deletions; immutable once made (the view
    may serve searches in several threads, and the next view reads it)."""

    segments: tuple[Segment, ...]
    segment_deleted: list[np.ndarray]  # per segment, ids deleted from it (sorted, unique)
    bases: list[int]  # per segment, the global position of its first document
    position_type: type  # of global document positions: int32 while they fit, else int64
    ids: np.ndarray  # every stored document's id, in view order (deleted ones too)
    lives: list[np.ndarray | None]  # per segment, its live mask (None: every document live)
    dead: np.ndarray | None  # per stored document, whether it is deleted (None: none is)
    lengths: np.ndarray  # per stored document, its tokens (deleted ones too: never scored)
    n: int  # live documents
    avgdl: float  # their average length
    vocab: Vocabulary
    local_to_global: list[np.ndarray]  # per segment, its local term ids' global ones
    df_parts: list[np.ndarray]  # per segment, its live documents holding each local term
    df: np.ndarray  # per global term id, live documents holding it
    idf_by_df: np.ndarray  # per document frequency (``floored_idf_by_df``), not per term
    stale_terms: int  # vocabulary entries no live document holds (``reusable``)
    follows: bool  # composed on the view before, whose vocabulary and term ids it keeps

    def idf_of(self, term_id: int) -> np.float64:
        """The idf used in scoring of a term some live document holds."""
        return self.idf_by_df[self.df[term_id]]


def compose(
    segments: tuple[Segment, ...],
    deleted: np.ndarray,
    deleted_per_segment: Sequence[np.ndarray] | None,
    dead_frequencies: Sequence[Dead | None] | None,
    epsilon: float,
    previous: Composition | None,
) -> Composition:
    """The composition of ``segments`` minus their deletions, on ``previous`` when it shares
    segments (``reusable``). ``dead_frequencies``: see ``SegmentedIndex``."""
    if deleted_per_segment is not None and len(deleted_per_segment) != len(segments):
        raise ValueError("deleted_per_segment needs one array per segment")
    segment_deleted = _segment_deletions(segments, deleted, deleted_per_segment)
    sizes = [len(s) for s in segments]
    bases = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    position_type = np.int32 if bases[-1] < 2**31 else np.int64
    ids = np.concatenate([s.doc_ids for s in segments]) if segments else np.empty(0, np.int64)
    if dead_frequencies is not None and len(dead_frequencies) != len(segments):
        raise ValueError("dead_frequencies needs one entry per segment")
    reused = reusable(previous, segments, segment_deleted)
    lives, dfs = _live_counts_of(segments, segment_deleted, reused, dead_frequencies)
    dead = _dead_mask(segments, lives)
    lengths, n, avgdl = _live_lengths(segments, dead)
    vocab = previous.vocab.successor() if reused and previous is not None else Vocabulary()
    local_to_global = _global_ids(vocab, segments, reused)
    df = _document_frequencies(len(vocab), local_to_global, dfs, previous, reused)
    return Composition(
        segments=segments,
        segment_deleted=segment_deleted,
        bases=bases.tolist(),
        position_type=position_type,
        ids=ids,
        lives=lives,
        dead=dead,
        lengths=lengths,
        n=n,
        avgdl=avgdl,
        vocab=vocab,
        local_to_global=local_to_global,
        df_parts=dfs,
        df=df,
        idf_by_df=floored_idf_by_df(df, n, epsilon),
        stale_terms=int(np.count_nonzero(df == 0)),
        follows=bool(reused),
    )


def _segment_deletions(
    segments: tuple[Segment, ...],
    deleted: np.ndarray,
    deleted_per_segment: Sequence[np.ndarray] | None,
) -> list[np.ndarray]:
    """Ids deleted from each segment (sorted, unique): the view's and the segment's own."""
    return [
        deleted
        if deleted_per_segment is None or (not len(deleted_per_segment[i]) and not deleted.size)
        else np.union1d(deleted, deleted_per_segment[i])
        for i in range(len(segments))
    ]


def _live_of(segment: Segment, deleted: np.ndarray) -> np.ndarray | None:
    """The segment's live mask, or None when none of its documents is deleted."""
    if not deleted.size or not len(segment):
        return None
    live = ~segment.holds(deleted)
    return None if live.all() else live


def _live_counts_of(
    segments: tuple[Segment, ...],
    segment_deleted: list[np.ndarray],
    reused: dict[int, Reused],
    dead_frequencies: Sequence[Dead | None] | None,
) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
    """Per segment, its live mask and live documents per local term (``live_counts``)."""
    lives, dfs = [], []
    for i, segment in enumerate(segments):
        kept = reused.get(i)
        counts = kept.counts if kept is not None and kept.same else None
        if counts is None:
            live = _live_of(segment, segment_deleted[i])
            dead = dead_frequencies[i] if dead_frequencies is not None else None
            before = kept.counts if kept is not None else None
            counts = (live, live_counts(segment, live, dead, before))
        lives.append(counts[0])
        dfs.append(counts[1])
    return lives, dfs


def _dead_mask(segments: tuple[Segment, ...], lives: list[np.ndarray | None]) -> np.ndarray | None:
    """Per stored document, whether it is deleted; None when every document is live."""
    if all(live is None for live in lives):
        return None
    return np.concatenate(
        [
            np.zeros(len(s), bool) if live is None else ~live
            for s, live in zip(segments, lives, strict=True)
        ]
    )


def _live_lengths(
    segments: tuple[Segment, ...], dead: np.ndarray | None
) -> tuple[np.ndarray, int, float]:
    """Every stored document's length, and the live documents' count and average length (1.0,
    never read, without tokens)."""
    lengths = np.concatenate([s.lengths for s in segments]) if segments else np.empty(0, np.int64)
    total = int(lengths.sum())
    n = int(lengths.size)
    if dead is not None:
        total -= int(lengths[dead].sum())
        n -= int(np.count_nonzero(dead))
    return lengths, n, total / n if total else 1.0


def _global_ids(
    vocab: Vocabulary, segments: tuple[Segment, ...], reused: dict[int, Reused]
) -> list[np.ndarray]:
    """Per segment, the global ids of its local terms (added to ``vocab`` when new)."""
    local_to_global: list[np.ndarray] = []
    for i, segment in enumerate(segments):
        ids = reused[i].local_to_global if i in reused else None
        if ids is None:
            ids = vocab.ids_of(segment.terms)
        local_to_global.append(ids)
    return local_to_global


def dead_frequencies_of(composition: Composition) -> list[Dead]:
    """Per segment, (local term ids, how many of its deleted documents hold each)."""
    found = []
    for segment, df in zip(composition.segments, composition.df_parts, strict=True):
        dead = np.diff(segment.offsets) - df
        terms = np.flatnonzero(dead)
        found.append((terms.astype(np.int32), dead[terms].astype(np.int32)))
    return found


def reusable(
    previous: Composition | None,
    segments: tuple[Segment, ...],
    segment_deleted: list[np.ndarray],
) -> dict[int, Reused]:
    """Per position of ``segments``, what ``previous`` composed for the same segment object.
    Empty (the view composed afresh) when no segment is shared, or when more than
    ``MAX_STALE_FRACTION`` of ``previous``'s vocabulary has no live document."""
    if previous is None or not previous.segments:
        return {}
    if previous.stale_terms > MAX_STALE_FRACTION * len(previous.vocab):
        return {}
    at = {id(segment): i for i, segment in enumerate(previous.segments)}
    reused = {}
    for position, segment in enumerate(segments):
        before = at.get(id(segment))
        if before is None:
            continue
        same = np.array_equal(segment_deleted[position], previous.segment_deleted[before])
        counts = (previous.lives[before], previous.df_parts[before])
        reused[position] = Reused(previous.local_to_global[before], counts, same, before)
    return reused


class Reused(NamedTuple):
    """What a view composed on ``previous`` takes from it for one segment (``reusable``)."""

    local_to_global: np.ndarray
    counts: tuple[np.ndarray | None, np.ndarray]  # previous's live mask and frequencies
    same: bool  # the segment's deletions are previous's: ``counts`` are this view's too
    before: int  # the segment's position in ``previous``


class Vocabulary:
    """Term -> global term id, grown along the views that follow one another (``successor``):
    a dict no view changes once made (``base``), shared by them, plus the terms added since,
    copied by each view and folded into a new base once they pass an eighth of it. Ids are
    given in order of first sight."""

    __slots__ = ("_added", "_base")
    FOLD_FRACTION = 8

    def __init__(self, base: dict[str, int] | None = None, added: dict[str, int] | None = None):
        self._base: dict[str, int] = {} if base is None else base
        self._added: dict[str, int] = {} if added is None else added

    def successor(self) -> Vocabulary:
        """A vocabulary with the same ids, which the next view grows."""
        if not self._base:
            return Vocabulary(self._added)
        if len(self._added) > len(self._base) // self.FOLD_FRACTION:
            return Vocabulary({**self._base, **self._added})
        return Vocabulary(self._base, self._added.copy())

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
    previous: Composition | None,
    reused: dict[int, Reused],
) -> np.ndarray:
    """Per global term id, how many live documents hold it (on ``previous``: its sums minus
    the parts that changed or went plus the new ones)."""
    df = np.zeros(size, dtype=np.int64)
    if not reused or previous is None:
        for ids, part in zip(local_to_global, parts, strict=True):
            df[ids] += part  # ids are unique within a segment
        return df
    df[: previous.df.size] = previous.df
    kept = {r.before for position, r in reused.items() if parts[position] is r.counts[1]}
    for before, (ids, part) in enumerate(
        zip(previous.local_to_global, previous.df_parts, strict=True)
    ):
        if before not in kept:
            df[ids] -= part
    for position, (ids, part) in enumerate(zip(local_to_global, parts, strict=True)):
        found = reused.get(position)
        if found is None or found.before not in kept:
            df[ids] += part
    return df


def live_counts(
    segment: Segment,
    live: np.ndarray | None,
    dead: Dead | None,
    before: tuple[np.ndarray | None, np.ndarray] | None,
) -> np.ndarray:
    """``live_frequencies``, or, without ``dead``, ``before``'s (a previous view's live mask
    and frequencies of the same segment) minus the terms of the few documents deleted since
    (``holders_by_term``) when that is cheaper than a pass over every posting."""
    if dead is None and before is not None and live is not None:
        counted = _minus_deleted_since(segment, live, *before)
        if counted is not None:
            return counted
    return live_frequencies(segment, live, dead)


def _minus_deleted_since(
    segment: Segment, live: np.ndarray, live_before: np.ndarray | None, df_before: np.ndarray
) -> np.ndarray | None:
    if live_before is not None and np.any(live & ~live_before):
        return None  # a document deleted before is live again: not this view's predecessor
    since = np.flatnonzero(~live if live_before is None else live_before & ~live)
    if not since.size:
        return df_before
    if segment.post_docs.dtype != np.int32:
        return None
    terms, postings = len(segment.terms), segment.post_docs.size
    # ``holders_by_term``'s steps at worst, against the pass's one per posting.
    steps = terms * (float(np.log2(max(2.0, postings / max(terms, 1)))) + since.size)
    if steps > postings:
        return None
    holding = np.empty(terms, dtype=np.int64)
    offsets = np.asarray(segment.offsets, dtype=np.int64)
    kernels.get().holders_by_term(offsets, segment.post_docs, since.astype(np.int64), holding)
    return df_before - holding


def live_frequencies(segment: Segment, live: np.ndarray | None, dead: Dead | None) -> np.ndarray:
    """Per local term of ``segment``, how many of its documents marked ``live`` hold it; from
    ``dead`` (local term ids, deleted documents holding each) when given and consistent, else
    by a pass over the postings."""
    df = np.diff(segment.offsets)
    if live is None:
        return df
    if dead is not None:
        terms, counts = dead
        # A record that cannot be this segment's is ignored: count instead.
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


def floored_idf_by_df(df: np.ndarray, n: int, epsilon: float) -> np.ndarray:
    """rank_bm25's idf per document frequency: entry d is the idf of a term d live documents
    hold (a negative one replaced by epsilon * the mean raw idf of the terms with df > 0);
    entry 0 is never read. The mean is summed per distinct df in ascending order: the same bits
    whatever order the vocabulary is in, so views composed along different paths agree."""
    terms_with = np.bincount(df) if df.size else np.zeros(1, np.int64)
    terms_with[0] = 0  # terms without a live posting: not in the mean, never read
    distinct = np.flatnonzero(terms_with > 0)  # on booleans: numpy's fastest nonzero
    by_df = np.zeros(terms_with.size, dtype=np.float64)
    if not distinct.size:
        return by_df
    by_df[distinct] = np.log(n - distinct + 0.5) - np.log(distinct + 0.5)
    present = terms_with[distinct]
    mean = float((by_df[distinct] * present).sum()) / int(present.sum())
    negative = distinct[by_df[distinct] < 0]
    by_df[negative] = epsilon * mean
    return by_df
