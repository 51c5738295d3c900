"""People in tenants: who belongs where, with which role."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from knowledge.models import Membership, Tenant


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
