"""Documents in: upload (with duplicate detection and replacement), a URL to fetch, reprocess,
delete.

A failed upload leaves the knowledge base as it was: the type and size are checked and the file
hashed before anything is written, and a stored file is removed again if its row is not created.
Deleting a document deletes its attachments (an e-mail's, see ``attachments``) with it.

A document from a URL is stored ``pending`` with no file (``store_url_document``): the URL was
judged by the web layer (``knowledge.web.documents.check_url_document``), and the worker
fetches it as the first step of processing. Until then its hash is a placeholder (of its URL),
so the same URL twice in a knowledge base is a duplicate like the same file twice.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO

from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from knowledge.ingestion.parsing import (
    FileTooLarge,
    FileType,
    ParseError,
    ParseLimits,
    detect_file_type,
)
from knowledge.models import Document, KnowledgeBase
from knowledge.selectors import hand_edits
from knowledge.services.dispatch import request_dispatch
from knowledge.services.knowledge_bases import bump_index_version
from tenancy.errors import DomainError, ErrorKind, ensure_tenant
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

_HEAD_BYTES = 8192
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class DuplicateDocument(DomainError):
    """The same bytes are already in this knowledge base."""

    code = "duplicate_document"
    kind = ErrorKind.CONFLICT

    def __init__(self, existing: Document) -> None:
        super().__init__(
            f"This file is already in the knowledge base as document {existing.pk}; "
            "upload it with replace=true to process it again.",
            existing_document_id=existing.pk,
        )
        self.existing = existing


def parse_limits() -> ParseLimits:
    return ParseLimits(
        max_file_bytes=settings.RAG_MAX_UPLOAD_BYTES,
        max_text_chars=settings.RAG_MAX_TEXT_CHARS,
        max_unzipped_bytes=settings.RAG_MAX_UNZIPPED_BYTES,
        max_ocr_pages=settings.RAG_MAX_OCR_PAGES,
        max_archive_members=settings.RAG_MAX_ARCHIVE_MEMBERS,
    )


def clean_filename(name: str) -> str:
    """The display name of an upload: last path component only, no control characters, NFC,
    at most 255 characters. Storage never uses it (files are stored under generated names)."""
    name = unicodedata.normalize("NFC", name or "").replace("\\", "/")
    name = _CONTROL.sub("", PurePosixPath(name).name).strip().lstrip(".")
    return (name or "upload")[:255]


def _hash_and_measure(stream: BinaryIO) -> tuple[str, int, bytes]:
    digest = hashlib.sha256()
    size = 0
    head = b""
    stream.seek(0)
    while block := stream.read(1 << 20):
        if not head:
            head = block[:_HEAD_BYTES]
        digest.update(block)
        size += len(block)
        if size > settings.RAG_MAX_UPLOAD_BYTES:
            raise FileTooLarge(
                f"the file is larger than the limit of {settings.RAG_MAX_UPLOAD_BYTES:,} bytes"
            )
    stream.seek(0)
    return digest.hexdigest(), size, head


@dataclass(frozen=True)
class CheckedFile:
    """A file judged for storing and not written yet (``check_file``)."""

    filename: str  # the display name, cleaned
    sha256: str
    size: int
    file_type: FileType


def check_file(name: str, stream: BinaryIO) -> CheckedFile:
    """Read ``stream`` once to judge it: FileTooLarge (413), UnsupportedFileType (415).
    Writes nothing; the stream is left at its start."""
    filename = clean_filename(name)
    sha256, size, head = _hash_and_measure(stream)
    return CheckedFile(filename, sha256, size, detect_file_type(filename, head))


def create_document(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    name: str,
    stream: BinaryIO,
    title: str = "",
    metadata: dict | None = None,
    options: dict | None = None,
    replace: bool = False,
    queue: bool = True,
) -> Document:
    """Store an upload as a ``pending`` document and queue its processing on commit.

    Raises UnsupportedFileType (415) and FileTooLarge (413) before anything is written, and
    DuplicateDocument when the same bytes are already in the knowledge base. With
    ``replace=True`` a duplicate is updated and processed again instead, and an earlier
    document of the same file name is replaced once the new one is ready (so search keeps
    finding the old one until then, and keeps it if the new one fails). ``queue=False`` leaves
    processing to the caller (``ingest --sync``). ``options`` are how the file is read
    (``ParseOptions`` fields: Q&A pairs), kept on the document for reprocessing.
    """
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    return store_document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        checked=check_file(name, stream),
        stream=stream,
        title=title,
        metadata=metadata,
        options=options,
        replace=replace,
        queue=queue,
    )


def store_document(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    checked: CheckedFile,
    stream: BinaryIO,
    title: str = "",
    metadata: dict | None = None,
    options: dict | None = None,
    replace: bool = False,
    queue: bool = True,
    written: list[str] | None = None,
) -> Document:
    """``create_document`` of a file ``check_file`` judged already; ``stream`` holds the same
    bytes. Raises DuplicateDocument as ``create_document`` does. The storage name of a file it
    writes is appended to ``written``, for a caller whose transaction may yet fail: the file
    is there before the row commits, and only the caller can remove it then."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    filename = checked.filename
    metadata = dict(metadata or {})
    title = (title or PurePosixPath(filename).stem or filename)[:500]

    existing = Document.objects.filter(knowledge_base=knowledge_base, sha256=checked.sha256).first()
    if existing is not None:
        if not replace:
            raise DuplicateDocument(existing)
        with transaction.atomic():
            existing.title = title
            existing.original_filename = filename
            existing.metadata = metadata or existing.metadata
            existing.options = options if options is not None else existing.options
            existing.save(
                update_fields=["title", "original_filename", "metadata", "options", "updated_at"]
            )
            _queue_again(existing, queue)
        return existing

    document = Document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        # processed by the caller (queue=False): in flight, never sent by the dispatcher
        dispatched_at=None if queue else timezone.now(),
        title=title,
        original_filename=filename,
        file_type=str(checked.file_type),
        size_bytes=checked.size,
        sha256=checked.sha256,
        metadata=metadata,
        options=dict(options or {}),
    )
    if replace:
        document.replaces = (
            Document.objects.filter(knowledge_base=knowledge_base, original_filename=filename)
            .order_by("-created_at")
            .first()
        )
    stream.seek(0)
    _save_file(document, filename, stream)
    try:
        with transaction.atomic():
            document.save()
            if queue:
                enqueue_processing(document.pk)
    except Exception:
        document.file.delete(save=False)
        raise
    if written is not None:
        written.append(document.file.name)
    return document


