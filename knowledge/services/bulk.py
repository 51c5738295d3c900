"""Bulk operations that must not time out: a ZIP archive uploaded as its members, every failed
document of a knowledge base retried, many documents deleted at once.

What stays true:

- An archive's members are judged one by one, exactly as separate uploads (type, size, name
  cleaned, duplicates), after the archive itself passed the zip-bomb guard every ZIP-based
  format passes (``knowledge.ingestion.parsers.archive``); each is read whole, its CRC-32
  checked, before anything of the upload is stored, and a member that cannot be read refuses
  the upload (``knowledge.services.uploads``). Entries that are not files to upload by design
  (folders, __MACOSX and hidden files, paths with ``..`` or absolute, links) are never
  unpacked: they come back as skipped, with the reason. Folders are flattened: the member's
  path inside the archive is kept in the document's metadata (``archive``, ``path``), so
  search can filter by it.
- A request touches at most a bounded number of rows (one UPDATE); anything that runs per
  document (queuing, deleting rows and files) runs in a task, in batches of ``BATCH``
  documents, each its own transaction. The answer is 202 with how many; the documents' status
  (or their absence) shows the progress.
- Nothing is lost when a task is: documents to retry are ``pending`` (the reaper queues those
  that stop moving), documents to delete carry ``delete_requested_at`` (the reaper queues their
  deletion again), and documents being deleted are disabled in the request's own transaction,
  so search stops returning them at once.
"""

from __future__ import annotations

import io
import logging
import re
import stat
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import PurePosixPath

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge.ingestion.parsers.archive import open_archive, read_member
from knowledge.ingestion.parsing import FileTooLarge, ParseError, ParseLimits
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import (
    clean_filename,
    delete_files_on_commit,
    enqueue_processing,
    stored_files,
)
from knowledge.services.knowledge_bases import bump_index_version
from rag_project.celery import enqueue
from tenancy.errors import DomainError, ErrorKind, ensure_tenant
from tenancy.models import Tenant

logger = logging.getLogger(__name__)
BATCH = 100  # documents per task transaction
ARCHIVE_SUFFIX = ".zip"
# Skipped entries counted against RAG_MAX_ARCHIVE_MEMBERS as the files they claim to be.
_COUNTED = {"unsafe_path", "symlink"}
_DRIVE = re.compile(r"[A-Za-z]:")


class TooManyMembers(ParseError):
    code = "archive_too_large"
    kind = ErrorKind.TOO_LARGE


class NestedArchive(ParseError):
    code = "nested_archive"
    kind = ErrorKind.UNSUPPORTED


class EncryptedMember(ParseError):
    code = "encrypted_member"


class EmptyArchive(ParseError):
    code = "empty_archive"


class NotAnUpload(DomainError):
    """An archive entry that is not a file to upload by design (a folder, what archivers add,
    a path leading out of the archive, a link): listed as skipped, never a refusal."""

    code = "not_an_upload"
    kind = ErrorKind.INVALID


class NothingSelected(DomainError):
    code = "nothing_selected"
    kind = ErrorKind.INVALID


# ------------------------------------------------------------------ archives


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIX)


@dataclass
class Member:
    """One entry of an archive, as an upload: a named binary stream with its size, or why it
    is not one: ``skipped`` (not an upload by design) or ``error`` (refused)."""

    name: str  # "archive.zip/folder/file.md", for the results
    path: str  # "folder/file.md"
    stream: io.BytesIO = field(default_factory=io.BytesIO)
    error: ParseError | None = None
    skipped: NotAnUpload | None = None

    @property
    def size(self) -> int:
        return self.stream.getbuffer().nbytes

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.stream.seek(offset, whence)


def _not_an_upload(info: zipfile.ZipInfo, path: str) -> NotAnUpload | None:
    """Why the entry is not a file to upload, or None. A path that leads out of the archive
    (``..``, absolute, a drive) or a link is never unpacked, whatever its name."""
    parts = PurePosixPath(path).parts
    if path.startswith("/") or _DRIVE.match(path) or ".." in parts:
        return NotAnUpload(
            "its path leads out of the archive (a .. segment, or absolute); it is not unpacked",
            code="unsafe_path",
        )
    if stat.S_ISLNK(info.external_attr >> 16):
        return NotAnUpload("a symbolic link, not a file; it is not followed", code="symlink")
    if info.is_dir() or path.endswith("/"):
        return NotAnUpload("a folder; the files in it are listed on their own", code="folder")
    if not parts or parts[0] == "__MACOSX":
        return NotAnUpload(
            "what macOS adds to an archive (__MACOSX), not a file of its own",
            code="archiver_metadata",
        )
    if any(part.startswith(".") for part in parts):
        return NotAnUpload("a hidden file (its name starts with a dot)", code="hidden_file")
    return None


