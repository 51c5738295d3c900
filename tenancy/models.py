"""Tenants and the people and programs acting in them.

The tables keep the names they had when these models lived in ``knowledge``
(``knowledge_tenant``, ``knowledge_membership``, ``knowledge_apikey``): the move was a change of
Django's state only, so no deployment copies or loses a row. An API key's restriction to some
knowledge bases is declared on ``knowledge.KnowledgeBase`` (``restricted_api_keys``), so this app
does not depend on ``knowledge``; here it reads ``api_key.knowledge_bases``. Whether a key is
restricted at all is its own ``restricted`` field, not the presence of those rows: a restricted
key whose knowledge bases are all deleted uses none, never every one.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models


class Tenant(models.Model):
    """An organisation: the unit of isolation. Nothing is shared between tenants."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "knowledge_tenant"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in a tenant; what each role may do is ``tenancy.roles.ROLE_PERMISSIONS``."""

    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        EDITOR = "editor", "Editor"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "knowledge_membership"
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ApiKey(models.Model):
    """A tenant's key for programs. Only a SHA-256 of the secret is stored; ``prefix`` (the
    first characters of the key, shown in lists) identifies it without revealing it. What its
    scopes allow is ``tenancy.roles.SCOPE_PERMISSIONS``."""

    class Scope(models.TextChoices):
        READ = "read", "Read (list and search)"
        WRITE = "write", "Write (create, upload, delete)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=10, choices=Scope.choices), default=list)
    # True: the key may use only the knowledge bases of its restriction rows, which deleting
    # them empties; with none left it uses none. False: every knowledge base of its tenant.
    restricted = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "knowledge_apikey"
        verbose_name = "API key"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="apikey_unique_name_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
