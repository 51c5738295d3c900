"""One search on behalf of a caller, as the REST endpoints and the MCP tools run it: the request
validated by the REST serializers (so both answer the same messages), every knowledge base
checked against the caller's tenant and key restriction (one outside it is as missing as one
that does not exist), then ``RAGService``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.serializers import Serializer

from knowledge.models import KnowledgeBase
from retrieval.search import KnowledgeBaseNotFound, RAGService, SearchResult
from tenancy.api.access import Access


def run_search(
    access: Access,
    data: Mapping[str, Any],
    serializer_class: type[Serializer],
    knowledge_base_id: int | None = None,
) -> tuple[SearchResult, dict[str, Any]]:
    """Search one knowledge base (``knowledge_base_id``) or the request's
    ``knowledge_base_ids``; returns the result and the validated request. Raises DRF's
    ValidationError (400) or NotFound (404), or the model's DoesNotExist (404)."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    options = serializer.search_options()
    query = serializer.validated_data["query"]
    if knowledge_base_id is not None:
        result = search_knowledge_base(access, query, knowledge_base_id, **options)
        return result, serializer.validated_data
    ids = serializer.validated_data["knowledge_base_ids"]
    for kb_id in ids:
        if not access.allows_knowledge_base(kb_id):
            raise NotFound(f"Knowledge base {kb_id} not found.")
    result = RAGService(access.tenant).search_multiple_knowledge_bases(query, ids, **options)
    return result, serializer.validated_data


def search_knowledge_base(
    access: Access,
    query: str,
    knowledge_base_id: int,
    **options: Any,
) -> SearchResult:
    """One knowledge base searched for a caller. Raises KnowledgeBase.DoesNotExist (404) for
    one outside the key's restriction or the tenant, or missing. The restriction is checked
    here and the tenant by the service's one read of the knowledge base: no read of its own
    (with its document counts, ``knowledge.access`` made the costliest query of a search)."""
    if not access.allows_knowledge_base(knowledge_base_id):
        raise KnowledgeBase.DoesNotExist
    try:
        return RAGService(access.tenant).search(query, knowledge_base_id, **options)
    except KnowledgeBaseNotFound:
        raise KnowledgeBase.DoesNotExist from None
