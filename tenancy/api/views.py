"""The base of every tenant endpoint, and ``GET /api/v1/me``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from tenancy.api.access import Access
from tenancy.api.pagination import Pagination
from tenancy.api.permissions import TenantAccess
from tenancy.api.schema import error_responses
from tenancy.roles import Permission


class TenantAPIView(APIView):
    """An endpoint acting inside the caller's tenant. Subclasses map HTTP methods to the
    Permission they need in ``required`` (GET, HEAD and OPTIONS need READ unless said
    otherwise)."""

    permission_classes = [TenantAccess]
    pagination_class = Pagination
    required: dict[str, Permission] = {}

    def required_permission(self, request) -> Permission:
        return self.required.get(request.method, Permission.READ)

    @property
    def access(self) -> Access:
        return self.request.access

    @property
    def tenant(self):
        return self.request.access.tenant

    def paginated(self, queryset, serializer_class, **context) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        data = serializer_class(page, many=True, context={"request": self.request, **context}).data
        return paginator.get_paginated_response(data)


class TenantSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    slug = serializers.CharField()


class MeSerializer(serializers.Serializer):
    tenant = TenantSerializer()
    authenticated_by = serializers.ChoiceField(choices=["api_key", "session"])
    username = serializers.CharField(allow_null=True)
    role = serializers.CharField(allow_null=True, help_text="Session users: role in the tenant.")
    api_key_prefix = serializers.CharField(allow_null=True)
    scopes = serializers.ListField(child=serializers.CharField(), allow_null=True)
    knowledge_base_ids = serializers.ListField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Knowledge bases an API key is restricted to (empty: none left, so it may use "
        "none); null: all of the tenant's.",
    )
    restricted = serializers.BooleanField(
        help_text="True: the caller may use only knowledge_base_ids (an API key's restriction)."
    )
    actions = serializers.ListField(
        child=serializers.ChoiceField(choices=[p.value for p in Permission]),
        help_text="What the caller may do here.",
    )


class MeView(TenantAPIView):
    @extend_schema(
        summary="Who am I",
        description="The tenant the request acts in and what the caller may do there.",
        responses={200: MeSerializer, **error_responses(400)},
        tags=["identity"],
    )
    def get(self, request):
        access = self.access
        key = access.api_key
        data = {
            "tenant": access.tenant,
            "authenticated_by": "api_key" if key else "session",
            "username": None if key else request.user.get_username(),
            "role": access.role,
            "api_key_prefix": key.prefix if key else None,
            "scopes": sorted(key.scopes) if key else None,
            "knowledge_base_ids": (
                None if access.knowledge_base_ids is None else sorted(access.knowledge_base_ids)
            ),
            "restricted": access.knowledge_base_ids is not None,
            "actions": sorted(access.permissions),
        }
        return Response(MeSerializer(data).data)
