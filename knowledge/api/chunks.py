"""Chunks of a knowledge base or of one document, in reading order, and one chunk by id."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.fields import BooleanField
from rest_framework.response import Response

from knowledge import access
from knowledge.api.serializers import ChunkSerializer
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView

TAGS = ["chunks"]
TOKENS_PARAMETER = OpenApiParameter(
    "include_tokens",
    OpenApiTypes.BOOL,
    description="Include each chunk's analysed tokens (what BM25 indexes).",
)


def _include_tokens(request) -> bool:
    return request.query_params.get("include_tokens", "").lower() in BooleanField.TRUE_VALUES


def _fields(queryset, include_tokens: bool):
    deferred = ["embedding"] if include_tokens else ["embedding", "tokens"]
    return queryset.defer(*deferred)


class KnowledgeBaseChunksView(TenantAPIView):
    @extend_schema(
        summary="List a knowledge base's chunks",
        description="By document, then position in the document.",
        parameters=[TOKENS_PARAMETER],
        responses={200: ChunkSerializer(many=True), **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        tokens = _include_tokens(request)
        queryset = _fields(access.chunks(self.tenant, kb), tokens)
        return self.paginated(queryset, ChunkSerializer, include_tokens=tokens)


class DocumentChunksView(TenantAPIView):
    @extend_schema(
        summary="List a document's chunks",
        description="By position in the document.",
        parameters=[TOKENS_PARAMETER],
        responses={200: ChunkSerializer(many=True), **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        document = access.access_document(self.tenant, pk, self.access.knowledge_base_ids)
        tokens = _include_tokens(request)
        queryset = access.chunks(self.tenant, document.knowledge_base, document)
        return self.paginated(_fields(queryset, tokens), ChunkSerializer, include_tokens=tokens)


class ChunkDetailView(TenantAPIView):
    @extend_schema(
        summary="Retrieve a chunk",
        parameters=[TOKENS_PARAMETER],
        responses={200: ChunkSerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        chunk = access.access_chunk(self.tenant, pk, self.access.knowledge_base_ids)
        context = {"include_tokens": _include_tokens(request)}
        return Response(ChunkSerializer(chunk, context=context).data)
