"""Bulk operations without timeouts: a ZIP archive uploaded as its members (each judged as an
upload and read whole before anything is stored; a damaged member, or a zip bomb, refuses the
whole upload; entries that are not uploads skipped with their reason), every failed document
retried, many documents deleted at once (out of search at once, rows and files in the
background), and the reaper that finds a lost deletion."""

from __future__ import annotations

import io
import stat
import struct
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


NOTE = b"The P-100 pump moves cooling water; replace its seal every year.\n" * 20


def build_zip(
    members: dict[str, bytes], method=zipfile.ZIP_DEFLATED, links: dict[str, str] | None = None
) -> bytes:
    """An archive of ``members``, then ``links`` (name: target) as a Unix zip stores them."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return out.getvalue()


def broken_zip(kind: str) -> bytes:
    """An archive of manuals/fine.md and manuals/broken.txt, the second damaged as ``kind``
    says, its bytes edited as a faulty disk, transfer or archiver would leave them."""
    method = zipfile.ZIP_DEFLATED if kind in ("method_9", "corrupt_data") else zipfile.ZIP_STORED
    members = {"manuals/fine.md": b"# Fine\n\nNothing wrong here.", "manuals/broken.txt": NOTE}
    raw = bytearray(build_zip(members, method))
    info = zipfile.ZipFile(io.BytesIO(bytes(raw))).getinfo("manuals/broken.txt")
    local = info.header_offset
    data = local + 30 + len(info.filename)  # writestr adds no extra field
    directory, entry = raw.find(b"PK\x01\x02"), raw.rfind(b"PK\x01\x02")
    if kind == "bad_crc":  # one byte of the stored data flipped
        raw[data + 10] ^= 0xFF
    elif kind == "method_9":  # Deflate64, which zipfile cannot inflate
        struct.pack_into("<H", raw, local + 8, 9)
        struct.pack_into("<H", raw, entry + 10, 9)
    elif kind == "corrupt_data":  # a deflate block of the reserved type
        raw[data] = 0x07
    elif kind == "encrypted":  # the flag of traditional PKWARE encryption
        raw[local + 6] |= 0x1
        raw[entry + 8] |= 0x1
    elif kind == "truncated_member":  # half its data lost, the directory intact
        cut = data + info.compress_size // 2
        raw = raw[:cut] + raw[directory:]
        struct.pack_into("<I", raw, raw.rfind(b"PK\x05\x06") + 16, cut)
    elif kind == "truncated_archive":  # cut short: the directory at its end is lost
        raw = raw[: len(raw) // 2]
    return bytes(raw)


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
            "__MACOSX/._pumps.md": b"junk",
            "manuals/": b"",
        }
    )
    response = upload(
        client, empty_kb.pk, named_file("plant.zip", archive), metadata='{"site": "north"}'
    )
    assert response.status_code == 202, response.content
    results = {r["file"]: r for r in response.json()["results"]}
    assert {name: r["outcome"] for name, r in results.items()} == {
        "plant.zip/pumps.md": "accepted",
        "plant.zip/manuals/sensors/th01.txt": "accepted",
        "plant.zip/tools/run.exe": "skipped",
        "plant.zip/__MACOSX/._pumps.md": "skipped",
        "plant.zip/manuals/": "skipped",
    }
    assert results["plant.zip/tools/run.exe"]["error"]["code"] == "unsupported_file_type"
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


@pytest.mark.parametrize(
    ("kind", "refused", "reason"),
    [
        ("bad_crc", "broken.zip/manuals/broken.txt", "Bad CRC-32"),
        ("method_9", "broken.zip/manuals/broken.txt", "ZIP method 9"),
        ("corrupt_data", "broken.zip/manuals/broken.txt", "invalid block type"),
        ("encrypted", "broken.zip/manuals/broken.txt", "encrypted"),
        ("truncated_member", "broken.zip/manuals/broken.txt", "ends before its declared size"),
        ("truncated_archive", "broken.zip", "damaged"),
    ],
)
def test_a_damaged_member_refuses_the_whole_upload_and_stores_nothing(
    client, empty_kb, django_capture_on_commit_callbacks, kind, refused, reason
):
    before = stored(empty_kb)
    with django_capture_on_commit_callbacks() as queued:
        response = upload(
            client,
            empty_kb.pk,
            named_file("note.txt", "A good note that would be accepted on its own."),
            named_file("broken.zip", broken_zip(kind)),
        )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["message"].startswith("Nothing was stored: 1 of the ")
    assert refused in error["message"] and reason in error["message"]
    results = {r["file"]: r for r in error["details"]["results"]}
    assert results[refused]["outcome"] == "refused"
    assert reason in results[refused]["error"]["message"]
    assert results["note.txt"]["outcome"] == "refused"
    assert results["note.txt"]["error"]["code"] == "not_stored"
    assert [
        r["file"] for r in error["details"]["results"] if r["error"]["code"] != "not_stored"
    ] == [refused]
    # the knowledge base is exactly as it was: no row, no stored file, nothing queued
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()
    assert stored(empty_kb) == before
    assert queued == []
    # sent again without the damaged archive, the note is accepted
    again = upload(
        client,
        empty_kb.pk,
        named_file("note.txt", "A good note that would be accepted on its own."),
    )
    assert again.status_code == 202, again.content


def test_members_that_are_not_uploads_are_skipped_with_their_reason(client, empty_kb):
    archive = build_zip(
        {
            "../evil.txt": b"outside the archive",
            "/abs.txt": b"an absolute path",
            "dir/": b"",
            "__MACOSX/x": b"resource fork",
            ".DS_Store": b"finder",
            "docs/good.md": b"# Good\n\nThe one file to upload.",
        },
        links={"link.txt": "/etc/passwd"},
    )
    response = upload(client, empty_kb.pk, named_file("mixed.zip", archive))
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [(r["file"], r["outcome"], r["error"] and r["error"]["code"]) for r in results] == [
        ("mixed.zip/../evil.txt", "skipped", "unsafe_path"),
        ("mixed.zip//abs.txt", "skipped", "unsafe_path"),
        ("mixed.zip/dir/", "skipped", "folder"),
        ("mixed.zip/__MACOSX/x", "skipped", "archiver_metadata"),
        ("mixed.zip/.DS_Store", "skipped", "hidden_file"),
        ("mixed.zip/docs/good.md", "accepted", None),
        ("mixed.zip/link.txt", "skipped", "symlink"),
    ]
    assert all(r["error"]["message"] for r in results if r["outcome"] == "skipped")
    (document,) = Document.objects.filter(knowledge_base=empty_kb)
    assert document.original_filename == "good.md"
    assert response.json()["documents"][0]["id"] == document.pk


def test_an_archive_of_nothing_to_upload_answers_400_not_500(client, empty_kb):
    archive = build_zip({"__MACOSX/._a.md": b"junk", "folder/": b""})
    response = upload(client, empty_kb.pk, named_file("junk.zip", archive))
    assert response.status_code == 400, response.content
    results = error_of(response)["details"]["results"]
    assert [r["outcome"] for r in results] == ["skipped", "skipped"]
    empty = upload(client, empty_kb.pk, named_file("empty.zip", build_zip({})))
    assert empty.status_code == 400 and error_of(empty)["code"] == "empty_archive"
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()


@pytest.mark.parametrize(
    ("member", "data", "code", "status"),
    [
        ("inner.zip", build_zip({"a.md": b"# A"}), "nested_archive", 415),
        ("empty.md", b"", "unreadable_file", 400),
        ("huge.txt", b"x" * 5000, "file_too_large", 413),
    ],
)
def test_a_member_that_cannot_be_an_upload_refuses_the_archive(
    client, empty_kb, settings, member, data, code, status
):
    settings.RAG_MAX_UPLOAD_BYTES = 4000
    archive = build_zip({"pumps.md": b"# Pumps\n\nThe P-100 pump.", member: data})
    response = upload(client, empty_kb.pk, named_file("plant.zip", archive))
    assert response.status_code == status, response.content
    error = error_of(response)
    assert error["code"] == code
    results = {r["file"]: r["error"]["code"] for r in error["details"]["results"]}
    assert results == {"plant.zip/pumps.md": "not_stored", f"plant.zip/{member}": code}
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()


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
