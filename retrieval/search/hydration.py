"""Fused candidates to hits, read from PostgreSQL filtered by tenant, knowledge base and ready
documents: whatever a cache offered, a deleted, reprocessing or foreign chunk never hydrates.

Read from the database the search was routed to (``retrieval.replica.search_reads``): the
primary, or a replica holding at least the versions the search read.

Only the head that can be returned is read, with a small margin for rows that no longer
hydrate; another round only when more than the margin vanished.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import connections

from knowledge.models import Chunk
from knowledge.selectors import searchable_document_sql
from retrieval.fusion import Fused
from retrieval.replica import search_reads
from retrieval.search.candidates import Candidates
from retrieval.search.types import Hit, Leg
from tenancy.models import Tenant

HYDRATE_MARGIN = 5
# SEARCHABLE_CHUNK (knowledge.selectors) as SQL, with the tenant on both tables. Raw SQL: the
# ORM's query (select_related, only, the Q) costs several times this one to compile and to turn
# into model instances, on every search (figures: docs/performance.md, "Figures behind choices
# in the code").
_ROWS = (
    "SELECT c.id, c.document_id, c.knowledge_base_id, c.content, c.page, c.start_char, "  # noqa: S608
    "c.end_char, c.heading_path, c.metadata, c.position, d.title, d.original_filename "
    "FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id "
    "WHERE c.id = ANY(%s) AND c.tenant_id = %s AND c.knowledge_base_id = ANY(%s) "
    f"AND d.tenant_id = %s AND c.enabled AND {searchable_document_sql('d')}"
)
_METADATA = Chunk._meta.get_field("metadata")


class _Row(NamedTuple):
    id: int
    document_id: int
    knowledge_base_id: int
    content: str
    page: int | None
    start_char: int
    end_char: int
    heading_path: list[str]
    metadata: Any  # decoded by the model field (the driver hands jsonb over as text)
    position: int
    title: str
    original_filename: str


def hydrate(
    tenant: Tenant, candidates: Candidates, knowledge_base_ids: list[int], wanted: int
) -> list[Hit]:
    """The first ``wanted`` candidates that hydrate, best first (fewer if fewer do)."""
    hits: list[Hit] = []
    start = 0
    while len(hits) < wanted and start < len(candidates):
        batch = candidates.head(start, start + wanted - len(hits) + HYDRATE_MARGIN)
        start += len(batch)
        rows = _rows(tenant, [item.id for item in batch], knowledge_base_ids)
        hits.extend(_hit(item, rows[item.id], candidates) for item in batch if item.id in rows)
    return hits[:wanted]


def _rows(tenant: Tenant, chunk_ids: list[int], knowledge_base_ids: list[int]) -> dict[int, _Row]:
    if not chunk_ids:
        return {}
    connection = connections[search_reads()]
    with connection.prepared_cursor() as cursor:
        cursor.execute(_ROWS, [chunk_ids, tenant.pk, knowledge_base_ids, tenant.pk])
        rows = [_Row(*row) for row in cursor.fetchall()]
    decode = _METADATA.from_db_value
    return {row.id: row._replace(metadata=decode(row.metadata, None, connection)) for row in rows}


def _hit(item: Fused, row: _Row, candidates: Candidates) -> Hit:
    return Hit(
        chunk_id=item.id,
        document_id=row.document_id,
        knowledge_base_id=row.knowledge_base_id,
        document_title=row.title,
        original_filename=row.original_filename,
        content=row.content,
        score=round(item.score / candidates.best, 6),
        vector_similarity=candidates.scores[Leg.VECTOR].get(item.id),
        vector_rank=item.ranks.get(Leg.VECTOR),
        bm25_score=candidates.scores[Leg.KEYWORD].get(item.id),
        bm25_rank=item.ranks.get(Leg.KEYWORD),
        page=row.page,
        start_char=row.start_char,
        end_char=row.end_char,
        heading_path=list(row.heading_path),
        metadata=row.metadata,
        position=row.position,
    )
