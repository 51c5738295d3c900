"""Knowledge bases: list, create, retrieve, update (settings apply to the next search), delete
(documents, chunks, files and every index tier go)."""

from pathlib import Path

import pytest

from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.bm25store import get_store
from retrieval.core.identity import identity_of
from retrieval.models import BM25Manifest
from tests.api.conftest import API, error_of, make_kb

pytestmark = pytest.mark.django_db


def test_create_with_settings_and_embedding(client, tenant):
    response = client.post(
        f"{API}/knowledge-bases",
        {
            "name": "Handbooks",
            "description": "Pumps and valves",
            "embedding": {"provider": "hash", "dimensions": 32},
            "chunk_size": 800,
            "chunk_overlap": 80,
            "user_words": ["传感器手册"],
            "top_k": 8,
            "score_threshold": 0.2,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "Handbooks" and body["chunk_size"] == 800 and body["top_k"] == 8
    assert body["embedding"] == {
        "provider": "hash",
        "model": "hash-32",
        "dimensions": 32,
        "migration": None,
    }
    assert body["document_count"] == 0 and body["user_words"] == ["传感器手册"]
    assert KnowledgeBase.objects.get(pk=body["id"]).tenant == tenant


def test_create_defaults_to_the_deployments_embedding(client):
    body = client.post(f"{API}/knowledge-bases", {"name": "Plain"}, format="json").json()
    assert body["embedding"]["provider"] == "hash"  # EMBEDDING_PROVIDER of the test profile
    assert body["chunk_size"] == 1500 and body["weight_mode"] == "calibrated"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "name"),
        ({"name": "Manuals"}, "name"),  # taken
        ({"name": "X", "chunk_size": 100, "chunk_overlap": 100}, "chunk_overlap"),
        ({"name": "X", "vector_weight": 0, "keyword_weight": 0}, "vector_weight"),
        ({"name": "X", "top_k": 0}, "top_k"),
        ({"name": "X", "score_threshold": 1.5}, "score_threshold"),
        ({"name": "X", "vector_weight": "NaN"}, "vector_weight"),
        ({"name": "X", "embedding": {"provider": "magic"}}, "embedding"),
    ],
)
def test_invalid_settings_answer_400_naming_the_field(client, kb, payload, field):
    response = client.post(f"{API}/knowledge-bases", payload, format="json")
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid" and field in error["details"]["fields"]
    assert error["message"].startswith(field)


def test_overlap_is_checked_against_the_default_chunk_size(client):
    ok = client.post(f"{API}/knowledge-bases", {"name": "A", "chunk_size": 200}, format="json")
    assert ok.status_code == 201 and ok.json()["chunk_overlap"] == 150
    refused = client.post(f"{API}/knowledge-bases", {"name": "B", "chunk_size": 150}, format="json")
    assert "chunk_overlap" in error_of(refused)["details"]["fields"]


def test_list_is_paginated_in_a_stable_order(client, tenant):
    ids = [make_kb(tenant, f"KB {i}").pk for i in range(5)]
    first = client.get(f"{API}/knowledge-bases?limit=2").json()
    assert first["count"] == 5 and [kb["id"] for kb in first["results"]] == ids[:2]
    second = client.get(first["next"]).json()
    assert [kb["id"] for kb in second["results"]] == ids[2:4]
    last = client.get(f"{API}/knowledge-bases?limit=2&offset=4").json()
    assert [kb["id"] for kb in last["results"]] == ids[4:] and last["next"] is None


def test_retrieve_counts_documents(client, kb):
    body = client.get(f"{API}/knowledge-bases/{kb.pk}").json()
    assert body["id"] == kb.pk and body["document_count"] == 3
    kb.refresh_from_db()
    assert body["ready_document_count"] == 3 and body["index_version"] == kb.index_version


