"""An API key restricted to some knowledge bases stays restricted: deleting its knowledge bases,
one by one or all at once, never leaves it with access to the tenant's others, and it learns
nothing of them, their names included."""

import threading

import pytest
from django.contrib import admin

from knowledge.models import KnowledgeBase
from retrieval.mcp import tools
from tenancy.api.access import access_for_key
from tenancy.models import ApiKey
from tenancy.selectors import allowed_knowledge_base_ids, find_api_key
from tenancy.services import create_api_key
from tests.api.conftest import API, bearer, error_of, make_kb, named_file, signed_in, upload
from tests.conftest import at_once

# ------------------------------------------------------------------ deleting its knowledge bases

ROUNDS = 20


def delete_at_once(raw_key: str, *kb_ids: int) -> list[int]:
    """DELETE each knowledge base in its own thread, the requests released together; the
    statuses (any order)."""
    targets, lock = list(kb_ids), threading.Lock()

    def delete_one() -> int:
        with lock:
            pk = targets.pop()
        return bearer(raw_key).delete(f"{API}/knowledge-bases/{pk}").status_code

    return at_once(len(kb_ids), delete_one)


def test_deleting_a_keys_knowledge_bases_at_once_never_widens_it(transactional_db, tenant):
    """Both deletes read the key's two restrictions before either committed, and each left the
    other one's: the key outlived them restricted to nothing, which read as "all of them"."""
    writer = create_api_key(tenant=tenant, name="writer", scopes=["read", "write"])[1]
    for round_ in range(ROUNDS):
        x, y = make_kb(tenant, f"X {round_}"), make_kb(tenant, f"Y {round_}")
        other = make_kb(tenant, f"Other {round_}")
        key, raw = create_api_key(
            tenant=tenant, name=f"reader {round_}", scopes=["read"], knowledge_bases=[x, y]
        )
        assert delete_at_once(writer, x.pk, y.pk) == [204, 204], f"round {round_}"

        assert ApiKey.objects.get(pk=key.pk).revoked_at is not None, f"round {round_}"
        assert allowed_knowledge_base_ids(ApiKey.objects.get(pk=key.pk)) == frozenset()
        assert allowed_knowledge_base_ids(find_api_key(raw)) == frozenset()
        reader = bearer(raw)
        for path in ("me", "knowledge-bases", f"knowledge-bases/{other.pk}"):
            response = reader.get(f"{API}/{path}")
            assert response.status_code == 401, (round_, path, response.content)
            assert error_of(response)["code"] == "api_key_revoked"


@pytest.mark.django_db
def test_deleting_one_of_two_knowledge_bases_keeps_the_key_on_the_other(tenant, make_key):
    x, y, other = make_kb(tenant, "X"), make_kb(tenant, "Y"), make_kb(tenant, "Other")
    reader = bearer(make_key(tenant, scopes=["read"], kbs=[x, y]))
    assert bearer(make_key(tenant)).delete(f"{API}/knowledge-bases/{x.pk}").status_code == 204

    body = reader.get(f"{API}/knowledge-bases").json()
    assert [kb["id"] for kb in body["results"]] == [y.pk]
    me = reader.get(f"{API}/me").json()
    assert (me["knowledge_base_ids"], me["restricted"]) == ([y.pk], True)
    assert reader.get(f"{API}/knowledge-bases/{other.pk}").status_code == 404


# ------------------------------------------------------------------ restricted to nothing


@pytest.fixture
def orphan(tenant, make_key) -> str:
    """A read+write key whose one knowledge base was deleted around the service (a bulk delete
    of rows): not revoked, restricted to nothing."""
    gone = make_kb(tenant, "Gone")
    raw = make_key(tenant, kbs=[gone], name="orphan")
    KnowledgeBase.objects.filter(pk=gone.pk).delete()
    return raw


