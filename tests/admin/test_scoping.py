"""Tenant scoping of every admin page and view: another tenant's objects look missing (404) or
are absent from lists; a member's role limits what they may change (403); the same requests by
the owning tenant's staff succeed, so each check can fail."""

from __future__ import annotations

import pytest
from django.urls import reverse

from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.models import BM25Manifest
from tenancy.services import create_api_key

pytestmark = pytest.mark.django_db


def object_pages(world) -> list[tuple[str, str]]:
    """(method, url) of every page or view that names one of tenant A's objects."""
    kb, doc = world.kb_a, world.docs_a["sensors.md"]
    chunk = Chunk.objects.filter(document=doc).first()
    kb_args, doc_args = [kb.pk], [doc.pk]
    return [
        ("get", reverse("admin:knowledge_knowledgebase_change", args=kb_args)),
        ("get", reverse("admin:knowledge_knowledgebase_history", args=kb_args)),
        ("get", reverse("admin:knowledge_knowledgebase_delete", args=kb_args)),
        ("get", reverse("admin:knowledge_knowledgebase_upload", args=kb_args)),
        ("get", reverse("admin:knowledge_knowledgebase_reembed", args=kb_args)),
        ("get", reverse("admin:knowledge_knowledgebase_hit_testing", args=kb_args) + "?q=TH01"),
        ("post", reverse("admin:knowledge_knowledgebase_rebuild_index", args=kb_args)),
        ("post", reverse("admin:knowledge_knowledgebase_calibrate", args=kb_args)),
        ("get", reverse("admin:knowledge_document_change", args=doc_args)),
        ("get", reverse("admin:knowledge_document_delete", args=doc_args)),
        ("get", reverse("admin:knowledge_document_file", args=doc_args)),
        ("post", reverse("admin:knowledge_document_reprocess", args=doc_args)),
        ("get", reverse("admin:knowledge_chunk_change", args=[chunk.pk])),
        ("get", reverse("admin:tenancy_tenant_change", args=[world.tenant_a.pk])),
    ]


def test_another_tenants_objects_are_not_found_while_their_own_staff_reach_them(client, world):
    client.force_login(world.owner_b)
    for method, url in object_pages(world):
        response = getattr(client, method)(url)
        assert response.status_code == 404, (method, url, response.status_code)

    client.force_login(world.owner_a)
    for method, url in object_pages(world):
        response = getattr(client, method)(url)
        assert response.status_code in (200, 302), (method, url, response.status_code)


def test_posts_to_another_tenants_objects_change_nothing(client, world):
    kb, doc = world.kb_a, world.docs_a["sensors.md"]
    kb.refresh_from_db()
    version = kb.index_version
    client.force_login(world.owner_b)
    upload = reverse("admin:knowledge_knowledgebase_upload", args=[kb.pk])
    with open(__file__, "rb") as stream:
        assert client.post(upload, {"files": [stream]}).status_code == 404
    delete = reverse("admin:knowledge_document_delete", args=[doc.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 404
    changelist = reverse("admin:knowledge_document_changelist")
    for action in ("delete_selected", "reprocess_selected"):
        confirmed = {"action": action, "_selected_action": [doc.pk], "post": "yes"}
        assert client.post(changelist, confirmed).status_code == 404
    change = reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])
    assert client.post(change, {"name": "taken over"}).status_code == 404
    assert Document.objects.filter(knowledge_base=kb).count() == 3
    doc.refresh_from_db()
    assert doc.status == "ready"
    kb.refresh_from_db()
    assert (kb.name, kb.index_version) == ("Acme manuals", version)


@pytest.mark.parametrize(
    "model",
    ["knowledgebase", "document", "chunk", "bm25manifest", "bm25segment", "apikey", "tenant"],
)
def test_lists_show_only_the_users_tenants(client, world, model, eager_tasks):
    from retrieval.search import RAGService

    with eager_tasks():
        for kb in (world.kb_a, world.kb_b):  # builds both BM25 indexes (L3 rows)
            RAGService(kb.tenant).search("sensor", kb.pk)
    assert BM25Manifest.objects.count() == 2
    create_api_key(tenant=world.tenant_a, name="Acme reader")
    create_api_key(tenant=world.tenant_b, name="Bolt reader")
    apps = {"bm25manifest": "retrieval", "bm25segment": "retrieval", "tenant": "tenancy"}
    app = (apps | {"apikey": "tenancy"}).get(model, "knowledge")
    url = reverse(f"admin:{app}_{model}_changelist")
    client.force_login(world.owner_b)
    page = client.get(url).content.decode()
    assert "Acme" not in page and "Sensor notes" not in page and "TH01" not in page
    client.force_login(world.superuser)
    page = client.get(url).content.decode()
    assert "Acme" in page or "Sensor notes" in page or "TH01" in page


