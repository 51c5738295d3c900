"""``/api/v1/api-keys``: list, create (the secret is shown once), retrieve, revoke. For the
tenant's owners and admins, signed in; API keys cannot manage keys."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from knowledge import access
from knowledge.api.serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeySerializer,
)
from knowledge.services.api_keys import create_api_key, revoke_api_key
from rag_project.api.schema import error_responses
from rag_project.api.tenancy import Action
from rag_project.api.views import TenantAPIView

TAGS = ["API keys"]


class ApiKeyListView(TenantAPIView):
    actions = {"GET": Action.MANAGE_API_KEYS, "POST": Action.MANAGE_API_KEYS}

    @extend_schema(
        summary="List API keys",
        description="Newest first, revoked ones included. Secrets are never shown again.",
        responses={200: ApiKeySerializer(many=True), **error_responses()},
        tags=TAGS,
    )
    def get(self, request):
        return self.paginated(access.api_keys(self.tenant), ApiKeySerializer)

    @extend_schema(
        summary="Create an API key",
        description="The answer holds the secret `key`, shown this once.",
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer, **error_responses(400)},
        tags=TAGS,
    )
    def post(self, request):
        serializer = ApiKeyCreateSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key, secret = create_api_key(
            tenant=self.tenant,
            name=data["name"],
            scopes=data["scopes"],
            knowledge_bases=data["knowledge_base_ids"],
            created_by=request.user,
        )
        key.key = secret
        return Response(ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(TenantAPIView):
    actions = {"GET": Action.MANAGE_API_KEYS}

    @extend_schema(
        summary="Retrieve an API key",
        responses={200: ApiKeySerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        return Response(ApiKeySerializer(access.access_api_key(self.tenant, pk)).data)


class ApiKeyRevokeView(TenantAPIView):
    actions = {"POST": Action.MANAGE_API_KEYS}

    @extend_schema(
        summary="Revoke an API key",
        description="The key stops working at once: its next request answers 401. Revoking "
        "a revoked key changes nothing.",
        request=None,
        responses={200: ApiKeySerializer, **error_responses(404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        key = revoke_api_key(tenant=self.tenant, api_key=access.access_api_key(self.tenant, pk))
        return Response(ApiKeySerializer(key).data)
