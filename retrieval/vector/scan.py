"""A knowledge base's vectors in memory and their search. Rows are unit length (a zero vector
scores 0); ties go by chunk id, as in SQL. An IVF base's rows are bounded on their int8 codes
and only those that can reach the top k are scored: the same top k as scoring them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from django.conf import settings
from threadpoolctl import ThreadpoolController

from retrieval.core import stamps
from retrieval.vector import kernels
from retrieval.vector.ivf import SLACK_PER_L1, Ivf

_HEAD = 4  # rows scored exactly to set the floor, per row wanted (``Part._bounded``)
_ALL_LIVE = np.zeros(0, dtype=np.bool_)  # ``upper_bounds``: no live mask


@dataclass(frozen=True)
class Part:
    """Rows of a matrix, memory-mapped from a host file when shared; ids ascend unless ``order``."""

    ids: np.ndarray  # int64
    vectors: np.ndarray  # (len(ids), dimensions): float32, float16 in an IVF base
    documents: np.ndarray | None = None  # int64
    live: np.ndarray | None = None  # bool, searchable rows (None: all); never set in place
    shared: bool = False
    order: np.ndarray | None = None  # int64: row positions by ascending id (None: ids ascend)
    ivf: Ivf | None = None  # the lists the rows are stored by

    def __len__(self) -> int:
        return self._live_rows

    @cached_property
    def _live_rows(self) -> int:
        return len(self.ids) if self.live is None else int(self.live.sum())

    @property
    def private_bytes(self) -> int:
        arrays = [self.live] if self.shared else [self.ids, self.vectors, self.documents, self.live]
        return int(sum(a.nbytes for a in arrays if a is not None))

    @property
    def total_bytes(self) -> int:
        arrays = [self.ids, self.vectors, self.documents, self.live, self.order]
        if self.ivf is not None:
            arrays += [self.ivf.centroids, self.ivf.offsets, self.ivf.codes, self.ivf.scales]
        return int(sum(a.nbytes for a in arrays if a is not None))

    def rows(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """Rows to score: live ones, of ``allowed`` ids only when given (None: all rows)."""
        if allowed is None:
            return None if self.live is None else np.flatnonzero(self.live)
        wanted = np.unique(np.asarray(allowed, dtype=np.int64))
        at = np.searchsorted(self.ids, wanted, sorter=self.order)
        inside = at < len(self.ids)
        rows = at[inside] if self.order is None else self.order[at[inside]]
        rows = rows[self.ids[rows] == wanted[inside]]
        if self.order is not None:
            rows.sort()  # read the mapped rows in file order
        return rows if self.live is None else rows[self.live[rows]]

    def probed(self, query: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(ids, scores) of the live rows of the probed lists that can be among the ``limit``
        best, the rows scanned (dead ones too), and whether any were bounded on codes."""
        runs = self.ivf.runs(query)
        if not runs:
            return np.empty(0, np.int64), np.empty(0, np.float32), 0, False
        starts = np.array([start for start, _ in runs], dtype=np.int64)
        stops = np.array([stop for _, stop in runs], dtype=np.int64)
        scanned = int((stops - starts).sum())
        return (*self._bounded(query, starts, stops, limit), scanned, True)

    def scored(
        self, query: np.ndarray, rows: np.ndarray, limit: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(ids, scores) of the given live rows (ascending positions) that can be among the
        ``limit`` best, and whether they were bounded on codes (an IVF base's rows are)."""
        if self.ivf is None or not len(rows):
            return self.ids[rows], self.vectors[rows] @ query, False
        return (*self._bounded(query, rows, rows + 1, limit), True)

    def _bounded(
        self, query: np.ndarray, starts: np.ndarray, stops: np.ndarray, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids, exact scores) of the live rows of the runs ``starts[i]:stops[i]`` whose bound
        reaches ``floor``, the ``limit``-th best exact score of the ``_HEAD * limit`` rows of
        highest bound, which each of the true best ``limit`` reaches: a superset of them."""
        scanned = int((stops - starts).sum())
        rows, bounds = np.empty(scanned, np.int64), np.empty(scanned, np.float32)
        live = _ALL_LIVE if self.live is None else self.live
        slack = np.float32(SLACK_PER_L1 * float(np.abs(query).sum()))
        codes, scales, loops = self.ivf.codes, self.ivf.scales, kernels.get()
        n = loops.upper_bounds(codes, scales, query, slack, starts, stops, live, rows, bounds)
        rows, bounds = rows[:n], bounds[:n]
        head = _HEAD * limit
        if n > head:
            best = np.argpartition(bounds, n - head)[n - head :]
            exact = self.vectors[rows[best]] @ query
            floor = np.partition(exact, head - limit)[head - limit]
            rows = rows[bounds >= floor]
        return self.ids[rows], self.vectors[rows] @ query


@dataclass(frozen=True)
class VectorMatrix:
    """One knowledge base's searchable vectors at one ``index_version``: a base part (shared
    when it is a host file) and the rows changed since, private to this process."""

    parts: tuple[Part, ...]
    version: int
    stamp: tuple  # the knowledge base row's (updated_at, provider, model, dimensions)
    processed: stamps.Stamps = field(default_factory=stamps.Stamps.empty)  # its documents
    base_name: str = ""  # the host file of the shared part, if any
    base_version: int = -1  # the version that file was written at

    @classmethod
    def of(
        cls,
        ids: np.ndarray,
        vectors: np.ndarray,
        version: int,
        stamp: tuple,
        documents: np.ndarray | None = None,
        processed: stamps.Stamps | None = None,
    ) -> VectorMatrix:
        """One private part (ids ascending)."""
        part = Part(np.asarray(ids, dtype=np.int64), vectors, documents)
        return cls((part,), version, stamp, processed or stamps.Stamps.empty())

    @property
    def nbytes(self) -> int:
        """What this process holds privately (a shared part's pages are the host's)."""
        return sum(part.private_bytes for part in self.parts)

    @property
    def total_bytes(self) -> int:
        """Every array of the matrix, private or shared: its size as one copy."""
        return sum(part.total_bytes for part in self.parts)

    @property
    def dimensions(self) -> int:
        return int(self.stamp[3] or self.parts[0].vectors.shape[1])

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def live_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return live_rows_of(self.parts, self.dimensions)

    def search(
        self, query_vector, limit: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``limit`` (chunk id, similarity), best first; of ``allowed`` ids only if given."""
        return self.search_traced(query_vector, limit, allowed)[0]

    def search_traced(
        self, query_vector, limit: int, allowed: np.ndarray | None = None
    ) -> tuple[list[tuple[int, float]], dict[str, Any]]:
        """``search``, and how: ``{"index": "exact"}`` or ``{"index": "ivf", "lists", "probes",
        "rows_scanned"}``, with ``"codes": "int8"`` when rows were bounded on codes."""
        query = np.array(query_vector, dtype=np.float32)  # a copy: normalised in place below
        if query.shape != (self.dimensions,):
            raise ValueError(
                f"query has {query.size} dimensions, the knowledge base {self.dimensions}"
            )
        how: dict[str, Any] = {"index": "exact"}
        norm = float(np.linalg.norm(query))
        if limit <= 0 or norm == 0.0 or not len(self):
            return [], how
        query /= norm
        found_ids, found_scores, scanned = [], [], 0
        with blas_threads():
            for part in self.parts:
                by_codes = False
                if allowed is not None:
                    ids, scores, by_codes = part.scored(query, part.rows(allowed), limit)
                elif part.ivf is not None:
                    ids, scores, rows, by_codes = part.probed(query, limit)
                    scanned += rows
                    probes = min(part.ivf.probes, part.ivf.lists)
                    how = {"index": "ivf", "lists": part.ivf.lists, "probes": probes}
                else:
                    # Every row, dead ones too: one product over the mapped matrix, no copy.
                    ids, scores = part.ids, part.vectors @ query
                    scanned += len(part.ids)
                    if part.live is not None:
                        ids, scores = ids[part.live], scores[part.live]
                found_ids.append(ids)
                found_scores.append(scores)
                if by_codes:
                    how["codes"] = "int8"
        if how["index"] == "ivf":
            how["rows_scanned"] = scanned
        return top(np.concatenate(found_ids), np.concatenate(found_scores), limit), how


_blas: ThreadpoolController | None = None


def blas_threads():
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas.limit(limits=settings.VECTOR_SCAN_THREADS, user_api="blas")


def top(ids: np.ndarray, scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best (id, score), highest first, ties by id; every row tied with the last
    place is considered, so the cut never depends on argpartition's order."""
    if len(scores) > limit:
        threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
        keep = np.flatnonzero(scores >= threshold)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:limit]
    return [(int(i), float(s)) for i, s in zip(ids[order], scores[order], strict=True)]


def live_rows_of(
    parts: list[Part] | tuple[Part, ...], dimensions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids ascending, document ids, float32 vectors) of the parts' live rows, copied out."""
    ids, documents, vectors = [np.empty(0, np.int64)], [np.empty(0, np.int64)], []
    for part in parts:
        rows = part.rows(None)
        take = slice(None) if rows is None else rows
        ids.append(part.ids[take])
        owners = part.documents
        documents.append(owners[take] if owners is not None else np.zeros(len(ids[-1]), np.int64))
        vectors.append(np.asarray(part.vectors[take], dtype=np.float32))
    all_ids = np.concatenate(ids)
    order = np.argsort(all_ids, kind="stable")
    stacked = np.concatenate([np.empty((0, dimensions), np.float32), *vectors])
    return all_ids[order], np.concatenate(documents)[order], stacked[order]
