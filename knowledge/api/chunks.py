"""Chunks of a knowledge base or of one document, in reading order, and one chunk by id; and
curation: PATCH a chunk (text, extra keywords and questions, enabled), add one to a document."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.fields import BooleanField
from rest_framework.response import Response

from knowledge import access
from knowledge.api.serializers import (
    ChunkCreateSerializer,
    ChunkSerializer,
    ChunkUpdateSerializer,
)
from knowledge.services.curation import ChunkChanges, add_chunk, update_chunk
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.roles import Permission

TAGS = ["chunks"]
TOKENS_PARAMETER = OpenApiParameter(
    "include_tokens",
    OpenApiTypes.BOOL,
    description="Include each chunk's analysed tokens (what BM25 indexes).",
)


def _include_tokens(request) -> bool:
    return request.query_params.get("include_tokens", "").lower() in BooleanField.TRUE_VALUES


def person(request):
    """The signed-in user who made a change, or None for an API key (which is nobody)."""
    user = request.user
    return user if isinstance(user, get_user_model()) else None


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
    required = {"POST": Permission.WRITE_DOCUMENTS}

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

    @extend_schema(
        summary="Add a chunk by hand",
        description="Appended after the document's last chunk, analysed and embedded before the "
        "answer; the next search finds it. Kept when the document is reprocessed.",
        request=ChunkCreateSerializer,
        responses={201: ChunkSerializer, **error_responses(400, 404, 409, 503)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        document = access.access_document(self.tenant, pk, self.access.knowledge_base_ids)
        serializer = ChunkCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        chunk = add_chunk(
            tenant=self.tenant, document=document, user=person(request), **serializer.validated_data
        )
        return Response(ChunkSerializer(chunk).data, status=status.HTTP_201_CREATED)


class ChunkDetailView(TenantAPIView):
    required = {"PATCH": Permission.WRITE_DOCUMENTS}

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

    @extend_schema(
        summary="Edit a chunk",
        description="Change its text, extra keywords and questions (re-analysed, and for text "
        "or questions re-embedded, before the answer), or disable/enable it (a disabled chunk "
        "is kept and listed, never returned by search). The next search sees the change. 409 "
        "while its document is being processed; 503 when the embedder cannot embed the new "
        "text (nothing is changed).",
        request=ChunkUpdateSerializer,
        responses={200: ChunkSerializer, **error_responses(400, 404, 409, 503)},
        tags=TAGS,
    )
    def patch(self, request, pk: int):
        chunk = access.access_chunk(self.tenant, pk, self.access.knowledge_base_ids)
        serializer = ChunkUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changes = ChunkChanges(**serializer.validated_data)
        chunk = update_chunk(tenant=self.tenant, chunk=chunk, changes=changes, user=person(request))
        return Response(ChunkSerializer(chunk).data)