@dataclass(frozen=True)
class CheckedUrl:
    """A URL judged for storing, without the network (``knowledge.web.documents.
    check_url_document``): as given, and either its canonical form with the file name its
    document has until it is fetched, or why it is refused (``refusal``)."""

    given: str
    url: str = ""  # http(s), no fragment, host lower-cased
    file_name: str = ""
    refusal: ParseError | None = None


def placeholder_sha256(url: str) -> str:
    """The hash of a document not fetched yet: unique per URL, never a real file's hash."""
    return hashlib.sha256(b"url\x00" + url.encode()).hexdigest()


def store_url_document(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    checked: CheckedUrl,
    title: str = "",
    metadata: dict | None = None,
    replace: bool = False,
    queue: bool = True,
) -> Document:
    """A pending document for a URL judged already, queued (on commit) to be fetched and
    processed; nothing is fetched here. Raises DuplicateDocument when the knowledge base
    already has a document from this URL; with ``replace=True`` that document is fetched and
    processed again instead."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    if checked.refusal is not None:
        raise checked.refusal
    url = checked.url
    existing = Document.objects.filter(knowledge_base=knowledge_base, source_url=url).first()
    if existing is not None:
        if not replace:
            raise DuplicateDocument(existing)
        _refetch(existing, queue=queue)
        return existing
    name = checked.file_name
    document = Document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title=(title or PurePosixPath(name).stem)[:500],
        original_filename=name[:255],
        sha256=placeholder_sha256(url),
        source_url=url,
        metadata=dict(metadata or {}),
    )
    with transaction.atomic():
        document.save()
        if queue:
            enqueue_processing(document.pk)
    return document


def _refetch(document: Document, *, queue: bool = True) -> None:
    """Fetch a URL's document again: its file goes (after commit) and it is processed anew."""
    with transaction.atomic():
        names = [document.file.name] if document.file else []
        Document.objects.filter(pk=document.pk).update(
            file="",
            sha256=placeholder_sha256(document.source_url),
            status=Document.Status.PENDING,
            progress=0,
            error="",
            attempts=0,
        )
        delete_files_on_commit(names)
        if queue:
            enqueue_processing(document.pk)
    document.refresh_from_db()


