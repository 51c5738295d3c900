"""The permission every tenant endpoint uses: resolve the caller's tenant, then check that
the caller may do what the view says the request does."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from tenancy.api.access import resolve_access


class TenantAccess(BasePermission):
    """Sets ``request.access`` and ``request.tenant``; the view's ``required_permission(request)``
    names the Permission needed (403 when the role or scopes lack it)."""

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False  # DRF answers 401 with the authentication challenge
        access = resolve_access(request)
        request.access = access
        request.tenant = access.tenant
        access.require(view.required_permission(request))
        return True
