"""The vector leg's matrices of searchable chunks, kept by ``MatrixCache`` and brought up to
``index_version`` by ``load``: a delta, read in one snapshot with the version, fetches documents
new or processed again and drops the others' rows; another stamp (re-embedding saves the
knowledge base row) reloads in full. A host file is only a base for the delta."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import psycopg
from django.conf import settings
from django.db import connections
from pgvector import Vector

from knowledge.models import KnowledgeBase
from knowledge.selectors import searchable_document_sql
from retrieval.core import stamps
from retrieval.core.identity import Identity, identity_of, knowledge_base_slot
from retrieval.core.lru import ByteLRU
from retrieval.core.snapshot import snapshot
from retrieval.core.stamps import KnownDocuments
from retrieval.replica import search_reads
from retrieval.vector import hostfile
from retrieval.vector.scan import Part, VectorMatrix, blas_threads, live_rows_of

logger = logging.getLogger(__name__)


_SELECT_KB = (
    "SELECT index_version, updated_at, embedding_provider, embedding_model, "
    "embedding_dimensions FROM knowledge_knowledgebase WHERE id = %s AND tenant_id = %s"
)
# The rows a search may return (a curation write sets processed_at, so a delta reloads them).
_ROWS = (
    "FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id "
    f"WHERE c.tenant_id = %s AND c.knowledge_base_id = %s AND {searchable_document_sql('d')} "
    "AND c.enabled "
    "AND c.embedding_model = %s AND c.embedding_dimensions = %s AND c.embedding IS NOT NULL"
)


@dataclass(frozen=True)
class MatrixHandle:
    matrix: VectorMatrix
    source: str  # l1, held, deferred, delta, load, file or rebase
    load_ms: float

    def trace(self, how: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            **(how or {"index": "exact"}),
            "source": self.source,
            "chunks": len(self.matrix),
            "load_ms": round(self.load_ms, 3),
        }


class MatrixCache:
    """This process's matrices, least recently used dropped first; None for one too large."""

    def __init__(self, max_bytes: int, size_limit: int | None = None) -> None:
        # The largest matrix searched exactly: the host's budget with host files.
        self.size_limit = max_bytes if size_limit is None else size_limit
        self.lru: ByteLRU[Identity, VectorMatrix] = ByteLRU(max_bytes, slot_of=knowledge_base_slot)
        self._too_large: dict[int, tuple[int, int]] = {}  # kb id -> (epoch, version)
        self._lock = threading.Lock()  # one load at a time: loads are rare and memory-heavy

    def get(
        self, knowledge_base: KnowledgeBase, keyword: KnownDocuments | None = None
    ) -> MatrixHandle | None:
        """The matrix at (at least) the ``index_version`` the caller has just read, or at that of
        ``keyword``, the BM25 view the same search's keyword leg answered from, when older."""
        identity = identity_of(knowledge_base)
        wanted = knowledge_base.index_version
        if self._too_large.get(knowledge_base.pk) == (identity.epoch, wanted):
            return None
        started = time.perf_counter()
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
            # Another thread is loading: the matrix held answers meanwhile (hydration never
            # returns a row that is no longer searchable).
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
    """(The knowledge base's matrix now, its source), reusing the still valid rows of ``held``
    or of the host's newest base; (None, "too large") beyond ``max_bytes``. ``known``: a BM25
    manifest's documents, used when of the version read. Raises KnowledgeBase.DoesNotExist."""
    identity = identity_of(knowledge_base)
    alias = search_reads()
    with snapshot(using=alias):
        version, stamp, processed, chunks = _state(alias, knowledge_base, known)
        dimensions = stamp[3]
        if not dimensions or int(chunks) * (int(dimensions) * 4 + 16) > max_bytes:
            return None, "too large"
        dimensions = int(dimensions)
        folder = hostfile.directory(identity.tenant_id, identity.knowledge_base_id, identity.epoch)
        params = [knowledge_base.tenant_id, knowledge_base.pk, stamp[2], dimensions]
        source = "delta"
        if held is None or held.stamp != stamp:
            held, source = _mapped(folder, stamp, dimensions), "file"
        if held is None:
            writer = hostfile.exclusive(folder) if hostfile.enabled() else contextlib.nullcontext()
            with writer:  # another process of the host may be writing it: then map it
                held = _mapped(folder, stamp, dimensions)
                if held is None:
                    ids, owners, vectors = _fetch(alias, params, None, dimensions)
                    written = _written(folder, stamp, version, ids, owners, vectors, processed)
                    if written is None:
                        written = VectorMatrix.of(ids, vectors, version, stamp, owners, processed)
                    return written, "load"
        unchanged = processed.unchanged_since(held.processed)
        changed = processed.ids[~unchanged].tolist()
        ids, owners, vectors = _fetch(alias, params, changed, dimensions)
    matrix = _merged(held, processed.ids[unchanged], Part(ids, vectors, owners))
    matrix = replace(matrix, version=version, stamp=stamp, processed=processed)
    base = matrix.parts[0]
    private = sum(len(part.ids) for part in matrix.parts[1:])
    if private + len(base.ids) - len(base) <= hostfile.REBASE_FRACTION * len(base.ids):
        return matrix, source
    if not hostfile.enabled():  # one private part again
        ids, owners, vectors = matrix.live_rows()
        return VectorMatrix.of(ids, vectors, version, stamp, owners, processed), "rebase"
    newer = hostfile.newest(folder, stamp, dimensions)
    if newer is not None and newer.version > held.base_version:
        # Another process's base or this one's background rebase: take it up, write no third.
        return load(knowledge_base, newer, max_bytes, known)[0], "file"
    rebase_in_background(folder, matrix)
    return matrix, source


