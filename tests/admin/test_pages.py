"""The admin pages do what a curator expects, through the services (Django's test client)."""

from __future__ import annotations

import html
import io
import re
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.models import BM25Manifest
from retrieval.search import RAGService
from tenancy.models import ApiKey
from tenancy.services import hash_key
from tests.admin.conftest import MANUALS
from tests.builders import build_pdf

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(client, world):
    client.force_login(world.owner_a)
    return client


def kb_url(name: str, kb: KnowledgeBase) -> str:
    return reverse(f"admin:knowledge_knowledgebase_{name}", args=[kb.pk])


def test_knowledge_base_page_shows_counts_settings_and_index_status(owner, world, eager_tasks):
    kb = world.kb_a
    page = owner.get(kb_url("change", kb)).content.decode()
    assert 'data-status-count="ready">Ready 3<' in page
    assert 'data-status-count="failed">Failed 0<' in page
    assert "hash-32" in page and 'id="index-state">not built<' in page
    with eager_tasks():
        owner.post(kb_url("rebuild_index", kb))
    row = BM25Manifest.objects.get(knowledge_base=kb)
    kb.refresh_from_db()
    assert row.version == kb.index_version and row.chunk_count == 3
    page = owner.get(kb_url("change", kb)).content.decode()
    assert 'id="index-state">current<' in page
    assert f"L3 v{row.version}" in page and f"L2 v{row.version}" in page


def test_rebuild_index_drops_the_stored_index_and_the_worker_builds_it_again(
    owner, world, eager_tasks
):
    kb = world.kb_a
    RAGService(kb.tenant).search("pump", kb.pk)  # built on demand
    assert BM25Manifest.objects.filter(knowledge_base=kb).exists()
    response = owner.post(kb_url("rebuild_index", kb))  # no worker runs: only dropped
    assert response.status_code == 302
    assert not BM25Manifest.objects.filter(knowledge_base=kb).exists()
    with eager_tasks():
        owner.post(kb_url("rebuild_index", kb))
    kb.refresh_from_db()
    assert BM25Manifest.objects.get(knowledge_base=kb).version == kb.index_version


UPLOAD_ROW = re.compile(
    r'data-file="([^"]+)">\s*<td>[^<]*</td>\s*<td><span class="kb-badge kb-(\w+)"'
)


def test_upload_reports_each_file_accepted_duplicate_or_skipped(owner, world):
    kb = world.kb_a
    existing = world.docs_a["pumps.md"]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("notes/valve.md", "# Valve\n\nValve V-7 opens clockwise.")
        zipped.writestr("../evil.txt", "outside")
        zipped.writestr("notes/", "")
    files = [
        SimpleUploadedFile("manual.pdf", build_pdf([["Valve V-7 is a gate valve."]])),
        SimpleUploadedFile("说明.txt", "阀门每年检查一次。".encode()),
        SimpleUploadedFile("copy-of-pumps.md", MANUALS["pumps.md"].encode()),
        SimpleUploadedFile("notes.zip", archive.getvalue()),
    ]
    response = owner.post(kb_url("upload", kb), {"files": files})
    page = response.content.decode()
    assert dict(UPLOAD_ROW.findall(page)) == {
        "manual.pdf": "accepted",
        "说明.txt": "accepted",
        "copy-of-pumps.md": "duplicate",
        "notes.zip/notes/valve.md": "accepted",
        "notes.zip/../evil.txt": "skipped",
        "notes.zip/notes/": "skipped",
    }
    existing_url = reverse("admin:knowledge_document_change", args=[existing.pk])
    assert f'class="kb-existing" href="{existing_url}"' in page
    assert "leads out of the archive" in page and "A folder" in page  # the skipped reasons
    assert 'id="upload-refused"' not in page
    new = Document.objects.filter(
        knowledge_base=kb, original_filename__in=["manual.pdf", "说明.txt", "valve.md"]
    )
    assert sorted(new.values_list("status", flat=True)) == ["pending"] * 3
    for document in new:  # live status widgets for status.js
        assert f'data-doc="{document.pk}" data-field="status" data-status="pending"' in page