def test_patch_of_weights_changes_the_next_search(client, kb):
    search = {"query": "pump seal"}
    path = f"{API}/knowledge-bases/{kb.pk}/search"
    before = client.post(path, search, format="json").json()["trace"]
    assert before["weights"] == {"vector": 0.6, "keyword": 0.4}

    response = client.patch(
        f"{API}/knowledge-bases/{kb.pk}",
        {"vector_weight": 0.2, "keyword_weight": 1.5, "top_k": 1},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["weight_mode"] == "fixed"  # weights set by hand are pinned
    assert (body["vector_weight"], body["keyword_weight"], body["top_k"]) == (0.2, 1.5, 1)

    after = client.post(path, search, format="json").json()
    assert after["trace"]["weights"] == {"vector": 0.2, "keyword": 1.5}
    assert after["trace"]["weight_source"] == "fixed"
    assert len(after["results"]) == 1


def test_patch_score_threshold_and_name(client, kb):
    def search():
        body = {"query": "pump seal", "top_k": 10}
        return client.post(f"{API}/knowledge-bases/{kb.pk}/search", body, format="json").json()

    everything = search()["results"]
    relevances = sorted({hit["relevance"] for hit in everything})
    assert len(relevances) > 1
    threshold = relevances[-1]
    response = client.patch(
        f"{API}/knowledge-bases/{kb.pk}",
        {"score_threshold": threshold, "name": "Renamed"},
        format="json",
    )
    assert response.json()["name"] == "Renamed"
    hits = search()["results"]  # the knowledge base's threshold, on relevance
    assert [h["chunk_id"] for h in hits] == [
        h["chunk_id"] for h in everything if h["relevance"] >= threshold
    ]
    assert 0 < len(hits) < len(everything)


def test_patch_validates_against_the_current_values(client, kb):
    response = client.patch(f"{API}/knowledge-bases/{kb.pk}", {"chunk_size": 150}, format="json")
    assert response.status_code == 400  # the current overlap is 150
    assert "chunk_overlap" in error_of(response)["details"]["fields"]
    kb.refresh_from_db()
    assert kb.chunk_size == 1500


@pytest.mark.parametrize("embedding", [{}, {"model": "x"}, {"dimensions": 8}])
def test_patch_of_an_embedding_without_its_provider_is_refused(client, kb, embedding):
    response = client.patch(
        f"{API}/knowledge-bases/{kb.pk}", {"embedding": embedding}, format="json"
    )
    assert response.status_code == 400  # was a 500 (found by the schemathesis test)
    assert "provider" in str(error_of(response)["details"]["fields"])
    kb.refresh_from_db()
    assert kb.embedding_provider == "hash"


def test_patch_user_words_queues_reanalysis(client, kb, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.patch(
            f"{API}/knowledge-bases/{kb.pk}", {"user_words": ["P-100泵"]}, format="json"
        )
    assert response.json()["user_words"] == ["P-100泵"]
    assert callbacks  # the re-analysis task is queued on commit


def test_delete_removes_documents_chunks_files_and_index_tiers(
    client, kb, monkeypatch, django_capture_on_commit_callbacks
):
    files = [Path(doc.file.path) for doc in kb.docs.values()]
    assert all(f.exists() for f in files)
    client.post(f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump"}, format="json")
    assert BM25Manifest.objects.filter(knowledge_base_id=kb.pk).exists()  # built by the search
    store, identity = get_store(), identity_of(kb)
    assert store.l2.version(identity) is not None
    invalidated = []
    original = store.invalidate
    monkeypatch.setattr(
        store, "invalidate", lambda kb_id: (invalidated.append(kb_id), original(kb_id))
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = client.delete(f"{API}/knowledge-bases/{kb.pk}")

    assert response.status_code == 204
    assert invalidated == [kb.pk] and store.l2.version(identity) is None
    assert not KnowledgeBase.objects.filter(pk=kb.pk).exists()
    assert not Document.objects.filter(knowledge_base_id=kb.pk).exists()
    assert not Chunk.objects.filter(knowledge_base_id=kb.pk).exists()
    assert not BM25Manifest.objects.filter(knowledge_base_id=kb.pk).exists()
    assert not any(f.exists() for f in files)
    response = client.get(f"{API}/knowledge-bases/{kb.pk}")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"
