"""A segmented BM25 view's terms as its query reads them, and their postings' layouts, shared by
the views that follow one another.

A term's layout (``Layout``) is a few pieces (``Piece``), each the global document positions of
a run of the segments holding it and, per posting, its code in its segment's grid of (term
frequency, document length) pairs (``Segment.pair_grid``); after a change only the new
segments' postings make a new piece. A view computes ``tf * (k1 + 1) / (tf + norm(dl))`` once
per grid cell (``Postings.view_table``), and the compiled loops compute a posting's
contribution as ``table[offset + code] * idf``: the same operations on the same values as per
posting, so the same bits, and a new view weighs no posting again.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple, cast

import numpy as np

from retrieval.bm25.segment import PairGrid, Segment
from retrieval.bm25.vocabulary import BM25Params, Composition
from retrieval.core.lru import ByteLRU

# Bytes of terms' pieces kept by the views of one knowledge base (and of each view's ``Term``s).
LAYOUT_CACHE_BYTES = 128 * 1024 * 1024
_ENTRY_OVERHEAD = 256  # two array headers and the LRU's slot, roughly
PIECE_RATIO = 4  # a new last piece at least this fraction of the one before is joined to it
MAX_PIECES = 6  # a term's, at most


class Holder(NamedTuple):
    """A segment holding a term: where it sits in the view and the term's id in it."""

    segment: Segment
    base: int
    local: int
    index: int  # the segment's position in the view


class Piece(NamedTuple):
    """Postings of a run of a term's holders: a posting's contribution is ``table[offsets[h] +
    codes[i]] * idf`` for the holder h whose run ``bounds[h]:bounds[h + 1]`` holds it."""

    positions: np.ndarray  # global document positions, ascending
    codes: np.ndarray  # per posting, its cell in its segment's pair grid (uint16 or int32)
    bounds: np.ndarray  # int64, holders + 1: each holder's run of postings
    offsets: np.ndarray  # int64, per holder, its segment's offset in the view's table
    cells: np.ndarray | None  # int64, ``_largest_cells`` in the view table (None: all of it)
    cell_bounds: np.ndarray | None  # int64, holders + 1: each holder's run of ``cells``

    @classmethod
    def of_weights(cls, positions: np.ndarray) -> Piece:
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


class Layout(NamedTuple):
    """A term's postings over a view's segments: immutable, shared by the views that hold
    them."""

    holders: tuple[tuple[Segment, int, int], ...]  # (segment, base, table offset), view order
    pieces: tuple[Piece, ...]
    generation: int  # of the view that made it


