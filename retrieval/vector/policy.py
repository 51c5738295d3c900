"""The vector leg's policy: which path searches a knowledge base's vectors.

Exact from this process's matrix (``retrieval.vector.matrix``) while the knowledge base's
vectors fit ``VECTOR_L1_MAX_BYTES``; pgvector's HNSW index (``retrieval.vector.hnsw``) beyond,
or when the matrix cannot be loaded for a reason other than the database (HNSW holds the same
rows). Why exact first: docs/performance.md. RAGService and the LangChain store both search
vectors through ``nearest_chunks``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from django.conf import settings
from django.db import DatabaseError

from knowledge.models import KnowledgeBase
from retrieval.search.filters import allowed_chunk_ids
from retrieval.search.types import SearchFilters
from retrieval.vector.hnsw import vector_search
from retrieval.vector.matrix import MatrixHandle, get_matrix_cache

logger = logging.getLogger(__name__)


def nearest_chunks(
    knowledge_base: KnowledgeBase,
    query_vector: Sequence[float],
    limit: int,
    filters: SearchFilters,
    allowed: Callable[[], np.ndarray] | None = None,
) -> tuple[list[tuple[int, float]], dict[str, Any]]:
    """The vector leg of one knowledge base: up to ``limit`` (chunk id, cosine similarity),
    best first, ties by chunk id, and a trace of how. Exact from this process's matrix while
    the knowledge base fits ``VECTOR_L1_MAX_BYTES``, else pgvector's HNSW index.
    ``knowledge_base`` must have been read just now (its ``index_version`` is the one asked
    for); ``allowed`` gives the ids the filters let through, when the caller has them cached.
    Raises KnowledgeBase.DoesNotExist if the knowledge base is gone."""
    wanted, limit = limit, limit + len(filters.exclude_chunk_ids)
    handle = _matrix(knowledge_base)
    if handle is not None:
        ids = None
        if filters.active:
            ids = (
                allowed()
                if allowed is not None
                else allowed_chunk_ids(knowledge_base.tenant_id, knowledge_base.pk, filters)
            )
        hits, how = handle.matrix.search_traced(query_vector, limit, ids)
        return filters.without_excluded(hits, wanted), handle.trace(how)
    hits = vector_search(
        tenant_id=knowledge_base.tenant_id,
        knowledge_base_id=knowledge_base.pk,
        model=knowledge_base.embedding_model,
        dimensions=knowledge_base.embedding_dimensions,
        query_vector=query_vector,
        limit=limit,
        filters=filters,
    )
    return filters.without_excluded(hits, wanted), {"index": "hnsw"}


def _matrix(knowledge_base: KnowledgeBase) -> MatrixHandle | None:
    """The matrix, or None for HNSW: too large for the budget, or the load failed for a
    reason other than the database (HNSW holds the same rows)."""
    if settings.VECTOR_L1_MAX_BYTES <= 0:
        return None
    try:
        return get_matrix_cache().get(knowledge_base)
    except (KnowledgeBase.DoesNotExist, DatabaseError):
        raise  # the HNSW query would meet the same database
    except Exception:
        logger.exception("vector matrix of knowledge base %s unavailable", knowledge_base.pk)
        return None
