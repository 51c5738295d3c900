"""What a caller may do: key scopes, member roles, and knowledge-base restrictions of keys."""

import pytest

from knowledge.models import Document, KnowledgeBase
from tenancy.models import ApiKey, Membership
from tests.api.conftest import API, bearer, error_of, make_kb, named_file, signed_in, upload

pytestmark = pytest.mark.django_db

Role = Membership.Role


def upload_one(client, kb):
    return upload(client, kb.pk, named_file("new.txt", "A new note about the P-100 pump."))


def search(client, kb):
    return client.post(f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump"}, format="json")


# ------------------------------------------------------------------ scopes


def test_a_read_key_lists_and_searches_but_cannot_write(tenant, make_key, kb):
    client = bearer(make_key(tenant, scopes=["read"]))
    assert client.get(f"{API}/knowledge-bases").status_code == 200
    assert search(client, kb).status_code == 200
    document = kb.docs["pumps.md"]

    refused = [
        upload_one(client, kb),
        client.delete(f"{API}/documents/{document.pk}"),
        client.post(f"{API}/documents/{document.pk}/reprocess"),
        client.post(f"{API}/knowledge-bases", {"name": "Other"}, format="json"),
        client.patch(f"{API}/knowledge-bases/{kb.pk}", {"top_k": 9}, format="json"),
        client.delete(f"{API}/knowledge-bases/{kb.pk}"),
    ]
    for response in refused:
        assert response.status_code == 403, response.content
        error = error_of(response)
        assert error["code"] == "insufficient_scope" and "'write'" in error["message"]
    assert Document.objects.filter(knowledge_base=kb).count() == 3
    assert KnowledgeBase.objects.filter(tenant=tenant).count() == 1
    kb.refresh_from_db()
    assert kb.top_k == 5


def test_a_write_only_key_writes_but_does_not_read(tenant, make_key, kb):
    client = bearer(make_key(tenant, scopes=["write"]))
    assert upload_one(client, kb).status_code == 202
    response = client.get(f"{API}/knowledge-bases")
    assert response.status_code == 403 and "'read'" in error_of(response)["message"]
    assert search(client, kb).status_code == 403


def test_keys_cannot_manage_keys(tenant, make_key):
    client = bearer(make_key(tenant))
    for response in (
        client.get(f"{API}/api-keys"),
        client.post(f"{API}/api-keys", {"name": "escalate"}, format="json"),
    ):
        assert response.status_code == 403
        assert error_of(response)["code"] == "insufficient_scope"
    assert not ApiKey.objects.filter(name="escalate").exists()


# ------------------------------------------------------------------ roles


def test_a_viewer_searches_but_cannot_upload(tenant, member, kb):
    client = signed_in(member(tenant, Role.VIEWER))
    assert search(client, kb).status_code == 200
    response = upload_one(client, kb)
    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_role"
    assert Document.objects.filter(knowledge_base=kb).count() == 3


def test_an_editor_writes_documents_but_not_knowledge_bases_or_keys(tenant, member, kb):
    client = signed_in(member(tenant, Role.EDITOR))
    assert upload_one(client, kb).status_code == 202
    document = kb.docs["pumps.md"]
    assert client.post(f"{API}/documents/{document.pk}/reprocess").status_code == 202
    assert client.delete(f"{API}/documents/{document.pk}").status_code == 204
    for response in (
        client.post(f"{API}/knowledge-bases", {"name": "Other"}, format="json"),
        client.patch(f"{API}/knowledge-bases/{kb.pk}", {"top_k": 9}, format="json"),
        client.delete(f"{API}/knowledge-bases/{kb.pk}"),
        client.get(f"{API}/api-keys"),
    ):
        assert response.status_code == 403
        assert error_of(response)["code"] == "insufficient_role"


@pytest.mark.parametrize("role", [Role.ADMIN, Role.OWNER])
def test_admins_and_owners_manage_knowledge_bases_and_keys(tenant, member, role):
    client = signed_in(member(tenant, role))
    created = client.post(f"{API}/knowledge-bases", {"name": "Team"}, format="json")
    assert created.status_code == 201
    key = client.post(f"{API}/api-keys", {"name": "bot"}, format="json")
    assert key.status_code == 201
    assert client.delete(f"{API}/knowledge-bases/{created.json()['id']}").status_code == 204


# ------------------------------------------------------------------ KB restriction


@pytest.fixture
def two_kbs(tenant):
    allowed = make_kb(tenant, "Allowed", {"a.md": "# Alpha\n\nThe alpha pump manual."})
    hidden = make_kb(tenant, "Hidden", {"h.md": "# Hidden\n\nThe hidden pump manual."})
    return allowed, hidden


def test_a_restricted_key_lists_only_its_knowledge_bases(tenant, make_key, two_kbs):
    allowed, _ = two_kbs
    client = bearer(make_key(tenant, kbs=[allowed]))
    body = client.get(f"{API}/knowledge-bases").json()
    assert [kb["id"] for kb in body["results"]] == [allowed.pk] and body["count"] == 1
    assert client.get(f"{API}/me").json()["knowledge_base_ids"] == [allowed.pk]


def test_a_restricted_key_gets_404_for_every_other_knowledge_base(tenant, make_key, two_kbs):
    allowed, hidden = two_kbs
    client = bearer(make_key(tenant, kbs=[allowed]))
    document = hidden.docs["h.md"]
    chunk = document.chunks.first()
    responses = {
        "kb": client.get(f"{API}/knowledge-bases/{hidden.pk}"),
        "patch": client.patch(f"{API}/knowledge-bases/{hidden.pk}", {"top_k": 2}, format="json"),
        "delete": client.delete(f"{API}/knowledge-bases/{hidden.pk}"),
        "documents": client.get(f"{API}/knowledge-bases/{hidden.pk}/documents"),
        "upload": upload_one(client, hidden),
        "kb chunks": client.get(f"{API}/knowledge-bases/{hidden.pk}/chunks"),
        "document": client.get(f"{API}/documents/{document.pk}"),
        "document chunks": client.get(f"{API}/documents/{document.pk}/chunks"),
        "reprocess": client.post(f"{API}/documents/{document.pk}/reprocess"),
        "delete document": client.delete(f"{API}/documents/{document.pk}"),
        "chunk": client.get(f"{API}/chunks/{chunk.pk}"),
        "search": search(client, hidden),
        "context": client.post(
            f"{API}/knowledge-bases/{hidden.pk}/context", {"query": "pump"}, format="json"
        ),
    }
    for name, response in responses.items():
        assert response.status_code == 404, name
        assert error_of(response)["code"] == "not_found", name
    assert search(client, allowed).status_code == 200
    hidden.refresh_from_db()
    assert hidden.top_k == 5 and hidden.documents.count() == 1


def test_a_restricted_key_cannot_search_a_forbidden_kb_among_several(tenant, make_key, two_kbs):
    allowed, hidden = two_kbs
    client = bearer(make_key(tenant, kbs=[allowed]))
    for path in ("search", "context"):
        response = client.post(
            f"{API}/{path}",
            {"query": "pump", "knowledge_base_ids": [allowed.pk, hidden.pk]},
            format="json",
        )
        assert response.status_code == 404
        assert str(hidden.pk) in error_of(response)["message"]
    ok = client.post(
        f"{API}/search", {"query": "pump", "knowledge_base_ids": [allowed.pk]}, format="json"
    )
    assert ok.status_code == 200
    assert {hit["knowledge_base_id"] for hit in ok.json()["results"]} == {allowed.pk}


def test_a_restricted_key_cannot_create_knowledge_bases(tenant, make_key, two_kbs):
    allowed, _ = two_kbs
    client = bearer(make_key(tenant, kbs=[allowed]))
    response = client.post(f"{API}/knowledge-bases", {"name": "Escape"}, format="json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "restricted_key"
    assert not KnowledgeBase.objects.filter(name="Escape").exists()


def test_deleting_a_keys_only_knowledge_base_revokes_the_key(tenant, make_key, two_kbs):
    """An empty restriction means every knowledge base: the key must not fall back to it."""
    allowed, hidden = two_kbs
    only_allowed = bearer(make_key(tenant, kbs=[allowed], name="only"))
    both = bearer(make_key(tenant, kbs=[allowed, hidden], name="both"))
    assert bearer(make_key(tenant)).delete(f"{API}/knowledge-bases/{allowed.pk}").status_code == 204

    response = only_allowed.get(f"{API}/knowledge-bases")
    assert response.status_code == 401
    assert error_of(response)["code"] == "api_key_revoked"
    body = both.get(f"{API}/knowledge-bases").json()
    assert [kb["id"] for kb in body["results"]] == [hidden.pk]
