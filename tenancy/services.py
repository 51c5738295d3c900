"""Writes of tenancy: tenants, memberships, and API keys (created with a secret returned once,
revoked, their use recorded).

A key reads ``rag_<8 hex>_<secret>``. ``rag_<8 hex>`` is stored as ``prefix`` (shown in lists, it
identifies the key without revealing it); only the SHA-256 of the whole key is stored. Keys carry
256 random bits, so a fast hash is as safe as a slow one here: nobody can guess their way to a
preimage, and a lookup stays one indexed query plus a constant-time compare.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from tenancy.errors import DomainError, ErrorKind, ensure_tenant
from tenancy.models import ApiKey, Membership, Tenant

KEY_PREFIX = "rag_"
PREFIX_LENGTH = len(KEY_PREFIX) + 8
# last_used_at is written at most this often per key: a busy key does not cost a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class InvalidKnowledgeBases(DomainError):
    """A key was to be restricted to knowledge bases that are not the tenant's."""

    code = "invalid"
    kind = ErrorKind.INVALID


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def split_key(raw_key: str) -> str | None:
    """The stored prefix of a well-formed key, or None when the text cannot be one of ours."""
    if not raw_key.startswith(KEY_PREFIX) or len(raw_key) < PREFIX_LENGTH + 2:
        return None
    prefix, separator = raw_key[:PREFIX_LENGTH], raw_key[PREFIX_LENGTH]
    return prefix if separator == "_" else None


def _new_key() -> tuple[str, str]:
    while True:
        prefix = KEY_PREFIX + secrets.token_hex(4)
        if not ApiKey.objects.filter(prefix=prefix).exists():
            return prefix, f"{prefix}_{secrets.token_urlsafe(32)}"


def create_api_key(
    *,
    tenant: Tenant,
    name: str,
    scopes: Iterable[str] = (ApiKey.Scope.READ,),
    knowledge_bases: Iterable = (),
    created_by: AbstractBaseUser | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is not stored and cannot be shown
    again. ``knowledge_bases`` (``knowledge.models.KnowledgeBase`` rows) restricts the key to
    those (empty: every knowledge base). A restricted key stays restricted when its knowledge
    bases are deleted: with none left it may use none."""
    kbs = list(knowledge_bases)
    if any(kb.tenant_id != tenant.pk for kb in kbs):
        raise InvalidKnowledgeBases("a key can only be restricted to its tenant's knowledge bases")
    prefix, raw_key = _new_key()
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=prefix,
        secret_hash=hash_key(raw_key),
        scopes=sorted(set(scopes)),
        restricted=bool(kbs),
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    key.full_clean(exclude=["secret_hash"])
    with transaction.atomic():
        key.save()
        key.knowledge_bases.set(kbs)
    return key, raw_key


def revoke_api_key(*, tenant: Tenant, api_key: ApiKey) -> ApiKey:
    """Revoke a key: from now on every request with it answers 401. Revoking twice keeps the
    first revocation time."""
    ensure_tenant(api_key, tenant, "API key")
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db(fields=["revoked_at"])
    return api_key


def record_use(api_key: ApiKey) -> None:
    """Set ``last_used_at``, at most once per LAST_USED_RESOLUTION per key."""
    now = timezone.now()
    if api_key.last_used_at is not None and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ApiKey.objects.filter(stale, pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


# --------------------------------------------------------------------------- tenants, members
def get_or_create_tenant(name: str) -> Tenant:
    """The tenant of that name, created with a unique slug if it does not exist."""
    with transaction.atomic():
        tenant = Tenant.objects.filter(name=name).first()
        if tenant is not None:
            return tenant
        base = slugify(name, allow_unicode=False) or "tenant"
        slug, n = base, 1
        while Tenant.objects.filter(slug=slug).exists():
            n += 1
            slug = f"{base}-{n}"
        return Tenant.objects.create(name=name, slug=slug)


def set_membership(*, tenant: Tenant, user: AbstractBaseUser, role: str) -> Membership:
    """Make ``user`` a member of ``tenant`` with ``role`` (changing the role of an existing
    member)."""
    if role not in Membership.Role.values:
        raise ValueError(
            f"unknown role {role!r}; choose one of {', '.join(Membership.Role.values)}"
        )
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            tenant=tenant, user=user, defaults={"role": role}
        )
        if not created and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    return membership