def test_an_upload_with_a_refused_file_stores_nothing_and_lists_each_reason(owner, world):
    kb = world.kb_a
    before = Document.objects.filter(knowledge_base=kb).count()
    files = [
        SimpleUploadedFile("说明.txt", "阀门每年检查一次。".encode()),
        SimpleUploadedFile("tool.exe", b"MZ\x90\x00binary"),
        SimpleUploadedFile("empty.txt", b""),
    ]
    urls = "https://help.example.com/faq"
    response = owner.post(kb_url("upload", kb), {"files": files, "urls": urls})
    page = html.unescape(response.content.decode())
    assert dict(UPLOAD_ROW.findall(page)) == {
        "说明.txt": "refused",
        "tool.exe": "refused",
        "empty.txt": "refused",
        "https://help.example.com/faq": "refused",
    }
    assert "Nothing was stored: 2 of the 4 files were refused" in page
    assert "The file is empty" in page and ".pdf" in page  # reasons, accepted types
    assert "can be sent again as it is" in page  # the files that were fine
    assert urls in page.split('id="upload-form"')[1]  # the URLs stay on the form
    assert Document.objects.filter(knowledge_base=kb).count() == before


def test_status_endpoint_reports_progress_error_and_chunks(owner, world):
    doc = world.docs_a["sensors.md"]
    Document.objects.filter(pk=doc.pk).update(status="failed", error="The PDF is encrypted")
    url = reverse("admin:knowledge_document_status") + f"?ids={doc.pk},x,999999"
    assert owner.get(url).json() == {
        "documents": {
            str(doc.pk): {
                "status": "failed",
                "label": "Failed",
                "progress": 100,
                "error": "The PDF is encrypted",
                "chunk_count": 1,
                "final": True,
                "queue": "",  # the fair-queue place, for pending documents only
            }
        }
    }


def test_documents_list_shows_badges_progress_and_errors(owner, world):
    doc = world.docs_a["pumps.md"]
    Document.objects.filter(pk=doc.pk).update(status="failed", error="could not parse the file")
    url = (
        reverse("admin:knowledge_document_changelist")
        + f"?knowledge_base__id__exact={world.kb_a.pk}"
    )
    page = owner.get(url).content.decode()
    assert "Documents of Acme manuals" in page
    assert f'data-doc="{doc.pk}" data-field="error">could not parse the file<' in page
    assert page.count('class="kb-badge kb-ready"') == 2
    assert 'class="kb-progress-bar" style="width: 100%"' in page
    assert "status.js" in page and reverse("admin:knowledge_document_status") in page
    assert kb_url("upload", world.kb_a) in page


def test_delete_selected_goes_through_the_service(owner, world, eager_tasks):
    kb = world.kb_a
    doc = world.docs_a["pumps.md"]
    stored = Path(doc.file.path)
    assert stored.exists()
    version = KnowledgeBase.objects.get(pk=kb.pk).index_version
    changelist = reverse("admin:knowledge_document_changelist")
    selected = {"action": "delete_selected", "_selected_action": [doc.pk]}
    confirm = owner.post(changelist, selected).content.decode()
    assert "<li>documents: 1</li>" in confirm.lower() or "documents: 1" in confirm.lower()
    with eager_tasks():
        owner.post(changelist, {**selected, "post": "yes"})
    assert not Document.objects.filter(pk=doc.pk).exists()
    assert not Chunk.objects.filter(document_id=doc.pk).exists()
    assert not stored.exists()  # removed after commit, by the service
    assert KnowledgeBase.objects.get(pk=kb.pk).index_version == version + 1


def test_reprocess_puts_documents_back_in_the_queue(owner, world, eager_tasks):
    doc = world.docs_a["sensors.md"]
    processed_at = doc.processed_at
    changelist = reverse("admin:knowledge_document_changelist")
    owner.post(changelist, {"action": "reprocess_selected", "_selected_action": [doc.pk]})
    doc.refresh_from_db()
    assert (doc.status, doc.progress) == ("pending", 0)
    with eager_tasks():  # the task runs inline: processed again
        owner.post(reverse("admin:knowledge_document_reprocess", args=[doc.pk]))
    doc.refresh_from_db()
    assert doc.status == "ready" and doc.processed_at > processed_at


