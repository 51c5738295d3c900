"""A document from a URL: REST (JSON or multipart, beside files), the ingest command; refused
at once when the host is an address that is not public, fetched by the worker otherwise, and
failing with a reason a person can act on."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import call_command

from knowledge.models import Document
from knowledge.services.processing import process_document
from knowledge.web.documents import fetch_into
from tests.api.conftest import API, error_of, make_kb, named_file
from tests.builders import build_pdf
from tests.web_site import Page, Site

pytestmark = pytest.mark.django_db


@pytest.fixture
def site():
    with Site() as running:
        running.html("/help/reset-password", "Reset your password", "Open Settings, then Reset.")
        yield running


@pytest.fixture
def empty_kb(tenant):
    return make_kb(tenant, "Web")


def post_urls(client, kb, **body):
    return client.post(f"{API}/knowledge-bases/{kb.pk}/documents", body, format="json")


def test_a_url_becomes_a_pending_document_then_ready_and_searchable(client, empty_kb, site, local):
    url = site.url("/help/reset-password")
    response = post_urls(client, empty_kb, url=url, metadata={"section": "accounts"})
    assert response.status_code == 202, response.content
    (document,) = response.json()["documents"]
    assert document["status"] == "pending" and document["source_url"] == url
    assert response.json()["results"][0] == {
        "file": url,
        "outcome": "accepted",
        "document_id": document["id"],
        "error": None,
    }
    assert site.fetched("/help/reset-password") == []  # nothing fetched in the request

    assert process_document(document["id"], fetch=fetch_into) == Document.Status.READY
    stored = Document.objects.get(pk=document["id"])
    assert stored.title == "Reset your password"
    assert stored.file_type == "html" and stored.original_filename == "reset-password.html"
    page = site.pages["/help/reset-password"].body
    assert stored.sha256 == hashlib.sha256(page).hexdigest()
    assert stored.file.read() == page
    hits = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/search",
        {"query": "reset password settings"},
        format="json",
    ).json()["results"]
    assert hits and hits[0]["document_id"] == document["id"]


def test_processing_a_url_document_without_its_fetch_step_is_refused_and_changes_nothing(
    client, empty_kb, site, local
):
    """The fetch step is the caller's to give (the worker's task gives ``fetch_into``): a
    caller that forgets it is told so, and the document waits as it was."""
    response = post_urls(client, empty_kb, url=site.url("/help/reset-password"))
    (document,) = response.json()["documents"]
    before = Document.objects.values().get(pk=document["id"])
    with pytest.raises(ValueError, match="fetch_into"):
        process_document(document["id"])
    assert Document.objects.values().get(pk=document["id"]) == before
    assert site.fetched("/help/reset-password") == []
    assert process_document(document["id"], fetch=fetch_into) == Document.Status.READY


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:8000/admin/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/iam/", "link-local"),
        ("http://localhost/", "local name"),
        ("http://2130706433/", "loopback"),
    ],
)
def test_a_url_to_a_refused_address_is_refused_at_once_and_nothing_is_stored(
    client, empty_kb, url, kind
):
    response = post_urls(client, empty_kb, url=url)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "url_refused"
    assert kind in error["message"] and "RAG_WEB_ALLOWED_HOSTS" in error["message"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()


def test_a_refused_url_refuses_the_files_beside_it_and_a_refused_file_the_urls(
    client, empty_kb, site, local, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        beside_file = client.post(
            f"{API}/knowledge-bases/{empty_kb.pk}/documents",
            {"files": [named_file("notes.txt", "Good notes.")], "url": "http://169.254.169.254/"},
            format="multipart",
        )
        beside_url = client.post(
            f"{API}/knowledge-bases/{empty_kb.pk}/documents",
            {"files": [named_file("empty.txt", b"")], "url": site.url("/help/reset-password")},
            format="multipart",
        )
    assert beside_file.status_code == 400, beside_file.content
    assert error_of(beside_file)["code"] == "url_refused"
    outcomes = [
        (r["file"], r["error"]["code"]) for r in error_of(beside_file)["details"]["results"]
    ]
    assert outcomes == [("notes.txt", "not_stored"), ("http://169.254.169.254/", "url_refused")]
    assert beside_url.status_code == 400, beside_url.content
    outcomes = [r["error"]["code"] for r in error_of(beside_url)["details"]["results"]]
    assert outcomes == ["unreadable_file", "not_stored"]
    assert not Document.objects.filter(knowledge_base=empty_kb).exists()
    assert queued == []


def test_other_schemes_are_refused(client, empty_kb):
    response = post_urls(client, empty_kb, urls=["file:///etc/passwd", "ftp://example.com/a"])
    assert response.status_code == 400
    assert error_of(response)["code"] == "url_invalid"
    assert "only http and https" in error_of(response)["message"]


def test_a_redirect_to_a_refused_address_fails_the_document_with_the_reason(
    client, empty_kb, site, local
):
    site.pages["/go"] = Page(status=302, location="http://169.254.169.254/latest/meta-data/")
    document_id = post_urls(client, empty_kb, url=site.url("/go")).json()["documents"][0]["id"]
    assert process_document(document_id, fetch=fetch_into) == Document.Status.FAILED
    error = Document.objects.get(pk=document_id).error
    assert "169.254.169.254 is a link-local address; fetching it is refused" in error


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        (None, "answered HTTP 404 Not Found"),
        (Page(body=b"x" * 5000, content_type="text/plain"), "larger than the limit of 1,024 bytes"),
        (Page(body=b"\x00\x01\x02\x03" * 100, content_type="text/html"), "looks like binary"),
    ],
)
def test_fetch_failures_fail_the_document_with_a_reason(
    client, empty_kb, site, local, settings, page, reason
):
    settings.RAG_WEB_MAX_BYTES = 1024
    if page is not None:
        site.pages["/file"] = page
    document_id = post_urls(client, empty_kb, url=site.url("/file")).json()["documents"][0]["id"]
    assert process_document(document_id, fetch=fetch_into) == Document.Status.FAILED
    document = Document.objects.get(pk=document_id)
    assert reason in document.error
    assert document.chunk_count == 0 and not document.file


def test_the_type_comes_from_the_bytes_not_the_header(client, empty_kb, site, local):
    site.pages["/download"] = Page(
        body=build_pdf([["Pump P-100 torque: 40 newton metres."]]), content_type="text/html"
    )
    document_id = post_urls(client, empty_kb, url=site.url("/download")).json()["documents"][0]
    assert process_document(document_id["id"], fetch=fetch_into) == Document.Status.READY
    document = Document.objects.get(pk=document_id["id"])
    assert document.file_type == "pdf" and document.original_filename == "download.pdf"


def test_the_same_url_twice_is_a_duplicate_and_replace_fetches_it_again(
    client, empty_kb, site, local
):
    url = site.url("/help/reset-password")
    first = post_urls(client, empty_kb, url=url).json()["documents"][0]["id"]
    process_document(first, fetch=fetch_into)
    again = post_urls(client, empty_kb, url=url)
    assert again.status_code == 409
    assert error_of(again)["details"]["existing_document_id"] == first

    site.html("/help/reset-password", "Reset your password", "Use the new self-service portal.")
    replaced = post_urls(client, empty_kb, url=url, replace=True)
    assert replaced.status_code == 202 and replaced.json()["documents"][0]["id"] == first
    assert process_document(first, fetch=fetch_into) == Document.Status.READY
    assert b"self-service portal" in Document.objects.get(pk=first).file.read()
    assert Document.objects.filter(knowledge_base=empty_kb).count() == 1


def test_content_already_uploaded_fails_as_a_duplicate_naming_the_document(
    client, empty_kb, site, local
):
    page = site.pages["/help/reset-password"].body
    uploaded = client.post(
        f"{API}/knowledge-bases/{empty_kb.pk}/documents",
        {"files": [named_file("reset.html", page)], "url": site.url("/help/reset-password")},
        format="multipart",
    )
    assert uploaded.status_code == 202
    file_doc, url_doc = (d["id"] for d in uploaded.json()["documents"])
    assert process_document(url_doc, fetch=fetch_into) == Document.Status.FAILED
    error = Document.objects.get(pk=url_doc).error
    assert f"is already in the knowledge base as document {file_doc}" in error


def test_ingest_takes_urls_beside_files(empty_kb, site, local, tmp_path):
    (tmp_path / "notes.txt").write_text("Pump notes: check the seal weekly.")
    out = io.StringIO()
    call_command(
        "ingest",
        str(tmp_path / "notes.txt"),
        site.url("/help/reset-password"),
        "http://169.254.169.254/",
        "--tenant",
        empty_kb.tenant.name,
        "--kb",
        empty_kb.name,
        "--sync",
        "--json",
        stdout=out,
        stderr=io.StringIO(),
    )
    summary = json.loads(out.getvalue())
    assert sorted(item["file"] for item in summary["ready"]) == sorted(
        [str(tmp_path / "notes.txt"), site.url("/help/reset-password")]
    )
    (refused,) = summary["refused"]
    assert refused["file"] == "http://169.254.169.254/" and "link-local" in refused["reason"]


def test_a_url_too_long_to_store_is_refused(client, empty_kb):
    response = post_urls(client, empty_kb, url="https://help.example.com/" + "é" * 400)
    assert response.status_code == 400
    assert "longer than 2000 characters" in error_of(response)["message"]
