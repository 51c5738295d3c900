"""Fused candidates to hits, read from PostgreSQL filtered by tenant, knowledge base and ready
documents: whatever a cache offered, a deleted, reprocessing or foreign chunk never hydrates.

Read from the database the search was routed to (``retrieval.replica.search_reads``): the
primary, or a replica holding at least the versions the search read.

Only the head that can be returned is read, with a small margin for rows that no longer
hydrate; another round only when more than the margin vanished.
"""

from __future__ import annotations

from knowledge.models import Chunk
from knowledge.selectors import SEARCHABLE_CHUNK
from retrieval.fusion import Fused
from retrieval.replica import search_reads
from retrieval.search.candidates import Candidates
from retrieval.search.types import Hit, Leg
from tenancy.models import Tenant

HYDRATE_MARGIN = 5
FIELDS = (
    "pk",
    "document_id",
    "knowledge_base_id",
    "content",
    "page",
    "start_char",
    "end_char",
    "heading_path",
    "metadata",
    "position",
    "document__title",
    "document__original_filename",
)


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


def _rows(tenant: Tenant, chunk_ids: list[int], knowledge_base_ids: list[int]) -> dict[int, Chunk]:
    if not chunk_ids:
        return {}
    rows = (
        Chunk.objects.using(search_reads())
        .filter(
            SEARCHABLE_CHUNK,  # curation: the one definition of searchable
            pk__in=chunk_ids,
            tenant=tenant,
            knowledge_base_id__in=knowledge_base_ids,
            document__tenant=tenant,
        )
        .select_related("document")
        .only(*FIELDS)
    )
    return {row.pk: row for row in rows}


def _hit(item: Fused, row: Chunk, candidates: Candidates) -> Hit:
    return Hit(
        chunk_id=item.id,
        document_id=row.document_id,
        knowledge_base_id=row.knowledge_base_id,
        document_title=row.document.title,
        original_filename=row.document.original_filename,
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
