"""Reads, always through the tenant: another tenant's object looks exactly like a missing one."""

from __future__ import annotations

from django.db import connection
from django.db.models import Q, QuerySet

from knowledge.models import Chunk, Document, KnowledgeBase
from rag_project.rawsql import Columns
from tenancy.models import Tenant

# What search may return, defined once: a chunk that is enabled, of a document that is ready
# and enabled. Every reader of searchable chunks (the BM25 build, the vector matrix, HNSW
# queries, search filters, hydration, calibration, the LangChain vector store) uses one of the
# three forms below, so disabling a chunk or a document hides it from every entry point.
SEARCHABLE_DOCUMENT = Q(status=Document.Status.READY, enabled=True)
SEARCHABLE_CHUNK = Q(enabled=True, document__status=Document.Status.READY, document__enabled=True)


def searchable_document_sql(alias: str = "d") -> str:
    """SEARCHABLE_DOCUMENT as SQL over ``knowledge_document`` aliased ``alias`` (a constant
    fragment: the status is an enum value, never input)."""
    return f"{alias}.status = '{Document.Status.READY.value}' AND {alias}.enabled"


def searchable_chunk_sql(alias: str = "c") -> str:
    """SEARCHABLE_CHUNK as SQL over ``knowledge_chunk`` aliased ``alias``, without a join (a
    correlated subquery on the document's primary key), so it fits any query on chunks."""
    return (
        f"{alias}.enabled AND EXISTS (SELECT 1 FROM knowledge_document sd "  # noqa: S608
        f"WHERE sd.id = {alias}.document_id AND {searchable_document_sql('sd')})"
    )


def searchable_chunks(tenant: Tenant, knowledge_base: KnowledgeBase) -> QuerySet[Chunk]:
    return chunks(tenant, knowledge_base).filter(SEARCHABLE_CHUNK)


# A parsed chunk changed by hand (text, keywords, questions) or disabled: what reprocessing the
# document would discard. Chunks added by hand are kept by reprocessing, so they do not count.
HAND_EDITED = Q(origin=Chunk.Origin.PARSED) & (Q(edited_at__isnull=False) | Q(enabled=False))


def hand_edits(document: Document) -> int:
    """How many of the document's chunks carry hand edits that reprocessing would discard."""
    return Chunk.objects.filter(HAND_EDITED, document_id=document.pk).count()


def knowledge_bases(tenant: Tenant) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant=tenant)


_KNOWLEDGE_BASE = Columns(KnowledgeBase)
_KNOWLEDGE_BASES_BY_ID = (
    f"SELECT {_KNOWLEDGE_BASE.sql} "  # noqa: S608
    f"FROM {KnowledgeBase._meta.db_table} WHERE tenant_id = %s AND id = ANY(%s)"
)


def knowledge_bases_by_id(tenant: Tenant, ids: list[int]) -> dict[int, KnowledgeBase]:
    """The tenant's knowledge bases among ``ids``, by id (a foreign or missing one is absent).
    Every search reads them first: as one raw query on a plain cursor (``rag_project.rawsql``),
    which spares the ORM compiling the query and ``Manager.raw`` mapping its columns again on
    every request."""
    with connection.prepared_cursor() as cursor:
        cursor.execute(_KNOWLEDGE_BASES_BY_ID, [tenant.pk, list(ids)])
        rows = cursor.fetchall()
    found = (_KNOWLEDGE_BASE.load(row, connection) for row in rows)
    return {kb.pk: kb for kb in found}


def get_knowledge_base(tenant: Tenant, knowledge_base_id: int) -> KnowledgeBase:
    """Raises KnowledgeBase.DoesNotExist for a missing or foreign knowledge base."""
    return knowledge_bases(tenant).get(pk=knowledge_base_id)


def get_knowledge_base_by_name(tenant: Tenant, name: str) -> KnowledgeBase:
    return knowledge_bases(tenant).get(name=name)


def documents(tenant: Tenant, knowledge_base: KnowledgeBase | None = None) -> QuerySet[Document]:
    queryset = Document.objects.filter(tenant=tenant)
    if knowledge_base is not None:
        queryset = queryset.filter(knowledge_base=knowledge_base)
    return queryset


def get_document(tenant: Tenant, document_id: int) -> Document:
    """Raises Document.DoesNotExist for a missing or foreign document."""
    return documents(tenant).select_related("knowledge_base").get(pk=document_id)


def chunks(tenant: Tenant, knowledge_base: KnowledgeBase) -> QuerySet[Chunk]:
    return Chunk.objects.filter(tenant=tenant, knowledge_base=knowledge_base)