def _state(
    alias: str, knowledge_base: KnowledgeBase, known: KnownDocuments | None
) -> tuple[int, tuple, stamps.Stamps, int]:
    """(index_version, stamp, documents' processed_at, chunks) in the caller's snapshot."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_SELECT_KB, [knowledge_base.pk, knowledge_base.tenant_id])
        row = cursor.fetchone()
        if row is None:
            raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} is gone")
        version, *stamp = row
        if known is not None and known.version == version:
            return version, tuple(stamp), known.stamps, known.chunks
        cursor.execute(stamps.SELECT, [knowledge_base.tenant_id, knowledge_base.pk])
        packed, chunks = cursor.fetchone()
    return version, tuple(stamp), stamps.Stamps.from_row(packed), chunks


def _merged(held: VectorMatrix, same: np.ndarray, fetched: Part) -> VectorMatrix:
    """``held``'s base with only the rows of documents in ``same`` live, and one private part
    of its other still valid rows and the ``fetched`` ones."""
    base, *rest = (replace(part, live=_live(part, same)) for part in held.parts)
    ids, owners, vectors = live_rows_of([*rest, fetched], held.dimensions)
    parts = (base, Part(ids, vectors, owners)) if len(ids) else (base,)
    return replace(held, parts=parts)


_rebasing: dict[str, threading.Thread] = {}  # host folder -> this process's rebase under way
_rebasing_lock = threading.Lock()


def rebase_in_background(folder, matrix: VectorMatrix) -> None:
    """Write ``matrix``'s live rows as the host's new base in a thread (one per knowledge base)
    while searches go on; the next delta takes the new base up."""
    key = str(folder)
    with _rebasing_lock:
        if key in _rebasing:
            return
        thread = threading.Thread(
            target=_rebase, args=(key, folder, matrix), name="rag-vector-rebase", daemon=True
        )
        _rebasing[key] = thread
    thread.start()


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


def _mapped(folder, stamp: tuple, dimensions: int) -> VectorMatrix | None:
    return hostfile.newest(folder, stamp, dimensions) if hostfile.enabled() else None


def _live(part: Part, same: np.ndarray) -> np.ndarray | None:
    """The part's rows still valid: live before and of a document unchanged since."""
    live = _of_documents(part.documents, same) if part.documents is not None else None
    if part.live is not None:
        live = part.live if live is None else live & part.live
    return None if live is None or live.all() else live


def _of_documents(documents: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per row, whether its document is one of ``wanted``: a table over the rows' document ids
    when their span is at most a few times the rows, else ``np.isin``."""
    if not documents.size:
        return np.zeros(0, dtype=bool)
    low, high = int(documents.min()), int(documents.max())
    if high - low > 8 * documents.size:
        return np.isin(documents, wanted)
    table = np.zeros(high - low + 1, dtype=bool)
    table[wanted[(wanted >= low) & (wanted <= high)] - low] = True
    return table.take(documents - low)


def _written(folder, stamp, version, ids, owners, vectors, processed) -> VectorMatrix | None:
    """A matrix on a host base of these rows, written now; None if none was written."""
    if not hostfile.enabled():
        return None
    try:
        with blas_threads():  # a large base's IVF is built here: k-means, its products
            return hostfile.write(folder, stamp, version, ids, owners, vectors, processed)
    except OSError as exc:
        logger.warning("vector base in %s not written (%s); keeping it in memory", folder, exc)
        return None


def _fetch(
    alias: str, params: list, documents: list[int] | None, dimensions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk ids ascending, document ids, unit float32 rows), of ``documents`` only if given."""
    if documents is not None and not documents:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty((0, dimensions), dtype=np.float32)
    sql = f"SELECT c.id, c.document_id, c.embedding {_ROWS}"
    args = list(params)
    if documents is not None:
        sql += " AND c.document_id = ANY(%s)"
        args.append(documents)
    sql += " ORDER BY c.id"
    # Binary results: pgvector's binary format, or a Vector where its types are registered.
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
