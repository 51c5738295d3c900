"""``/api/v1/knowledge-bases``: list, create, retrieve, update, delete."""

from __future__ import annotations

from dataclasses import replace

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from knowledge import access
from knowledge.api.serializers import KnowledgeBaseSerializer, KnowledgeBaseWriteSerializer
from knowledge.embeddings import EmbeddingConfig
from knowledge.embeddings.registry import settings_config
from knowledge.services.knowledge_bases import (
    create_knowledge_base,
    delete_knowledge_base,
    update_knowledge_base,
)
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.roles import Permission

TAGS = ["knowledge bases"]


def _embedding(data: dict | None) -> EmbeddingConfig | None:
    """The requested embedding with the deployment's connection settings (URL, key...)."""
    if not data:
        return None
    return replace(
        settings_config(),
        provider=data["provider"],
        model=data.get("model") or "",
        dimensions=data.get("dimensions"),
    )


class KnowledgeBaseListView(TenantAPIView):
    required = {"POST": Permission.MANAGE_KNOWLEDGE_BASES}

    @extend_schema(
        summary="List knowledge bases",
        description="The tenant's knowledge bases by id; a restricted API key sees only its own.",
        responses={200: KnowledgeBaseSerializer(many=True), **error_responses()},
        tags=TAGS,
    )
    def get(self, request):
        queryset = access.knowledge_bases(self.tenant, self.access.knowledge_base_ids)
        return self.paginated(queryset, KnowledgeBaseSerializer)

    @extend_schema(
        summary="Create a knowledge base",
        request=KnowledgeBaseWriteSerializer,
        responses={201: KnowledgeBaseSerializer, **error_responses(400)},
        tags=TAGS,
    )
    def post(self, request):
        if self.access.knowledge_base_ids is not None:
            raise PermissionDenied(
                "This API key is restricted to some knowledge bases; it cannot create others.",
                code="restricted_key",
            )
        serializer = KnowledgeBaseWriteSerializer(
            data=request.data, context={"tenant": self.tenant}
        )
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        kb = create_knowledge_base(
            tenant=self.tenant, embedding=_embedding(data.pop("embedding", None)), **data
        )
        kb = access.access_knowledge_base(self.tenant, kb.pk)
        return Response(KnowledgeBaseSerializer(kb).data, status=status.HTTP_201_CREATED)


class KnowledgeBaseDetailView(TenantAPIView):
    required = {
        "PATCH": Permission.MANAGE_KNOWLEDGE_BASES,
        "DELETE": Permission.MANAGE_KNOWLEDGE_BASES,
    }

    def _get(self, pk: int):
        return access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)

    @extend_schema(
        summary="Retrieve a knowledge base",
        responses={200: KnowledgeBaseSerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        return Response(KnowledgeBaseSerializer(self._get(pk)).data)

    @extend_schema(
        summary="Update a knowledge base",
        description="Retrieval settings (weights, top_k, score_threshold, rerank...) apply to "
        "the next search. Chunking settings apply to documents processed afterwards. New "
        "user_words re-analyse, and a new embedding re-embeds, the chunks in the background. "
        "An API key restricted to some knowledge bases cannot change the name (403 "
        "restricted_key): names are unique among all of the tenant's knowledge bases.",
        request=KnowledgeBaseWriteSerializer(partial=True),
        responses={200: KnowledgeBaseSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def patch(self, request, pk: int):
        kb = self._get(pk)
        restricted = self.access.knowledge_base_ids is not None
        serializer = KnowledgeBaseWriteSerializer(
            kb,
            data=request.data,
            partial=True,
            context={"tenant": self.tenant, "restricted": restricted},
        )
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        update_knowledge_base(
            tenant=self.tenant,
            knowledge_base=kb,
            user_words=changes.pop("user_words", None),
            embedding=_embedding(changes.pop("embedding", None)),
            changes=changes,
        )
        return Response(KnowledgeBaseSerializer(self._get(pk)).data)

    @extend_schema(
        summary="Delete a knowledge base",
        description="Deletes its documents, chunks, stored files and every tier of its BM25 "
        "index. API keys restricted to it and to no other knowledge base left are revoked.",
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(404)},
        tags=TAGS,
    )
    def delete(self, request, pk: int):
        delete_knowledge_base(tenant=self.tenant, knowledge_base=self._get(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
