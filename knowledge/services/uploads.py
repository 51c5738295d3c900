"""An upload request is all or nothing: several files, ZIP archives of files (their members
read by ``knowledge.ingestion.parsers.archive``) and URLs (judged by the caller through
``knowledge.web.documents.check_url_document``, without the network) at once.

What stays true:

- Everything is judged before anything is written: each file's size, emptiness and type, each
  archive's readability, each member read whole (its CRC-32 checked), each URL's shape and host,
  and duplicates. Only then are the documents created, all in one transaction: their stored
  files are removed if it rolls back, and their processing is queued when it commits.
- Each file, archive entry and URL has one outcome, in upload order (``Outcome``): accepted (a
  pending document), duplicate (the same bytes or URL are in the knowledge base already, and
  ``replace`` was not asked: not an error, the rest is accepted), skipped (an archive entry that
  is not an upload by design, ``archive.NotAnUpload``, or a member of a type that is not accepted:
  listed with its reason, the rest is accepted) or refused (too large, empty, an unsupported
  type at the top level, a damaged or unreadable archive or member, an encrypted member, an
  archive inside an archive, a URL refused). One refusal refuses the whole request: nothing is
  stored, nothing queued, and every refusal is listed with its reason.
- An archive's members are judged exactly as separate uploads (type, size, name cleaned,
  duplicates). Folders are flattened: the member's path inside the archive is kept in the
  document's metadata (``archive``, ``path``, and ``folder`` below the top), so search can
  filter by it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError, transaction

from knowledge.ingestion.parsers.archive import Member, archive_members, is_archive
from knowledge.ingestion.parsing import FileTooLarge, ParseError, UnsupportedFileType
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import (
    CheckedFile,
    CheckedUrl,
    DuplicateDocument,
    check_file,
    clean_filename,
    delete_files,
    parse_limits,
    store_document,
    store_url_document,
)
from tenancy.errors import DomainError, ensure_tenant
from tenancy.models import Tenant


class Upload(Protocol):
    """An uploaded file: Django's UploadedFile, or any binary stream with a name and size."""

    name: str
    size: int

    def read(self, size: int = -1) -> bytes: ...

    def seek(self, offset: int, whence: int = 0) -> int: ...


class EmptyFile(ParseError):
    """A file of zero bytes: there is nothing to process."""


class NotStored(DomainError):
    """A file with nothing wrong in an upload refused for other files: sent again without
    them, it is accepted."""

    code = "not_stored"


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    SKIPPED = "skipped"
    REFUSED = "refused"


@dataclass
class UploadOutcome:
    name: str  # the file name as uploaded, "archive.zip/path" of a member, or the URL
    outcome: Outcome
    document: Document | None = None  # accepted
    # Why it was not accepted: DuplicateDocument; NotAnUpload or UnsupportedFileType (skipped);
    # a ParseError (refused: UnsupportedFileType, FileTooLarge, EmptyFile, damaged...)
    error: DomainError | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome is Outcome.ACCEPTED

    @property
    def refused(self) -> bool:
        """Refused for what it is (not merely left unstored with the rest of its upload)."""
        return self.outcome is Outcome.REFUSED and not isinstance(self.error, NotStored)


@dataclass
class _Judged:
    """One file, archive entry or URL as judged; ``outcome`` None: to be stored."""

    name: str
    outcome: Outcome | None = None
    error: DomainError | None = None
    checked: CheckedFile | None = None
    checked_url: CheckedUrl | None = None
    metadata: dict | None = None
    document: Document | None = None


@dataclass
class _Source:
    """One uploaded file (an archive: its entries, in archive order), or one URL."""

    upload: Upload | None
    entries: list[_Judged] = field(default_factory=list)
    archive: bool = False


