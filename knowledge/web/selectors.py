"""Reads of web sources, through the tenant and an API key's knowledge-base restriction
(``allowed``, as in ``knowledge.access``): a foreign or not-allowed source raises
WebSource.DoesNotExist exactly like a missing one."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import QuerySet

from knowledge.models import KnowledgeBase
from knowledge.web.models import WebSource
from tenancy.models import Tenant


def web_sources(tenant: Tenant, knowledge_base: KnowledgeBase | None = None) -> QuerySet:
    queryset = WebSource.objects.filter(tenant=tenant)
    if knowledge_base is not None:
        queryset = queryset.filter(knowledge_base=knowledge_base)
    return queryset.order_by("pk")


def access_web_source(
    tenant: Tenant, source_id: int, allowed: Collection[int] | None = None
) -> WebSource:
    queryset = web_sources(tenant)
    if allowed is not None:
        queryset = queryset.filter(knowledge_base_id__in=list(allowed))
    return queryset.get(pk=source_id)
