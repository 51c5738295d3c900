"""Reads, always through the tenant: another tenant's object looks exactly like a missing one."""

from __future__ import annotations

from django.db.models import QuerySet

from knowledge.models import Chunk, Document, KnowledgeBase
from tenancy.models import Tenant


def knowledge_bases(tenant: Tenant) -> QuerySet[KnowledgeBase]:
    return KnowledgeBase.objects.filter(tenant=tenant)


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
