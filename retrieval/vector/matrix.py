"""The vector leg's exact path: a knowledge base's vectors as one matrix in memory (a file
mapped once per host, see ``retrieval.vector.hostfile``, plus this process's changed rows).

Why not always pgvector's HNSW index: an approximate graph misses part of the exact top 10 (how
much depends on the vectors and ``ef_search``), and raising its recall costs build time and
query time; pgvector's own exact scan detoasts and casts every vector. The same exact scan as
one float32 matrix-vector product in numpy reads each row once at memory speed, with recall 1
by construction (measurements: docs/performance.md, "Vector recall"). So a knowledge base whose
matrix fits ``VECTOR_HOST_MAX_BYTES`` (``VECTOR_L1_MAX_BYTES`` without host files) is searched
exactly here; a larger one goes to HNSW (``retrieval.vector.hnsw``), whose index is still kept
for every dimension in use; the choice is ``retrieval.vector.policy``. The scan grows with the
rows, and past ~300k chunks it outgrows a search's latency budget: a host base of
``VECTOR_IVF_MIN_ROWS`` rows or more carries an inverted file (``retrieval.vector.ivf``), and a
search without filters scores only the rows of the lists nearest to the query (contiguous
slices of the mapped matrix, as many as the base's calibration found for recall@10
``VECTOR_IVF_TARGET_RECALL``), then the private rows changed since, exactly. A filtered search
scores its allowed rows exactly, on any base: they are few, and recall stays 1. Measurements:
docs/performance.md, "Which path serves which size".

Contents: the chunks of ``ready`` documents under the knowledge base's embedding model and
dimension (the rows a search may return), ids ascending, each row scaled to unit length so a dot
product is the cosine similarity (pgvector's ``<=>`` is 1 - cosine); a zero vector stays zero
(similarity 0). Ties are broken by chunk id, as in the SQL path.

Freshness follows the BM25 L1: every change to a knowledge base's searchable chunks bumps its
``index_version`` (a document ready, deleted or reprocessed, re-analysis, the switch of a
re-embedding), and a search asks for the version it read at its start. An older matrix is
brought up to date by a delta, read in one REPEATABLE READ snapshot with the version: the
knowledge base's ready documents with their ``processed_at`` (one small table; the chunk table
is not touched), then the vectors of documents new or processed again only; rows of documents
gone are dropped. A document's chunks are written only by its processing, which sets
``processed_at``, and a chunk's vector otherwise changes only when the whole knowledge base is
re-embedded, which saves the knowledge base row; so when the row's ``updated_at``, provider,
model or dimension differ from the matrix's, it is reloaded in full (the slow path, mostly
PostgreSQL detoasting every vector). The ready documents' ``chunk_count`` tells the size
before anything is fetched.

In a search that runs both legs, the matrix follows the keyword leg's BM25 view (which runs
first: ``RAGService._answer``): while that view is older than the knowledge base's version
(the keyword leg defers to the worker's build of the new one), a matrix of the view's version
or later answers as it is, so the vector leg does not run ahead of the keyword leg and both
catch up together; catching up to the view's version, the delta takes the documents and their
``processed_at`` from the view's manifest, which its writer read in a snapshot of that version,
instead of scanning the document rows again (``MatrixCache.get``'s ``keyword``). A search of
the vector leg alone reads them.

Loads and deltas read the database the search reads (``retrieval.replica.search_reads``): a
replica is chosen only when it holds at least the version asked for, and the version a matrix
is labelled with is read in the same snapshot as its documents and rows, wherever they come
from. A host file written by another process from another database (or at another version) is
only a base: the delta against this snapshot's documents makes the matrix exactly this
snapshot's rows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import psycopg
from django.conf import settings
from django.db import connections
from pgvector import Vector
from threadpoolctl import ThreadpoolController

from knowledge.models import KnowledgeBase
from knowledge.selectors import searchable_document_sql
from retrieval.core import stamps
from retrieval.core.identity import Identity, identity_of, knowledge_base_slot
from retrieval.core.lru import ByteLRU
from retrieval.core.snapshot import snapshot
from retrieval.core.stamps import KnownDocuments
from retrieval.replica import search_reads
from retrieval.vector import hostfile, kernels
from retrieval.vector.ivf import SLACK_PER_L1, Ivf

logger = logging.getLogger(__name__)


_SELECT_KB = (
    "SELECT index_version, updated_at, embedding_provider, embedding_model, "
    "embedding_dimensions FROM knowledge_knowledgebase WHERE id = %s AND tenant_id = %s"
)
# Curation: searchable documents and chunks (knowledge.selectors); a curation write sets the
# document's processed_at, so the delta below reloads its rows. The documents and their
# processed_at come packed into one value (``retrieval.core.stamps``).
# The rows a search may return: same tenant, knowledge base, model and dimension, searchable.
_ROWS = (
    "FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id "
    f"WHERE c.tenant_id = %s AND c.knowledge_base_id = %s AND {searchable_document_sql('d')} "
    "AND c.enabled "
    "AND c.embedding_model = %s AND c.embedding_dimensions = %s AND c.embedding IS NOT NULL"
)


@dataclass(frozen=True)
class Part:
    """Rows of a matrix: ids, their document ids and unit vectors; ``live`` marks the rows
    still searchable (None: all). A shared part is memory-mapped from a host file. Ids are
    ascending, except in a base stored list by list for its IVF (``ivf``): then ``order`` lists
    the rows by ascending id."""

    ids: np.ndarray  # int64, ascending unless ``order`` is given
    vectors: np.ndarray  # float32 (float16 in an IVF base), (len(ids), dimensions)
    documents: np.ndarray | None = None  # int64
    live: np.ndarray | None = None  # bool
    shared: bool = False
    order: np.ndarray | None = None  # int64: row positions by ascending id (None: ids ascend)
    ivf: Ivf | None = None  # the lists the rows are stored by

    def __len__(self) -> int:
        return self._live_rows

    @cached_property
    def _live_rows(self) -> int:
        # Counted once: a sum over the whole mask, which every search would otherwise pay
        # twice (``live`` arrays are never changed in place; a change makes a new Part).
        return len(self.ids) if self.live is None else int(self.live.sum())

    @property
    def private_bytes(self) -> int:
        arrays = [self.live] if self.shared else [self.ids, self.vectors, self.documents, self.live]
        return int(sum(a.nbytes for a in arrays if a is not None))

    @property
    def arrays(self) -> list[np.ndarray]:
        """Every array of the part, shared or private."""
        arrays = [self.ids, self.vectors, self.documents, self.live, self.order]
        if self.ivf is not None:
            arrays += [self.ivf.centroids, self.ivf.offsets, self.ivf.codes, self.ivf.scales]
        return [a for a in arrays if a is not None]

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

    def _loops(self):
        """The compiled loops when this part's rows are to be bounded on their codes first
        (loaded now unless the warm-up has), else None."""
        if self.ivf is None or self.ivf.codes is None or not settings.VECTOR_IVF_CODES:
            return None
        return kernels.get()

    def probed(self, query: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(ids, scores) of live rows of the IVF lists nearest to ``query`` (a unit vector),
        among them the ``limit`` best, how many rows were scanned (dead ones too: each list is
        a contiguous slice of the rows), and whether they were bounded on codes first. With the
        IVF's codes and the compiled loops, only the rows that can be among the best (by the
        bound from their codes) are returned, scored exactly; else every live probed row."""
        runs = self.ivf.runs(query)
        loops = self._loops() if runs else None
        if loops is not None:
            starts = np.fromiter((start for start, _ in runs), np.int64, len(runs))
            stops = np.fromiter((stop for _, stop in runs), np.int64, len(runs))
            ids, scores = self._bounded(loops, query, starts, stops, limit)
            return ids, scores, int((stops - starts).sum()), True
        ids, scores, scanned = [], [], 0
        for start, stop in runs:
            found, scored = self.ids[start:stop], self.vectors[start:stop] @ query
            if self.live is not None:
                live = self.live[start:stop]
                found, scored = found[live], scored[live]
            ids.append(found)
            scores.append(scored)
            scanned += stop - start
        if not ids:
            return np.empty(0, np.int64), np.empty(0, np.float32), 0, False
        return np.concatenate(ids), np.concatenate(scores), scanned, False

    def scored(
        self, query: np.ndarray, rows: np.ndarray, limit: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(ids, scores) of the given live rows (ascending positions), among them the ``limit``
        best, and whether they were bounded on codes first (as ``probed``; a filtered search's
        rows: with float16 rows, scoring tens of thousands of them converts each to float32, at
        several times the cost of a float32 product, where the codes score ~limit of them)."""
        loops = self._loops() if len(rows) else None
        if loops is None:
            return self.ids[rows], self.vectors[rows] @ query, False
        return (*self._bounded(loops, query, rows, rows + 1, limit), True)

    def _bounded(
        self, loops, query: np.ndarray, starts: np.ndarray, stops: np.ndarray, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids, scores) of the live rows of the runs ``starts[i]:stops[i]`` that can be among
        the best ``limit``, bounded on their codes. Every row gets an upper bound of its score
        (``retrieval.vector.ivf.quantize``); the ``_HEAD`` x ``limit`` rows of highest bound are
        scored exactly, and the ``limit``-th best of those exact scores, ``floor``, is reached by
        each of the true best ``limit`` rows. So every row whose bound reaches ``floor`` is scored
        exactly and returned: a superset of the best ``limit``, with their exact scores."""
        scanned = int((stops - starts).sum())
        rows, bounds = np.empty(scanned, np.int64), np.empty(scanned, np.float32)
        live = _ALL_LIVE if self.live is None else self.live
        slack = np.float32(SLACK_PER_L1 * float(np.abs(query).sum()))
        codes, scales = self.ivf.codes, self.ivf.scales
        n = loops.upper_bounds(codes, scales, query, slack, starts, stops, live, rows, bounds)
        rows, bounds = rows[:n], bounds[:n]
        head = _HEAD * limit
        if n > head:
            best = np.argpartition(bounds, n - head)[n - head :]
            exact = self.vectors[rows[best]] @ query
            floor = np.partition(exact, head - limit)[head - limit]
            rows = rows[bounds >= floor]
        return self.ids[rows], self.vectors[rows] @ query


# Rows scored exactly before the floor is set, per row wanted: enough that the floor lies near
# the k-th best, so the rows whose bound reaches it are not many more than those wanted
# (figures: docs/performance.md, "int8 codes and float16 rows").
_HEAD = 4
_ALL_LIVE = np.zeros(0, dtype=np.bool_)  # ``upper_bounds``: no live mask


@dataclass(frozen=True)
class VectorMatrix:
    """One knowledge base's searchable vectors at one ``index_version``: a base part (shared
    by every process of the host when it is a memory-mapped host file) and the rows that
    changed since, private to this process."""

    parts: tuple[Part, ...]
    version: int
    stamp: tuple  # the knowledge base row's (updated_at, provider, model, dimensions)
    processed: stamps.Stamps = field(default_factory=stamps.Stamps.empty)  # its documents
    base_name: str = ""  # the host file of the shared part, if any
    base_version: int = -1  # ... and the version it was written at

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
    def shared_bytes(self) -> int:
        return sum(part.vectors.nbytes for part in self.parts if part.shared)

    @property
    def total_bytes(self) -> int:
        """Every array of the matrix, private or shared: its size as one copy."""
        return int(sum(a.nbytes for p in self.parts for a in p.arrays))

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def live_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids ascending, document ids, vectors) of every live row, copied out of the parts."""
        dimensions = int(self.stamp[3] or self.parts[0].vectors.shape[1])
        return _live_rows_of(self.parts, dimensions)

    @property
    def ids(self) -> np.ndarray:
        return self.live_rows()[0]

    @property
    def vectors(self) -> np.ndarray:
        return self.live_rows()[2]

    def search(
        self, query_vector, limit: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``limit`` (chunk id, cosine similarity), most similar first, ties by chunk id;
        only chunks in ``allowed`` (ids) when it is given."""
        return self.search_traced(query_vector, limit, allowed)[0]

    def search_traced(
        self, query_vector, limit: int, allowed: np.ndarray | None = None
    ) -> tuple[list[tuple[int, float]], dict[str, Any]]:
        """``search``, and how: ``{"index": "exact"}``, or with no filter and a base with an
        IVF, ``{"index": "ivf", "lists", "probes", "rows_scanned"}`` (the rows scored: the
        probed lists' and every row changed since the base), and ``"codes": "int8"`` when the
        base's rows (probed, or allowed by a filter) were bounded on their codes first
        (``Part.probed``, ``Part.scored``)."""
        query = np.array(query_vector, dtype=np.float32)  # a copy: normalised in place below
        dimensions = self.stamp[3] if self.stamp[3] else self.parts[0].vectors.shape[1]
        if query.shape != (int(dimensions),):
            raise ValueError(
                f"query has {query.size} dimensions, the knowledge base {int(dimensions)}"
            )
        how: dict[str, Any] = {"index": "exact"}
        norm = float(np.linalg.norm(query))
        if limit <= 0 or norm == 0.0 or not len(self):
            return [], how
        query /= norm
        found_ids, found_scores, scanned = [], [], 0
        with _blas_threads():
            for part in self.parts:
                if allowed is None and part.ivf is not None:
                    ids, scores, rows, by_codes = part.probed(query, limit)
                    found_ids.append(ids)
                    found_scores.append(scores)
                    scanned += rows
                    probes = min(part.ivf.probes, part.ivf.lists)
                    how = {"index": "ivf", "lists": part.ivf.lists, "probes": probes}
                    if by_codes:
                        how["codes"] = "int8"
                    continue
                if allowed is None:
                    # Every row, dead ones too, then drop those: one product over the mapped
                    # matrix, never a copy of its live rows (460 MB at 300k chunks).
                    scores = part.vectors @ query
                    scanned += len(part.ids)
                    if part.live is None:
                        found_ids.append(part.ids)
                        found_scores.append(scores)
                    else:
                        found_ids.append(part.ids[part.live])
                        found_scores.append(scores[part.live])
                    continue
                ids, scores, by_codes = part.scored(query, part.rows(allowed), limit)
                found_ids.append(ids)
                found_scores.append(scores)
                if by_codes:
                    how["codes"] = "int8"
        if how["index"] == "ivf":
            how["rows_scanned"] = scanned
        if not found_ids:
            return [], how
        return top(np.concatenate(found_ids), np.concatenate(found_scores), limit), how


