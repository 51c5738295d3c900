"""Bulk operations without timeouts: a ZIP archive uploaded as its members (each judged as an
upload, zip bombs refused), every failed document retried, many documents deleted at once
(out of search at once, rows and files in the background), and the reaper that finds a lost
deletion."""

from __future__ import annotations

import io
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from knowledge.models import Chunk, Document
from knowledge.services import bulk
from knowledge.services.processing import process_document
from rag_project.celery import app
from tests.api.conftest import API, error_of, make_kb, named_file, upload
from tests.builders import zip_bomb

pytestmark = pytest.mark.django_db
ELF = b"\x7fELF\x02\x01\x01" + bytes(300)


def build_zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


@pytest.fixture
def eager(django_capture_on_commit_callbacks):
    """Tasks run inline; ``with eager():`` runs its block's on-commit callbacks (queuing)."""
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = False


@pytest.fixture
def empty_kb(tenant):
    return make_kb(tenant, "Inbox")


def stored(kb) -> set[Path]:
    folder = Path(django_settings.MEDIA_ROOT) / "documents" / str(kb.tenant_id) / str(kb.pk)
    return set(folder.iterdir()) if folder.exists() else set()


def test_a_zip_is_uploaded_as_its_members_each_judged_on_its_own(client, empty_kb):
    archive = build_zip(
        {
            "pumps.md": b"# Pumps\n\nThe P-100 pump moves water.",
            "manuals/sensors/th01.txt": b"The TH01 sensor reads the casing temperature.",
            "tools/run.exe": ELF,
            "inner.zip": build_zip({"a.md": b"# A"}),
            "empty.md": b"",
            "__MACOSX/._pumps.md": b"junk",
            "manuals/": b"",
        }
    )
    response = upload(
        client, empty_kb.pk, named_file("plant.zip", archive), metadata='{"site": "north"}'
    )
    assert response.status_code == 202, response.content
    results = {r["file"]: r for r in response.json()["results"]}
    assert set(results) == {
        "plant.zip/pumps.md",
        "plant.zip/manuals/sensors/th01.txt",
        "plant.zip/tools/run.exe",
        "plant.zip/inner.zip",
        "plant.zip/empty.md",
    }
    assert results["plant.zip/pumps.md"]["outcome"] == "accepted"
    assert results["plant.zip/tools/run.exe"]["error"]["code"] == "unsupported_file_type"
    assert results["plant.zip/inner.zip"]["error"]["code"] == "nested_archive"
    assert results["plant.zip/empty.md"]["outcome"] == "refused"
    nested = Document.objects.get(pk=results["plant.zip/manuals/sensors/th01.txt"]["document_id"])
    assert nested.original_filename == "th01.txt"  # flattened; the path is in the metadata
    assert nested.metadata == {
        "site": "north",
        "archive": "plant.zip",
        "path": "manuals/sensors/th01.txt",
        "folder": "manuals/sensors",
    }
    assert process_document(nested.pk) == Document.Status.READY
    hits = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/search",
        {"query": "casing temperature", "filters": {"metadata": {"folder": "manuals/sensors"}}},
        format="json",
    ).json()["results"]
    assert [h["document_id"] for h in hits] == [nested.pk]
    assert Document.objects.filter(knowledge_base=empty_kb).count() == 2


def test_a_zip_bomb_is_refused_whole_and_stores_nothing(client, empty_kb):
    bomb = zip_bomb(build_zip({"a.md": b"# A\n\ntext"}))
    before = stored(empty_kb)
    response = upload(client, empty_kb.pk, named_file("bomb.zip", bomb))
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert "zip bomb" in error["message"]
    assert error["details"]["results"][0]["file"] == "bomb.zip"
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()
    assert stored(empty_kb) == before