def test_document_page_lists_its_chunks_in_order_and_links_the_original(owner, world):
    doc = world.docs_a["传感器.txt"]
    long = "\n\n".join(f"Paragraph {i} about valve V-{i}." * 4 for i in range(30))
    doc_kb = world.kb_a
    KnowledgeBase.objects.filter(pk=doc_kb.pk).update(chunk_size=200, chunk_overlap=0)
    from tests.factories import add_document

    doc_kb.refresh_from_db()
    many = add_document(doc_kb, "valves.md", long)
    page = owner.get(reverse("admin:knowledge_document_change", args=[many.pk])).content.decode()
    positions = [int(p) for p in re.findall(r'data-position="(\d+)"', page)]
    assert positions == list(range(25))  # first page, in reading order
    assert f"of {many.chunk_count}" in page and "?page=2" in page
    assert "hash-32 (32)" in page and "<code>valv</code>" in page

    page = owner.get(reverse("admin:knowledge_document_change", args=[doc.pk])).content.decode()
    assert "温度传感器每六个月校准一次" in page and "<code>传感器</code>" in page
    response = owner.get(reverse("admin:knowledge_document_file", args=[doc.pk]))
    assert b"".join(response.streaming_content) == MANUALS["传感器.txt"].encode()
    assert "attachment" in response["Content-Disposition"]


def test_chunk_page_shows_content_tokens_model_and_neighbours(owner, world):
    doc = world.docs_a["sensors.md"]
    chunk = Chunk.objects.get(document=doc, position=0)
    page = owner.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()
    assert "calibrated every six months" in page
    assert "<code>th01</code>" in page and "<code>calibr</code>" in page
    assert "hash-32 (32 dimensions)" in page
    assert "Sensor notes" in page  # heading path
    assert reverse("admin:knowledge_document_file", args=[doc.pk]) in page


def test_hit_testing_finds_the_chunk_first_with_signals_highlights_and_trace(owner, world):
    url = kb_url("hit_testing", world.kb_a)
    page = owner.get(url, {"q": "when is TH01 calibrated", "mode": "hybrid"}).content.decode()
    target = Chunk.objects.get(document=world.docs_a["sensors.md"])
    first = re.search(r'class="kb-card kb-hit" data-chunk="(\d+)"', page)
    assert int(first.group(1)) == target.pk
    assert "<mark>TH01</mark>" in page and "<mark>calibrated</mark>" in page
    assert 'fused <b class="kb-score">1.0000</b>' in page
    assert "(rank 1)" in page and "vector → keyword → fusion" in page
    assert "terms: th01, calibr" in page and '"mode_used": "hybrid"' in html.unescape(page)

    page = owner.get(url, {"q": "传感器校准", "mode": "keyword"}).content.decode()
    assert re.search("<mark>[^<]*传感器</mark>", page) and "<mark>校准</mark>" in page


def test_hit_testing_history_reruns_with_the_current_settings(owner, world):
    url = kb_url("hit_testing", world.kb_a)
    for i in range(12):
        owner.get(url, {"q": f"pump {i}"})
    owner.get(url, {"q": "pump 5"})  # again: moves up, not duplicated
    page = owner.get(url).content.decode()
    queries = re.findall(r'class="kb-rerun">([^<]+)<', page)
    assert queries == [
        "pump 5",
        "pump 11",
        "pump 10",
        "pump 9",
        "pump 8",
        "pump 7",
        "pump 6",
        "pump 4",
        "pump 3",
        "pump 2",
    ]
    owner.get(url, {"q": "sensor pump", "mode": "keyword"})
    page = owner.get(url).content.decode()
    assert "2 results; first: " in page
    KnowledgeBase.objects.filter(pk=world.kb_a.pk).update(top_k=1)  # a settings change
    rerun = re.search(r'href="([^"]+)" class="kb-rerun">sensor pump<', page).group(1)
    page = owner.get(html.unescape(rerun)).content.decode()
    assert page.count('class="kb-card kb-hit"') == 1
    assert "1 result; first: " in page and "2 results; first: " not in page