_blas: ThreadpoolController | None = None


def _blas_threads():
    """Limit BLAS to VECTOR_SCAN_THREADS threads for one product (see the setting, and
    OPENBLAS_THREAD_TIMEOUT in rag_project/__init__.py)."""
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


@dataclass(frozen=True)
class MatrixHandle:
    """A matrix and how this search got it, for the trace."""

    matrix: VectorMatrix
    # l1, held (older, another thread loads), deferred (older: the keyword leg's view's
    # version), delta, load, file, rebase (private)
    source: str
    load_ms: float

    def trace(self, how: dict[str, Any] | None = None) -> dict[str, Any]:
        """The search's trace: ``how`` the matrix was searched (``search_traced``; exact when
        not given), where it came from and its size."""
        return {
            **(how or {"index": "exact"}),
            "source": self.source,
            "chunks": len(self.matrix),
            "load_ms": round(self.load_ms, 3),
        }


class MatrixCache:
    """This process's matrices, least recently used dropped first beyond ``max_bytes``.
    ``get`` returns None for a knowledge base whose matrix would not fit: search it with HNSW."""

    def __init__(self, max_bytes: int, size_limit: int | None = None) -> None:
        self.max_bytes = max_bytes
        # The largest matrix searched exactly (the policy's line to HNSW): the host's budget
        # when matrices are host files, else this process's.
        self.size_limit = max_bytes if size_limit is None else size_limit
        self.lru: ByteLRU[Identity, VectorMatrix] = ByteLRU(max_bytes, slot_of=knowledge_base_slot)
        self._too_large: dict[int, tuple[int, int]] = {}  # kb id -> (epoch, version)
        self._lock = threading.Lock()  # one load at a time: loads are rare and memory-heavy

    def get(
        self, knowledge_base: KnowledgeBase, keyword: KnownDocuments | None = None
    ) -> MatrixHandle | None:
        """The matrix of the knowledge base at (at least) the ``index_version`` of this
        instance, which the caller has just read.

        ``keyword``: the documents of the BM25 view the same search's keyword leg answered
        from. The matrix follows that view: one of its version or later answers (source
        ``deferred`` when older than the knowledge base's: the keyword leg is deferring to a
        build under way: the vector leg does not run ahead of it), and a matrix
        catching up to its version takes the documents from it, not from PostgreSQL."""
        identity = identity_of(knowledge_base)
        wanted = knowledge_base.index_version
        if self._too_large.get(knowledge_base.pk) == (identity.epoch, wanted):
            return None
        started = time.perf_counter()
        # The oldest version that may answer: the keyword view's when it is older.
        floor = wanted if keyword is None else min(wanted, keyword.version)

        def usable(held: VectorMatrix | None) -> MatrixHandle | None:
            if held is None or held.version < floor or _stamp(knowledge_base) != held.stamp:
                return None
            self.lru.get(identity, held.version)  # mark as recently used
            source = "l1" if held.version >= wanted else "deferred"
            return MatrixHandle(held, source, (time.perf_counter() - started) * 1000)

        held = self.lru.peek(identity)
        if (handle := usable(held)) is not None:
            return handle
        if not self._lock.acquire(blocking=False):
            # Another thread is loading: a matrix of this knowledge base's vectors (same stamp)
            # held from a version before answers meanwhile (rows of documents changed since
            # are dropped or added milliseconds later; hydration never returns a row that is
            # no longer searchable).
            if held is not None and _stamp(knowledge_base) == held.stamp:
                return MatrixHandle(held, "held", (time.perf_counter() - started) * 1000)
            self._lock.acquire()
        try:
            held = self.lru.peek(identity)  # another thread may have loaded it meanwhile
            if (handle := usable(held)) is not None:
                return handle
            matrix, source = load(knowledge_base, held, self.size_limit, keyword)
            if matrix is None:
                self.lru.discard(knowledge_base.pk)
                self._too_large[knowledge_base.pk] = (identity.epoch, wanted)
                return None
            self._too_large.pop(knowledge_base.pk, None)
            self.lru.put(identity, matrix, matrix.version)
        finally:
            self._lock.release()
        return MatrixHandle(matrix, source, (time.perf_counter() - started) * 1000)

    def discard(self, knowledge_base_id: int) -> None:
        self.lru.discard(knowledge_base_id)
        self._too_large.pop(knowledge_base_id, None)

    def clear(self) -> None:
        self.lru.clear()
        self._too_large.clear()


