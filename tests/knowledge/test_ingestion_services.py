"""Ingestion services against the real database: upload, process, duplicates, replace, delete,
reprocess and the reaper. Processing runs in-process here; tests/knowledge/test_ingestion_worker
runs it in real Celery workers."""

import errno
import io
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.utils import timezone

from knowledge.embeddings import EmbeddingConfig
from knowledge.ingestion.parsing import ACCEPTED_EXTENSIONS, FileTooLarge, UnsupportedFileType
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services import documents as services
from knowledge.services import upkeep
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from knowledge.services.uploads import Outcome, upload_documents
from knowledge.signals import knowledge_base_changed
from tests.conftest import CEILING_S, wait_until
from tests.factories import TenantFactory
from tests.fake_services import FakeEmbeddingsServer, Scripted

pytestmark = pytest.mark.django_db

MARKDOWN = b"""# Sensor manual

The TH01 sensor measures temperature every minute.

## Calibration

Calibrate the TH01 every six months with the reference probe.
"""
CHINESE = "传感器温度数据非常重要。我们每天记录温度，并且每月校准一次传感器。".encode()


@pytest.fixture
def kb():
    tenant = TenantFactory()
    return create_knowledge_base(
        tenant=tenant, name="Manuals", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )


def upload(kb, name: str, data: bytes, **kwargs) -> Document:
    return services.create_document(
        tenant=kb.tenant, knowledge_base=kb, name=name, stream=io.BytesIO(data), **kwargs
    )


def version(kb) -> int:
    return KnowledgeBase.objects.get(pk=kb.pk).index_version


def test_upload_stores_a_pending_document_under_a_generated_name(kb):
    document = upload(kb, "../../etc/pass\x00wd\n.md", MARKDOWN, metadata={"project": "x"})
    assert document.status == Document.Status.PENDING
    assert document.original_filename == "passwd.md"
    assert document.title == "passwd"
    assert "passwd" not in document.file.name and ".." not in document.file.name
    assert (
        Path(document.file.path).resolve().is_relative_to(Path(default_storage.location).resolve())
    )
    assert document.file.read() == MARKDOWN
    assert document.size_bytes == len(MARKDOWN) and len(document.sha256) == 64
    assert document.file_type == "md"


def test_processing_stores_chunks_with_tokens_embeddings_and_citations(kb):
    before = version(kb)
    events = []

    def receiver(**kw):
        events.append(kw)

    knowledge_base_changed.connect(receiver)
    try:
        document = upload(kb, "manual.md", MARKDOWN, title="Sensor manual")
        assert process_document(document.pk) == Document.Status.READY
    finally:
        knowledge_base_changed.disconnect(receiver)

    document.refresh_from_db()
    assert (document.status, document.progress, document.error) == ("ready", 100, "")
    chunks = list(Chunk.objects.filter(document=document).order_by("position"))
    assert document.chunk_count == len(chunks) >= 1
    calibration = next(c for c in chunks if "Calibrate" in c.content)
    assert calibration.heading_path == ["Sensor manual", "Calibration"]
    assert "th01" in calibration.tokens and "calibr" in calibration.tokens
    assert "manual" in calibration.tokens  # the document title is indexed with every chunk
    assert calibration.embedding_model == "hash-64" and len(calibration.embedding) == 64
    assert calibration.tenant_id == kb.tenant_id and calibration.knowledge_base_id == kb.pk
    assert version(kb) == before + 1
    assert [e["index_version"] for e in events] == [before + 1]
    assert events[0]["knowledge_base_id"] == kb.pk


def test_gbk_chinese_text_is_analysed_with_jieba(kb):
    document = upload(kb, "notes.txt", CHINESE.decode().encode("gbk"))
    process_document(document.pk)
    tokens = Chunk.objects.get(document=document).tokens
    assert "传感器" in tokens and "温度" in tokens and "的" not in tokens