class Term(NamedTuple):
    """A query term in one view: its pieces, the table their codes index and its idf (a term
    computed per posting: its weights, identity codes, 1.0)."""

    pieces: tuple[Piece, ...]
    table: np.ndarray
    idf: float

    def postings(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def most_cell(self, piece: Piece) -> float:
        """The largest table value the piece's postings read (of the cells that can hold it)."""
        return self.table.max() if piece.cells is None else self.table.take(piece.cells).max()

    def add_to(self, compiled: ModuleType, buffer: np.ndarray) -> None:
        """Add every contribution into `buffer` at its position."""
        for piece in self.pieces:
            compiled.scatter_add(buffer, *piece[:4], self.table, self.idf)


class Postings:
    """A view's ``Term``s, kept in an LRU, and their layouts, in an LRU shared with the view
    before when it keeps that one's vocabulary (keyed by global term id, versioned by the
    generation of the view that made them)."""

    def __init__(
        self,
        composition: Composition,
        params: BM25Params,
        before: Postings | None,
        layout_cache_bytes: int,
    ) -> None:
        self._composition = composition
        self._params = params
        self._terms: ByteLRU[int, Term] = ByteLRU(layout_cache_bytes, _term_bytes)
        self.layouts: ByteLRU[int, Layout] = (
            before.layouts if before is not None else ByteLRU(layout_cache_bytes, _layout_bytes)
        )
        self.generation = before.generation + 1 if before is not None else 0
        self._table: tuple[np.ndarray, list[int]] | None = None

    def terms(self, query: Sequence[str], term_ids: list[int]) -> list[Term]:
        """The ``Term`` of every known query token occurrence, in query order (a repeated
        token's the same object), their term ids appended to `term_ids`."""
        if isinstance(query, str):
            raise TypeError("query must be a sequence of tokens, not a string")
        cache: dict[str, Term | None] = {}
        found = []
        for token in query:
            if token not in cache:
                cache[token] = self.term(token)
            term = cache[token]
            if term is not None:
                found.append(term)
                term_ids.append(self._composition.vocab[token])
        return found

    def term(self, token: str) -> Term | None:
        """The token's ``Term``: its layout's pieces with the view's table and its idf, or,
        when a segment holding it has no pair grid, its weights computed per posting."""
        composition = self._composition
        term_id = composition.vocab.get(token)
        if term_id is None or not composition.df[term_id]:
            return None
        found = self._terms.get(term_id)
        if found is not None:
            return found
        holders = self._holders(token)
        if all(h.segment.pair_grid is not None for h in holders):
            layout = self._layout(term_id, holders)
            table = self.view_table()[0]
            term = Term(layout.pieces, table, float(composition.idf_of(term_id)))
        else:
            positions, weights = self._computed(holders, composition.idf_of(term_id))
            term = Term((Piece.of_weights(positions),), weights, 1.0)
        self._terms.put(term_id, term)
        return term

    def _holders(self, term: str) -> list[Holder]:
        """Each segment holding the term, in view order."""
        found = []
        composition = self._composition
        for index, (base, segment) in enumerate(
            zip(composition.bases, composition.segments, strict=False)
        ):
            local = segment.vocab.get(term)
            if local is not None:
                found.append(Holder(segment, base, local, index))
        return found

    def _positions(self, holders: Sequence[Holder]) -> np.ndarray:
        """The global document positions of the holders' postings, ascending: a segment's own
        array (no copy) when it is the only holder and starts the view."""
        position_type = self._composition.position_type
        parts = []
        for segment, base, local, _ in holders:
            start, end = segment.offsets[local], segment.offsets[local + 1]
            docs = segment.post_docs[start:end]
            parts.append(docs if base == 0 else docs + position_type(base))
        if len(parts) == 1:
            return parts[0].astype(position_type, copy=False)
        return np.concatenate(parts, dtype=position_type)

    def _computed(self, holders: list[Holder], idf: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions and contributions straight from the postings, as rank_bm25 evaluates
        them."""
        composition, params = self._composition, self._params
        docs = self._positions(holders)
        tf_parts = [s.post_tf[s.offsets[t] : s.offsets[t + 1]] for s, _, t, _ in holders]
        weights = np.concatenate(tf_parts, dtype=np.float64)
        denominator = _length_norm(composition.lengths.take(docs), composition.avgdl, params)
        denominator += weights
        weights *= params.k1 + 1
        weights /= denominator
        weights *= idf
        return docs, weights

    def _layout(self, term_id: int, holders: list[Holder]) -> Layout:
        """The term's layout: the cached one when its holders are the same segments at the
        same bases and table offsets; else its leading pieces still valid kept, the rest made
        (from the codes already computed where it can). A new last piece at least a
        ``PIECE_RATIO``-th of the one before is joined to it: O(log n) pieces a term."""
        offsets = self.view_table()[1]
        key = tuple((h.segment, h.base, offsets[h.index]) for h in holders)
        found = self.layouts.get(term_id)
        if found is not None and found.holders == key:
            return found
        pieces: list[Piece] = []
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
            pieces[-1].size * PIECE_RATIO >= pieces[-2].size or len(pieces) > MAX_PIECES
        ):
            pieces[-2:] = [_joined(pieces[-2], pieces[-1], self._composition.position_type)]
        layout = Layout(key, tuple(pieces), self.generation)
        # An older view still serving a search does not take the entry back from a newer one.
        self.layouts.put(term_id, layout, layout.generation)
        return layout

    def _piece(
        self,
        holders: list[Holder],
        offsets: list[int],
        known: dict[int, tuple[np.ndarray, np.ndarray]],
    ) -> Piece:
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
        return Piece(
            self._positions(holders),
            codes[0] if len(codes) == 1 else np.concatenate(codes, dtype=np.result_type(*codes)),
            bounds,
            np.array(offsets, dtype=np.int64),
            np.concatenate(cells).astype(np.int64, copy=False),
            used,
        )

    def view_table(self) -> tuple[np.ndarray, list[int]]:
        """``tf * (k1 + 1) / (tf + norm(dl))`` over every segment's pair grid (row-major),
        concatenated in view order, and each segment's offset in it; made on first use."""
        found = self._table
        if found is None:
            params, avgdl = self._params, self._composition.avgdl
            tables, offsets, at = [], [], 0
            for segment in self._composition.segments:
                offsets.append(at)
                grid = segment.pair_grid
                if grid is not None:
                    tf = grid.tf[:, np.newaxis]
                    table = tf * (params.k1 + 1)
                    table = table / (_length_norm(grid.lengths, avgdl, params) + tf)
                    tables.append(table.reshape(-1))
                    at += tables[-1].size
            table = np.concatenate(tables) if tables else np.zeros(0)
            found = self._table = (table, offsets)
        return found


def _largest_cells(codes: np.ndarray, grid: PairGrid) -> np.ndarray:
    """Of the grid cells `codes` use, those that can hold their largest value in any view: per
    term frequency used, the cell of the shortest document (a value never grows with dl)."""
    columns = grid.lengths.size
    used = np.bincount(codes, minlength=grid.tf.size * columns).reshape(-1, columns) > 0
    rows = np.flatnonzero(used.any(axis=1))
    return rows * columns + used[rows].argmax(axis=1)


def _joined(first: Piece, second: Piece, position_type: type) -> Piece:
    """One piece of two consecutive ones (of layouts: with their cells)."""
    cells = cast(np.ndarray, first.cells), cast(np.ndarray, second.cells)
    cell_bounds = cast(np.ndarray, first.cell_bounds), cast(np.ndarray, second.cell_bounds)
    return Piece(
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


def _piece_bytes(piece: Piece) -> int:
    # Positions that are a view of a segment's postings are the segment's.
    arrays = [piece.codes, piece.bounds, piece.offsets, piece.cells, piece.cell_bounds]
    if piece.positions.base is None:
        arrays.append(piece.positions)
    return sum(a.nbytes for a in arrays if a is not None) + _ENTRY_OVERHEAD


def _layout_bytes(layout: Layout) -> int:
    return sum(_piece_bytes(piece) for piece in layout.pieces) + _ENTRY_OVERHEAD


def _term_bytes(term: Term) -> int:
    """A term's pieces (its layout's too: the term keeps them alive) and own weights."""
    own = term.table.nbytes if term.pieces[0].cells is None else 0
    return sum(_piece_bytes(piece) for piece in term.pieces) + own + _ENTRY_OVERHEAD


def _length_norm(lengths: np.ndarray, avgdl: float, params: BM25Params) -> np.ndarray:
    """``k1 * (1 - b + b * dl / avgdl)`` per length, as rank_bm25 evaluates it (every path
    uses this one expression, so gives the same bits)."""
    return params.k1 * (1 - params.b + params.b * lengths / avgdl)
