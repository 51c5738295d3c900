"""Search filters (``retrieval.core.filters``) as SQL over ``knowledge_chunk c`` (alias ``c``),
shared by both legs.

Document metadata is copied onto each chunk at ingestion (``Chunk.metadata``, GIN-indexed), so
equality and membership filters need no join: ``c.metadata @> '{"project": "apollo"}'``. Age
filters read the documents' creation time through a subquery on the same knowledge base.
"""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
from django.db import connections
from django.utils import timezone

from knowledge.selectors import searchable_chunk_sql
from retrieval.core.filters import SearchFilters
from retrieval.replica import search_reads


def filter_sql(filters: SearchFilters, knowledge_base_id: int) -> tuple[str, list]:
    """``AND ...`` clauses and their parameters (empty when no filter is active)."""
    clauses: list[str] = []
    params: list = []
    if filters.document_ids is not None:
        clauses.append("c.document_id = ANY(%s)")
        params.append(list(filters.document_ids))
    if filters.exclude_chunk_ids:
        clauses.append("NOT (c.id = ANY(%s))")
        params.append(sorted(filters.exclude_chunk_ids))
    for key, value in sorted(filters.metadata.items()):
        values = value if isinstance(value, list | tuple) else [value]
        if not values:
            clauses.append("FALSE")
            continue
        alternatives = " OR ".join(["c.metadata @> %s::jsonb"] * len(values))
        clauses.append(f"({alternatives})")
        params.extend(json.dumps({key: item}) for item in values)
    after = filters.created_after
    if filters.max_age_days is not None:
        cutoff = timezone.now() - timedelta(days=filters.max_age_days)
        after = max(after, cutoff) if after else cutoff
    if after or filters.created_before:
        bounds, bound_params = ["d.knowledge_base_id = %s"], [knowledge_base_id]
        if after:
            bounds.append("d.created_at >= %s")
            bound_params.append(after)
        if filters.created_before:
            bounds.append("d.created_at < %s")
            bound_params.append(filters.created_before)
        clauses.append(
            # Only constant fragments are joined here; every value is a parameter.
            "c.document_id IN (SELECT d.id FROM knowledge_document d WHERE "  # noqa: S608
            + " AND ".join(bounds)
            + ")"
        )
        params.extend(bound_params)
    return "".join(f" AND {clause}" for clause in clauses), params


def allowed_chunk_ids(tenant_id: int, knowledge_base_id: int, filters: SearchFilters) -> np.ndarray:
    """Ids of the knowledge base's searchable chunks the filters let through (both legs use
    them), from the database the search reads (``retrieval.replica``)."""
    where, params = filter_sql(filters, knowledge_base_id)
    with connections[search_reads()].cursor() as cursor:
        cursor.execute(
            "SELECT c.id FROM knowledge_chunk c WHERE c.tenant_id = %s "  # noqa: S608
            f"AND c.knowledge_base_id = %s {where} "  # constant fragments, values as params
            f"AND {searchable_chunk_sql('c')}",  # curation: only searchable chunks
            [tenant_id, knowledge_base_id, *params],
        )
        return np.fromiter((row[0] for row in cursor.fetchall()), dtype=np.int64)
