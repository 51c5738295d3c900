"""An e-mail's attachments become documents of their own, linked to the message.

Called while the message is processed. Each attachment of an accepted type is stored as a
document of the message's knowledge base with ``parent`` set to the message (deleting the
message deletes it), the message's own metadata (so a filter that finds the message finds its
attachments) and queued for processing. Duplicates are judged as for uploads, by SHA-256 within
the knowledge base: a file already there is linked to, not stored twice, so processing a message
again creates nothing new. Attachments that are not ingested are listed with the reason.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import PurePosixPath

from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from knowledge.ingestion.parsing import Attachment, UnsupportedFileType, detect_file_type
from knowledge.models import Document
from knowledge.services.documents import clean_filename, enqueue_processing

logger = logging.getLogger(__name__)

# Keys of a message's metadata that describe the message itself, not what the uploader gave.
MESSAGE_KEYS = frozenset({"email"})


def add_attachments(message: Document, attachments: Sequence[Attachment]) -> list[dict]:
    """One entry per attachment: {"name", "document_id"} (with "duplicate": true when it was
    already in the knowledge base on its own) or {"name", "skipped": reason}."""
    return [_add(message, attachment) for attachment in attachments]


def _add(message: Document, attachment: Attachment) -> dict:
    name = clean_filename(attachment.name)
    if not attachment.data:
        return {"name": name, "skipped": "the attachment is empty"}
    try:
        file_type = detect_file_type(name, attachment.data)
    except UnsupportedFileType as exc:
        return {"name": name, "skipped": str(exc)}
    sha256 = hashlib.sha256(attachment.data).hexdigest()
    existing = _existing(message, sha256)
    if existing is not None:
        return _linked(message, name, existing)
    document = Document(
        tenant_id=message.tenant_id,
        knowledge_base_id=message.knowledge_base_id,
        parent=message,
        title=(PurePosixPath(name).stem or name)[:500],
        original_filename=name,
        file_type=str(file_type),
        size_bytes=len(attachment.data),
        sha256=sha256,
        metadata={k: v for k, v in message.metadata.items() if k not in MESSAGE_KEYS},
    )
    document.file.save(name, ContentFile(attachment.data), save=False)
    try:
        with transaction.atomic():
            document.save()
            enqueue_processing(document.pk)
    except IntegrityError:
        # Stored meanwhile by another run (the same bytes), or the message was deleted.
        document.file.delete(save=False)
        existing = _existing(message, sha256)
        if existing is None:
            raise
        return _linked(message, name, existing)
    except Exception:
        document.file.delete(save=False)
        raise
    return {"name": name, "document_id": document.pk}


def _existing(message: Document, sha256: str) -> Document | None:
    same = Document.objects.filter(knowledge_base_id=message.knowledge_base_id, sha256=sha256)
    return same.first()


def _linked(message: Document, name: str, existing: Document) -> dict:
    entry: dict = {"name": name, "document_id": existing.pk}
    # An attachment of the message this one replaces moves to it once it is ready (processing
    # does that), so it is this message's own, not a duplicate.
    if existing.parent_id not in (message.pk, message.replaces_id) or existing.parent_id is None:
        entry["duplicate"] = True
    return entry
