"""LangChain texts in a knowledge base: put, found, read back and deleted through the ingestion
services, by their LangChain ids. Every function takes the tenant; ``KnowledgeBaseVectorStore``
is their one caller.

A text becomes a ``.txt`` document processed in this process (parsed, chunked, analysed,
embedded, stored, the knowledge base's ``index_version`` bumped), so it is searchable by every
entry point when ``put_text`` returns. Its id is kept in the document's metadata
(``langchain_id``); a document uploaded otherwise is known by its primary key. The knowledge
base refuses the same bytes twice, but LangChain may hold one text under several ids: such a
text is stored with trailing line breaks, which chunking strips again.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Prefetch, Q, QuerySet
from langchain_core.documents import Document

from knowledge import selectors
from knowledge.ingestion.parsing import parse_document
from knowledge.models import Chunk, KnowledgeBase
from knowledge.models import Document as StoredDocument
from knowledge.selectors import SEARCHABLE_DOCUMENT
from knowledge.services.documents import (
    DuplicateDocument,
    create_document,
    delete_document,
    parse_limits,
)
from knowledge.services.processing import process_document
from retrieval.langchain.documents import ID_KEY, langchain_id, own_metadata
from tenancy.models import Tenant

READY = StoredDocument.Status.READY
TITLE_CHARS = 100
_PADDINGS_PER_QUERY = 32


class TextNotAdded(RuntimeError):
    """Ingestion failed for a text (the message is its document's error); texts before it in
    the same call were added, and a text it was to replace is still there."""


def check_text(position: int, text: str, metadata: dict) -> None:
    """Refuse, before anything is written, what could not be stored or searched."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text {position} is empty: there is nothing to search in it")
    if ID_KEY in metadata:
        raise ValueError(f"metadata key {ID_KEY!r} is reserved for the document's id")
    if not all(isinstance(key, str) for key in metadata):
        raise ValueError(f"metadata of text {position} has keys that are not strings")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata of text {position} cannot be stored as JSON: {exc}") from None


def documents_with_ids(
    tenant: Tenant, knowledge_base: KnowledgeBase, ids: Iterable[Any]
) -> QuerySet[StoredDocument]:
    """The documents of these LangChain ids, of this tenant's knowledge base only."""
    ids = [str(i) for i in ids]
    match = Q(**{f"metadata__{ID_KEY}__in": ids})
    pks = [int(i) for i in ids if i.isascii() and i.isdigit() and len(i) < 19]
    if pks:
        match |= Q(pk__in=pks) & ~Q(metadata__has_key=ID_KEY)
    return selectors.documents(tenant, knowledge_base).filter(match)


def put_text(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, lc_id: str, text: str, metadata: dict
) -> None:
    """Add the text under this id, replacing the id's document once the new one is ready; the
    same text and metadata again change nothing. Raises TextNotAdded."""
    existing = list(documents_with_ids(tenant, knowledge_base, [lc_id]))
    if len(existing) == 1 and _unchanged(existing[0], text, metadata):
        return
    with transaction.atomic():
        document = _store_text(tenant, knowledge_base, lc_id, text, metadata)
        try:
            if process_document(document.pk) != READY:
                document.refresh_from_db(fields=["error"])
                raise TextNotAdded(f"text {lc_id!r} was not added: {document.error}")
            for old in existing:
                delete_document(tenant=tenant, document=old)
        except BaseException:
            document.file.delete(save=False)  # the row goes with the rollback
            raise


def delete_texts(*, tenant: Tenant, knowledge_base: KnowledgeBase, ids: Iterable[Any]) -> None:
    with transaction.atomic():
        for document in documents_with_ids(tenant, knowledge_base, ids):
            delete_document(tenant=tenant, document=document)


def get_texts(tenant: Tenant, knowledge_base: KnowledgeBase, ids: Sequence[Any]) -> list[Document]:
    """The searchable documents of these ids, whole, in the order asked; unknown ids, disabled
    documents and documents whose chunks are all disabled skipped."""
    chunks = Prefetch("chunks", queryset=Chunk.objects.order_by("position"))
    documents = documents_with_ids(tenant, knowledge_base, ids).filter(SEARCHABLE_DOCUMENT)
    found = {}
    for document in documents.prefetch_related(chunks):
        lc_id = langchain_id(document.metadata, document.pk)
        text = _whole_text(document)
        if text is not None:
            found[lc_id] = Document(
                id=lc_id, page_content=text, metadata=own_metadata(document.metadata)
            )
    return [found[i] for i in dict.fromkeys(str(i) for i in ids) if i in found]


def _store_text(
    tenant: Tenant, kb: KnowledgeBase, lc_id: str, text: str, metadata: dict
) -> StoredDocument:
    """A pending document holding the text, with as many trailing line breaks as make its
    bytes new to the knowledge base."""
    data = text.encode("utf-8")
    start = 0
    while True:
        candidates = {_padded_sha256(data, n): n for n in range(start, start + _PADDINGS_PER_QUERY)}
        taken = set(
            selectors.documents(tenant, kb)
            .filter(sha256__in=candidates)
            .values_list("sha256", flat=True)
        )
        for sha256, padding in candidates.items():
            if sha256 in taken:
                continue
            try:
                return create_document(
                    tenant=tenant,
                    knowledge_base=kb,
                    name=f"{lc_id}.txt",
                    stream=io.BytesIO(data + b"\n" * padding),
                    title=_title(text, metadata),
                    metadata={**metadata, ID_KEY: lc_id},
                    queue=False,
                )
            except DuplicateDocument:  # added meanwhile by someone else
                continue
        start += _PADDINGS_PER_QUERY


def _title(text: str, metadata: dict) -> str:
    """The title citations show: the metadata's ``title``, else the text's first line."""
    given = metadata.get("title")
    if isinstance(given, str) and given.strip():
        return given.strip()[:500]
    first = text.strip().splitlines()[0].strip()
    return first if len(first) <= TITLE_CHARS else first[: TITLE_CHARS - 1].rstrip() + "…"


def _padded_sha256(data: bytes, padding: int) -> str:
    digest = hashlib.sha256(data)
    digest.update(b"\n" * padding)
    return digest.hexdigest()


def _unchanged(document: StoredDocument, text: str, metadata: dict) -> bool:
    """Adding this text again would store what the document holds already."""
    if document.status != READY or own_metadata(document.metadata) != metadata:
        return False
    with document.file.open("rb") as handle:
        stored = handle.read()
    data = text.encode("utf-8")
    return stored.startswith(data) and not stored[len(data) :].strip(b"\n")


def _whole_text(document: StoredDocument) -> str | None:
    """Its one chunk, or the text its chunks were cut from; once curated by hand, its enabled
    chunks' texts (what search returns of it); None when none is enabled."""
    chunks = list(document.chunks.all())
    enabled = [chunk.content for chunk in chunks if chunk.enabled]
    if not enabled:
        return None
    curated = any(c.edited or c.origin == Chunk.Origin.MANUAL or not c.enabled for c in chunks)
    if len(chunks) == 1 or curated:
        return "\n\n".join(enabled)
    with document.file.open("rb") as handle:
        data = handle.read()
    return parse_document(document.original_filename, data, parse_limits()).text.strip()
