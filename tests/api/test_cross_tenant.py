"""Every endpoint, called with another tenant's credentials on our objects, answers 404 in the
error shape, exactly as for an id that does not exist, and changes nothing."""

import pytest

from knowledge.models import Chunk, Document, KnowledgeBase
from tenancy.models import ApiKey, Membership
from tests.api.conftest import API, MANUALS, bearer, error_of, make_kb, named_file, signed_in

pytestmark = pytest.mark.django_db

MISSING = 10**17

# (method, path template, body); {kb}, {doc}, {chunk}, {key} are the victim's objects.
ENDPOINTS = [
    ("get", "knowledge-bases/{kb}", None),
    ("patch", "knowledge-bases/{kb}", {"top_k": 2, "name": "pwned"}),
    ("delete", "knowledge-bases/{kb}", None),
    ("get", "knowledge-bases/{kb}/documents", None),
    ("upload", "knowledge-bases/{kb}/documents", None),
    ("get", "knowledge-bases/{kb}/chunks", None),
    ("post", "knowledge-bases/{kb}/search", {"query": "pump"}),
    ("post", "knowledge-bases/{kb}/context", {"query": "pump"}),
    ("post", "search", {"query": "pump", "knowledge_base_ids": ["{kb}"]}),
    ("post", "context", {"query": "pump", "knowledge_base_ids": ["{kb}"]}),
    ("get", "documents/{doc}", None),
    ("delete", "documents/{doc}", None),
    ("post", "documents/{doc}/reprocess", None),
    ("get", "documents/{doc}/chunks", None),
    ("get", "chunks/{chunk}", None),
    ("get", "api-keys/{key}", None),
    ("post", "api-keys/{key}/revoke", None),
]


def fingerprint(tenant) -> dict:
    """Everything of the tenant an endpoint could change."""
    return {
        "kbs": list(
            KnowledgeBase.objects.filter(tenant=tenant)
            .order_by("pk")
            .values_list("pk", "name", "top_k", "index_version", "updated_at")
        ),
        "documents": list(
            Document.objects.filter(tenant=tenant)
            .order_by("pk")
            .values_list("pk", "status", "progress", "updated_at", "attempts")
        ),
        "chunks": list(
            Chunk.objects.filter(tenant=tenant).order_by("pk").values_list("pk", "content")
        ),
        "keys": list(
            ApiKey.objects.filter(tenant=tenant)
            .order_by("pk")
            .values_list("pk", "revoked_at", "last_used_at")
        ),
    }


@pytest.fixture
def victim(tenant, make_key):
    kb = make_kb(tenant, "Secrets", MANUALS)
    document = kb.docs["pumps.md"]
    make_key(tenant, name="victim key")
    return {
        "kb": kb.pk,
        "doc": document.pk,
        "chunk": document.chunks.first().pk,
        "key": ApiKey.objects.get(name="victim key").pk,
    }


@pytest.fixture
def attacker(other_tenant, make_key, member):
    """A read+write key and an owner session of another tenant, which has a KB of its own."""
    make_kb(other_tenant, "Theirs", {"theirs.md": "# Theirs\n\nTheir own pump notes."})
    return {
        "key": bearer(make_key(other_tenant)),
        "owner": signed_in(member(other_tenant, Membership.Role.OWNER)),
    }


def call(client, method, template, body, ids):
    path = f"{API}/" + template.format(**ids)
    if method == "upload":
        return client.post(
            path, {"files": [named_file("x.txt", "Injected text.")]}, format="multipart"
        )
    if isinstance(body, dict):
        body = {
            k: [int(v.format(**ids)) for v in value] if isinstance(value, list) else value
            for k, value in body.items()
        }
    return getattr(client, method)(path, body, format="json")


@pytest.mark.parametrize(
    ("method", "template", "body"), ENDPOINTS, ids=[f"{m} {t}" for m, t, _ in ENDPOINTS]
)
def test_another_tenants_credentials_get_404_and_change_nothing(
    tenant, victim, attacker, method, template, body
):
    client = attacker["owner"] if template.startswith("api-keys") else attacker["key"]
    before = fingerprint(tenant)

    response = call(client, method, template, body, victim)

    assert response.status_code == 404, response.content
    assert error_of(response)["code"] == "not_found"
    assert fingerprint(tenant) == before
    missing = call(client, method, template, body, dict.fromkeys(victim, MISSING))
    assert missing.status_code == 404
    if template not in ("search", "context"):  # those name the id they did not find
        assert missing.json() == response.json()  # indistinguishable from a missing object


def test_the_list_endpoints_show_only_the_callers_tenant(tenant, victim, attacker):
    body = attacker["key"].get(f"{API}/knowledge-bases").json()
    assert [kb["name"] for kb in body["results"]] == ["Theirs"]
    keys = attacker["owner"].get(f"{API}/api-keys").json()["results"]
    assert victim["key"] not in {key["id"] for key in keys}


def test_a_key_cannot_be_restricted_to_another_tenants_knowledge_base(victim, attacker):
    """Creating a key is a write that names the victim's knowledge base in its body: refused
    like an id that does not exist, and no key is made."""
    keys = ApiKey.objects.count()

    def create(kb_id):
        body = {"name": f"sneaky {kb_id}", "knowledge_base_ids": [kb_id]}
        return attacker["owner"].post(f"{API}/api-keys", body, format="json")

    refused, missing = create(victim["kb"]), create(MISSING)

    assert refused.status_code == missing.status_code == 400
    fields = error_of(refused)["details"]["fields"]
    assert fields == {"knowledge_base_ids": [f"Knowledge base {victim['kb']} not found."]}
    assert error_of(missing)["details"]["fields"] == {
        "knowledge_base_ids": [f"Knowledge base {MISSING} not found."]
    }
    assert ApiKey.objects.count() == keys
