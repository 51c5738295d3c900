"""Tenants and their members."""

from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from knowledge.models import Tenant


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