def _stamp(knowledge_base: KnowledgeBase) -> tuple:
    return (
        knowledge_base.updated_at,
        knowledge_base.embedding_provider,
        knowledge_base.embedding_model,
        knowledge_base.embedding_dimensions,
    )


def load(
    knowledge_base: KnowledgeBase,
    held: VectorMatrix | None,
    max_bytes: int,
    known: KnownDocuments | None = None,
) -> tuple[VectorMatrix | None, str]:
    """The knowledge base's matrix now, reusing the rows of ``held`` (or, in a process that
    holds none, of the host's newest base file) where they are still valid; (None, "too
    large") when it would take more than ``max_bytes``. ``known``: the documents at a version
    (a BM25 manifest's), used instead of reading them when it is the version read here.
    Raises KnowledgeBase.DoesNotExist if the knowledge base is gone."""
    identity = identity_of(knowledge_base)
    alias = search_reads()
    with snapshot(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(_SELECT_KB, [knowledge_base.pk, knowledge_base.tenant_id])
            row = cursor.fetchone()
            if row is None:
                raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} is gone")
            version, updated_at, provider, model, dimensions = row
            stamp = (updated_at, provider, model, dimensions)
            if known is not None and known.version == version:
                # The manifest's writer read them in a snapshot of this same version: a scan
                # of every document row the less for PostgreSQL, in every process at every
                # change.
                processed, chunks = known.stamps, known.chunks
            else:
                cursor.execute(stamps.SELECT, [knowledge_base.tenant_id, knowledge_base.pk])
                packed, chunks = cursor.fetchone()
                processed = stamps.Stamps.from_row(packed)
        if not dimensions or int(chunks) * (int(dimensions) * 4 + 16) > max_bytes:
            return None, "too large"
        dimensions = int(dimensions)
        folder = hostfile.directory(identity.tenant_id, identity.knowledge_base_id, identity.epoch)
        params = [knowledge_base.tenant_id, knowledge_base.pk, model, dimensions]
        source = "delta"
        if (held is None or held.stamp != stamp) and hostfile.enabled():
            base = hostfile.newest(folder, stamp, dimensions)
            if base is not None:
                held, source = _on_base(base, stamp), "file"
        if held is None or held.stamp != stamp:
            with _first_writer(folder):  # another process may be loading it for the host
                base = hostfile.newest(folder, stamp, dimensions) if hostfile.enabled() else None
                if base is not None:  # it was: map its file and catch up by a delta below
                    held, source = _on_base(base, stamp), "file"
                else:
                    ids, owners, vectors = _fetch(alias, params, None, dimensions)
                    return _stored(folder, stamp, version, ids, owners, vectors, processed), "load"
        unchanged = processed.unchanged_since(held.processed)
        same = processed.ids[unchanged]
        ids, owners, vectors = _fetch(alias, params, processed.ids[~unchanged].tolist(), dimensions)
    base, *rest = held.parts
    base = replace(base, live=_live(base, same))
    kept = [replace(p, live=_live(p, same)) for p in rest]
    merged_ids, merged_owners, merged_vectors = _live_rows_of(
        [*kept, Part(ids, vectors, owners)], dimensions
    )
    extra = Part(merged_ids, merged_vectors, merged_owners)
    dead = 0 if base.live is None else len(base.ids) - int(base.live.sum())
    matrix = VectorMatrix(
        (base, extra) if len(extra.ids) else (base,),
        version,
        stamp,
        processed,
        held.base_name,
        held.base_version,
    )
    if len(extra.ids) + dead > hostfile.REBASE_FRACTION * len(base.ids):
        if not hostfile.enabled():  # one private part again
            ids, owners, vectors = matrix.live_rows()
            return VectorMatrix.of(ids, vectors, version, stamp, owners, processed), "rebase"
        newer = hostfile.newest(folder, stamp, dimensions)
        if newer is not None and newer.version > held.base_version:
            # A newer base (another process's, or this one's rebase in the background): take
            # it up instead of writing a third.
            return load(knowledge_base, _on_base(newer, stamp), max_bytes, known)[0], "file"
        rebase_in_background(folder, matrix)
    return matrix, source


