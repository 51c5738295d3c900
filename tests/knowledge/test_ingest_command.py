"""``manage.py ingest``: a folder of every format, good and bad, as a person would ingest it."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from knowledge.ingestion.parsing import ACCEPTED_EXTENSIONS
from knowledge.models import Chunk, Document, KnowledgeBase
from tenancy.models import Tenant
from tests.builders import build_docx, build_eml, build_epub, build_pdf, build_pptx, build_xlsx

pytestmark = pytest.mark.django_db

CHINESE = "传感器的温度数据每天记录一次。校准周期为六个月，由维护团队负责。"


@pytest.fixture
def folder(tmp_path):
    files = {
        "notes.txt": b"Plain text about the P-100 pump and its pressure limits.",
        "guide.md": b"# Guide\n\nIntro.\n\n## Setup\n\nConnect the TH01 sensor to port 3.",
        "page.html": b"<html><head><title>Page</title><script>x()</script></head>"
        b"<body><h1>Valves</h1><p>Valve V-7 is normally closed.</p></body></html>",
        "report.pdf": build_pdf([["First page about turbines."], ["Second page about rotors."]]),
        "report.docx": build_docx(),
        "table.csv": b"part,stock\nP-100,4\nV-7,12\n",
        "chinese-gbk.txt": CHINESE.encode("gbk"),
        "corrupt.pdf": b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R",
        "empty.txt": b"",
        "program.bin": b"\x7fELF\x02\x01\x01" + bytes(500),
        "prices.xlsx": build_xlsx(),
        "training.pptx": build_pptx(),
        "handbook.epub": build_epub(),
        "mail.eml": build_eml(
            attachments=[("inspection.pdf", build_pdf([["Gland inspection."]]), "application/pdf")]
        ),
        "legacy.xls": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def ingest(*args) -> dict:
    out = io.StringIO()
    call_command("ingest", *args, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def names(items) -> set[str]:
    return {item["file"].rsplit("/", 1)[-1] for item in items}


def test_a_folder_of_every_format_good_and_bad(folder):
    summary = ingest("--tenant", "Acme", "--kb", "Manuals", "--create", "--sync", str(folder))

    assert names(summary["ready"]) == {
        "notes.txt",
        "guide.md",
        "page.html",
        "report.pdf",
        "report.docx",
        "table.csv",
        "chinese-gbk.txt",
        "prices.xlsx",
        "training.pptx",
        "handbook.epub",
        "mail.eml",
        "inspection.pdf",  # the message's attachment, processed with it
    }
    assert any(item["file"].endswith("mail.eml/inspection.pdf") for item in summary["ready"])
    failed = {item["file"].rsplit("/", 1)[-1]: item["reason"] for item in summary["failed"]}
    assert set(failed) == {"corrupt.pdf", "empty.txt"}
    assert "damaged" in failed["corrupt.pdf"].lower()
    assert "empty" in failed["empty.txt"].lower()
    refused = {item["file"].rsplit("/", 1)[-1]: item["reason"] for item in summary["refused"]}
    assert set(refused) == {"program.bin", "legacy.xls"}
    assert ACCEPTED_EXTENSIONS in refused["program.bin"]
    assert "save it as .xlsx" in refused["legacy.xls"]
    assert summary["duplicates"] == []
    assert summary["processed_in_process"] is True

    kb = KnowledgeBase.objects.get(tenant__name="Acme", name="Manuals")
    assert summary["chunks"] == Chunk.objects.filter(knowledge_base=kb).count() > 0
    chunks = Chunk.objects.filter(knowledge_base=kb, document__status="ready")
    assert all(chunk.tokens for chunk in chunks)
    pdf_pages = set(
        chunks.filter(document__original_filename="report.pdf").values_list("page", flat=True)
    )
    assert pdf_pages == {1, 2}
    gbk = chunks.get(document__original_filename="chinese-gbk.txt")
    assert gbk.content == CHINESE and "传感器" in gbk.tokens
    docx_paths = {
        tuple(c.heading_path) for c in chunks.filter(document__original_filename="report.docx")
    }
    assert ("Report 2024", "Sales", "Europe") in docx_paths


def test_ingesting_again_reports_duplicates_and_changes_nothing(folder):
    ingest("--tenant", "Acme", "--kb", "Manuals", "--create", "--sync", str(folder))
    kb = KnowledgeBase.objects.get(name="Manuals")
    before = (
        set(Chunk.objects.filter(knowledge_base=kb).values_list("pk", flat=True)),
        KnowledgeBase.objects.get(pk=kb.pk).index_version,
    )
    summary = ingest("--tenant", "Acme", "--kb", "Manuals", "--sync", str(folder))
    assert len(summary["duplicates"]) == 13  # every accepted file, the failed ones included
    assert all("already in the knowledge base" in d["reason"] for d in summary["duplicates"])
    assert summary["ready"] == [] and summary["failed"] == []
    after = (
        set(Chunk.objects.filter(knowledge_base=kb).values_list("pk", flat=True)),
        KnowledgeBase.objects.get(pk=kb.pk).index_version,
    )
    assert after == before


def test_bad_files_leave_the_rest_of_the_knowledge_base_untouched(folder, tmp_path_factory):
    good = tmp_path_factory.mktemp("good")
    (good / "base.md").write_bytes(b"# Base\n\nExisting knowledge about compressors.")
    ingest("--tenant", "Acme", "--kb", "Manuals", "--create", "--sync", str(good))
    existing = list(Chunk.objects.values_list("pk", "content", "tokens"))
    bad = tmp_path_factory.mktemp("bad")
    for name in ("corrupt.pdf", "empty.txt", "program.bin"):
        (bad / name).write_bytes((folder / name).read_bytes())
    ingest("--tenant", "Acme", "--kb", "Manuals", "--sync", str(bad))
    assert list(Chunk.objects.values_list("pk", "content", "tokens")) == existing
    assert Document.objects.filter(status="ready").count() == 1


def test_without_a_worker_it_processes_in_process_and_says_so(folder, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.md").write_bytes(b"# A\n\nalpha")
    err = io.StringIO()
    out = io.StringIO()
    call_command(
        "ingest",
        "--tenant",
        "Solo",
        "--kb",
        "K",
        "--create",
        "--json",
        str(one),
        stdout=out,
        stderr=err,
    )
    assert "no Celery worker answered; processing in this process" in err.getvalue()
    assert json.loads(out.getvalue())["processed_in_process"] is True


def test_unknown_tenant_or_path_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="no tenant 'Nobody'"):
        call_command("ingest", "--tenant", "Nobody", "--kb", "K", str(tmp_path))
    Tenant.objects.create(name="Acme", slug="acme")
    with pytest.raises(CommandError, match="no knowledge base 'K'"):
        call_command("ingest", "--tenant", "Acme", "--kb", "K", str(tmp_path))
    with pytest.raises(CommandError, match="no such file"):
        call_command("ingest", "--tenant", "Acme", "--kb", "K", "--create", str(tmp_path / "nope"))
