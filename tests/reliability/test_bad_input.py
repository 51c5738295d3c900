"""Bad input through the REST API: hostile file names, zip bombs disguised as .docx, .xlsx,
.pptx and .epub, files over the limit, unsupported types, legacy Office files, malformed and
encrypted PDFs and Office files, truncated workbooks, slides, books and images, binary garbage
named .txt, empty files, GBK text, 10 MB on one line; hostile queries on every search endpoint.
Each is refused (with its status and reason in the one error shape) or fails its document with a
reason; the process survives and other documents' chunks are untouched. Also: secrets never
reach a log."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from pypdf import PdfReader, PdfWriter

from knowledge.models import Chunk, Document
from knowledge.services.processing import process_document
from tests.api.conftest import API, bearer, error_of, make_kb, named_file, signed_in, upload
from tests.builders import (
    build_docx,
    build_epub,
    build_pdf,
    build_pptx,
    build_scan,
    build_xlsx,
    encrypted_office,
    zip_bomb,
)

pytestmark = pytest.mark.django_db

Status = Document.Status


def chunk_snapshot(kb) -> list[tuple]:
    """Every chunk of the KB as a reader would notice it (ids, text, tokens, vectors)."""
    return list(
        Chunk.objects.filter(knowledge_base=kb)
        .order_by("pk")
        .values_list("pk", "document_id", "position", "content", "tokens", "embedding_model")
    )


def accepted_one(response) -> dict:
    assert response.status_code == 202, response.content
    body = response.json()
    assert [r["outcome"] for r in body["results"]] == ["accepted"]
    (document,) = body["documents"]
    assert document["status"] == "pending"
    return document


def processed(document_id: int) -> Document:
    """Process in this process, as the worker would; the call itself must not raise."""
    process_document(document_id)
    return Document.objects.get(pk=document_id)


# --------------------------------------------------------------------------- builders


def zip_bomb_docx(bomb_bytes: int = 40 * 1024 * 1024) -> bytes:
    """A real Word document with one more part: ``bomb_bytes`` of zeros deflated to a few KB."""
    return zip_bomb(build_docx(), "word/media/padding.bin", bomb_bytes)


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(build_pdf([["Secret pump data."]]))))
    writer.encrypt(user_password="open sesame", owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --------------------------------------------------------------------------- fixtures

OTHER_DOCS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "传感器.md": "# 温度传感器\n\n温度传感器每六个月校准一次。校准时使用标准温度计。",
}


@pytest.fixture
def kb(tenant):
    """A knowledge base whose existing documents must come out of every case untouched."""
    return make_kb(tenant, "Target", OTHER_DOCS)


@pytest.fixture
def untouched(kb):
    """Asserts, after the test, that the KB's other documents and chunks did not change."""
    before = chunk_snapshot(kb)
    statuses = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "status"))
    yield
    assert chunk_snapshot(kb)[: len(before)] == before
    for pk, status in statuses.items():
        assert Document.objects.get(pk=pk).status == status


# --------------------------------------------------------------------------- refused at upload


