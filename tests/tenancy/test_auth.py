"""Who is calling: API keys (hashed, prefixed, revocable at once, use recorded) and session
users, and the tenant each request acts in."""

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tenancy.models import ApiKey, Membership
from tenancy.services import LAST_USED_RESOLUTION, create_api_key, hash_key
from tests.conftest import API, bearer, error_of, signed_in

pytestmark = pytest.mark.django_db


def test_no_credentials_answer_401_with_a_bearer_challenge():
    response = APIClient().get(f"{API}/knowledge-bases")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert error_of(response)["code"] == "not_authenticated"


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer", "invalid_authorization_header"),
        ("Bearer two parts", "invalid_authorization_header"),
        ("Bearer not-one-of-ours", "invalid_api_key"),
        ("Bearer rag_00000000_guessed-secret", "invalid_api_key"),
    ],
)
def test_bad_bearer_credentials_answer_401(header, code):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(f"{API}/knowledge-bases")
    assert response.status_code == 401
    assert error_of(response)["code"] == code


def test_a_key_with_a_right_prefix_and_a_wrong_secret_is_refused(tenant, make_key):
    raw = make_key(tenant)
    response = bearer(raw[:-1] + ("A" if raw[-1] != "A" else "B")).get(f"{API}/me")
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_api_key"


def test_keys_are_stored_hashed_with_a_visible_prefix(tenant):
    key, raw = create_api_key(tenant=tenant, name="ci", scopes=["read"])
    assert raw.startswith(key.prefix + "_") and len(key.prefix) == 12
    assert key.prefix.startswith("rag_")
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.secret_hash == hash_key(raw) and raw not in stored.secret_hash
    assert raw not in {stored.name, stored.prefix}


def test_revocation_takes_effect_on_the_next_request(tenant, member, make_key):
    raw = make_key(tenant, name="doomed")
    client = bearer(raw)
    assert client.get(f"{API}/me").status_code == 200
    key = ApiKey.objects.get(name="doomed")

    owner = signed_in(member(tenant, Membership.Role.OWNER))
    revoked = owner.post(f"{API}/api-keys/{key.pk}/revoke")
    assert revoked.status_code == 200 and revoked.json()["is_active"] is False

    response = client.get(f"{API}/me")
    assert response.status_code == 401
    assert error_of(response)["code"] == "api_key_revoked"


def test_last_used_at_is_recorded_at_most_once_a_minute(tenant, make_key):
    raw = make_key(tenant, name="busy")
    key = ApiKey.objects.get(name="busy")
    assert key.last_used_at is None

    before = timezone.now()
    bearer(raw).get(f"{API}/me")
    key.refresh_from_db()
    first = key.last_used_at
    assert first is not None and before <= first <= timezone.now()  # the time of this request

    bearer(raw).get(f"{API}/me")
    key.refresh_from_db()
    assert key.last_used_at == first  # within the minute: no write

    ApiKey.objects.filter(pk=key.pk).update(last_used_at=first - LAST_USED_RESOLUTION)
    bearer(raw).get(f"{API}/me")
    key.refresh_from_db()
    assert key.last_used_at > first


def test_a_key_acts_in_its_tenant(tenant, make_key):
    body = bearer(make_key(tenant, scopes=["read"])).get(f"{API}/me").json()
    assert body["tenant"]["slug"] == tenant.slug
    assert body["authenticated_by"] == "api_key" and body["scopes"] == ["read"]
    assert body["actions"] == ["read"]


def test_a_session_user_acts_in_their_only_tenant_with_their_role(tenant, member):
    user = member(tenant, Membership.Role.EDITOR)
    body = signed_in(user).get(f"{API}/me").json()
    assert body["tenant"]["slug"] == tenant.slug
    assert body["authenticated_by"] == "session" and body["role"] == "editor"
    assert body["actions"] == ["read", "write_documents"]


def test_a_user_of_several_tenants_names_one_with_x_tenant(tenant, other_tenant, member):
    user = member(tenant, Membership.Role.VIEWER)
    Membership.objects.create(user=user, tenant=other_tenant, role=Membership.Role.ADMIN)

    response = signed_in(user).get(f"{API}/me")
    assert response.status_code == 400
    assert error_of(response)["code"] == "tenant_required"

    body = signed_in(user, other_tenant.slug).get(f"{API}/me").json()
    assert body["tenant"]["slug"] == other_tenant.slug and body["role"] == "admin"
    body = signed_in(user, tenant.slug).get(f"{API}/me").json()
    assert body["role"] == "viewer"


@pytest.mark.parametrize("slug", ["someone-elses", "does-not-exist"])
def test_x_tenant_of_a_tenant_you_are_not_in_is_403_whether_it_exists_or_not(
    tenant, other_tenant, member, slug
):
    user = member(tenant)
    other_tenant.slug = "someone-elses"
    other_tenant.save()
    response = signed_in(user, slug).get(f"{API}/me")
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "not_a_member" and slug in error["message"]


def test_a_user_in_no_tenant_is_refused(django_user_model):
    user = django_user_model.objects.create_user("loner", password="x")
    response = signed_in(user).get(f"{API}/knowledge-bases")
    assert response.status_code == 403
    assert error_of(response)["code"] == "not_a_member"
