"""Reads on behalf of a caller: through the tenant, and through an API key's knowledge-base
restriction when there is one (Zulip's ``access_*`` helpers).

``allowed`` is the set of knowledge-base ids a caller may see, or None for all of its tenant's.
Anything outside it raises the model's DoesNotExist, exactly like an id that does not exist:
another tenant's object, or a knowledge base a key is not allowed, looks missing.
"""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import Count, Q, QuerySet

from knowledge import selectors
from knowledge.models import Chunk, Document, KnowledgeBase
from tenancy.models import Tenant

Allowed = Collection[int] | None


def _within(queryset: QuerySet, allowed: Allowed, field: str) -> QuerySet:
    return queryset if allowed is None else queryset.filter(**{f"{field}__in": list(allowed)})


def knowledge_bases(tenant: Tenant, allowed: Allowed = None) -> QuerySet[KnowledgeBase]:
    """The caller's knowledge bases with their document and chunk counts, by id."""
    return (
        _within(selectors.knowledge_bases(tenant), allowed, "pk")
        .annotate(
            document_count=Count("documents", distinct=True),
            ready_document_count=Count(
                "documents", filter=Q(documents__status=Document.Status.READY), distinct=True
            ),
            deleting_document_count=Count(
                "documents", filter=Q(documents__delete_requested_at__isnull=False), distinct=True
            ),
        )
        .order_by("pk")
    )


def access_knowledge_base(
    tenant: Tenant, knowledge_base_id: int, allowed: Allowed = None
) -> KnowledgeBase:
    """Raises KnowledgeBase.DoesNotExist for a missing, foreign or not-allowed knowledge base."""
    return knowledge_bases(tenant, allowed).get(pk=knowledge_base_id)


def documents(
    tenant: Tenant, knowledge_base: KnowledgeBase, statuses: Collection[str] = ()
) -> QuerySet[Document]:
    """A knowledge base's documents, newest first (not those being deleted)."""
    queryset = selectors.documents(tenant, knowledge_base).filter(delete_requested_at__isnull=True)
    if statuses:
        queryset = queryset.filter(status__in=list(statuses))
    return queryset.order_by("-pk")


def access_document(tenant: Tenant, document_id: int, allowed: Allowed = None) -> Document:
    """Raises Document.DoesNotExist for a missing, foreign or not-allowed document."""
    queryset = selectors.documents(tenant).select_related("knowledge_base")
    return _within(queryset, allowed, "knowledge_base_id").get(pk=document_id)


def chunks(
    tenant: Tenant, knowledge_base: KnowledgeBase, document: Document | None = None
) -> QuerySet[Chunk]:
    """Chunks of a knowledge base (or of one of its documents) in reading order."""
    queryset = selectors.chunks(tenant, knowledge_base).select_related("document")
    if document is not None:
        queryset = queryset.filter(document=document)
    return queryset.order_by("document_id", "position")


def access_chunk(tenant: Tenant, chunk_id: int, allowed: Allowed = None) -> Chunk:
    """Raises Chunk.DoesNotExist for a missing, foreign or not-allowed chunk."""
    queryset = Chunk.objects.filter(tenant=tenant).select_related("document")
    return _within(queryset, allowed, "knowledge_base_id").get(pk=chunk_id)