def test_processing_twice_changes_nothing_the_second_time(kb):
    document = upload(kb, "manual.md", MARKDOWN)
    process_document(document.pk)
    ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    after_first = version(kb)
    assert process_document(document.pk) == Document.Status.READY
    assert set(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == ids
    assert version(kb) == after_first


def test_a_damaged_file_fails_with_its_reason_and_changes_nothing(kb):
    good = upload(kb, "manual.md", MARKDOWN)
    process_document(good.pk)
    before_version, before_chunks = version(kb), Chunk.objects.count()
    bad = upload(kb, "report.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog")
    assert process_document(bad.pk) == Document.Status.FAILED
    bad.refresh_from_db()
    assert "damaged" in bad.error.lower()
    assert Chunk.objects.count() == before_chunks and version(kb) == before_version


def test_unsupported_and_oversized_uploads_are_refused_before_anything_is_written(kb, settings):
    files_before = set(_stored_files())
    with pytest.raises(UnsupportedFileType, match=re.escape(ACCEPTED_EXTENSIONS)):
        upload(kb, "tool.exe", b"MZ\x90\x00\x03" + bytes(200))
    with pytest.raises(UnsupportedFileType, match="binary"):
        upload(kb, "notes.txt", b"\x00\x01GIF89a" + bytes(100))
    settings.RAG_MAX_UPLOAD_BYTES = 100
    with pytest.raises(FileTooLarge):
        upload(kb, "big.txt", b"a" * 101)
    assert Document.objects.count() == 0
    assert set(_stored_files()) == files_before


def _stored_files():
    root = Path(default_storage.location)
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


class FailsWhenReadAgain(io.BytesIO):
    """An uploaded file whose disk fails once it was judged: read to its end once, it raises
    on the next read, as a temporary file on a failing disk does."""

    def __init__(self, name: str, data: bytes) -> None:
        super().__init__(data)
        self.name, self.size, self.ended = name, len(data), False

    def read(self, size: int | None = -1) -> bytes:
        if self.ended:
            raise OSError(errno.EIO, "Input/output error")
        data = super().read(size)
        self.ended = not data
        return data


def test_an_upload_failing_while_it_is_stored_leaves_no_file_row_or_task(
    kb, django_capture_on_commit_callbacks
):
    files_before = set(_stored_files())
    good = io.BytesIO(MARKDOWN)
    good.name, good.size = "manual.md", len(MARKDOWN)
    with django_capture_on_commit_callbacks() as queued, pytest.raises(OSError):
        upload_documents(
            tenant=kb.tenant,
            knowledge_base=kb,
            files=[good, FailsWhenReadAgain("notes.txt", b"Notes on the pump.")],
        )
    # manual.md was stored before notes.txt failed: its file went with the rollback
    assert Document.objects.filter(knowledge_base=kb).count() == 0
    assert set(_stored_files()) == files_before
    assert queued == []


@pytest.mark.django_db(transaction=True)
def test_the_same_bytes_committed_meanwhile_by_another_upload_are_a_duplicate(kb):
    """Judged before the other upload commits, stored after: the unique hash per knowledge
    base stops the second row, and the upload is judged again rather than failing."""
    outcomes = []

    def second_upload() -> None:
        stream = io.BytesIO(MARKDOWN)
        stream.name, stream.size = "copy.md", len(MARKDOWN)
        try:
            outcomes.extend(upload_documents(tenant=kb.tenant, knowledge_base=kb, files=[stream]))
        finally:
            connection.close()

    files_before = set(_stored_files())
    with transaction.atomic():
        first = upload(kb, "manual.md", MARKDOWN, queue=False)
        thread = threading.Thread(target=second_upload)
        thread.start()
        wait_until(_waiting_on_a_lock, "the second upload to wait for the first one's row")
    thread.join(CEILING_S)
    assert [(o.outcome, o.error.existing.pk) for o in outcomes] == [(Outcome.DUPLICATE, first.pk)]
    assert Document.objects.filter(knowledge_base=kb).count() == 1
    assert set(_stored_files()) - files_before == {Path(first.file.path)}


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:  # pg_locks is live; pg_stat_activity is per transaction
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0] > 0


def test_duplicate_bytes_are_refused_with_the_existing_document(kb):
    first = upload(kb, "manual.md", MARKDOWN)
    with pytest.raises(services.DuplicateDocument) as caught:
        upload(kb, "copy-of-manual.md", MARKDOWN)
    assert caught.value.existing.pk == first.pk
    assert Document.objects.filter(knowledge_base=kb).count() == 1


def test_duplicates_are_per_knowledge_base(kb):
    other = create_knowledge_base(
        tenant=kb.tenant, name="Other", embedding=EmbeddingConfig(provider="none")
    )
    upload(kb, "manual.md", MARKDOWN)
    assert upload(other, "manual.md", MARKDOWN).knowledge_base_id == other.pk


