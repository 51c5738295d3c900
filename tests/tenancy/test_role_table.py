"""One role table: the REST API and the admin decide every permission of every role alike.

Both read ``tenancy.roles``; this keeps them from drifting apart again (the admin once let an
editor do what the API refused). Each decision is checked for a user who is a member of two
tenants with different roles, so a decision made for the wrong tenant shows up too.
"""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from rest_framework.request import Request

from tenancy.admin.scoping import allowed
from tenancy.api.access import TENANT_HEADER, resolve_access
from tenancy.models import Membership
from tenancy.roles import Permission, role_permissions
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

ROLES = list(Membership.Role)


def api_decides(user, tenant, permission: Permission) -> bool:
    """What the API's Access says, for a session user acting in ``tenant`` (X-Tenant)."""
    request = Request(RequestFactory().get("/api/v1/me", headers={TENANT_HEADER: tenant.slug}))
    request.user, request.auth = user, None  # a signed-in session, as SessionAuthentication sets
    return resolve_access(request).can(permission)


def admin_decides(user, tenant, permission: Permission) -> bool:
    """What the admin's scoping says for the same user and tenant."""
    request = RequestFactory().get("/admin/")
    request.user = user
    return allowed(request, permission, tenant.pk)


@pytest.mark.parametrize("role", ROLES)
def test_the_admin_and_the_api_allow_each_role_the_same(role, tenant, other_tenant):
    # The other membership has a different role, with different permissions.
    elsewhere = Membership.Role.VIEWER if role != Membership.Role.VIEWER else Membership.Role.OWNER
    user = UserFactory(is_staff=True)
    MembershipFactory(user=user, tenant=tenant, role=role)
    MembershipFactory(user=user, tenant=other_tenant, role=elsewhere)

    for where, its_role in ((tenant, role), (other_tenant, elsewhere)):
        for permission in Permission:
            api = api_decides(user, where, permission)
            admin = admin_decides(user, where, permission)
            expected = permission in role_permissions(its_role)
            assert (api, admin) == (expected, expected), (
                f"{its_role} in {where.slug}, {permission}: API {api}, admin {admin}, "
                f"role table {expected}"
            )


def test_the_roles_differ_so_the_comparison_can_fail():
    """Were every role allowed everything (or nothing), the test above would prove nothing."""
    decisions = {role: role_permissions(role) for role in ROLES}
    assert decisions[Membership.Role.VIEWER] == {Permission.READ}
    assert Permission.MANAGE_API_KEYS not in decisions[Membership.Role.EDITOR]
    assert decisions[Membership.Role.OWNER] == set(Permission)