def test_hit_testing_rejects_impossible_options_with_a_message(owner, world):
    page = owner.get(
        kb_url("hit_testing", world.kb_a), {"q": "pump", "vector_weight": 0, "keyword_weight": 0}
    ).content.decode()
    assert "cannot both be 0" in page and "kb-hit" not in page


def test_calibration_runs_and_reports_its_weights(owner, world):
    response = owner.post(kb_url("calibrate", world.kb_a), follow=True)
    kb = KnowledgeBase.objects.get(pk=world.kb_a.pk)
    assert kb.calibrated_at is not None
    assert "Calibrated on 3 pseudo-queries" in response.content.decode()
    assert "in use now" in response.content.decode()


def test_reembed_switches_the_model_through_the_service(owner, world, eager_tasks):
    kb = world.kb_a
    page = owner.post(kb_url("reembed", kb), {"provider": "nonsense"}).content.decode()
    assert "Select a valid choice" in page
    with eager_tasks():
        response = owner.post(kb_url("reembed", kb), {"provider": "hash", "dimensions": 16})
    assert response.status_code == 302
    kb.refresh_from_db()
    assert (kb.embedding_model, kb.embedding_dimensions, kb.embedding_migration) == (
        "hash-16",
        16,
        None,
    )
    assert set(
        Chunk.objects.filter(knowledge_base=kb).values_list("embedding_model", flat=True)
    ) == {"hash-16"}


def test_settings_and_new_knowledge_bases_go_through_the_services(owner, world, eager_tasks):
    kb = world.kb_a
    form = {
        "name": kb.name,
        "description": "",
        "chunk_size": 1500,
        "chunk_overlap": 150,
        "user_words": "校准周期",
        "weight_mode": "calibrated",
        "vector_weight": 0.3,
        "keyword_weight": 0.7,
        "top_k": 5,
        "candidate_multiplier": 3,
        "score_threshold": "",
        "rerank_top_n": 20,
    }
    with eager_tasks():
        response = owner.post(kb_url("change", kb), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    kb.refresh_from_db()
    # a weight set by hand pins the mode (update_knowledge_base); user words re-analyse chunks
    assert (kb.weight_mode, kb.vector_weight, kb.user_words) == ("fixed", 0.3, ["校准周期"])
    tokens = Chunk.objects.get(document=world.docs_a["传感器.txt"]).tokens
    assert "校准" in tokens

    response = owner.post(
        reverse("admin:knowledge_knowledgebase_add"),
        {
            **form,
            "tenant": world.tenant_a.pk,
            "name": "Fresh",
            "embedding": "hash",
            "embedding_dims": 8,
            "user_words": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    fresh = KnowledgeBase.objects.get(name="Fresh")
    assert (fresh.tenant, fresh.embedding_model, fresh.embedding_dimensions) == (
        world.tenant_a,
        "hash-8",
        8,
    )


def test_deleting_a_knowledge_base_removes_its_files(owner, world, eager_tasks):
    kb = world.kb_a
    paths = [Path(d.file.path) for d in world.docs_a.values()]
    url = reverse("admin:knowledge_knowledgebase_delete", args=[kb.pk])
    assert "chunks: 3" in owner.get(url).content.decode().lower()
    with eager_tasks():
        owner.post(url, {"post": "yes"})
    assert not KnowledgeBase.objects.filter(pk=kb.pk).exists()
    assert not any(p.exists() for p in paths)


def test_a_new_api_key_is_shown_once_and_only_its_hash_is_stored(owner, world):
    response = owner.post(
        reverse("admin:tenancy_apikey_add"),
        {
            "tenant": world.tenant_a.pk,
            "name": "CI",
            "scopes": ["read"],
            "knowledge_bases": [world.kb_a.pk],
        },
    )
    secret = re.search(r'id="api-key-secret"[^>]*>([^<]+)<', response.content.decode()).group(1)
    key = ApiKey.objects.get(name="CI")
    assert key.secret_hash == hash_key(secret) and list(key.knowledge_bases.all()) == [world.kb_a]
    changelist = reverse("admin:tenancy_apikey_changelist")
    owner.post(changelist, {"action": "revoke_selected", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is not None