@pytest.mark.django_db
def test_a_key_restricted_to_nothing_may_use_no_knowledge_base(tenant, orphan, kb):
    client = bearer(orphan)
    key = find_api_key(orphan)
    assert key.revoked_at is None and allowed_knowledge_base_ids(key) == frozenset()
    me = client.get(f"{API}/me").json()
    assert (me["knowledge_base_ids"], me["restricted"]) == ([], True)
    listed = client.get(f"{API}/knowledge-bases").json()
    assert (listed["count"], listed["results"]) == (0, [])

    document = kb.docs["pumps.md"]
    chunk = document.chunks.first()
    kb_url, query = f"{API}/knowledge-bases/{kb.pk}", {"query": "pump"}
    responses = {
        "kb": client.get(kb_url),
        "patch": client.patch(kb_url, {"top_k": 2}, format="json"),
        "delete": client.delete(kb_url),
        "documents": client.get(f"{kb_url}/documents"),
        "upload": upload(client, kb.pk, named_file("new.txt", "A new pump note.")),
        "retry failed": client.post(f"{kb_url}/documents/retry-failed"),
        "bulk delete": client.post(f"{kb_url}/documents/delete", {"status": "ready"}),
        "kb chunks": client.get(f"{kb_url}/chunks"),
        "web sources": client.get(f"{kb_url}/web-sources"),
        "search": client.post(f"{kb_url}/search", query, format="json"),
        "context": client.post(f"{kb_url}/context", query, format="json"),
        "several": client.post(
            f"{API}/search", {**query, "knowledge_base_ids": [kb.pk]}, format="json"
        ),
        "document": client.get(f"{API}/documents/{document.pk}"),
        "document chunks": client.get(f"{API}/documents/{document.pk}/chunks"),
        "chunk": client.get(f"{API}/chunks/{chunk.pk}"),
    }
    for name, response in responses.items():
        assert response.status_code == 404, (name, response.content)
        assert error_of(response)["code"] == "not_found", name
    created = client.post(f"{API}/knowledge-bases", {"name": "Escape"}, format="json")
    assert created.status_code == 403 and error_of(created)["code"] == "restricted_key"
    dify = client.post(
        f"{API}/dify/retrieval",
        {
            **query,
            "knowledge_id": str(kb.pk),
            "retrieval_setting": {"top_k": 3, "score_threshold": 0.0},
        },
        format="json",
    )
    assert (dify.status_code, dify.json()["error_code"]) == (404, 2001)
    assert tools.list_knowledge_bases(access_for_key(key), {}) == {"knowledge_bases": []}

    kb.refresh_from_db()
    assert kb.top_k == 5 and kb.documents.count() == 3
    assert not KnowledgeBase.objects.filter(name="Escape").exists()


@pytest.mark.django_db
def test_keys_and_the_admin_tell_restricted_to_nothing_from_unrestricted(
    tenant, member, make_key, orphan
):
    kb = make_kb(tenant, "Kept")
    make_key(tenant, name="everything")
    make_key(tenant, kbs=[kb], name="kept")
    listed = signed_in(member(tenant)).get(f"{API}/api-keys").json()["results"]
    shown = {k["name"]: (k["knowledge_base_ids"], k["restricted"]) for k in listed}
    assert shown == {"orphan": ([], True), "everything": (None, False), "kept": ([kb.pk], True)}

    key_admin = admin.site._registry[ApiKey]
    displayed = {key.name: key_admin.restricted_to(key) for key in ApiKey.objects.all()}
    assert displayed == {
        "orphan": "None left (restricted)",
        "everything": "All of the tenant's",
        "kept": "Kept",
    }


# ------------------------------------------------------------------ names of hidden ones


@pytest.mark.django_db
def test_a_restricted_key_cannot_learn_a_hidden_name_by_renaming(tenant, make_key):
    """Names are unique in the tenant: "already exists" would confirm a hidden knowledge base's
    name. A restricted key cannot rename at all, so a taken name and a free one answer alike."""
    mine, hidden = make_kb(tenant, "Mine"), make_kb(tenant, "Secret plans")
    client = bearer(make_key(tenant, kbs=[mine]))
    url = f"{API}/knowledge-bases/{mine.pk}"

    taken = client.patch(url, {"name": "Secret plans"}, format="json")
    free = client.patch(url, {"name": "Nobody has this name"}, format="json")
    assert taken.status_code == free.status_code == 403
    assert error_of(taken) == error_of(free)
    assert error_of(taken)["code"] == "restricted_key" and "(name)" in error_of(taken)["message"]
    assert "exist" not in error_of(taken)["message"]
    mine.refresh_from_db()
    hidden.refresh_from_db()
    assert (mine.name, hidden.name) == ("Mine", "Secret plans")

    unchanged = client.patch(url, {"name": "Mine", "top_k": 7}, format="json")
    assert unchanged.status_code == 200 and unchanged.json()["top_k"] == 7


@pytest.mark.django_db
def test_a_key_that_sees_every_knowledge_base_is_told_the_name_is_taken(tenant, make_key):
    mine, _ = make_kb(tenant, "Mine"), make_kb(tenant, "Secret plans")
    client = bearer(make_key(tenant))
    response = client.patch(
        f"{API}/knowledge-bases/{mine.pk}", {"name": "Secret plans"}, format="json"
    )
    assert response.status_code == 400
    assert error_of(response)["details"]["fields"] == {
        "name": ["A knowledge base with this name already exists."]
    }
