"""Reads behind the admin pages. Callers pass querysets already scoped to the user's tenants
(``TenantScopedAdmin.get_queryset``), so nothing here can reach another tenant's rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet, Sum

from knowledge.models import Chunk, Document, KnowledgeBase, StagedEmbedding
from knowledge.services.dispatch import queue_positions

Status = Document.Status
CHUNKS_PER_PAGE = 25


@dataclass(frozen=True)
class StatusCount:
    status: str
    label: str
    count: int


@dataclass(frozen=True)
class KnowledgeBaseOverview:
    """What the knowledge-base page shows above its settings."""

    statuses: list[StatusCount]
    documents: int
    chunks: int
    # re-embedding in progress: the target and how many chunks are done of how many
    migration: dict | None
    migration_done: int = 0

    @property
    def processing(self) -> int:
        return sum(s.count for s in self.statuses if s.status not in Status.final())


def with_document_counts(queryset: QuerySet[KnowledgeBase]) -> QuerySet[KnowledgeBase]:
    """Knowledge bases annotated with their document, ready-document and chunk counts."""
    return queryset.annotate(
        document_count=Count("documents", distinct=True),
        ready_count=Count("documents", filter=Q(documents__status=Status.READY), distinct=True),
        failed_count=Count("documents", filter=Q(documents__status=Status.FAILED), distinct=True),
    )


def knowledge_base_overview(knowledge_base: KnowledgeBase) -> KnowledgeBaseOverview:
    rows = dict(
        Document.objects.filter(knowledge_base=knowledge_base)
        .values_list("status")
        .annotate(n=Count("pk"))
        .values_list("status", "n")
    )
    chunks = (
        Document.objects.filter(knowledge_base=knowledge_base, status=Status.READY).aggregate(
            n=Sum("chunk_count")
        )["n"]
        or 0
    )
    migration = knowledge_base.embedding_migration
    done = 0
    if migration:
        done = StagedEmbedding.objects.filter(
            knowledge_base=knowledge_base, embedding_model=migration.get("model", "")
        ).count()
    return KnowledgeBaseOverview(
        statuses=[StatusCount(value, label, rows.get(value, 0)) for value, label in Status.choices],
        documents=sum(rows.values()),
        chunks=chunks,
        migration=migration,
        migration_done=done,
    )


def document_statuses(documents: QuerySet[Document], ids: Iterable[int]) -> dict[str, dict]:
    """``{id: {status, label, progress, error, chunk_count, final, queue}}`` of those of
    ``ids`` found in ``documents``; the others (missing, foreign) are simply absent."""
    labels = dict(Status.choices)
    rows = list(
        documents.filter(pk__in=list(ids)).only(
            "pk", "tenant_id", "status", "dispatched_at", "progress", "error", "chunk_count"
        )
    )
    places = queue_positions(rows)
    return {
        str(row.pk): {
            "status": row.status,
            "label": labels.get(row.status, row.status),
            "progress": row.progress,
            "error": row.error,
            "chunk_count": row.chunk_count,
            "final": row.status in Status.final(),
            "queue": queue_label(places[row.pk]),
        }
        for row in rows
    }


def queue_label(place: int | None) -> str:
    """A document's place in the fair queue, for people ("" unless it is pending)."""
    if place is None:
        return ""
    return "sent to a worker" if place == 0 else f"#{place} in the queue"


def chunk_page(document: Document, number: str | int | None) -> Page:
    """One page of a document's chunks in reading order."""
    chunks = Chunk.objects.filter(tenant_id=document.tenant_id, document=document).order_by(
        "position"
    )
    return Paginator(chunks.defer("embedding"), CHUNKS_PER_PAGE).get_page(number)


def neighbours(chunk: Chunk) -> tuple[Chunk | None, Chunk | None]:
    """The chunks before and after ``chunk`` in its document."""
    siblings = Chunk.objects.filter(tenant_id=chunk.tenant_id, document_id=chunk.document_id)
    before = siblings.filter(position__lt=chunk.position).order_by("-position").only("pk").first()
    after = siblings.filter(position__gt=chunk.position).order_by("position").only("pk").first()
    return before, after


def deletion_counts(objs: Iterable[KnowledgeBase | Document]) -> dict[str, int]:
    """What deleting these knowledge bases or documents takes with it, counted per kind."""
    kbs = [o.pk for o in objs if isinstance(o, KnowledgeBase)]
    docs = [o.pk for o in objs if isinstance(o, Document)]
    counts: dict[str, int] = {}
    if kbs:
        counts["knowledge bases"] = len(kbs)
        documents = Document.objects.filter(knowledge_base_id__in=kbs)
        counts["documents"] = documents.count()
        counts["chunks"] = Chunk.objects.filter(knowledge_base_id__in=kbs).count()
    if docs:
        counts["documents"] = len(docs)
        counts["chunks"] = Chunk.objects.filter(document_id__in=docs).count()
    return counts