@pytest.mark.parametrize(
    ("name", "data", "status", "code", "reason"),
    [
        ("program.exe", b"\x7fELF\x02\x01\x01" + bytes(300), 415, "unsupported_file_type", ".docx"),
        ("notes.txt", bytes(range(256)) * 40, 415, "unsupported_file_type", "binary data"),
        ("garbage.txt", b"\x00\xff\xfe\x01" * 500, 415, "unsupported_file_type", "binary"),
        ("fake.pdf", b"just words, no PDF header", 415, "unsupported_file_type", "PDF data"),
        ("fake.docx", b"PK\x03\x04" + bytes(200), 415, "unsupported_file_type", "Word"),
        ("legacy.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), 415, "", "legacy"),
        ("prices.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), 415, "", "as .xlsx"),
        ("deck.ppt", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), 415, "", "as .pptx"),
        ("anim.gif", b"GIF89a" + bytes(200), 415, "", "GIF image"),
        ("fake.xlsx", b"name,price\npump,10\n", 415, "", "not contain an Excel workbook"),
        ("notes.eml", b"no headers here\n", 415, "", "e-mail headers"),
        ("empty.txt", b"", 400, "unreadable_file", "empty"),
    ],
)
def test_files_refused_at_upload_answer_their_status_and_store_nothing(
    client, kb, untouched, name, data, status, code, reason
):
    documents_before = Document.objects.filter(knowledge_base=kb).count()
    response = upload(client, kb.pk, named_file(name, data))
    assert response.status_code == status, response.content
    error = error_of(response)
    assert error["code"] == (code or "unsupported_file_type")
    assert reason.lower() in error["message"].lower()
    (result,) = error["details"]["results"]
    assert result["outcome"] == "refused"
    assert Document.objects.filter(knowledge_base=kb).count() == documents_before


def test_a_file_over_the_size_limit_answers_413(client, kb, untouched, settings):
    settings.RAG_MAX_UPLOAD_BYTES = 64 * 1024
    response = upload(client, kb.pk, named_file("big.txt", "pump " * 20_000))
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "file_too_large" and "65,536" in error["message"]
    assert not Document.objects.filter(knowledge_base=kb, original_filename="big.txt").exists()


@pytest.mark.parametrize(
    ("metadata", "field", "message"),
    [
        ('{"revision": 1e999}', "metadata.revision", "A finite number is required."),
        ('{"a": ' * 10_000 + "1" + "}" * 10_000, "metadata", "nested at most 64 deep"),
        ("[" * 10_000 + "]" * 10_000, "metadata", "nested at most 64 deep"),
    ],
    ids=["beyond a float", "objects 10,000 deep", "arrays 10,000 deep"],
)
def test_metadata_json_a_form_cannot_store_is_refused_naming_it(
    client, kb, untouched, metadata, field, message
):
    documents_before = Document.objects.filter(knowledge_base=kb).count()
    response = upload(client, kb.pk, named_file("notes.txt", "Valve V-7 text."), metadata=metadata)
    assert response.status_code == 400, response.content[:300]
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["message"].startswith(f"{field}: ") and message in error["message"]
    assert Document.objects.filter(knowledge_base=kb).count() == documents_before


# --------------------------------------------------------------------------- hostile file names


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("../../../../etc/passwd.txt", "passwd.txt"),
        ("..\\..\\windows\\system32\\evil.txt", "evil.txt"),
        ("/var/www/html/shell.md", "shell.md"),
        ("....//....//x.txt", "x.txt"),
        ("bell\x07\x1b[31mred\x1b[0m.txt", "bell[31mred[0m.txt"),
        # (CR and LF cannot travel in a multipart header: clients percent-encode them.)
        ("nul\x00tab\there\x01.txt", "nultabhere.txt"),
        ("\u202etxt.exe.txt", "txt.exe.txt"),  # right-to-left override: a display trick
        (".hidden.txt", "hidden.txt"),
    ],
)
def test_hostile_file_names_are_cleaned_and_never_used_to_store(client, kb, untouched, name, shown):
    document = accepted_one(upload(client, kb.pk, named_file(name, f"Text of {name!r}.")))
    assert document["original_filename"] == shown
    stored = Document.objects.get(pk=document["id"]).file
    media = Path(django_settings.MEDIA_ROOT).resolve()
    path = Path(stored.path).resolve()
    assert path.is_relative_to(media)  # no ../ escapes the media root
    assert path.parent == media / "documents" / str(kb.tenant_id) / str(kb.pk)
    assert len(path.name) == 32 and int(path.name, 16) >= 0  # a generated uuid4 hex name
    assert processed(document["id"]).status == Status.READY


