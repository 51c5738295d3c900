"""The new formats through the real pipeline (upload, ``process_document``, search): office
files a team moves in become ready and searchable, an e-mail's attachments become documents of
their own, Q&A tables answer questions asked in other words, scans are read by OCR with progress
per page, and a missing OCR engine fails with how to install it."""

from __future__ import annotations

import io

import pytest
from django.core.files.storage import default_storage

from knowledge.embeddings import EmbeddingConfig
from knowledge.ingestion.parsing import TextBox, UnsupportedFileType
from knowledge.models import Chunk, Document
from knowledge.services.documents import create_document, delete_document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from retrieval.search import RAGService
from tests.builders import (
    QA_PAIRS,
    build_eml,
    build_epub,
    build_pdf,
    build_pptx,
    build_qa_xlsx,
    build_scan,
    build_scanned_pdf,
    build_xlsx,
)
from tests.factories import TenantFactory, add_document

pytestmark = pytest.mark.django_db

Status = Document.Status


@pytest.fixture
def kb():
    return create_knowledge_base(
        tenant=TenantFactory(),
        name="Team folder",
        embedding=EmbeddingConfig(provider="hash", dimensions=64),
    )


def upload(kb, name: str, data: bytes, **kwargs) -> Document:
    return create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name=name,
        stream=io.BytesIO(data),
        queue=False,
        **kwargs,
    )


def processed(document: Document) -> Document:
    process_document(document.pk)
    document.refresh_from_db()
    return document


def keyword_hits(kb, query: str):
    return RAGService(kb.tenant).search(query, kb.pk, mode="keyword").hits


def test_a_folder_of_office_files_becomes_ready_and_searchable(kb):
    pdf = build_pdf([["The gland packing was inspected by Hydro AG."]])
    folder = {
        "prices.xlsx": (build_xlsx(), "price in USD", "Pumps"),
        "training.pptx": (build_pptx(), "torque gland bolts", "Seal replacement"),
        "report.eml": (
            build_eml(attachments=[("inspection.pdf", pdf, "application/pdf")]),
            "seal replaced Monday",
            None,
        ),
        "handbook.epub": (build_epub(), "impeller", "Chapter 1: The pump"),
    }
    documents = {name: add_document(kb, name, data) for name, (data, _, _) in folder.items()}

    for name, (_, query, heading) in folder.items():
        hits = keyword_hits(kb, query)
        assert hits and hits[0].document_id == documents[name].pk, (name, hits)
        if heading:
            assert hits[0].heading_path[0] == heading
    assert documents["report.eml"].title == "Pump P-100: seal replacement report"
    assert keyword_hits(kb, "机械密封")[0].document_id == documents["handbook.epub"].pk
    sheet_hit = keyword_hits(kb, "Hydro AG Basel")[0]
    assert sheet_hit.page == 2 and sheet_hit.heading_path[0] == "Suppliers"

    (attachment,) = Document.objects.filter(parent=documents["report.eml"])
    assert processed(attachment).status == Status.READY
    assert keyword_hits(kb, "gland packing")[0].document_id == attachment.pk


@pytest.mark.parametrize(
    ("name", "saved_as"),
    [("prices.xls", ".xlsx"), ("deck.ppt", ".pptx"), ("letter.doc", ".docx")],
)
def test_legacy_office_files_are_refused_at_upload_with_what_to_save_them_as(kb, name, saved_as):
    with pytest.raises(UnsupportedFileType, match=f"save it as \\{saved_as}"):
        upload(kb, name, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(1000))
    assert not Document.objects.filter(knowledge_base=kb).exists()


# --- e-mail attachments ----------------------------------------------------------------------


def test_email_attachments_become_linked_documents_and_go_with_the_message(
    kb, django_capture_on_commit_callbacks
):
    pdf = build_pdf([["Vibration readings of pump P-100."]])
    already_there = add_document(kb, "notes.txt", "Shared notes about the cooling plant.")
    data = build_eml(
        attachments=[
            ("readings.pdf", pdf, "application/pdf"),
            ("notes.txt", b"Shared notes about the cooling plant.", "text/plain"),
            ("setup.exe", b"MZ\x90\x00" + bytes(100), "application/octet-stream"),
            ("empty.csv", b"", "text/csv"),
        ]
    )
    message = processed(upload(kb, "report.eml", data, metadata={"project": "apollo"}))

    assert message.status == Status.READY
    email = message.metadata["email"]
    assert message.metadata["project"] == "apollo"
    assert email["from"] == "li.wei@plant.example"
    readings = Document.objects.get(parent=message)
    assert email["attachments"][0] == {"name": "readings.pdf", "document_id": readings.pk}
    assert email["attachments"][1] == {
        "name": "notes.txt",
        "document_id": already_there.pk,
        "duplicate": True,
    }
    assert email["attachments"][2]["name"] == "setup.exe"
    assert "binary data" in email["attachments"][2]["skipped"]
    assert email["attachments"][3] == {"name": "empty.csv", "skipped": "the attachment is empty"}
    assert readings.status == Status.PENDING and readings.file_type == "pdf"
    assert readings.metadata == {"project": "apollo"}  # found by the message's filters
    # The chunks carry the message's facts, so search can filter on the sender.
    assert Chunk.objects.filter(document=message).first().metadata["email"]["subject"]

    # Processing the message again creates nothing new.
    Document.objects.filter(pk=message.pk).update(status=Status.PENDING)
    processed(message)
    assert Document.objects.filter(knowledge_base=kb).count() == 3

    processed(readings)
    files = [message.file.name, readings.file.name]
    with django_capture_on_commit_callbacks(execute=True):
        delete_document(tenant=kb.tenant, document=message)
    assert not Document.objects.filter(pk__in=[message.pk, readings.pk]).exists()
    assert not Chunk.objects.filter(document_id=readings.pk).exists()
    assert Document.objects.filter(pk=already_there.pk).exists()  # not the message's own
    assert not any(default_storage.exists(name) for name in files)


