"""``create_tenant`` and ``create_api_key``: what a script needs, and the printed key works."""

import io

import pytest
from django.core.management import CommandError, call_command

from tenancy.models import ApiKey, Membership, Tenant
from tests.api.conftest import API, bearer, make_kb

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_tenant_with_an_owner_is_idempotent(django_user_model):
    user = django_user_model.objects.create_user("ada", password="x")
    out, _ = run("create_tenant", "Acme Corp", "--owner", "ada")
    assert "created" in out and "acme-corp" in out
    tenant = Tenant.objects.get(name="Acme Corp")
    assert Membership.objects.get(tenant=tenant, user=user).role == "owner"
    out, _ = run("create_tenant", "Acme Corp")
    assert "exists" in out and Tenant.objects.filter(name="Acme Corp").count() == 1


def test_create_tenant_refuses_an_unknown_owner():
    with pytest.raises(CommandError, match="no user 'ghost'"):
        run("create_tenant", "Acme", "--owner", "ghost")
    assert not Tenant.objects.filter(name="Acme").exists()


def test_create_api_key_prints_only_the_key_and_it_works():
    run("create_tenant", "Acme")
    out, err = run("create_api_key", "--tenant", "Acme", "--scope", "read", "--scope", "write")
    raw = out.strip()
    assert raw.startswith("rag_") and "\n" not in raw
    assert "not shown again" in err and raw not in err
    key = ApiKey.objects.get(prefix=raw[:12])
    assert sorted(key.scopes) == ["read", "write"] and key.secret_hash != raw

    client = bearer(raw)
    created = client.post(f"{API}/knowledge-bases", {"name": "Scripted"}, format="json")
    assert created.status_code == 201
    assert client.get(f"{API}/me").json()["tenant"]["name"] == "Acme"


def test_create_api_key_defaults_to_read_and_restricts_to_kbs(tenant):
    kb = make_kb(tenant, "Manuals")
    other = make_kb(tenant, "Other")
    out, _ = run("create_api_key", "--tenant", tenant.slug, "--kb", "Manuals", "--name", "ro")
    key = ApiKey.objects.get(name="ro")
    assert key.scopes == ["read"] and list(key.knowledge_bases.all()) == [kb]
    client = bearer(out.strip())
    assert client.get(f"{API}/knowledge-bases/{other.pk}").status_code == 404
    assert client.post(f"{API}/knowledge-bases", {"name": "X"}, format="json").status_code == 403


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "Nobody"], "no tenant 'Nobody'"),
        (["--tenant", "Acme", "--kb", "Missing"], "no knowledge base 'Missing'"),
    ],
)
def test_create_api_key_errors(args, message):
    run("create_tenant", "Acme")
    with pytest.raises(CommandError, match=message):
        run("create_api_key", *args)
