"""Reads of tenancy: API keys of a tenant, a key by its secret, a user's memberships."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from django.db import connection
from django.db.models import QuerySet

from rag_project.rawsql import Columns
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


_KEY, _TENANT = Columns(ApiKey, "k"), Columns(Tenant, "t")
_RESTRICTION = ApiKey.knowledge_bases.through._meta.db_table
# The key (its ``restricted`` among its columns), its tenant and its knowledge-base restriction
# rows (read by allowed_knowledge_base_ids) in one round trip, on every request authenticated by
# a key. Raw SQL: the ORM would compile its query (select_related, an ArraySubquery) again on
# every request, which costs more than running it (rag_project.rawsql).
_FIND_KEY = (
    f"SELECT {_KEY.sql}, {_TENANT.sql}, "  # noqa: S608
    f"ARRAY(SELECT r.knowledgebase_id FROM {_RESTRICTION} r WHERE r.apikey_id = k.id) "
    f"FROM {ApiKey._meta.db_table} k JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id "
    "WHERE k.prefix = %s"
)


def find_api_key(raw_key: str) -> ApiKey | None:
    """The key (revoked or not) whose secret is ``raw_key``: looked up by its prefix (unique),
    then compared in constant time with the stored hash. None when there is no such key."""
    prefix = split_key(raw_key)
    if prefix is None:
        return None
    with connection.prepared_cursor() as cursor:
        cursor.execute(_FIND_KEY, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    keys, tenants = len(_KEY), len(_TENANT)
    key = _KEY.load(row[:keys], connection)
    key.tenant = _TENANT.load(row[keys : keys + tenants], connection)
    key.restricted_to = row[keys + tenants]
    if not hmac.compare_digest(key.secret_hash, hash_key(raw_key)):
        return None
    return key


def restriction(restricted: bool, ids: Iterable[int]) -> frozenset[int] | None:
    """The knowledge bases a key may use, from its ``restricted`` and its restriction rows'
    ids: None (every one of its tenant's) only for a key that is not restricted and names
    none. A restricted key whose knowledge bases were all deleted gets the empty set: it may
    use none. Rows on a key not marked restricted restrict it all the same: either sign of a
    restriction narrows, neither widens."""
    ids = frozenset(ids)
    return ids if restricted or ids else None


def allowed_knowledge_base_ids(api_key: ApiKey) -> frozenset[int] | None:
    """``restriction`` of a key (its rows read with it by ``find_api_key``, else asked for):
    None when it may use every knowledge base of its tenant, else the ids it may use."""
    ids = getattr(api_key, "restricted_to", None)
    if ids is None:
        ids = api_key.knowledge_bases.values_list("pk", flat=True)
    return restriction(api_key.restricted, ids)


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
