"""One search on behalf of a caller, as the REST endpoints and the MCP tools run it: the request
validated by the REST serializers (so both answer the same messages), every knowledge base
checked against the caller's tenant and key restriction (one outside it is as missing as one
that does not exist), then ``RAGService``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.serializers import Serializer

from knowledge import access as knowledge_access
from retrieval.search import RAGService, SearchResult
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
    service = RAGService(access.tenant)
    options = serializer.search_options()
    query = serializer.validated_data["query"]
    if knowledge_base_id is not None:
        kb = knowledge_access.access_knowledge_base(
            access.tenant, knowledge_base_id, access.knowledge_base_ids
        )
        return service.search(query, kb.pk, **options), serializer.validated_data
    ids = serializer.validated_data["knowledge_base_ids"]
    for kb_id in ids:
        if not access.allows_knowledge_base(kb_id):
            raise NotFound(f"Knowledge base {kb_id} not found.")
    return service.search_multiple_knowledge_bases(query, ids, **options), serializer.validated_data