def test_an_archive_with_too_many_files_is_refused_with_the_limit(client, empty_kb, settings):
    settings.RAG_MAX_ARCHIVE_MEMBERS = 2
    archive = build_zip({f"{i}.md": f"# {i}".encode() for i in range(3)})
    response = upload(client, empty_kb.pk, named_file("many.zip", archive))
    assert response.status_code == 413
    assert "more than the limit of 2" in error_of(response)["message"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()


def test_retry_failed_sets_them_pending_and_queues_them(client, kb, eager):
    failed = [kb.docs["pumps.md"], kb.docs["sensors.md"]]
    Document.objects.filter(pk__in=[d.pk for d in failed]).update(
        status=Document.Status.FAILED, error="the embedder was down"
    )
    with eager():
        response = client.post(f"{API}/knowledge-bases/{kb.pk}/documents/retry-failed")
    assert response.status_code == 202, response.content
    assert response.json() == {"queued": 2}
    for document in failed:
        document.refresh_from_db()
        assert (document.status, document.error) == (Document.Status.READY, "")
    again = client.post(f"{API}/knowledge-bases/{kb.pk}/documents/retry-failed")
    assert again.json() == {"queued": 0}


def test_bulk_delete_takes_them_out_at_once_and_deletes_in_the_background(client, kb, eager):
    doomed = [kb.docs["pumps.md"].pk, kb.docs["sensors.md"].pk]
    files_before = stored(kb)
    url = f"{API}/knowledge-bases/{kb.pk}/documents/delete"
    response = client.post(url, {"ids": [*doomed, 10**9]}, format="json")
    assert response.status_code == 202, response.content
    assert response.json() == {"deleting": 2}
    # before the task ran: out of search and of the list, counted as deleting
    hits = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump seal"}, format="json"
    ).json()["results"]
    assert not {h["document_id"] for h in hits} & set(doomed)
    listed = client.get(f"{API}/knowledge-bases/{kb.pk}/documents").json()["results"]
    assert not {d["id"] for d in listed} & set(doomed)
    assert client.get(f"{API}/knowledge-bases/{kb.pk}").json()["deleting_document_count"] == 2
    # the task (lost here: the test transaction never committed) is found by the reaper
    later = timezone.now() + timedelta(seconds=django_settings.RAG_STUCK_AFTER_S + 1)
    with eager():
        assert bulk.reap_requested_deletions(later) == [kb.pk]
    assert not Document.objects.filter(pk__in=doomed).exists()
    assert not Chunk.objects.filter(document_id__in=doomed).exists()
    assert len(stored(kb)) == len(files_before) - 2
    assert client.get(f"{API}/knowledge-bases/{kb.pk}").json()["deleting_document_count"] == 0


def test_bulk_delete_by_status(client, kb, eager):
    Document.objects.filter(pk=kb.docs["pumps.md"].pk).update(status=Document.Status.FAILED)
    url = f"{API}/knowledge-bases/{kb.pk}/documents/delete"
    with eager():
        response = client.post(url, {"status": ["failed"]}, format="json")
    assert response.json() == {"deleting": 1}
    assert not Document.objects.filter(pk=kb.docs["pumps.md"].pk).exists()
    assert Document.objects.filter(knowledge_base=kb).count() == 2


@pytest.mark.parametrize(
    "payload",
    [{}, {"ids": [1], "status": ["failed"]}, {"ids": []}, {"status": ["gone"]}, {"ids": "1"}],
)
def test_bulk_delete_needs_ids_or_a_status(client, kb, payload):
    url = f"{API}/knowledge-bases/{kb.pk}/documents/delete"
    response = client.post(url, payload, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["message"]
    assert Document.objects.filter(knowledge_base=kb, delete_requested_at__isnull=True).count() == 3


def test_bulk_operations_need_write_and_stay_in_the_tenant(kb, make_key, other_tenant):
    from tests.api.conftest import bearer

    reader = bearer(make_key(kb.tenant, scopes=["read"]))
    ids = {"ids": [kb.docs["pumps.md"].pk]}
    base = f"{API}/knowledge-bases/{kb.pk}/documents"
    assert reader.post(f"{base}/delete", ids, format="json").status_code == 403
    assert reader.post(f"{base}/retry-failed").status_code == 403
    stranger = bearer(make_key(other_tenant))
    assert stranger.post(f"{base}/delete", ids, format="json").status_code == 404
    assert stranger.post(f"{base}/retry-failed").status_code == 404
    # another tenant's ids through its own knowledge base are ignored
    theirs = make_kb(other_tenant, "Theirs")
    response = stranger.post(f"{API}/knowledge-bases/{theirs.pk}/documents/delete", ids)
    assert response.json() == {"deleting": 0}
    assert Document.objects.filter(knowledge_base=kb, delete_requested_at__isnull=True).count() == 3
