"""Documents: multipart upload of one or many files (202, then processed), duplicates (409 or
replace=true), refusals (413, 415) that store nothing, listing, retrieval, deletion,
reprocessing, and the chunks of documents and knowledge bases."""

import contextlib
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadhandler import StopFutureHandlers

from knowledge.api.uploads import BoundedTemporaryFileUploadHandler
from knowledge.models import Chunk, Document
from knowledge.services.processing import process_document
from tests.api.conftest import API, error_of, make_kb, named_file, upload
from tests.builders import build_eml, build_pdf

pytestmark = pytest.mark.django_db

CHINESE = "温度传感器每六个月校准一次。校准时使用标准温度计，并记录偏差。"
ELF = b"\x7fELF\x02\x01\x01" + bytes(300)


def stored_files(kb) -> set[Path]:
    folder = Path(django_settings.MEDIA_ROOT) / "documents" / str(kb.tenant_id) / str(kb.pk)
    return set(folder.iterdir()) if folder.exists() else set()


@pytest.fixture
def empty_kb(tenant):
    return make_kb(tenant, "Inbox")


def test_upload_a_pdf_and_a_chinese_text_answers_202_then_they_become_ready(client, empty_kb):
    pdf = build_pdf([["The P-100 pump manual."], ["Replace the seal every year."]])
    response = upload(
        client,
        empty_kb.pk,
        named_file("manual.pdf", pdf),
        named_file("校准.txt", CHINESE.encode("gb18030")),
        metadata='{"project": "apollo"}',
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert [r["outcome"] for r in body["results"]] == ["accepted", "accepted"]
    assert [d["status"] for d in body["documents"]] == ["pending", "pending"]
    assert {d["original_filename"] for d in body["documents"]} == {"manual.pdf", "校准.txt"}
    assert all(d["metadata"] == {"project": "apollo"} for d in body["documents"])

    for document in body["documents"]:
        assert process_document(document["id"]) == Document.Status.READY
    listed = client.get(f"{API}/knowledge-bases/{empty_kb.pk}/documents").json()
    assert {d["status"] for d in listed["results"]} == {"ready"}
    assert {d["progress"] for d in listed["results"]} == {100}
    pdf_id = body["documents"][0]["id"]
    chunks = client.get(f"{API}/documents/{pdf_id}/chunks").json()["results"]
    assert [c["page"] for c in chunks] == [1, 2]
    hits = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/search",
        {"query": "校准温度计", "filters": {"metadata": {"project": "apollo"}}},
        format="json",
    ).json()["results"]
    assert hits[0]["original_filename"] == "校准.txt"


