"""The tenant of a request and what its caller may do there: the one place that decides.

- API key: the key's tenant; its permissions come from its scopes, and which knowledge bases it
  sees from its restriction (``tenancy.selectors.restriction``: a restricted key with no
  knowledge base left sees none).
- Session user: the tenant of their membership. A user in several tenants names one with the
  ``X-Tenant`` header (the tenant's slug); their permissions come from their role there.

What each role and scope may do is ``tenancy.roles``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import status
from rest_framework.exceptions import APIException, NotAuthenticated, PermissionDenied

from tenancy.models import ApiKey, Tenant
from tenancy.roles import Permission, role_permissions, scope_for, scope_permissions
from tenancy.selectors import allowed_knowledge_base_ids, memberships

TENANT_HEADER = "X-Tenant"


class TenantRequired(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "tenant_required"
    default_detail = f"You belong to several tenants: name one in the {TENANT_HEADER} header."


@dataclass(frozen=True)
class Access:
    """Who is calling, in which tenant, allowed to do what, on which knowledge bases."""

    tenant: Tenant
    permissions: frozenset[Permission]
    # None: every knowledge base of the tenant; else only these ids (an API key's restriction,
    # empty for a restricted key whose knowledge bases were all deleted: it may use none).
    knowledge_base_ids: frozenset[int] | None = None
    role: str | None = None
    api_key: ApiKey | None = None

    def can(self, permission: Permission) -> bool:
        return permission in self.permissions

    def require(self, permission: Permission) -> None:
        """Raise PermissionDenied (403) unless the caller may do ``permission``."""
        if self.can(permission):
            return
        if self.api_key is not None:
            if permission == Permission.MANAGE_API_KEYS:
                raise PermissionDenied(
                    "API keys cannot manage API keys; sign in as a tenant owner or admin.",
                    code="insufficient_scope",
                )
            raise PermissionDenied(
                f"This API key lacks the '{scope_for(permission)}' scope.",
                code="insufficient_scope",
            )
        raise PermissionDenied(
            f"Your role in this tenant ({self.role}) does not allow this.", code="insufficient_role"
        )

    def allows_knowledge_base(self, knowledge_base_id: int) -> bool:
        return self.knowledge_base_ids is None or knowledge_base_id in self.knowledge_base_ids


def access_for_key(key: ApiKey) -> Access:
    """What an authenticated API key may do: its tenant, its scopes' permissions, and its
    knowledge-base restriction (the REST API's requests and the MCP server's tool calls)."""
    return Access(
        tenant=key.tenant,
        permissions=scope_permissions(key.scopes),
        knowledge_base_ids=allowed_knowledge_base_ids(key),
        api_key=key,
    )


def resolve_access(request) -> Access:
    """The tenant of ``request`` and what its caller may do there (see the module docstring).
    Raises NotAuthenticated (401), TenantRequired (400) or PermissionDenied (403)."""
    if isinstance(request.auth, ApiKey):
        return access_for_key(request.auth)
    user = request.user
    if user is None or not user.is_authenticated:
        raise NotAuthenticated()
    member_of = list(memberships(user))
    wanted = request.headers.get(TENANT_HEADER, "").strip()
    if wanted:
        chosen = next((m for m in member_of if m.tenant.slug == wanted), None)
        if chosen is None:  # whether the tenant exists or not: it is not yours
            raise PermissionDenied(
                f"You are not a member of tenant '{wanted}'.", code="not_a_member"
            )
    elif len(member_of) == 1:
        chosen = member_of[0]
    elif not member_of:
        raise PermissionDenied("Your account belongs to no tenant.", code="not_a_member")
    else:
        raise TenantRequired(
            f"You belong to several tenants ({', '.join(m.tenant.slug for m in member_of)}): "
            f"name one in the {TENANT_HEADER} header."
        )
    return Access(tenant=chosen.tenant, permissions=role_permissions(chosen.role), role=chosen.role)
