"""The vector leg through pgvector's HNSW index: partial expression indexes, one per dimension
(embeddings have none fixed), whose expression and predicate the query repeats so the planner
can use them. Vectors of another model or dimension are never compared."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from django.conf import settings
from django.db import connection, connections, transaction

from knowledge.selectors import searchable_chunk_sql
from retrieval.core.filter_sql import filter_sql
from retrieval.core.filters import SearchFilters
from retrieval.replica import search_reads

logger = logging.getLogger(__name__)

_indexed_dimensions: set[int] = set()
_index_lock = threading.Lock()


def index_name(dimensions: int) -> str:
    return f"chunk_embedding_hnsw_{int(dimensions)}"


def ensure_vector_index(dimensions: int) -> bool:
    """Create this dimension's HNSW index concurrently if missing; whether it was created."""
    dimensions = int(dimensions)
    if dimensions <= 0 or dimensions > 2000:  # pgvector's HNSW limit for `vector`
        return False
    with _index_lock:
        if dimensions in _indexed_dimensions:
            return False
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_indexes WHERE indexname = %s", [index_name(dimensions)]
            )
            exists = cursor.fetchone() is not None
            if not exists and not connection.in_atomic_block:
                cursor.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index_name(dimensions)} "
                    f"ON knowledge_chunk USING hnsw ((embedding::vector({dimensions})) "
                    f"vector_cosine_ops) WHERE embedding_dimensions = {dimensions}"
                )
                logger.info("created HNSW index for %d-dimensional vectors", dimensions)
        if exists or not connection.in_atomic_block:
            _indexed_dimensions.add(dimensions)
        return not exists


ITERATIVE_SCAN = "relaxed_order"


def ef_search(limit: int, wanted: int | None = None) -> int:
    """The candidate list size: ``wanted`` (else ``RAG_HNSW_EF_SEARCH``), at least ``limit``."""
    base = settings.RAG_HNSW_EF_SEARCH if wanted is None else wanted
    return max(1, int(base), int(limit))


def vector_search(
    *,
    tenant_id: int,
    knowledge_base_id: int,
    model: str,
    dimensions: int,
    query_vector: Sequence[float],
    limit: int,
    filters: SearchFilters,
    ef: int | None = None,
) -> list[tuple[int, float]]:
    """Up to ``limit`` (chunk id, cosine similarity), most similar first, ties by chunk id.
    ``ef`` overrides ``RAG_HNSW_EF_SEARCH`` (benchmarks sweep it)."""
    dims = int(dimensions)
    where, params = filter_sql(filters, knowledge_base_id)
    literal = "[" + ",".join(repr(float(x)) for x in query_vector) + "]"
    # dims is an int and `where` holds constant fragments; every value is a parameter.
    sql = (
        f"SELECT c.id, (c.embedding::vector({dims}) <=> %s::vector({dims})) AS distance "  # noqa: S608
        "FROM knowledge_chunk c "
        f"WHERE c.tenant_id = %s AND c.knowledge_base_id = %s "
        f"AND c.embedding_dimensions = {dims} AND c.embedding_model = %s {where} "
        f"AND {searchable_chunk_sql('c')} "  # curation: only searchable chunks
        "ORDER BY distance LIMIT %s"
    )
    alias = search_reads()
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        # These settings (ints and a constant) end with the transaction. relaxed_order: with
        # filters the scan goes on past ef_search until enough rows pass them.
        cursor.execute(
            f"SET LOCAL hnsw.iterative_scan = {ITERATIVE_SCAN}; "
            f"SET LOCAL hnsw.ef_search = {ef_search(limit, ef)}; "
            f"SET LOCAL hnsw.max_scan_tuples = {int(settings.RAG_HNSW_MAX_SCAN_TUPLES)}"
        )
        cursor.execute(sql, [literal, tenant_id, knowledge_base_id, model, *params, limit])
        rows = cursor.fetchall()
    # relaxed_order may return slightly out of order: sort exactly, ties by chunk id.
    rows.sort(key=lambda row: (row[1], row[0]))
    return [(int(chunk_id), 1.0 - float(distance)) for chunk_id, distance in rows]


def exact_vector_search(**kwargs) -> list[tuple[int, float]]:
    """The same search with index scans disabled: the reference for recall measurements."""
    alias = search_reads()
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        return vector_search(**kwargs)