def test_uploads_are_queued_for_the_worker_on_commit(
    client, empty_kb, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = upload(client, empty_kb.pk, named_file("a.txt", "Some text to process."))
    assert response.status_code == 202
    assert len(callbacks) == 1  # the fair dispatcher's task, after the commit


def test_a_duplicate_answers_409_with_the_existing_documents_id(client, kb):
    existing = kb.docs["pumps.md"]
    again = existing.file.open("rb").read()
    response = upload(client, kb.pk, named_file("copy.md", again))
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "duplicate_document"
    assert error["details"]["existing_document_id"] == existing.pk
    assert error["details"]["results"][0]["outcome"] == "duplicate"
    assert Document.objects.filter(knowledge_base=kb).count() == 3


def test_replace_true_processes_a_duplicate_again(client, kb):
    existing = kb.docs["pumps.md"]
    again = existing.file.open("rb").read()
    response = upload(client, kb.pk, named_file("pumps.md", again), replace="true")
    assert response.status_code == 202
    body = response.json()
    assert body["documents"][0]["id"] == existing.pk
    assert body["documents"][0]["status"] == "pending"
    assert process_document(existing.pk) == Document.Status.READY


def test_one_refused_file_refuses_the_upload_and_names_each_reason(
    client, kb, settings, django_capture_on_commit_callbacks
):
    settings.RAG_MAX_UPLOAD_BYTES = 2000
    duplicate = kb.docs["sensors.md"].file.open("rb").read()
    before = stored_files(kb)
    with django_capture_on_commit_callbacks() as queued:
        response = upload(
            client,
            kb.pk,
            named_file("new.txt", "A brand new note."),
            named_file("sensors-again.md", duplicate),
            named_file("program.exe", ELF),
            named_file("huge.txt", "x" * 5000),
            named_file("empty.txt", b""),
        )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "upload_refused"
    assert error["message"].startswith("Nothing was stored: 3 of the 5 files were refused")
    results = error["details"]["results"]
    assert [(r["file"], r["outcome"], r["error"]["code"]) for r in results] == [
        ("new.txt", "refused", "not_stored"),
        ("sensors-again.md", "duplicate", "duplicate_document"),
        ("program.exe", "refused", "unsupported_file_type"),
        ("huge.txt", "refused", "file_too_large"),
        ("empty.txt", "refused", "unreadable_file"),
    ]
    assert results[1]["document_id"] == kb.docs["sensors.md"].pk
    assert Document.objects.filter(knowledge_base=kb).count() == 3
    assert stored_files(kb) == before and queued == []


def test_duplicates_do_not_fail_an_upload_the_rest_is_accepted(client, kb):
    duplicate = kb.docs["sensors.md"].file.open("rb").read()
    response = upload(
        client,
        kb.pk,
        named_file("new.txt", "A brand new note."),
        named_file("sensors-again.md", duplicate),
        named_file("new-again.txt", "A brand new note."),  # the same bytes twice in one upload
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert [(r["file"], r["outcome"]) for r in body["results"]] == [
        ("new.txt", "accepted"),
        ("sensors-again.md", "duplicate"),
        ("new-again.txt", "duplicate"),
    ]
    (document,) = body["documents"]
    assert body["results"][1]["document_id"] == kb.docs["sensors.md"].pk
    assert body["results"][2]["document_id"] == document["id"]
    assert Document.objects.filter(knowledge_base=kb).count() == 4


def test_several_refusals_of_different_kinds_answer_400_upload_refused(client, empty_kb):
    response = upload(client, empty_kb.pk, named_file("a.exe", ELF), named_file("empty.txt", b""))
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "upload_refused" and len(error["details"]["results"]) == 2


def test_an_unsupported_type_answers_415_and_stores_nothing(client, empty_kb):
    before = stored_files(empty_kb)
    response = upload(client, empty_kb.pk, named_file("program.exe", ELF))
    assert response.status_code == 415
    error = error_of(response)
    assert error["code"] == "unsupported_file_type" and ".pdf" in error["message"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()
    assert stored_files(empty_kb) == before


def test_a_file_over_the_limit_answers_413_and_stores_nothing(client, empty_kb, settings):
    settings.RAG_MAX_UPLOAD_BYTES = 1000
    before = stored_files(empty_kb)
    response = upload(client, empty_kb.pk, named_file("big.txt", "word " * 1000))
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "file_too_large" and "1,000" in error["message"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()
    assert stored_files(empty_kb) == before


def test_a_request_over_every_limit_is_refused_before_it_is_read(client, empty_kb, settings):
    settings.RAG_MAX_UPLOAD_BYTES = 10
    settings.RAG_MAX_UPLOAD_FILES = 2
    before = stored_files(empty_kb)
    response = upload(client, empty_kb.pk, named_file("big.txt", "x" * (1100 * 1024)))
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert stored_files(empty_kb) == before


def test_the_upload_handler_writes_at_most_one_byte_over_the_limit(settings):
    settings.RAG_MAX_UPLOAD_BYTES = 100
    handler = BoundedTemporaryFileUploadHandler()
    with contextlib.suppress(StopFutureHandlers):  # it stops the handlers after it
        handler.new_file("files", "big.txt", "text/plain", 5000)
    for start in range(0, 5000, 64):
        handler.receive_data_chunk(b"y" * 64, start)
    uploaded = handler.file_complete(5056)
    assert uploaded.size == 5056  # the size that was sent: refused as too large
    assert len(uploaded.read()) == 101  # the disk held one byte over the limit
    assert not hasattr(uploaded.file, "getvalue")  # a temporary file, not memory
    uploaded.close()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "files"),
        ({"metadata": "not json"}, "metadata"),
        ({"metadata": "[1, 2]"}, "metadata"),
    ],
)
def test_invalid_upload_forms_answer_400(client, empty_kb, fields, field):
    files = [] if field == "files" else [named_file("a.txt", "text")]
    response = upload(client, empty_kb.pk, *files, **fields)
    assert response.status_code == 400
    assert field in error_of(response)["details"]["fields"]


def test_list_filters_by_status_newest_first(client, kb):
    document = kb.docs["pumps.md"]
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error="bad")
    body = client.get(f"{API}/knowledge-bases/{kb.pk}/documents?status=failed").json()
    assert [d["id"] for d in body["results"]] == [document.pk]
    assert body["results"][0]["error"] == "bad"
    both = client.get(f"{API}/knowledge-bases/{kb.pk}/documents?status=failed,ready").json()
    ids = [d["id"] for d in both["results"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 3
    response = client.get(f"{API}/knowledge-bases/{kb.pk}/documents?status=done")
    assert response.status_code == 400 and "status" in error_of(response)["details"]["fields"]


def test_retrieve_a_document(client, kb):
    document = kb.docs["sensors.md"]
    body = client.get(f"{API}/documents/{document.pk}").json()
    assert body["id"] == document.pk and body["knowledge_base_id"] == kb.pk
    assert body["title"] == "Sensor notes" and body["chunk_count"] == 1
    assert body["status"] == "ready" and body["sha256"] == document.sha256
    assert "file" not in body  # storage names are never exposed


def test_delete_a_document_removes_its_chunks_file_and_search_hits(
    client, kb, django_capture_on_commit_callbacks
):
    document = kb.docs["pumps.md"]
    path = Path(document.file.path)
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"{API}/documents/{document.pk}").status_code == 204
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not path.exists()
    hits = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump seal"}, format="json"
    ).json()["results"]
    assert document.pk not in {hit["document_id"] for hit in hits}
    assert client.get(f"{API}/documents/{document.pk}").status_code == 404


