"""Curation through the REST API and its services: edit a chunk (re-analysed, re-embedded, the
index follows), extra keywords and questions (searched, never shown as content), add a chunk by
hand, disable/enable chunks and documents, and reprocessing that asks before it discards hand
edits (and keeps hand-added chunks)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.curation import ChunkChanges, update_chunk
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from retrieval.search import RAGService
from tests.api.conftest import API, bearer, error_of, make_kb
from tests.factories import add_document
from tests.fake_services import FakeEmbeddingsServer, Scripted

pytestmark = pytest.mark.django_db

SENSORS = "sensors.md"


@pytest.fixture
def target(kb) -> Chunk:
    return Chunk.objects.get(document=kb.docs[SENSORS])


def chunk_ids(client, kb, query: str, mode: str = "keyword") -> list[int]:
    body = {"query": query, "mode": mode, "top_k": 10}
    response = client.post(f"{API}/knowledge-bases/{kb.pk}/search", body, format="json")
    assert response.status_code == 200, response.content
    return [hit["chunk_id"] for hit in response.json()["results"]]


def test_patch_content_reanalyses_reembeds_and_moves_the_index(client, kb, target):
    before = Chunk.objects.get(pk=target.pk)
    version = kb.index_version
    processed_at = kb.docs[SENSORS].processed_at
    response = client.patch(
        f"{API}/chunks/{target.pk}",
        {"content": "  The TH02 probe logs humidity hourly.  "},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["content"] == "The TH02 probe logs humidity hourly."
    assert body["edited"] is True and body["edited_at"] and body["origin"] == "parsed"
    after = Chunk.objects.get(pk=target.pk)
    assert "humid" in after.tokens and "th01" not in after.tokens
    assert "sensor" in after.tokens  # the document title is still indexed with it
    assert list(after.embedding) != list(before.embedding)
    kb.refresh_from_db()
    assert kb.index_version > version
    document = Document.objects.get(pk=target.document_id)
    assert document.processed_at > processed_at  # the delta readers see the document changed
    assert target.pk in chunk_ids(client, kb, "humidity probe")
    assert target.pk not in chunk_ids(client, kb, "casing temperature alarms")


def test_extra_keywords_and_questions_are_searched_but_never_shown(client, kb, target):
    assert target.pk not in chunk_ids(client, kb, "thermistor")
    response = client.patch(
        f"{API}/chunks/{target.pk}",
        {
            "extra_keywords": ["thermistor", " thermistor ", ""],
            "extra_questions": ["How often does the overheating warning fire?"],
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["extra_keywords"] == ["thermistor"]  # cleaned: stripped, blanks and repeats out
    assert "thermistor" not in body["content"] and "overheating" not in body["content"]
    assert chunk_ids(client, kb, "thermistor") == [target.pk]
    assert chunk_ids(client, kb, "overheating warning") == [target.pk]
    # the question is embedded with the chunk: it is the vector leg's first hit for it
    assert chunk_ids(client, kb, "How often does the overheating warning fire?", "vector")[0] == (
        target.pk
    )
    hits = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "thermistor"}, format="json"
    ).json()["results"]
    assert "thermistor" not in hits[0]["content"]


def test_add_a_chunk_by_hand_it_is_found_and_listed_after_the_others(client, kb):
    document = kb.docs[SENSORS]
    response = client.post(
        f"{API}/documents/{document.pk}/chunks",
        {"content": "Spare TH01 sensors are kept in cabinet 12.", "extra_keywords": ["spares"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["origin"] == "manual" and body["enabled"] is True and body["position"] == 1
    assert chunk_ids(client, kb, "cabinet 12") == [body["id"]]
    assert chunk_ids(client, kb, "spares") == [body["id"]]
    listed = client.get(f"{API}/documents/{document.pk}/chunks").json()["results"]
    assert [c["origin"] for c in listed] == ["parsed", "manual"]
    assert client.get(f"{API}/documents/{document.pk}").json()["chunk_count"] == 2


def test_disable_and_enable_a_chunk_and_a_document(client, kb, target):
    assert target.pk in chunk_ids(client, kb, "TH01 casing temperature")
    response = client.patch(f"{API}/chunks/{target.pk}", {"enabled": False}, format="json")
    assert response.status_code == 200 and response.json()["enabled"] is False
    assert response.json()["edited"] is False  # disabling is not an edit of the text
    assert target.pk not in chunk_ids(client, kb, "TH01 casing temperature")
    client.patch(f"{API}/chunks/{target.pk}", {"enabled": True}, format="json")
    assert target.pk in chunk_ids(client, kb, "TH01 casing temperature")

    document = kb.docs[SENSORS]
    response = client.patch(f"{API}/documents/{document.pk}", {"enabled": False}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["enabled"] is False and response.json()["status"] == "ready"
    assert target.pk not in chunk_ids(client, kb, "TH01 casing temperature")
    listed = client.get(f"{API}/knowledge-bases/{kb.pk}/documents").json()["results"]
    assert {d["id"]: d["enabled"] for d in listed}[document.pk] is False  # kept, shown disabled
    client.patch(f"{API}/documents/{document.pk}", {"enabled": True}, format="json")
    assert target.pk in chunk_ids(client, kb, "TH01 casing temperature")


def test_reprocess_asks_before_discarding_hand_edits_and_keeps_added_chunks(client, kb, target):
    document = kb.docs[SENSORS]
    client.patch(f"{API}/chunks/{target.pk}", {"content": "Edited by hand."}, format="json")
    added = client.post(
        f"{API}/documents/{document.pk}/chunks", {"content": "Added by hand."}, format="json"
    ).json()
    url = f"{API}/documents/{document.pk}/reprocess"

    refused = client.post(url, format="json")
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "hand_edits_would_be_lost" and error["details"]["hand_edits"] == 1
    assert "discard_hand_edits" in error["message"]
    assert Document.objects.get(pk=document.pk).status == "ready"  # nothing happened

    accepted = client.post(url, {"discard_hand_edits": True}, format="json")
    assert accepted.status_code == 202, accepted.content
    assert process_document(document.pk) == Document.Status.READY
    chunks = list(Chunk.objects.filter(document=document).order_by("position"))
    assert [(c.origin, c.position) for c in chunks] == [("parsed", 0), ("manual", 1)]
    assert chunks[1].content == "Added by hand."
    assert "Edited by hand." not in chunks[0].content and "TH01" in chunks[0].content
    assert chunks[1].pk == added["id"]  # the same chunk, found by search again
    assert chunk_ids(client, kb, "added by hand") == [added["id"]]
    # no hand edits left: reprocessing no longer asks
    assert client.post(url, format="json").status_code == 202


def test_chunks_of_a_document_being_processed_cannot_change(client, kb, target):
    Document.objects.filter(pk=target.document_id).update(status=Document.Status.EMBEDDING)
    response = client.patch(f"{API}/chunks/{target.pk}", {"content": "x"}, format="json")
    assert response.status_code == 409
    assert error_of(response)["code"] == "document_not_ready"
    assert Chunk.objects.get(pk=target.pk).content == target.content


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, None),
        ({"content": "   "}, "content"),
        ({"extra_keywords": "not a list"}, "extra_keywords"),
        ({"extra_questions": ["q"] * 51}, "extra_questions"),
        ({"enabled": "maybe"}, "enabled"),
    ],
)
def test_bad_curation_input_is_400_and_changes_nothing(client, kb, target, payload, field):
    response = client.patch(f"{API}/chunks/{target.pk}", payload, format="json")
    assert response.status_code == 400, response.content
    error = error_of(response)
    if field:
        assert field in error["details"]["fields"]
    assert error["message"]
    after = Chunk.objects.get(pk=target.pk)
    assert (after.content, after.enabled, after.extra_keywords) == (target.content, True, [])


def test_curation_needs_write_permission_and_the_tenant(kb, target, make_key, other_tenant):
    reader = bearer(make_key(kb.tenant, scopes=["read"]))
    assert reader.patch(f"{API}/chunks/{target.pk}", {"enabled": False}).status_code == 403
    document = kb.docs[SENSORS]
    assert reader.post(f"{API}/documents/{document.pk}/chunks", {"content": "x"}).status_code == 403
    assert reader.patch(f"{API}/documents/{document.pk}", {"enabled": False}).status_code == 403
    stranger = bearer(make_key(other_tenant))
    assert stranger.patch(f"{API}/chunks/{target.pk}", {"enabled": False}).status_code == 404
    assert stranger.patch(f"{API}/documents/{document.pk}", {"enabled": False}).status_code == 404
    assert (
        stranger.post(f"{API}/documents/{document.pk}/chunks", {"content": "x"}).status_code == 404
    )
    assert Chunk.objects.get(pk=target.pk).enabled and Document.objects.get(pk=document.pk).enabled


def test_an_embedder_that_fails_leaves_the_old_chunk_and_says_why(tenant, client):
    with FakeEmbeddingsServer(dimensions=8) as server:
        config = EmbeddingConfig(
            provider="openai",
            model="m",
            dimensions=8,
            base_url=server.base_url,
            max_retries=1,
            backoff_s=0.01,
        )
        kb = create_knowledge_base(tenant=tenant, name="Remote", embedding=config)
        with override_settings(EMBEDDING_BASE_URL=server.base_url, EMBEDDING_MAX_RETRIES=1):
            document = add_document(kb, "a.md", "# A\n\nThe old words stay searchable.")
            chunk = document.chunks.get()
            version = KnowledgeBase.objects.get(pk=kb.pk).index_version
            server.script = [Scripted(500)] * 5
            response = client.patch(
                f"{API}/chunks/{chunk.pk}", {"content": "New words."}, format="json"
            )
    assert response.status_code == 503, response.content
    error = error_of(response)
    assert error["code"] == "embedding_failed" and "nothing was changed" in error["message"]
    after = Chunk.objects.get(pk=chunk.pk)
    assert after.content == chunk.content and after.tokens == chunk.tokens
    assert list(after.embedding) == list(chunk.embedding)
    assert KnowledgeBase.objects.get(pk=kb.pk).index_version == version


def test_the_service_refuses_another_tenants_chunk(kb, target, other_tenant):
    from tenancy.errors import NotYours

    with pytest.raises(NotYours):
        update_chunk(tenant=other_tenant, chunk=target, changes=ChunkChanges(enabled=False))
    assert Chunk.objects.get(pk=target.pk).enabled


def test_reanalysis_keeps_extra_keywords(tenant):
    from knowledge.services.reindex import reanalyze_knowledge_base

    kb = make_kb(tenant, "Words", {"a.md": "# A\n\nPlain text."})
    chunk = Chunk.objects.get(document=kb.docs["a.md"])
    update_chunk(tenant=tenant, chunk=chunk, changes=ChunkChanges(extra_keywords=["flux"]))
    assert reanalyze_knowledge_base(kb.pk, all_chunks=True) == 1
    assert "flux" in Chunk.objects.get(pk=chunk.pk).tokens
    hits = RAGService(tenant).search("flux", kb.pk, mode="keyword").hits
    assert [h.chunk_id for h in hits] == [chunk.pk]
