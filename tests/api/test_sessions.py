"""Session users in the API, on knowledge-base pages: writes need the CSRF token, and the
browsable API renders. (Who a session user is and which tenant they act in: tests/tenancy.)"""

import pytest
from rest_framework.test import APIClient

from tenancy.models import Membership
from tests.api.conftest import API, error_of

pytestmark = pytest.mark.django_db


def test_session_login_works_with_csrf_for_writes(tenant, member, kb):
    user = member(tenant, Membership.Role.OWNER)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get(f"{API}/knowledge-bases").status_code == 200
    response = client.post(f"{API}/knowledge-bases", {"name": "New"}, format="json")
    assert response.status_code == 403  # a session write needs the CSRF token
    assert "CSRF" in error_of(response)["message"]


def test_the_browsable_api_renders_for_a_signed_in_user(tenant, member, kb):
    client = APIClient()
    client.force_login(member(tenant, Membership.Role.OWNER))
    pages = {
        "knowledge-bases": b"Manuals",
        f"knowledge-bases/{kb.pk}": b"Manuals",
        f"knowledge-bases/{kb.pk}/documents": b"Pump handbook",
    }
    for path, shown in pages.items():
        response = client.get(f"{API}/{path}", HTTP_ACCEPT="text/html")
        assert response.status_code == 200, path
        assert response["Content-Type"].startswith("text/html") and shown in response.content
