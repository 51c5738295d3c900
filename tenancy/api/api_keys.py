"""``/api/v1/api-keys``: list, create (the secret is shown once), retrieve, revoke. For the
tenant's owners and admins, signed in; API keys cannot manage keys."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from tenancy import selectors
from tenancy.api.fields import id_field
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.models import ApiKey
from tenancy.roles import Permission
from tenancy.services import create_api_key, revoke_api_key

TAGS = ["API keys"]


class ApiKeySerializer(serializers.ModelSerializer):
    knowledge_base_ids = serializers.SerializerMethodField(
        help_text="The knowledge bases the key is restricted to (empty: none left, so it may "
        "use none); null: all of the tenant's."
    )
    restricted = serializers.SerializerMethodField(
        help_text="True: the key may use only knowledge_base_ids, even when none are left."
    )
    created_by = serializers.SerializerMethodField()
    is_active = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "knowledge_base_ids",
            "restricted",
            "created_by",
            "created_at",
            "last_used_at",
            "revoked_at",
            "is_active",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "prefix": {"help_text": "The key's first characters: identifies it, reveals nothing."},
            "last_used_at": {"help_text": "Recorded at most once a minute."},
        }

    def get_knowledge_base_ids(self, key: ApiKey) -> list[int] | None:
        ids = _restriction(key)
        return None if ids is None else sorted(ids)

    def get_restricted(self, key: ApiKey) -> bool:
        return _restriction(key) is not None

    def get_created_by(self, key: ApiKey) -> str | None:
        return key.created_by.get_username() if key.created_by else None

    def get_is_active(self, key: ApiKey) -> bool:
        return key.revoked_at is None


def _restriction(key: ApiKey) -> frozenset[int] | None:
    """The key's restriction from its prefetched knowledge bases (``selectors.api_keys``)."""
    return selectors.restriction(key.restricted, (kb.pk for kb in key.knowledge_bases.all()))


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True, help_text="The secret key. Shown this once; only its hash is stored."
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=ApiKey.Scope.choices),
        min_length=1,
        max_length=2,
        default=[ApiKey.Scope.READ],
        help_text="read: list, retrieve, search. write: create, upload, update, delete.",
    )
    knowledge_base_ids = serializers.ListField(
        child=id_field(),
        max_length=1000,
        default=list,
        help_text="Restrict the key to these knowledge bases; empty: all of the tenant's.",
    )

    def validate_name(self, value: str) -> str:
        if selectors.api_keys(self.context["tenant"]).filter(name=value).exists():
            raise serializers.ValidationError("An API key with this name already exists.")
        return value

    def validate_knowledge_base_ids(self, value: list[int]) -> list:
        wanted = list(dict.fromkeys(value))
        # The tenant's knowledge bases through the relation knowledge declares on Tenant.
        found = {kb.pk: kb for kb in self.context["tenant"].knowledge_bases.filter(pk__in=wanted)}
        missing = [pk for pk in wanted if pk not in found]
        if missing:
            raise serializers.ValidationError(f"Knowledge base {missing[0]} not found.")
        return [found[pk] for pk in wanted]


class ApiKeyListView(TenantAPIView):
    required = {"GET": Permission.MANAGE_API_KEYS, "POST": Permission.MANAGE_API_KEYS}

    @extend_schema(
        summary="List API keys",
        description="Newest first, revoked ones included. Secrets are never shown again.",
        responses={200: ApiKeySerializer(many=True), **error_responses()},
        tags=TAGS,
    )
    def get(self, request):
        return self.paginated(selectors.api_keys(self.tenant), ApiKeySerializer)

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
    required = {"GET": Permission.MANAGE_API_KEYS}

    @extend_schema(
        summary="Retrieve an API key",
        responses={200: ApiKeySerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        return Response(ApiKeySerializer(selectors.access_api_key(self.tenant, pk)).data)


class ApiKeyRevokeView(TenantAPIView):
    required = {"POST": Permission.MANAGE_API_KEYS}

    @extend_schema(
        summary="Revoke an API key",
        description="The key stops working at once: its next request answers 401. Revoking "
        "a revoked key changes nothing.",
        request=None,
        responses={200: ApiKeySerializer, **error_responses(404)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        key = revoke_api_key(tenant=self.tenant, api_key=selectors.access_api_key(self.tenant, pk))
        return Response(ApiKeySerializer(key).data)