_rebasing: dict[str, threading.Thread] = {}  # host folder -> this process's rebase under way
_rebasing_lock = threading.Lock()


def rebase_in_background(folder, matrix: VectorMatrix) -> threading.Thread | None:
    """Write ``matrix``'s live rows as the host's new base in a thread of this process (one
    per knowledge base at a time; None when one is under way), while searches go on with the
    base and private rows they have. The next change's delta takes the new base up (``load``:
    "file"); another process of the host that is writing one already wins (``hostfile.write``'s
    lock), and this one's write is skipped.

    Not in the search that found the rows past ``REBASE_FRACTION``: copying the live rows,
    writing them and, from ``VECTOR_IVF_MIN_ROWS``, building the IVF take many times a search,
    growing with the rows, and that search (and every request queued behind it in a sync web
    worker) would wait for all of it."""
    key = str(folder)
    with _rebasing_lock:
        if key in _rebasing:
            return None
        thread = threading.Thread(
            target=_rebase, args=(key, folder, matrix), name="rag-vector-rebase", daemon=True
        )
        _rebasing[key] = thread
    thread.start()
    return thread


def _rebase(key: str, folder, matrix: VectorMatrix) -> None:
    started = time.perf_counter()
    try:
        ids, owners, vectors = matrix.live_rows()
        rebased = _written(
            folder, matrix.stamp, matrix.version, ids, owners, vectors, matrix.processed
        )
        if rebased is not None:
            logger.info(
                "vector base of %s rewritten at v%s in the background: %d rows, %.1f s",
                folder,
                matrix.version,
                len(ids),
                time.perf_counter() - started,
            )
    except Exception:  # the searches go on with the rows they have; the next change retries
        logger.exception("vector base of %s not rewritten", folder)
    finally:
        with _rebasing_lock:
            _rebasing.pop(key, None)


