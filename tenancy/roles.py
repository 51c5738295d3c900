"""The one role table: what each member role and each API-key scope may do in a tenant.

Every entry point decides with it: the REST API (``tenancy.api.access``), the admin
(``tenancy.admin.scoping``) and in-process callers that act for a user. Roles: a viewer reads
and searches; an editor also uploads, reprocesses and deletes documents; admins and owners also
create, change and delete knowledge bases and manage API keys. Scopes: ``read`` reads and
searches; ``write`` does everything else a key may do. Keys never manage keys: a restricted or
read-only key could otherwise mint itself a wider one.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from tenancy.models import ApiKey, Membership


class Permission(StrEnum):
    READ = "read"  # list, retrieve, search, hit testing
    WRITE_DOCUMENTS = "write_documents"  # upload, reprocess, delete documents
    MANAGE_KNOWLEDGE_BASES = "manage_knowledge_bases"  # create, change, delete; index actions
    MANAGE_API_KEYS = "manage_api_keys"  # list, create, revoke


Role = Membership.Role
ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.READ}),
    Role.EDITOR: frozenset({Permission.READ, Permission.WRITE_DOCUMENTS}),
    Role.ADMIN: frozenset(Permission),
    Role.OWNER: frozenset(Permission),
}
SCOPE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    ApiKey.Scope.READ: frozenset({Permission.READ}),
    ApiKey.Scope.WRITE: frozenset({Permission.WRITE_DOCUMENTS, Permission.MANAGE_KNOWLEDGE_BASES}),
}


def role_permissions(role: str | None) -> frozenset[Permission]:
    """What a member of that role may do (nothing for no role or an unknown one)."""
    return ROLE_PERMISSIONS.get(role, frozenset()) if role else frozenset()


def scope_permissions(scopes: Iterable[str]) -> frozenset[Permission]:
    """What a key with those scopes may do."""
    return frozenset().union(*(SCOPE_PERMISSIONS.get(scope, frozenset()) for scope in scopes))


def scope_for(permission: Permission) -> str:
    """The scope a key needs for ``permission`` (keys never manage keys: no scope does)."""
    return ApiKey.Scope.READ if permission == Permission.READ else ApiKey.Scope.WRITE