def test_reprocess_answers_202_and_processes_again(client, kb):
    document = kb.docs["pumps.md"]
    response = client.post(f"{API}/documents/{document.pk}/reprocess")
    assert response.status_code == 202
    assert response.json()["status"] == "pending" and response.json()["progress"] == 0
    assert process_document(document.pk) == Document.Status.READY


def test_chunks_of_a_kb_and_of_a_document_with_tokens_on_request(client, kb):
    body = client.get(f"{API}/knowledge-bases/{kb.pk}/chunks").json()
    assert body["count"] == 3
    assert [c["document_id"] for c in body["results"]] == sorted(d.pk for d in kb.docs.values())
    assert all(c["tokens"] is None for c in body["results"])
    assert all(c["has_embedding"] and c["embedding_dimensions"] == 64 for c in body["results"])

    document = kb.docs["传感器.md"]
    chunks = client.get(f"{API}/documents/{document.pk}/chunks?include_tokens=true").json()
    chunk = chunks["results"][0]
    assert chunk["document_title"] == "温度传感器" and "传感器" in chunk["tokens"]
    detail = client.get(f"{API}/chunks/{chunk['id']}").json()
    assert detail["content"] == chunk["content"] and detail["tokens"] is None
    assert client.get(f"{API}/chunks/{chunk['id']}?include_tokens=1").json()["tokens"]


def test_uploads_are_multipart_only(client, empty_kb):
    response = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/documents", {"files": []}, format="json"
    )
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


@pytest.mark.parametrize("body", ["-1.5e16", "[1, 2]", '"text"', "null"])
def test_a_json_body_that_is_not_an_object_is_a_bad_request(client, empty_kb, body):
    response = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/documents", body, content_type="application/json"
    )
    assert response.status_code == 400  # found by schemathesis: a number body was a 500
    assert error_of(response)["code"] == "invalid"


@pytest.mark.parametrize(("body", "status"), [("null", 202), ("[1]", 400), ("7", 400)])
def test_reprocess_takes_no_body_or_an_object(client, kb, body, status):
    document = kb.docs["pumps.md"]
    response = client.post(
        f"{API}/documents/{document.pk}/reprocess", body, content_type="application/json"
    )
    assert response.status_code == status  # found by schemathesis: these were 500s


def test_qa_options_at_upload_are_kept_on_the_document_and_used(client, empty_kb):
    faq = "Kunde fragt,Wir antworten\nWo ist das Handbuch?,Im Intranet unter Dokumente.\n"
    response = upload(
        client,
        empty_kb.pk,
        named_file("faq.csv", faq),
        qa_question_column="Kunde fragt",
        qa_answer_column="Wir antworten",
    )
    assert response.status_code == 202, response.content
    (document,) = response.json()["documents"]
    assert document["options"] == {
        "qa_question_column": "Kunde fragt",
        "qa_answer_column": "Wir antworten",
    }
    assert document["parent_id"] is None
    assert process_document(document["id"]) == Document.Status.READY
    (chunk,) = client.get(f"{API}/documents/{document['id']}/chunks").json()["results"]
    assert chunk["heading_path"] == ["Wo ist das Handbuch?"]
    assert chunk["content"] == "Im Intranet unter Dokumente."


def test_qa_pairs_off_with_named_columns_is_a_contradiction(client, empty_kb):
    response = upload(
        client,
        empty_kb.pk,
        named_file("faq.csv", "q,a\nx,y\n"),
        qa_pairs="false",
        qa_question_column="q",
    )
    assert response.status_code == 400
    assert "qa_pairs" in error_of(response)["details"]["fields"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()


def test_an_email_attachment_lists_its_message_as_parent(client, empty_kb):
    message = build_eml(attachments=[("a.pdf", build_pdf([["Attached."]]), "application/pdf")])
    (document,) = upload(client, empty_kb.pk, named_file("m.eml", message)).json()["documents"]
    assert process_document(document["id"]) == Document.Status.READY
    shown = client.get(f"{API}/documents/{document['id']}").json()
    (attachment,) = shown["metadata"]["email"]["attachments"]
    child = client.get(f"{API}/documents/{attachment['document_id']}").json()
    assert child["parent_id"] == document["id"] and child["original_filename"] == "a.pdf"
    assert client.delete(f"{API}/documents/{document['id']}").status_code == 204
    assert client.get(f"{API}/documents/{attachment['document_id']}").status_code == 404