def test_a_replaced_message_hands_its_shared_attachments_to_the_new_one(kb):
    shared = ("manual.pdf", build_pdf([["Shared manual."]]), "application/pdf")
    dropped = ("old.pdf", build_pdf([["Only in the first version."]]), "application/pdf")
    first = processed(upload(kb, "thread.eml", build_eml(attachments=[shared, dropped])))
    manual = Document.objects.get(parent=first, original_filename="manual.pdf")

    second = upload(
        kb, "thread.eml", build_eml(body="Updated.", attachments=[shared]), replace=True
    )
    second = processed(second)

    assert second.metadata["email"]["attachments"] == [
        {"name": "manual.pdf", "document_id": manual.pk}
    ]
    assert not Document.objects.filter(pk=first.pk).exists()
    assert Document.objects.get(pk=manual.pk).parent_id == second.pk
    assert not Document.objects.filter(original_filename="old.pdf").exists()


def test_a_forwarded_message_is_an_attachment_with_attachments_of_its_own(kb):
    inner = build_eml(
        subject="Original report",
        attachments=[("graph.pdf", build_pdf([["Pressure graph."]]), "application/pdf")],
    )
    outer = processed(upload(kb, "fwd.eml", build_eml(attachments=[("", inner, "message/rfc822")])))
    forwarded = Document.objects.get(parent=outer)
    assert forwarded.original_filename == "Original report.eml"
    assert processed(forwarded).title == "Original report"
    assert Document.objects.get(parent=forwarded).original_filename == "graph.pdf"


# --- Q&A pairs -------------------------------------------------------------------------------


def test_qa_pairs_answer_questions_asked_in_other_words(kb):
    faq = add_document(kb, "faq.xlsx", build_qa_xlsx())

    chunks = list(Chunk.objects.filter(document=faq).order_by("position"))
    assert [(c.heading_path, c.content.split("\n")[0]) for c in chunks] == [
        ([question], answer) for question, answer, _ in QA_PAIRS
    ]
    for query, answer in [
        ("忘记密码了怎么重置", QA_PAIRS[0][1]),
        ("can I get my money back as a refund", QA_PAIRS[1][1]),
        ("电子发票开具时间", QA_PAIRS[2][1]),
    ]:
        hit = keyword_hits(kb, query)[0]
        assert hit.content.split("\n")[0] == answer, query


def test_qa_detection_is_turned_off_and_columns_named_at_upload(kb):
    data = b"question,answer\nWhere is the manual?,On the intranet.\n"
    rows = processed(upload(kb, "rows.csv", data, options={"qa_pairs": False}))
    assert Chunk.objects.get(document=rows).content == (
        "question: Where is the manual?; answer: On the intranet."
    )
    named = b"Frage,Antwort\nWo ist das Handbuch?,Im Intranet.\n"
    pairs = processed(
        upload(
            kb,
            "de.csv",
            named,
            options={"qa_question_column": "Frage", "qa_answer_column": "Antwort"},
        )
    )
    chunk = Chunk.objects.get(document=pairs)
    assert (chunk.heading_path, chunk.content) == (["Wo ist das Handbuch?"], "Im Intranet.")
    failing = processed(upload(kb, "x.csv", b"a,b\n1,2\n", options={"qa_pairs": True}))
    assert failing.status == Status.FAILED and "qa_question_column" in failing.error


# --- OCR -------------------------------------------------------------------------------------


def test_a_scanned_pdf_is_read_by_ocr_and_searchable(kb):
    document = add_document(kb, "scan.pdf", build_scanned_pdf([("en", 21)], lines=2))
    assert document.chunk_count >= 1
    text = Chunk.objects.get(document=document).content
    word = max(text.split(), key=len).strip(".,;")
    assert keyword_hits(kb, word)[0].document_id == document.pk


class PageEngine:
    """An OCR engine that reads every page as one line, and notes the document's status and
    progress each time it is called (that is, after the previous page)."""

    seen: list[tuple[str, int]] = []

    def __call__(self, image):
        self.seen.append(Document.objects.values_list("status", "progress").get())
        return [TextBox("Recognised words", 0.99, ((0, 0), (200, 0), (200, 30), (0, 30)))]


def page_engine() -> PageEngine:
    return PageEngine()


def test_progress_moves_per_page_read_by_ocr(kb, settings):
    settings.RAG_OCR_ENGINE = f"{__name__}.page_engine"
    PageEngine.seen = []

    document = processed(upload(kb, "scan.pdf", build_scanned_pdf([("en", 1)] * 3, lines=1)))

    assert document.status == Status.READY and document.progress == 100
    assert [status for status, _ in PageEngine.seen] == ["parsing"] * 3
    progress = [value for _, value in PageEngine.seen]
    assert progress[0] == 2 and progress == sorted(progress) and len(set(progress)) == 3


@pytest.mark.parametrize(
    ("name", "build"),
    [("notice.png", build_scan), ("scan.pdf", lambda: build_scanned_pdf([("zh", 1)], lines=1))],
)
def test_without_an_ocr_engine_scans_fail_with_how_to_install_it(kb, settings, name, build):
    settings.RAG_OCR_ENGINE = "rapidocr_not_installed.engine"  # as if the package were missing

    failed = processed(upload(kb, name, build()))

    assert failed.status == Status.FAILED
    assert "scanned document or an image" in failed.error
    assert "pip install -r requirements.txt (rapidocr_onnxruntime)" in failed.error
    assert "No module named 'rapidocr_not_installed'" in failed.error
