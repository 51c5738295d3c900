"""The vector leg's exact path: a knowledge base's vectors as one matrix in process memory.

Why not always pgvector's HNSW index: an approximate graph can miss much of the exact top 10
on vectors without neighbourhood structure, and tuning it costs build time and query time;
pgvector's own exact scan detoasts and casts every vector. The same exact scan as one float32
matrix-vector product in numpy is a few milliseconds at 100k chunks, with recall 1 by
construction (measurements: docs/performance.md, "Vector recall"). So a knowledge base whose
matrix fits ``VECTOR_L1_MAX_BYTES`` (per process) is searched exactly here; a larger one goes to
HNSW (``retrieval.vector.hnsw``), whose index is still kept for every dimension in use; the
choice is ``retrieval.vector.policy``.

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
model or dimension differ from the matrix's, it is reloaded in full (seconds at 100k chunks,
mostly PostgreSQL detoasting the vectors). The ready documents' ``chunk_count`` tells the size
before anything is fetched.

Loads read the database the search reads (``retrieval.replica.search_reads``): a replica is
chosen only when it holds at least the version asked for, and the version a matrix is labelled
with is read in the same snapshot as its rows, wherever they come from.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import psycopg
from django.conf import settings
from django.db import connections
from pgvector import Vector
from threadpoolctl import ThreadpoolController

from knowledge.models import KnowledgeBase
from knowledge.selectors import searchable_document_sql
from retrieval.bm25store.build import snapshot
from retrieval.bm25store.l1 import ByteLRU
from retrieval.bm25store.store import identity_of
from retrieval.replica import search_reads

logger = logging.getLogger(__name__)


_SELECT_KB = (
    "SELECT index_version, updated_at, embedding_provider, embedding_model, "
    "embedding_dimensions FROM knowledge_knowledgebase WHERE id = %s AND tenant_id = %s"
)
# Curation: searchable documents and chunks (knowledge.selectors); a curation write sets the
# document's processed_at, so the delta below reloads its rows.
_SELECT_DOCUMENTS = (
    "SELECT id, processed_at, chunk_count FROM knowledge_document d "  # noqa: S608
    f"WHERE tenant_id = %s AND knowledge_base_id = %s AND {searchable_document_sql('d')}"
)
# The rows a search may return: same tenant, knowledge base, model and dimension, searchable.
_ROWS = (
    "FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id "
    f"WHERE c.tenant_id = %s AND c.knowledge_base_id = %s AND {searchable_document_sql('d')} "
    "AND c.enabled "
    "AND c.embedding_model = %s AND c.embedding_dimensions = %s AND c.embedding IS NOT NULL"
)


@dataclass(frozen=True)
class VectorMatrix:
    """One knowledge base's searchable vectors at one ``index_version``."""

    ids: np.ndarray  # int64, ascending
    vectors: np.ndarray  # float32, (len(ids), dimensions), unit rows
    version: int
    stamp: tuple  # the knowledge base row's (updated_at, provider, model, dimensions)
    documents: np.ndarray | None = None  # int64, each row's document id
    processed: dict[int, Any] = field(default_factory=dict)  # document id -> processed_at
    # (ids, documents, vectors) with room to grow: the arrays above are their first rows, and
    # a delta that only appends writes past them (no reader of this matrix looks there).
    buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def nbytes(self) -> int:
        arrays = self.buffers or (self.ids, self.vectors, self.documents)
        return int(sum(a.nbytes for a in arrays if a is not None))

    def __len__(self) -> int:
        return len(self.ids)

    def search(
        self, query_vector, limit: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``limit`` (chunk id, cosine similarity), most similar first, ties by chunk id;
        only chunks in ``allowed`` (ids) when it is given."""
        query = np.asarray(query_vector, dtype=np.float32)
        if query.shape != (self.vectors.shape[1],):
            raise ValueError(
                f"query has {query.size} dimensions, the knowledge base {self.vectors.shape[1]}"
            )
        norm = float(np.linalg.norm(query))
        if limit <= 0 or norm == 0.0 or not len(self.ids):
            return []
        query /= norm
        with _blas_threads():
            if allowed is None:
                ids, scores = self.ids, self.vectors @ query
            else:
                rows = self.rows_of(allowed)
                ids, scores = self.ids[rows], self.vectors[rows] @ query
        return top(ids, scores, limit)

    def rows_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Row numbers of those of ``chunk_ids`` this matrix holds, ascending."""
        wanted = np.unique(np.asarray(chunk_ids, dtype=np.int64))
        rows = np.searchsorted(self.ids, wanted)
        inside = rows < len(self.ids)
        rows = rows[inside]
        return rows[self.ids[rows] == wanted[inside]]


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
    source: str  # "l1", "delta" or "load"
    load_ms: float

    def trace(self) -> dict[str, Any]:
        return {
            "index": "exact",
            "source": self.source,
            "chunks": len(self.matrix),
            "load_ms": round(self.load_ms, 3),
        }


class MatrixCache:
    """This process's matrices, least recently used dropped first beyond ``max_bytes``.
    ``get`` returns None for a knowledge base whose matrix would not fit: search it with HNSW."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lru: ByteLRU[VectorMatrix] = ByteLRU(max_bytes)
        self._too_large: dict[int, tuple[int, int]] = {}  # kb id -> (epoch, version)
        self._lock = threading.Lock()  # one load at a time: loads are rare and memory-heavy

    def get(self, knowledge_base: KnowledgeBase) -> MatrixHandle | None:
        """The matrix of the knowledge base at (at least) the ``index_version`` of this
        instance, which the caller has just read."""
        identity = identity_of(knowledge_base)
        wanted = knowledge_base.index_version
        if self._too_large.get(knowledge_base.pk) == (identity.epoch, wanted):
            return None
        started = time.perf_counter()
        held = self.lru.peek(identity)
        if held is not None and held.version >= wanted and _stamp(knowledge_base) == held.stamp:
            self.lru.get(identity, wanted)  # mark as recently used
            return MatrixHandle(held, "l1", (time.perf_counter() - started) * 1000)
        with self._lock:
            held = self.lru.peek(identity)  # another thread may have loaded it meanwhile
            if held is not None and held.version >= wanted and _stamp(knowledge_base) == held.stamp:
                return MatrixHandle(held, "l1", (time.perf_counter() - started) * 1000)
            matrix, source = load(knowledge_base, held, self.max_bytes)
            if matrix is None:
                self.lru.discard(knowledge_base.pk)
                self._too_large[knowledge_base.pk] = (identity.epoch, wanted)
                return None
            self._too_large.pop(knowledge_base.pk, None)
            self.lru.put(identity, matrix.version, matrix)
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
    knowledge_base: KnowledgeBase, held: VectorMatrix | None, max_bytes: int
) -> tuple[VectorMatrix | None, str]:
    """The knowledge base's matrix now, reusing the rows of ``held`` where they are still
    valid; (None, "too large") when it would take more than ``max_bytes``. Raises
    KnowledgeBase.DoesNotExist if the knowledge base is gone."""
    alias = search_reads()
    with snapshot(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(_SELECT_KB, [knowledge_base.pk, knowledge_base.tenant_id])
            row = cursor.fetchone()
            if row is None:
                raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} is gone")
            version, updated_at, provider, model, dimensions = row
            stamp = (updated_at, provider, model, dimensions)
            cursor.execute(_SELECT_DOCUMENTS, [knowledge_base.tenant_id, knowledge_base.pk])
            documents = cursor.fetchall()
        chunks = sum(count or 0 for _, _, count in documents)
        if not dimensions or _capacity(chunks) * (int(dimensions) * 4 + 16) > max_bytes:
            return None, "too large"
        processed = {doc_id: at for doc_id, at, _ in documents}
        params = [knowledge_base.tenant_id, knowledge_base.pk, model, dimensions]
        if held is None or held.stamp != stamp or held.documents is None:
            ids, owners, vectors = _fetch(alias, params, None, int(dimensions))
            return _with_headroom(ids, owners, vectors, version, stamp, processed), "load"
        same = [d for d, at in processed.items() if held.processed.get(d, _MISSING) == at]
        kept = np.isin(held.documents, np.array(same, dtype=np.int64))
        changed = [d for d in processed if held.processed.get(d, _MISSING) != processed[d]]
        ids, owners, vectors = _fetch(alias, params, changed, int(dimensions))
        if kept.all():
            if not len(ids):
                return replace(held, version=version, processed=processed), "delta"
            appended = _append(held, ids, owners, vectors, version, processed)
            if appended is not None:
                return appended, "delta"
        ids = np.concatenate([held.ids[kept], ids])
        owners = np.concatenate([held.documents[kept], owners])
        vectors = np.concatenate([held.vectors[kept], vectors])
        order = np.argsort(ids, kind="stable")
        matrix = _with_headroom(
            ids[order], owners[order], vectors[order], version, stamp, processed
        )
        return matrix, "delta"


def _capacity(rows: int) -> int:
    """Rows allocated for a matrix of ``rows``: an eighth more (at least 256) to grow into."""
    return rows + max(256, rows // 8)


def _with_headroom(ids, owners, vectors, version, stamp, processed) -> VectorMatrix:
    n = len(ids)
    capacity = _capacity(n)
    buffers = (
        np.empty(capacity, dtype=np.int64),
        np.empty(capacity, dtype=np.int64),
        np.empty((capacity, vectors.shape[1]), dtype=np.float32),
    )
    buffers[0][:n], buffers[1][:n], buffers[2][:n] = ids, owners, vectors
    return VectorMatrix(
        buffers[0][:n], buffers[2][:n], version, stamp, buffers[1][:n], processed, buffers
    )


def _append(held: VectorMatrix, ids, owners, vectors, version, processed) -> VectorMatrix | None:
    """``held`` with rows added in its spare room, when they fit and keep ids ascending (new
    chunks have the highest ids, so they normally do); None otherwise."""
    n, m = len(held), len(held) + len(ids)
    if held.buffers is None or m > len(held.buffers[0]) or (n and ids[0] <= held.ids[-1]):
        return None
    all_ids, all_owners, all_vectors = held.buffers
    all_ids[n:m], all_owners[n:m], all_vectors[n:m] = ids, owners, vectors
    return VectorMatrix(
        all_ids[:m], all_vectors[:m], version, held.stamp, all_owners[:m], processed, held.buffers
    )


_MISSING = object()


def _fetch(
    alias: str, params: list, documents: list[int] | None, dimensions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk ids ascending, their document ids, unit-length float32 rows) of the matching
    chunks, of the given documents only when ``documents`` is not None; binary transfer."""
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
                _cache = MatrixCache(settings.VECTOR_L1_MAX_BYTES)
    return _cache