def _save_file(document: Document, filename: str, stream: BinaryIO) -> None:
    """``document.file.save``, except that a write failing part way (the stream's disk, a full
    volume) leaves no partial file behind: it is deleted under its generated name, a new
    random one that no other file has."""
    field = document.file.field
    storage = document.file.storage
    name = field.generate_filename(document, filename)
    try:
        document.file = storage.save(name, File(stream), max_length=field.max_length)
    except BaseException:
        delete_files([name])
        raise


def _queue_again(document: Document, queue: bool = True) -> None:
    Document.objects.filter(pk=document.pk).update(
        status=Document.Status.PENDING,
        progress=0,
        error="",
        attempts=0,
        updated_at=timezone.now(),
        dispatched_at=None if queue else timezone.now(),
    )
    document.refresh_from_db()
    if queue:
        enqueue_processing(document.pk)


class HandEditsWouldBeLost(DomainError):
    """Reprocessing replaces the parsed chunks, and with them their hand edits: asked first."""

    code = "hand_edits_would_be_lost"
    kind = ErrorKind.CONFLICT

    def __init__(self, document: Document, count: int) -> None:
        super().__init__(
            f"Reprocessing document {document.pk} would discard the hand edits of {count} "
            "chunk(s) (edited text, extra keywords or questions, disabled chunks); send "
            "discard_hand_edits=true to reprocess anyway. Chunks added by hand are kept.",
            hand_edits=count,
        )


def reprocess_document(
    *, tenant: Tenant, document: Document, discard_hand_edits: bool = False
) -> None:
    """Process a document again from its stored file. Only ``ready`` documents are searched, so
    it leaves search until it is ready again; its old chunks are replaced in one step then.
    (To keep an old version searchable meanwhile, upload the new file with replace=True.)

    Raises HandEditsWouldBeLost (409, ``details.hand_edits``) when parsed chunks carry hand
    edits, unless ``discard_hand_edits``; chunks added by hand survive either way."""
    ensure_tenant(document, tenant, "document")
    with transaction.atomic():
        edits = hand_edits(document)
        if edits and not discard_hand_edits:
            raise HandEditsWouldBeLost(document, edits)
        _queue_again(document)


def delete_document(*, tenant: Tenant, document: Document) -> None:
    """Delete a document, its chunks, its attachments (the database cascades) and, after
    commit, their stored files; bumps the index."""
    ensure_tenant(document, tenant, "document")
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=document.knowledge_base_id)
        names = stored_files(document.pk)
        deleted, _ = Document.objects.filter(pk=document.pk, tenant=tenant).delete()
        if deleted:
            bump_index_version(kb)
            delete_files_on_commit(names)


def stored_files(document_id: int) -> list[str]:
    """The stored file names of a document and of its attachments, theirs included."""
    names = list(Document.objects.filter(pk=document_id).values_list("file", flat=True))
    parents = [document_id]
    while parents:
        rows = list(Document.objects.filter(parent_id__in=parents).values_list("pk", "file"))
        names.extend(name for _, name in rows)
        parents = [pk for pk, _ in rows]
    return [name for name in names if name]


def delete_files(names: list[str]) -> None:
    storage = Document._meta.get_field("file").storage
    for name in names:
        try:
            storage.delete(name)
        except OSError as exc:  # logged: it must not undo a deletion or hide the error raised
            logger.warning("could not delete stored file %s: %s", name, exc)


def delete_files_on_commit(names: list[str]) -> None:
    transaction.on_commit(lambda: delete_files(names))


def enqueue_processing(document_id: int) -> None:
    """Queue processing: the document waits in the database (``pending``, not dispatched) and
    the fair dispatcher (``knowledge.services.dispatch``), asked to run once the current
    transaction commits, sends it to a worker in its tenant's turn. If the broker cannot be
    reached the document keeps waiting and the reaper's beat dispatches it: nothing is lost."""
    Document.objects.filter(pk=document_id).exclude(status__in=Document.Status.final()).update(
        status=Document.Status.PENDING, dispatched_at=None
    )
    request_dispatch()


def record_attempt(document_id: int) -> None:
    Document.objects.filter(pk=document_id).update(attempts=F("attempts") + 1)