def wait_for_rebases(timeout: float | None = None) -> bool:
    """Wait for this process's background rebases (tests, benchmarks, shutdown); whether none
    is left under way."""
    with _rebasing_lock:
        threads = list(_rebasing.values())
    for thread in threads:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in threads)


def _on_base(base: hostfile.Base, stamp: tuple) -> VectorMatrix:
    # Plain ndarray views of the mapped arrays (the mapping stays open through their base):
    # slicing a np.memmap runs its Python-level __array_finalize__ per slice, a Python call for
    # each of the IVF's probed lists in every search.
    ids, vectors, documents, order = (
        None if a is None else np.asarray(a)
        for a in (base.ids, base.vectors, base.documents, base.order)
    )
    part = Part(ids, vectors, documents, shared=True, order=order, ivf=base.ivf)
    return VectorMatrix((part,), base.version, stamp, base.processed, base.name, base.version)


def _live(part: Part, same: np.ndarray) -> np.ndarray | None:
    """The part's rows still valid: live before and of a document unchanged since."""
    live = _of_documents(part.documents, same) if part.documents is not None else None
    if part.live is not None:
        live = part.live if live is None else live & part.live
    return None if live is None or live.all() else live


def _of_documents(documents: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per row, whether its document is one of ``wanted``: a table over the rows' document
    ids read once per row when their span is at most a few times the rows (ids of one
    knowledge base's documents: O(rows)), else ``np.isin`` (a sort of the rows' ids with
    ``wanted``); paid by every process after every change."""
    if not documents.size:
        return np.zeros(0, dtype=bool)
    low, high = int(documents.min()), int(documents.max())
    if high - low > 8 * documents.size:
        return np.isin(documents, wanted)
    table = np.zeros(high - low + 1, dtype=bool)
    table[wanted[(wanted >= low) & (wanted <= high)] - low] = True
    return table.take(documents - low)


def _live_rows_of(
    parts: list[Part] | tuple[Part, ...], dimensions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids ascending, document ids, float32 vectors) of the parts' live rows, copied out (a
    float16 base's rows too)."""
    ids, documents, vectors = [], [], []
    for part in parts:
        rows = part.rows(None)
        take = slice(None) if rows is None else rows
        ids.append(part.ids[take])
        documents.append(
            part.documents[take]
            if part.documents is not None
            else np.zeros(len(part.ids[take]), np.int64)
        )
        vectors.append(np.asarray(part.vectors[take]))
    if not ids:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty((0, dimensions), np.float32)
    all_ids = np.concatenate(ids)
    order = np.argsort(all_ids, kind="stable")
    stacked = np.concatenate(vectors).astype(np.float32, copy=False)
    return all_ids[order], np.concatenate(documents)[order], stacked[order]


def _first_writer(folder):
    """With host files, the host's writer lock of the knowledge base's folder, waited for up
    to ``VECTOR_HOST_WAIT_S`` (past it this process loads on its own, privately)."""
    if not hostfile.enabled():
        return contextlib.nullcontext(False)
    return hostfile.exclusive(folder, settings.VECTOR_HOST_WAIT_S)


def _stored(folder, stamp, version, ids, owners, vectors, processed) -> VectorMatrix:
    """A matrix of these rows: on a host file when host files are on and this process may
    write it now, else in this process's memory."""
    if hostfile.enabled():
        written = _written(folder, stamp, version, ids, owners, vectors, processed)
        if written is not None:
            return written
    return VectorMatrix.of(ids, vectors, version, stamp, owners, processed)


def _written(folder, stamp, version, ids, owners, vectors, processed) -> VectorMatrix | None:
    try:
        with _blas_threads():  # a large base's IVF is built here: k-means, its products
            base = hostfile.write(folder, stamp, version, ids, owners, vectors, processed)
    except OSError as exc:
        logger.warning("vector base in %s not written (%s); keeping it in memory", folder, exc)
        return None
    return _on_base(base, stamp) if base is not None else None


def _fetch(
    alias: str, params: list, documents: list[int] | None, dimensions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk ids ascending, their document ids, unit-length float32 rows) of the matching
    chunks on database ``alias``, of the given documents only when ``documents`` is not None;
    binary transfer."""
    if documents is not None and not documents:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty((0, dimensions), dtype=np.float32)
    sql = f"SELECT c.id, c.document_id, c.embedding {_ROWS}"
    args = list(params)
    if documents is not None:
        sql += " AND c.document_id = ANY(%s)"
        args.append(documents)
    sql += " ORDER BY c.id"
    # Binary results. Unless something registered pgvector's types on this connection (the
    # benchmarks' bulk COPY does), each value arrives as bytes in pgvector's binary format.
    connection = connections[alias]
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, args, binary=True)
        rows = cursor.fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    owners = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    vectors = np.empty((len(rows), dimensions), dtype=np.float32)
    for i, (_, _, data) in enumerate(rows):
        vectors[i] = (data if isinstance(data, Vector) else Vector.from_binary(data)).to_numpy()
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0
    vectors /= norms[:, None]
    return ids, owners, vectors


_cache: MatrixCache | None = None
_cache_lock = threading.Lock()


def get_matrix_cache() -> MatrixCache:
    """This process's cache (created on first use from settings)."""
    global _cache
    if _cache is None:
        with _cache_lock:
            if _cache is None:
                limit = (
                    settings.VECTOR_HOST_MAX_BYTES
                    if settings.VECTOR_HOST_FILES
                    else settings.VECTOR_L1_MAX_BYTES
                )
                _cache = MatrixCache(settings.VECTOR_L1_MAX_BYTES, limit)
    return _cache
