"""Search and LLM context over one knowledge base or several.

``POST /knowledge-bases/{id}/search`` and ``POST /search`` answer ``results`` (every score and
rank of each hit, its document title, page, offsets and metadata) and a ``trace``: a summary by
default, everything with ``explain: true``. ``POST /knowledge-bases/{id}/context`` and
``POST /context`` run the same search and answer ``context``: the hits formatted for an LLM
prompt (numbered citations and sources, within ``max_chars``).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from retrieval.api.searching import run_search
from retrieval.api.serializers import (
    ContextRequestSerializer,
    ContextResponseSerializer,
    MultiContextRequestSerializer,
    MultiSearchRequestSerializer,
    SearchOptionsSerializer,
    SearchResponseSerializer,
    present,
)
from retrieval.search import RAGService, SearchResult
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView

TAGS = ["search"]


class _SearchView(TenantAPIView):
    """Searching is reading: the ``read`` scope and every role may do it."""

    request_serializer = SearchOptionsSerializer

    def _search(self, request, pk: int | None) -> tuple[SearchResult, dict]:
        return run_search(self.access, request.data, self.request_serializer, pk)

    def _context(self, request, pk: int | None) -> Response:
        result, data = self._search(request, pk)
        body = present(result, data["explain"])
        body["context"] = RAGService.format_for_context(result.hits, data["max_chars"])
        return Response(body)  # ContextResponseSerializer's shape (see present)


class KnowledgeBaseSearchView(_SearchView):
    @extend_schema(
        summary="Search a knowledge base",
        request=SearchOptionsSerializer,
        responses={200: SearchResponseSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        result, data = self._search(request, pk)
        return Response(present(result, data["explain"]))  # SearchResponseSerializer's shape


class SearchView(_SearchView):
    request_serializer = MultiSearchRequestSerializer

    @extend_schema(
        summary="Search several knowledge bases",
        description="Each knowledge base runs its own legs with its own settings; the hits "
        "are fused into one ranking. Any id that is not yours (or not allowed to a restricted "
        "key) answers 404.",
        request=MultiSearchRequestSerializer,
        responses={200: SearchResponseSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def post(self, request):
        result, data = self._search(request, None)
        return Response(present(result, data["explain"]))  # SearchResponseSerializer's shape


class KnowledgeBaseContextView(_SearchView):
    request_serializer = ContextRequestSerializer

    @extend_schema(
        summary="Context for an LLM from a knowledge base",
        request=ContextRequestSerializer,
        responses={200: ContextResponseSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        return self._context(request, pk)


class ContextView(_SearchView):
    request_serializer = MultiContextRequestSerializer

    @extend_schema(
        summary="Context for an LLM from several knowledge bases",
        request=MultiContextRequestSerializer,
        responses={200: ContextResponseSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def post(self, request):
        return self._context(request, None)