def upload_documents(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    files: Sequence[Upload] = (),
    urls: Sequence[CheckedUrl] = (),
    replace: bool = False,
    metadata: dict | None = None,
    options: dict | None = None,
) -> list[UploadOutcome]:
    """Judge every file, archive entry and URL, then, unless one is refused, create a pending
    document for each accepted one (processing queued on commit); their outcomes in upload
    order. The same bytes twice in one upload are a duplicate the second time. ``options``
    (how the files are read: ``ParseOptions`` fields) apply to every file. ``urls`` come
    judged by the web layer (``knowledge.web.documents.check_url_document``), a refused one
    with its refusal.

    When one is refused nothing is stored, and the entries that were fine come back refused
    with NotStored. Called inside a transaction of the caller's, the files stored are removed
    when this function's own block fails, not when the caller's rolls back later."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    arguments = (tenant, knowledge_base, files, urls, replace, metadata, options)
    try:
        return _upload(*arguments)
    except IntegrityError:
        # The same bytes or URL committed by a concurrent upload meanwhile (unique per
        # knowledge base): nothing of this one was kept, and judged again they are duplicates.
        return _upload(*arguments)


def _upload(
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    files: Sequence[Upload],
    urls: Sequence[CheckedUrl],
    replace: bool,
    metadata: dict | None,
    options: dict | None,
) -> list[UploadOutcome]:
    sources = [_judge_upload(upload, metadata) for upload in files]
    sources += [_Source(None, [_judge_url(url, metadata)]) for url in urls]
    judged = [entry for source in sources for entry in source.entries]
    _find_duplicates(knowledge_base, judged, replace)
    if any(entry.outcome is Outcome.REFUSED for entry in judged):
        for entry in judged:
            if entry.outcome is None:
                entry.outcome = Outcome.REFUSED
                entry.error = NotStored(
                    "nothing of this upload was stored because of the files refused with it; "
                    "this one can be sent again as it is"
                )
        return [_outcome(entry) for entry in judged]
    _store(tenant, knowledge_base, sources, replace, options)
    return [_outcome(entry) for entry in judged]


def _judge_upload(upload: Upload, metadata: dict | None) -> _Source:
    if not is_archive(upload.name) or not 0 < upload.size <= settings.RAG_MAX_UPLOAD_BYTES:
        return _Source(upload, [_judge_file(upload.name, upload, upload.name, metadata)])
    source = _Source(upload, archive=True)
    try:
        for member in _members(upload):
            source.entries.append(_judge_member(upload.name, member, metadata))
    except ParseError as exc:  # the archive as a whole: damaged, a zip bomb, too many files
        source.entries = [_Judged(upload.name, Outcome.REFUSED, exc)]
    return source


def _members(upload: Upload) -> Iterator[Member]:
    """The archive's entries, read as they are yielded (one member's bytes at a time)."""
    upload.seek(0)
    return archive_members(upload.name, upload.read(), parse_limits())


def _judge_member(archive_name: str, member: Member, metadata: dict | None) -> _Judged:
    if member.skipped is not None:
        return _Judged(member.name, Outcome.SKIPPED, member.skipped)
    if member.error is not None:
        return _Judged(member.name, Outcome.REFUSED, member.error)
    name = PurePosixPath(member.path).name
    judged = _judge_file(
        member.name, member, name, _member_metadata(archive_name, member, metadata)
    )
    if isinstance(judged.error, UnsupportedFileType):
        judged.outcome = Outcome.SKIPPED  # inside an archive: not one of the files to upload
    return judged


def _member_metadata(archive_name: str, member: Member, metadata: dict | None) -> dict:
    folder = str(PurePosixPath(member.path).parent)
    extra = {"archive": clean_filename(archive_name), "path": member.path}
    if folder != ".":
        extra["folder"] = folder
    return {**(metadata or {}), **extra}


def _judge_file(shown: str, upload: Upload, name: str, metadata: dict | None) -> _Judged:
    try:
        if upload.size > settings.RAG_MAX_UPLOAD_BYTES:
            raise FileTooLarge(
                f"the file is larger than the limit of {settings.RAG_MAX_UPLOAD_BYTES:,} bytes"
            )
        if upload.size == 0:
            raise EmptyFile("the file is empty")
        checked = check_file(name, upload)
    except ParseError as exc:
        return _Judged(shown, Outcome.REFUSED, exc)
    return _Judged(shown, checked=checked, metadata=metadata)


def _judge_url(url: CheckedUrl, metadata: dict | None) -> _Judged:
    if url.refusal is not None:  # UrlInvalid, AddressRefused
        return _Judged(url.given, Outcome.REFUSED, url.refusal)
    return _Judged(url.given, checked_url=url, metadata=metadata)


def _find_duplicates(knowledge_base: KnowledgeBase, judged: list[_Judged], replace: bool) -> None:
    """Mark what the knowledge base holds already (same bytes, same URL) as duplicate, unless
    ``replace``. Duplicates within the upload are found as it is stored."""
    if replace:
        return
    to_store = [entry for entry in judged if entry.outcome is None]
    hashes = [entry.checked.sha256 for entry in to_store if entry.checked]
    urls = [entry.checked_url.url for entry in to_store if entry.checked_url]
    documents = Document.objects.filter(knowledge_base=knowledge_base)
    by_sha256 = {d.sha256: d for d in documents.filter(sha256__in=hashes)} if hashes else {}
    by_url = {d.source_url: d for d in documents.filter(source_url__in=urls)} if urls else {}
    for entry in to_store:
        if entry.checked_url:
            existing = by_url.get(entry.checked_url.url)
        else:
            existing = by_sha256.get(entry.checked.sha256)
        if existing is not None:
            entry.outcome, entry.error = Outcome.DUPLICATE, DuplicateDocument(existing)


def _store(
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    sources: list[_Source],
    replace: bool,
    options: dict | None,
) -> None:
    """Create the documents of every entry still to store, in one transaction; a file stored
    before it fails is removed again."""
    written: list[str] = []

    def store(entry: _Judged, stream: Upload | None) -> None:
        try:
            if entry.checked_url:
                entry.document = store_url_document(
                    tenant=tenant,
                    knowledge_base=knowledge_base,
                    checked=entry.checked_url,
                    metadata=entry.metadata,
                    replace=replace,
                )
            else:
                entry.document = store_document(
                    tenant=tenant,
                    knowledge_base=knowledge_base,
                    checked=entry.checked,
                    stream=stream,
                    metadata=entry.metadata,
                    options=options,
                    replace=replace,
                    written=written,
                )
        except DuplicateDocument as exc:  # the same bytes or URL earlier in this upload
            entry.outcome, entry.error = Outcome.DUPLICATE, exc
        else:
            entry.outcome = Outcome.ACCEPTED

    try:
        with transaction.atomic():
            for source in sources:
                if source.archive:
                    members = _members(source.upload)
                    for entry, member in zip(source.entries, members, strict=True):
                        if entry.outcome is None:
                            store(entry, member)
                else:
                    (entry,) = source.entries
                    if entry.outcome is None:
                        store(entry, source.upload)
    except BaseException:
        delete_files(written)
        raise


def _outcome(entry: _Judged) -> UploadOutcome:
    return UploadOutcome(entry.name, entry.outcome, entry.document, entry.error)
