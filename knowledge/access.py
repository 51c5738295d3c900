"""Reads on behalf of a caller: through the tenant, and through an API key's knowledge-base
restriction when there is one (Zulip's ``access_*`` helpers).

``allowed`` is the set of knowledge-base ids a caller may see, or None for all of its tenant's.
Anything outside it raises the model's DoesNotExist, exactly like an id that does not exist:
another tenant's object, or a knowledge base a key is not allowed, looks missing.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection

from django.db.models import Count, Q, QuerySet

from knowledge import selectors
from knowledge.models import ApiKey, Chunk, Document, KnowledgeBase, Membership, Tenant
from knowledge.services.api_keys import hash_key, split_key

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
    """A knowledge base's documents, newest first."""
    queryset = selectors.documents(tenant, knowledge_base)
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


def api_keys(tenant: Tenant) -> QuerySet[ApiKey]:
    return (
        ApiKey.objects.filter(tenant=tenant)
        .select_related("created_by")
        .prefetch_related("knowledge_bases")
        .order_by("-pk")
    )


def access_api_key(tenant: Tenant, api_key_id: int) -> ApiKey:
    """Raises ApiKey.DoesNotExist for a missing or foreign key."""
    return api_keys(tenant).get(pk=api_key_id)


def find_api_key(raw_key: str) -> ApiKey | None:
    """The key (revoked or not) whose secret is ``raw_key``: looked up by its prefix, then
    compared in constant time with the stored hash. None when there is no such key."""
    prefix = split_key(raw_key)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
    if key is None or not hmac.compare_digest(key.secret_hash, hash_key(raw_key)):
        return None
    return key


def allowed_knowledge_base_ids(api_key: ApiKey) -> frozenset[int] | None:
    """The knowledge bases a key is restricted to, or None when it may use all of them."""
    ids = frozenset(api_key.knowledge_bases.values_list("pk", flat=True))
    return ids or None


def memberships(user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug")