def test_replace_keeps_the_old_version_searchable_until_the_new_one_is_ready(kb):
    old = upload(kb, "manual.md", MARKDOWN)
    process_document(old.pk)
    new = upload(kb, "manual.md", MARKDOWN + b"\nNew section about TH02.\n", replace=True)
    assert Document.objects.filter(pk=old.pk).exists()  # still there while the new one waits
    assert Chunk.objects.filter(document=old).exists()
    process_document(new.pk)
    assert not Document.objects.filter(pk=old.pk).exists()
    assert not Chunk.objects.filter(document_id=old.pk).exists()
    assert Document.objects.get(pk=new.pk).status == "ready"


def test_a_failed_replacement_keeps_the_old_version(kb):
    old = upload(kb, "manual.md", MARKDOWN)
    process_document(old.pk)
    new = upload(kb, "manual.md", b"   \n\n  ", replace=True)
    assert process_document(new.pk) == Document.Status.FAILED
    assert Document.objects.get(pk=old.pk).status == "ready"
    assert Chunk.objects.filter(document=old).exists()


def test_replace_of_identical_bytes_processes_the_existing_document_again(kb):
    first = upload(kb, "manual.md", MARKDOWN)
    process_document(first.pk)
    again = upload(kb, "manual-v2.md", MARKDOWN, replace=True, title="Manual v2")
    assert again.pk == first.pk
    again.refresh_from_db()
    assert (again.status, again.title, again.original_filename) == (
        "pending",
        "Manual v2",
        "manual-v2.md",
    )


def test_reprocess_replaces_the_chunks_in_one_step_when_ready(kb):
    document = upload(kb, "manual.md", MARKDOWN)
    process_document(document.pk)
    old_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    services.reprocess_document(tenant=kb.tenant, document=document)
    document.refresh_from_db()
    assert document.status == "pending"
    assert set(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == old_ids
    process_document(document.pk)
    new_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    assert new_ids and not (new_ids & old_ids)


def test_delete_removes_document_chunks_and_file_and_bumps_the_version(
    kb, django_capture_on_commit_callbacks
):
    document = upload(kb, "manual.md", MARKDOWN)
    process_document(document.pk)
    path = Path(document.file.path)
    before = version(kb)
    with django_capture_on_commit_callbacks(execute=True):
        services.delete_document(tenant=kb.tenant, document=document)
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert version(kb) == before + 1
    assert not path.exists()


def test_embedding_provider_failure_fails_the_document_with_a_message():
    tenant = TenantFactory()
    with FakeEmbeddingsServer(dimensions=8) as server:
        kb = create_knowledge_base(
            tenant=tenant,
            name="Remote",
            embedding=EmbeddingConfig(
                provider="openai",
                model="m",
                dimensions=8,
                base_url=server.base_url,
                max_retries=1,
                backoff_s=0.01,
            ),
        )
        from django.test import override_settings

        with override_settings(EMBEDDING_BASE_URL=server.base_url, EMBEDDING_MAX_RETRIES=1):
            server.script = [Scripted(500)] * 5
            document = upload(kb, "manual.md", MARKDOWN)
            assert process_document(document.pk) == Document.Status.FAILED
    document.refresh_from_db()
    assert "500" in document.error and "reprocess" in document.error
    assert not Chunk.objects.filter(document=document).exists()


def test_reaper_requeues_stuck_documents_and_fails_them_after_bounded_attempts(kb, settings):
    settings.RAG_STUCK_AFTER_S = 60
    settings.RAG_MAX_PROCESSING_ATTEMPTS = 2
    stuck = upload(kb, "manual.md", MARKDOWN)
    hopeless = upload(kb, "other.md", MARKDOWN + b"x")
    fresh = upload(kb, "fresh.md", MARKDOWN + b"y")
    long_ago = timezone.now() - timedelta(minutes=5)
    Document.objects.filter(pk=stuck.pk).update(status="embedding", attempts=1, updated_at=long_ago)
    Document.objects.filter(pk=hopeless.pk).update(
        status="parsing", attempts=2, updated_at=long_ago
    )
    Document.objects.filter(pk=fresh.pk).update(status="embedding", attempts=1)

    assert upkeep.reap_stuck_documents() == {"requeued": 1, "failed": 1}
    states = dict(Document.objects.values_list("pk", "status"))
    assert states == {stuck.pk: "pending", hopeless.pk: "failed", fresh.pk: "embedding"}
    assert "after 2 attempts" in Document.objects.get(pk=hopeless.pk).error
    assert process_document(stuck.pk) == "ready"
