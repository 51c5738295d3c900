"""Several files uploaded at once: each is accepted, found to be a duplicate, or refused, on its
own; one bad file does not fail the others. A ZIP archive is uploaded as its members, each
judged the same way (``knowledge.services.bulk``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from django.conf import settings

from knowledge.ingestion.parsing import FileTooLarge, ParseError
from knowledge.models import Document, KnowledgeBase
from knowledge.services import bulk
from knowledge.services.documents import DuplicateDocument, create_document, parse_limits
from tenancy.models import Tenant


class Upload(Protocol):
    """An uploaded file: Django's UploadedFile, or any binary stream with a name and size."""

    name: str
    size: int

    def read(self, size: int = -1) -> bytes: ...

    def seek(self, offset: int, whence: int = 0) -> int: ...


class EmptyFile(ParseError):
    """A file of zero bytes: there is nothing to process."""


@dataclass
class UploadOutcome:
    name: str
    document: Document | None = None
    # DuplicateDocument, or a ParseError (UnsupportedFileType, FileTooLarge, EmptyFile)
    error: Exception | None = None

    @property
    def accepted(self) -> bool:
        return self.document is not None


def upload_documents(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    files: Sequence[Upload],
    replace: bool = False,
    metadata: dict | None = None,
    options: dict | None = None,
) -> list[UploadOutcome]:
    """Create a pending document per file (queued for processing on commit), in order. The
    same bytes twice in one upload are a duplicate the second time. ``options`` (how the files
    are read: ``ParseOptions`` fields) apply to every file."""
    outcomes = []

    def one(upload: Upload, name: str, file_metadata: dict | None) -> None:
        try:
            if upload.size > settings.RAG_MAX_UPLOAD_BYTES:
                raise FileTooLarge(
                    f"the file is larger than the limit of {settings.RAG_MAX_UPLOAD_BYTES:,} bytes"
                )
            if upload.size == 0:
                raise EmptyFile("the file is empty")
            document = create_document(
                tenant=tenant,
                knowledge_base=knowledge_base,
                name=name,
                stream=upload,
                metadata=file_metadata,
                options=options,
                replace=replace,
            )
        except (DuplicateDocument, ParseError) as exc:
            outcomes.append(UploadOutcome(getattr(upload, "name", name), error=exc))
        else:
            outcomes.append(UploadOutcome(getattr(upload, "name", name), document=document))

    for upload in files:
        if not bulk.is_archive(upload.name) or upload.size > settings.RAG_MAX_UPLOAD_BYTES:
            one(upload, upload.name, metadata)
            continue
        try:
            upload.seek(0)
            members = list(bulk.archive_members(upload.name, upload.read(), parse_limits()))
        except ParseError as exc:
            outcomes.append(UploadOutcome(upload.name, error=exc))
            continue
        for member in members:
            if member.error is not None:
                outcomes.append(UploadOutcome(member.name, error=member.error))
            else:
                member_metadata = bulk.member_metadata(upload.name, member, metadata)
                one(member, PurePosixPath(member.path).name, member_metadata)
    return outcomes
