"""The tenant of a request and what the caller may do in it: the one place that decides.

- API key: the key's tenant; what it may do comes from its scopes, and which knowledge bases
  it sees from its restriction list.
- Session user: the tenant of their membership. A user in several tenants names one with the
  ``X-Tenant`` header (the tenant's slug); what they may do comes from their role there.

Roles: viewer reads and searches; editor also uploads, reprocesses and deletes documents;
admin and owner also create, change and delete knowledge bases and manage API keys.
Scopes: ``read`` reads and searches; ``write`` does everything else a key may do. Keys cannot
manage keys: a restricted or read-only key could otherwise mint itself a wider one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rest_framework import status
from rest_framework.exceptions import APIException, NotAuthenticated, PermissionDenied

from knowledge.access import allowed_knowledge_base_ids, memberships
from knowledge.models import ApiKey, Membership, Tenant

TENANT_HEADER = "X-Tenant"


class Action(StrEnum):
    READ = "read"  # list, retrieve, search
    WRITE_DOCUMENTS = "write_documents"  # upload, reprocess, delete documents
    MANAGE_KNOWLEDGE_BASES = "manage_knowledge_bases"  # create, change, delete
    MANAGE_API_KEYS = "manage_api_keys"  # list, create, revoke


Role = Membership.Role
ROLE_ACTIONS: dict[str, frozenset[Action]] = {
    Role.VIEWER: frozenset({Action.READ}),
    Role.EDITOR: frozenset({Action.READ, Action.WRITE_DOCUMENTS}),
    Role.ADMIN: frozenset(Action),
    Role.OWNER: frozenset(Action),
}
SCOPE_ACTIONS: dict[str, frozenset[Action]] = {
    ApiKey.Scope.READ: frozenset({Action.READ}),
    ApiKey.Scope.WRITE: frozenset({Action.WRITE_DOCUMENTS, Action.MANAGE_KNOWLEDGE_BASES}),
}


class TenantRequired(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "tenant_required"
    default_detail = f"You belong to several tenants: name one in the {TENANT_HEADER} header."


@dataclass(frozen=True)
class Access:
    """Who is calling, in which tenant, allowed to do what, on which knowledge bases."""

    tenant: Tenant
    actions: frozenset[Action]
    # None: every knowledge base of the tenant; else only these ids (an API key's restriction).
    knowledge_base_ids: frozenset[int] | None = None
    role: str | None = None
    api_key: ApiKey | None = None

    def can(self, action: Action) -> bool:
        return action in self.actions

    def require(self, action: Action) -> None:
        """Raise PermissionDenied (403) unless the caller may do ``action``."""
        if self.can(action):
            return
        if self.api_key is not None:
            if action == Action.MANAGE_API_KEYS:
                raise PermissionDenied(
                    "API keys cannot manage API keys; sign in as a tenant owner or admin.",
                    code="insufficient_scope",
                )
            scope = ApiKey.Scope.READ if action == Action.READ else ApiKey.Scope.WRITE
            raise PermissionDenied(
                f"This API key lacks the '{scope}' scope.", code="insufficient_scope"
            )
        raise PermissionDenied(
            f"Your role in this tenant ({self.role}) does not allow this.", code="insufficient_role"
        )

    def allows_knowledge_base(self, knowledge_base_id: int) -> bool:
        return self.knowledge_base_ids is None or knowledge_base_id in self.knowledge_base_ids


def resolve_access(request) -> Access:
    """The tenant of ``request`` and what its caller may do there (see the module docstring).
    Raises NotAuthenticated (401), TenantRequired (400) or PermissionDenied (403)."""
    if isinstance(request.auth, ApiKey):
        key = request.auth
        actions = frozenset().union(*(SCOPE_ACTIONS.get(s, frozenset()) for s in key.scopes))
        return Access(
            tenant=key.tenant,
            actions=actions,
            knowledge_base_ids=allowed_knowledge_base_ids(key),
            api_key=key,
        )
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
    return Access(tenant=chosen.tenant, actions=ROLE_ACTIONS[chosen.role], role=chosen.role)