def test_document_lists_and_their_filters_name_only_the_users_knowledge_bases(client, world):
    url = reverse("admin:knowledge_document_changelist")
    client.force_login(world.owner_b)
    page = client.get(url).content.decode()
    assert "Bolts" in page
    assert "Acme manuals" not in page and "Sensor notes" not in page
    client.force_login(world.owner_a)
    page = client.get(url).content.decode()
    assert "Sensor notes" in page
    assert "Bolts" not in page and "Bolt notes" not in page
    client.force_login(world.superuser)  # both knowledge bases: a column and a filter
    page = client.get(url).content.decode()
    assert "Bolt notes" in page and "Acme manuals" in page


def test_status_endpoint_answers_for_own_documents_only(client, world):
    doc_a = world.docs_a["sensors.md"]
    doc_b = Document.objects.get(knowledge_base=world.kb_b)
    url = reverse("admin:knowledge_document_status") + f"?ids={doc_a.pk},{doc_b.pk}"
    client.force_login(world.owner_b)
    assert set(client.get(url).json()["documents"]) == {str(doc_b.pk)}
    client.force_login(world.outsider)
    assert client.get(url).json()["documents"] == {}
    client.force_login(world.superuser)
    assert set(client.get(url).json()["documents"]) == {str(doc_a.pk), str(doc_b.pk)}


def test_staff_of_no_tenant_see_no_knowledge_models(client, world):
    client.force_login(world.outsider)
    index = client.get(reverse("admin:index")).content.decode()
    assert "/admin/knowledge/" not in index and "/admin/retrieval/" not in index
    assert client.get(reverse("admin:knowledge_knowledgebase_changelist")).status_code == 403
    url = reverse("admin:knowledge_knowledgebase_change", args=[world.kb_a.pk])
    assert client.get(url).status_code == 404


def test_add_forms_offer_only_the_users_tenants(client, world):
    client.force_login(world.owner_b)
    page = client.get(reverse("admin:knowledge_knowledgebase_add")).content.decode()
    assert "Bolt" in page and "Acme" not in page
    page = client.get(reverse("admin:tenancy_apikey_add")).content.decode()
    assert "Bolt notes" in page and "Acme manuals" not in page
    response = client.post(
        reverse("admin:knowledge_knowledgebase_add"),
        {
            "tenant": world.tenant_a.pk,
            "name": "Planted",
            "chunk_size": 1500,
            "chunk_overlap": 150,
            "weight_mode": "fixed",
            "vector_weight": 0.6,
            "keyword_weight": 0.4,
            "top_k": 5,
            "candidate_multiplier": 3,
            "rerank_top_n": 20,
        },
    )
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not KnowledgeBase.objects.filter(name="Planted").exists()


def test_a_viewer_reads_but_cannot_change(client, world):
    kb, doc = world.kb_a, world.docs_a["sensors.md"]
    client.force_login(world.viewer_a)
    assert (
        client.get(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])).status_code == 200
    )
    hit_testing = reverse("admin:knowledge_knowledgebase_hit_testing", args=[kb.pk])
    assert client.get(hit_testing + "?q=TH01").status_code == 200
    for method, name, pk in [
        ("get", "knowledge_knowledgebase_upload", kb.pk),
        ("post", "knowledge_knowledgebase_rebuild_index", kb.pk),
        ("post", "knowledge_knowledgebase_calibrate", kb.pk),
        ("get", "knowledge_knowledgebase_reembed", kb.pk),
        ("post", "knowledge_document_reprocess", doc.pk),
        ("get", "knowledge_document_delete", doc.pk),
    ]:
        response = getattr(client, method)(reverse(f"admin:{name}", args=[pk]))
        assert response.status_code == 403, (name, response.status_code)
    response = client.post(
        reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]), {"name": "renamed"}
    )
    assert response.status_code == 403
    kb.refresh_from_db()
    assert kb.name == "Acme manuals"
