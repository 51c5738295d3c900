"""Reads of tenancy: API keys of a tenant, a key by its secret, a user's memberships."""

from __future__ import annotations

import hmac

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef, QuerySet

from tenancy.models import ApiKey, Membership, Tenant
from tenancy.services import hash_key, split_key


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
    # Its knowledge-base restriction comes in the same query (one round trip less for every
    # request authenticated by a key; read by allowed_knowledge_base_ids), as a subquery: an
    # aggregate grouped every key and tenant column. The prefix is unique: no ordering.
    restriction = ApiKey.knowledge_bases.through.objects.filter(apikey_id=OuterRef("pk"))
    found = list(
        ApiKey.objects.select_related("tenant")
        .filter(prefix=prefix)
        .annotate(restricted_to=ArraySubquery(restriction.values("knowledgebase_id")))
        .order_by()[:1]
    )
    key = found[0] if found else None
    if key is None or not hmac.compare_digest(key.secret_hash, hash_key(raw_key)):
        return None
    return key


def allowed_knowledge_base_ids(api_key: ApiKey) -> frozenset[int] | None:
    """The knowledge bases a key is restricted to, or None when it may use all of them (read
    with the key by ``find_api_key``, else asked for)."""
    ids = getattr(api_key, "restricted_to", None)
    if ids is None:
        ids = api_key.knowledge_bases.values_list("pk", flat=True)
    return frozenset(ids) or None


def memberships(user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug")


def tenant_roles(user) -> dict[int, str]:
    """``{tenant id: role}`` of a user (empty for an anonymous one)."""
    if user is None or not user.is_authenticated:
        return {}
    return dict(Membership.objects.filter(user=user).values_list("tenant_id", "role"))


def role_of(tenant: Tenant, user_id: int) -> str | None:
    """The role of a user in a tenant, None when not a member."""
    return (
        Membership.objects.filter(tenant=tenant, user_id=user_id)
        .values_list("role", flat=True)
        .first()
    )