def test_uploaded_files_are_not_reachable_by_url(client, kb):
    """Stored outside any web root: no URL serves MEDIA_ROOT; only authorised views do."""
    document = accepted_one(upload(client, kb.pk, named_file("secret.txt", "Top secret.")))
    stored = Document.objects.get(pk=document["id"]).file.name
    assert not django_settings.MEDIA_URL or django_settings.MEDIA_URL in ("/", "")
    for url in (f"/{stored}", f"/media/{stored}", f"/static/{stored}"):
        assert Client().get(url).status_code == 404
    media = Path(django_settings.MEDIA_ROOT).resolve()
    static = Path(django_settings.STATIC_ROOT).resolve()
    assert not media.is_relative_to(static) and not static.is_relative_to(media)


# --------------------------------------------------------------------------- failed in processing


@pytest.mark.parametrize(
    ("name", "build", "reason"),
    [
        ("report.docx", zip_bomb_docx, "zip bomb"),
        ("locked.pdf", encrypted_pdf, "encrypted"),
        ("broken.pdf", lambda: build_pdf([["One page."]])[:300], "damaged"),
        ("mangled.pdf", lambda: b"%PDF-1.4\n" + bytes(range(256)) * 20, "damaged"),
        ("broken.docx", lambda: build_docx()[:2000], "damaged"),
        ("blank.pdf", lambda: build_pdf([b"<< /Length 0 >>\nstream\n\nendstream"]), "no text"),
        ("spaces.txt", lambda: b" \n\t \n" * 100, "no text"),
        ("prices.xlsx", lambda: encrypted_office(build_xlsx()), "encrypted"),
        ("deck.pptx", lambda: encrypted_office(build_pptx()), "encrypted"),
        ("prices.xlsx", lambda: zip_bomb(build_xlsx()), "zip bomb"),
        ("deck.pptx", lambda: zip_bomb(build_pptx()), "zip bomb"),
        ("book.epub", lambda: zip_bomb(build_epub()), "zip bomb"),
        ("cut.xlsx", lambda: build_xlsx()[:3000], "damaged"),
        ("cut.pptx", lambda: build_pptx()[:5000], "damaged"),
        ("cut.epub", lambda: build_epub()[:1000], "damaged"),
        ("photo.png", lambda: b"\x89PNG\r\n\x1a\n" + bytes(200), "damaged"),
        ("cut.png", lambda: build_scan()[:2000], "damaged"),
    ],
)
def test_files_that_cannot_be_read_fail_with_a_reason_and_leave_the_rest_alone(
    client, kb, untouched, name, build, reason
):
    document = accepted_one(upload(client, kb.pk, named_file(name, build())))
    failed = processed(document["id"])
    assert failed.status == Status.FAILED
    assert reason in failed.error.lower(), failed.error
    assert not Chunk.objects.filter(document=failed).exists()
    shown = client.get(f"{API}/documents/{document['id']}").json()
    assert shown["status"] == "failed" and shown["error"] == failed.error
    # The process is fine: the next document is processed as usual.
    ok = accepted_one(upload(client, kb.pk, named_file(f"after-{name}.txt", "Valve V-7 text.")))
    assert processed(ok["id"]).status == Status.READY


def test_a_docx_unpacking_over_the_total_limit_fails_as_a_zip_bomb(client, kb, untouched, settings):
    settings.RAG_MAX_UNZIPPED_BYTES = 1024 * 1024
    document = accepted_one(upload(client, kb.pk, named_file("big.docx", zip_bomb_docx(2 << 20))))
    failed = processed(document["id"])
    assert failed.status == Status.FAILED and "zip bomb" in failed.error


def test_text_over_the_character_limit_fails_with_a_reason(client, kb, untouched, settings):
    settings.RAG_MAX_TEXT_CHARS = 10_000
    document = accepted_one(upload(client, kb.pk, named_file("long.txt", "word " * 5000)))
    failed = processed(document["id"])
    assert failed.status == Status.FAILED and "10000" in failed.error.replace(",", "")


# --------------------------------------------------------------------------- accepted and read


