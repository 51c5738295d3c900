"""The vector leg's policy: this process's matrix while the knowledge base fits its budget, else
pgvector's HNSW index, which also serves when the matrix fails to load outside the database."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from django.conf import settings
from django.db import DatabaseError

from knowledge.models import KnowledgeBase
from retrieval.core.filter_sql import allowed_chunk_ids
from retrieval.core.filters import SearchFilters
from retrieval.core.stamps import KnownDocuments
from retrieval.vector.hnsw import vector_search
from retrieval.vector.matrix import MatrixHandle, get_matrix_cache

logger = logging.getLogger(__name__)


def nearest_chunks(
    knowledge_base: KnowledgeBase,
    query_vector: Sequence[float],
    limit: int,
    filters: SearchFilters,
    allowed: Callable[[], np.ndarray] | None = None,
    keyword: KnownDocuments | None = None,
) -> tuple[list[tuple[int, float]], dict[str, Any]]:
    """Up to ``limit`` (chunk id, cosine similarity), best first, ties by chunk id, and a trace
    whose ``index`` names the path (``exact``, ``ivf`` or ``hnsw``). ``allowed``: the filters'
    ids, when cached. Raises KnowledgeBase.DoesNotExist if the knowledge base is gone."""
    wanted, limit = limit, limit + len(filters.exclude_chunk_ids)
    handle = _matrix(knowledge_base, keyword)
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


def _matrix(
    knowledge_base: KnowledgeBase, keyword: KnownDocuments | None = None
) -> MatrixHandle | None:
    """The matrix, or None for HNSW (too large, or the load failed outside the database)."""
    if settings.VECTOR_L1_MAX_BYTES <= 0:
        return None
    try:
        return get_matrix_cache().get(knowledge_base, keyword)
    except (KnowledgeBase.DoesNotExist, DatabaseError):
        raise  # the HNSW query would meet the same database
    except Exception:
        logger.exception("vector matrix of knowledge base %s unavailable", knowledge_base.pk)
        return None