def archive_members(archive_name: str, data: bytes, limits: ParseLimits) -> Iterator[Member]:
    """The entries of a ZIP archive, in archive order, each read whole (its CRC-32 checked)
    unless it is skipped or refused. Raises ParseError for the whole archive (damaged, a zip
    bomb, empty, more than RAG_MAX_ARCHIVE_MEMBERS files). An entry that is not a file to
    upload comes with ``skipped``; a file that cannot be an upload with ``error`` (too large,
    an archive itself, encrypted, damaged). Members are read as they are yielded: a caller
    that does not keep them holds one member's bytes at a time."""
    archive = open_archive(data, limits, "ZIP archive", ARCHIVE_SUFFIX)
    with archive:
        entries = []
        for info in archive.infolist():
            path = info.filename.replace("\\", "/")
            entries.append((info, path, _not_an_upload(info, path)))
        if not entries:
            raise EmptyArchive("The ZIP archive is empty: it holds no files")
        # Links and paths leading out count as the files they claim to be: a crafted archive
        # cannot add them without bound.
        files = sum(1 for _, _, why in entries if why is None or why.code in _COUNTED)
        if files > settings.RAG_MAX_ARCHIVE_MEMBERS:
            raise TooManyMembers(
                f"The archive holds {files:,} files, more than the limit of "
                f"{settings.RAG_MAX_ARCHIVE_MEMBERS:,}; split it into several archives"
            )
        for info, path, why in entries:
            member = Member(f"{archive_name}/{path}", path, skipped=why)
            if why is None:
                member.error = _refusal(info, path)
            if why is None and member.error is None:
                try:
                    member.stream = io.BytesIO(read_member(archive, info))
                except ParseError as exc:
                    member.error = exc
            yield member


def _refusal(info: zipfile.ZipInfo, path: str) -> ParseError | None:
    """Why a file of the archive cannot be an upload, judged from its directory entry."""
    if info.file_size > settings.RAG_MAX_UPLOAD_BYTES:
        return FileTooLarge(
            f"the file is larger than the limit of {settings.RAG_MAX_UPLOAD_BYTES:,} bytes"
        )
    if is_archive(path):
        return NestedArchive("archives inside an archive are not unpacked; upload it on its own")
    if info.flag_bits & 0x1:
        return EncryptedMember("the file is encrypted inside the archive; upload it unencrypted")
    return None


def member_metadata(archive_name: str, member: Member, metadata: dict | None) -> dict:
    folder = str(PurePosixPath(member.path).parent)
    extra = {"archive": clean_filename(archive_name), "path": member.path}
    if folder != ".":
        extra["folder"] = folder
    return {**(metadata or {}), **extra}


# ------------------------------------------------------------------ retry failed


def retry_failed_documents(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> int:
    """Set every failed document of the knowledge base back to ``pending`` (one UPDATE) and
    queue a task that queues their processing; returns how many."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    with transaction.atomic():
        failed = Document.objects.filter(
            tenant=tenant,
            knowledge_base=knowledge_base,
            status=Document.Status.FAILED,
            delete_requested_at__isnull=True,
        )
        ids = list(failed.select_for_update().values_list("pk", flat=True))
        Document.objects.filter(pk__in=ids).update(
            status=Document.Status.PENDING,
            progress=0,
            error="",
            attempts=0,
            updated_at=timezone.now(),
        )
        if ids:
            enqueue("knowledge.queue_documents", ids)
    return len(ids)


def queue_documents(document_ids: Sequence[int]) -> int:
    """Queue processing of those documents still pending (the task of ``retry_failed``)."""
    pending = Document.objects.filter(pk__in=list(document_ids), status=Document.Status.PENDING)
    ids = list(pending.values_list("pk", flat=True))
    for document_id in ids:
        enqueue_processing(document_id)
    return len(ids)


# ------------------------------------------------------------------ delete many


def request_deletion(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    document_ids: Sequence[int] | None = None,
    statuses: Sequence[str] | None = None,
) -> int:
    """Delete the knowledge base's documents of these ids, or in these statuses: in this
    transaction they are marked and leave search (one UPDATE, one index version); a task
    deletes their rows and files in batches. Ids of other knowledge bases or tenants are
    ignored. Returns how many are being deleted."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    if (document_ids is None) == (statuses is None):
        raise NothingSelected("Give either ids or status, not both and not neither.")
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=knowledge_base.pk, tenant=tenant)
        rows = Document.objects.filter(
            tenant=tenant, knowledge_base=kb, delete_requested_at__isnull=True
        )
        if document_ids is not None:
            rows = rows.filter(pk__in=list(document_ids))
        else:
            rows = rows.filter(status__in=list(statuses))
        searchable = rows.filter(status=Document.Status.READY, enabled=True).exists()
        count = rows.update(enabled=False, delete_requested_at=timezone.now())
        if searchable:
            bump_index_version(kb)
        if count:
            enqueue("knowledge.delete_requested_documents", kb.pk)
    return count


def delete_requested_documents(knowledge_base_id: int) -> int:
    """Delete the documents of a knowledge base marked for deletion, ``BATCH`` per transaction
    (rows and chunks at once; stored files after each commit). Safe to run twice."""
    deleted = 0
    while True:
        with transaction.atomic():
            kb = KnowledgeBase.objects.select_for_update().filter(pk=knowledge_base_id).first()
            if kb is None:
                return deleted
            ids = list(
                Document.objects.filter(knowledge_base=kb, delete_requested_at__isnull=False)
                .order_by("pk")
                .values_list("pk", flat=True)[:BATCH]
            )
            if not ids:
                return deleted
            names = [name for pk in ids for name in stored_files(pk)]
            # No version bump: they left search (disabled) when the deletion was asked for.
            Document.objects.filter(pk__in=ids).delete()
            delete_files_on_commit(names)
            deleted += len(ids)


def reap_requested_deletions(now=None) -> list[int]:
    """Queue again the deletion of knowledge bases whose marked documents have waited longer
    than RAG_STUCK_AFTER_S (the task was lost, or its worker died)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.RAG_STUCK_AFTER_S)
    kb_ids = sorted(
        set(
            Document.objects.filter(delete_requested_at__lt=cutoff).values_list(
                "knowledge_base_id", flat=True
            )
        )
    )
    for kb_id in kb_ids:
        enqueue("knowledge.delete_requested_documents", kb_id)
    return kb_ids