def test_gbk_text_is_decoded_and_searchable(client, kb, untouched):
    text = "离心泵的机械密封每年更换一次。" * 20
    document = accepted_one(upload(client, kb.pk, named_file("gbk.txt", text.encode("gbk"))))
    assert processed(document["id"]).status == Status.READY
    chunks = Chunk.objects.filter(document_id=document["id"])
    assert "机械密封" in chunks.first().content
    hits = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "机械密封", "mode": "keyword"}
    ).json()["results"]
    assert hits and hits[0]["document_id"] == document["id"]


def test_ten_megabytes_on_one_line_is_chunked_without_hanging(client, kb, untouched):
    line = "pump7 " * (10 * 1024 * 1024 // 6)
    document = accepted_one(upload(client, kb.pk, named_file("one-line.txt", line)))
    done = processed(document["id"])
    assert done.status == Status.READY, done.error
    assert done.chunk_count > 1000
    longest = max(
        len(c) for c in Chunk.objects.filter(document=done).values_list("content", flat=True)
    )
    assert longest <= kb.chunk_size


# --------------------------------------------------------------------------- queries

QUERIES = {
    "only stopwords": "the of and a is to",
    "chinese stopwords": "的 了 是 在",
    "emoji": "🔧 pump 🚰💧 seal 😀",
    "only emoji": "😀😀😀🔧",
    "mixed scripts": "P-100 泵 насос ポンプ مضخة seal",
    "sql injection": "'; DROP TABLE knowledge_chunk; -- pump",
    "sql union": "pump' UNION SELECT password FROM auth_user --",
    "tsquery syntax": "pump & !seal | (valve:* <-> sensor) & 'x'",
    "regex and like": "%_% .* [a-z]+ \\d{3} pump",
    "nul bytes": "pump\x00seal\x00",
    "only nul": "\x00\x00",
    "control chars": "pump\x1b[31m\x07seal\x7f",
    "surrogate-ish": "pump \ufffd\ufeff\u200b seal",
    "right to left": "\u202epump seal",
    "json-ish": '{"$where": "1==1"} pump',
    "very long word": "p" * 3900,
}

ENDPOINTS = ["search", "context", "multi-search", "dify"]


def ask(client, endpoint: str, kb, query: str, **options):
    if endpoint == "search":
        return client.post(f"{API}/knowledge-bases/{kb.pk}/search", {"query": query, **options})
    if endpoint == "context":
        return client.post(f"{API}/knowledge-bases/{kb.pk}/context", {"query": query, **options})
    if endpoint == "multi-search":
        return client.post(f"{API}/search", {"query": query, "knowledge_base_ids": [kb.pk]})
    return client.post(
        f"{API}/dify/retrieval",
        {"knowledge_id": str(kb.pk), "query": query, "retrieval_setting": {"top_k": 3}},
    )


@pytest.fixture
def json_client(client):
    client.default_format = "json"
    return client


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("case", QUERIES)
def test_hostile_queries_get_an_answer_or_a_400_never_a_5xx(json_client, kb, endpoint, case):
    query = QUERIES[case]
    response = ask(json_client, endpoint, kb, query)
    assert response.status_code in (200, 400), (response.status_code, response.content[:500])
    body = response.json()
    if response.status_code == 400:
        if endpoint == "dify":
            assert body["error_code"] == 3001
        else:
            assert error_of(response)["code"] in ("invalid", "invalid_search")
        return
    hits = body["records"] if endpoint == "dify" else body["results"]
    if "pump" in query.replace("\x00", " ").lower() and endpoint != "dify":
        titles = [h["document_title"] for h in hits]
        assert "Pump handbook" in titles, (case, titles)


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid", "auto"])
@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("", 400),
        ("   \n\t ", 400),
        ("x" * 100_000, 400),
        ("泵 " * 50_000, 400),
        ("pump\x00seal", 400),  # PostgreSQL text cannot hold NUL: refused, named
        ("'; SELECT pg_sleep(10); --", 200),
    ],
)
def test_empty_and_oversized_queries_in_every_mode(json_client, kb, mode, query, status):
    response = ask(json_client, "search", kb, query, mode=mode)
    assert response.status_code == status, response.content[:500]
    if status == 400:
        assert "query" in error_of(response)["details"]["fields"]


def test_a_hundred_kilobyte_body_of_nul_bytes_is_refused(json_client, kb):
    response = ask(json_client, "search", kb, "\x00" * 100_000)
    assert response.status_code == 400


def test_queries_in_admin_hit_testing_survive_hostile_input(kb, tenant):
    from tests.factories import MembershipFactory, UserFactory

    user = UserFactory(is_staff=True)
    MembershipFactory(user=user, tenant=tenant)
    browser = Client()
    browser.force_login(user)
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/hit-testing/"
    assert browser.get(url).status_code == 200
    for query in ("pump\x00seal", "x" * 100_000, "'; DROP TABLE x; --", "😀", "", "the of"):
        response = browser.get(url, {"q": query})
        assert response.status_code == 200, query[:20]


# --------------------------------------------------------------------------- secrets in logs


@pytest.fixture
def every_log(caplog):
    """Every logger at DEBUG, SQL included (every query is logged), into caplog."""
    caplog.set_level(logging.DEBUG)
    levels = {}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            levels[name] = logger.level
            logger.setLevel(logging.DEBUG)
    connection.force_debug_cursor = True
    yield caplog
    connection.force_debug_cursor = False
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def logged_text(caplog) -> str:
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        parts.append(repr(record.__dict__))
    return "\n".join(parts)


def test_api_keys_and_passwords_never_reach_a_log(every_log, tenant, make_key, member, kb):
    from tests.admin.conftest import PASSWORD

    # Key creation through the API (the answer holds the secret, the logs must not).
    owner = member(tenant)
    created = signed_in(owner).post(
        f"{API}/api-keys", {"name": "ci", "scopes": ["read"]}, format="json"
    )
    assert created.status_code == 201
    new_key = created.json()["key"]
    # rag_<8 hex>_<secret>: the secret (token_urlsafe) may hold "_" itself, so split twice
    # from the left; taking what follows the last "_" once checked a one-letter "secret".
    new_secret = new_key.split("_", 2)[2]
    # Use of a key, of a wrong key with a right prefix, and of garbage.
    raw = make_key(tenant)
    secret = raw.split("_", 2)[2]
    assert bearer(raw).get(f"{API}/me").status_code == 200
    assert (
        bearer(new_key)
        .post(f"{API}/knowledge-bases/{kb.pk}/search", {"query": "pump"}, format="json")
        .status_code
        == 200
    )
    wrong = raw[: -len(secret)] + "WrongSecretWrongSecret123"
    assert bearer(wrong).get(f"{API}/me").status_code == 401
    assert bearer("rag_nonsense_TotallyMadeUpSecret999").get(f"{API}/me").status_code == 401
    # Admin logins: one right password, one wrong.
    owner.is_staff = True
    owner.set_password(PASSWORD)
    owner.save()
    wrong_password = "not the right password 0xDEADBEEF"
    browser = Client()
    failed = browser.post("/admin/login/", {"username": owner.username, "password": wrong_password})
    assert failed.status_code == 200  # the form again, with an error
    ok = browser.post("/admin/login/", {"username": owner.username, "password": PASSWORD})
    assert ok.status_code == 302

    text = logged_text(every_log)
    assert "SELECT" in text  # the capture really saw SQL: the check below means something
    for secret_text in (
        new_key,
        new_secret,
        raw,
        secret,
        "WrongSecretWrongSecret123",
        "TotallyMadeUpSecret999",
        PASSWORD,
        wrong_password,
    ):
        assert secret_text not in text, f"{secret_text[:6]}... was logged"
