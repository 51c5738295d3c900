"""Processing one document: (fetch) -> parse -> chunk -> analyse -> embed -> store, with visible
status.

Runs in a Celery worker (``knowledge.tasks.process_document_task``) or in-process
(``ingest --sync``). A document from a URL that has no file yet is fetched first, by the step
its caller hands over (``fetch``: the web layer's ``knowledge.web.documents.fetch_into``, which
services never import). Safe to run twice: a final document is left alone, and the chunks are
replaced in one transaction, so a reader sees the old set or the new set, never half of one.
Every failure a person can act on ends as ``failed`` with its message; nothing crashes the
worker.

Progress moves at every step, and within the long ones: per page read by OCR (status
``parsing``) and per embedding request. OCR takes seconds a page, longer than everything else,
so a document that needs it gives parsing most of the bar (up to ``OCR_DONE``) and the later
steps share the rest. Every move also refreshes ``updated_at``, so the reaper never takes a
long OCR run for a stuck one.

An e-mail's attachments are stored as documents of their own right after the message is parsed
(``services.attachments``) and queued; the message's metadata["email"] records its headers and
what became of each attachment. Q&A pairs are embedded with their question, so a question
asked in other words finds the pair by meaning as well as by its words.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import PurePosixPath

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from knowledge.analysis import ANALYZER_VERSION, get_analyzer
from knowledge.embeddings import EmbeddingError, config_for_knowledge_base, get_embedder
from knowledge.ingestion.chunking import ChunkingConfig, TextChunk, chunk_document
from knowledge.ingestion.parsing import (
    Ocr,
    OcrEngine,
    OcrUnavailable,
    ParsedDocument,
    ParseError,
    ParseOptions,
    parse_document,
)
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.attachments import add_attachments
from knowledge.services.curation import manual_chunks_after
from knowledge.services.documents import (
    delete_files_on_commit,
    enqueue_processing,
    parse_limits,
    record_attempt,
    stored_files,
)
from knowledge.services.knowledge_bases import bump_index_version

logger = logging.getLogger(__name__)
Status = Document.Status

# Progress (0-100) at the start of each step; embedding moves between its start and indexing.
PROGRESS = {Status.PARSING: 2, Status.CHUNKING: 15, Status.EMBEDDING: 25, Status.INDEXING: 92}
# Where parsing ends when pages were read by OCR; the later steps are scaled into the rest.
OCR_DONE = 60
# Stores the bytes of a document from a URL as its file (``knowledge.web.documents.fetch_into``);
# a ParseError, with a message to act on, when it cannot.
Fetch = Callable[[Document], None]


def parse_options(options: dict) -> ParseOptions:
    """The stored upload options as ParseOptions (keys it does not know are ignored)."""
    known = ParseOptions.__dataclass_fields__
    return ParseOptions(**{k: v for k, v in options.items() if k in known})


def ocr_engine() -> OcrEngine:
    """The engine RAG_OCR_ENGINE names; OcrUnavailable (with how to install it) when it
    cannot be imported."""
    try:
        factory = import_string(settings.RAG_OCR_ENGINE)
    except ImportError as exc:
        raise OcrUnavailable.not_installed(exc) from exc
    return factory()


def _set(document_id: int, status: str, progress: int | None = None) -> None:
    fields = {"status": status, "updated_at": timezone.now()}
    if progress is not None:
        fields["progress"] = progress
    Document.objects.filter(pk=document_id).update(**fields)


class _Progress:
    """The progress bar of one run (see the module docstring)."""

    def __init__(self, document_id: int) -> None:
        self._document_id = document_id
        self._parsed_at = PROGRESS[Status.CHUNKING]

    def ocr_page(self, done: int, total: int) -> None:
        self._parsed_at = OCR_DONE
        start = PROGRESS[Status.PARSING]
        _set(self._document_id, Status.PARSING, start + (OCR_DONE - start) * done // total)

    def step(self, status: str, within: float = 0.0) -> None:
        """At `status`, `within` (0-1) of the way to the next step."""
        steps = [Status.CHUNKING, Status.EMBEDDING, Status.INDEXING]
        if status == Status.PARSING:
            value = PROGRESS[Status.PARSING]
        else:
            following = steps.index(status) + 1
            end = PROGRESS[steps[following]] if following < len(steps) else 100
            value = self._scaled(PROGRESS[status] + (end - PROGRESS[status]) * within)
        _set(self._document_id, status, int(value))

    def _scaled(self, value: float) -> float:
        low = PROGRESS[Status.CHUNKING]
        return self._parsed_at + (value - low) * (100 - self._parsed_at) / (100 - low)


def _fail(document_id: int, message: str) -> None:
    Document.objects.filter(pk=document_id).update(
        status=Status.FAILED, error=message[:2000], updated_at=timezone.now()
    )


def needs_fetching(document: Document) -> bool:
    """A document from a URL whose bytes are not stored yet."""
    return bool(document.source_url) and not document.file


def process_document(document_id: int, *, fetch: Fetch | None = None) -> str:
    """Process one document; returns its final status (or why nothing was done). ``fetch`` is
    the first step of a document from a URL not fetched yet; such a document given without it
    raises ValueError and is left as it was (a caller's mistake, not the document's)."""
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        return "missing"
    if document.status in Status.final():
        return document.status
    if fetch is None and needs_fetching(document):
        raise ValueError(
            f"document {document_id} comes from a URL and has no file yet: process it with "
            "its fetch step (knowledge.web.documents.fetch_into)"
        )
    record_attempt(document_id)
    started = time.perf_counter()
    try:
        result = _run(document, fetch)
    except (ParseError, EmbeddingError) as exc:  # UnsupportedFileType, FileTooLarge included
        _fail(document_id, str(exc))
        return Status.FAILED
    except SoftTimeLimitExceeded:
        _fail(document_id, "processing took longer than the time limit; split the file")
        return Status.FAILED
    except OSError as exc:
        _fail(document_id, f"the stored file could not be read ({exc.strerror or exc})")
        return Status.FAILED
    logger.info("document %s %s in %.2fs", document_id, result, time.perf_counter() - started)
    return result


def _run(document: Document, fetch: Fetch | None) -> str:
    kb = document.knowledge_base
    progress = _Progress(document.pk)
    if fetch is not None and needs_fetching(document):  # a URL's bytes come first
        _set(document.pk, Status.FETCHING, 1)
        fetch(document)
    progress.step(Status.PARSING)
    with document.file.open("rb") as handle:
        data = handle.read()
    parsed = parse_document(
        document.original_filename,
        data,
        parse_limits(),
        parse_options(document.options),
        Ocr(engine=ocr_engine, on_page=progress.ocr_page),
    )
    if parsed.title and document.title == PurePosixPath(document.original_filename).stem:
        # No title was given: the document's own (Markdown/HTML heading, .docx or PDF title)
        # names it better than its file name, in citations and in every chunk's tokens.
        document.title = parsed.title.strip()[:500]
    if "email" in parsed.metadata:
        email = {**parsed.metadata["email"]}
        email["attachments"] = add_attachments(document, parsed.attachments)
        document.metadata = {**document.metadata, "email": email}

    progress.step(Status.CHUNKING)
    pieces = chunk_document(parsed, ChunkingConfig(kb.chunk_size, kb.chunk_overlap))
    if not pieces:
        raise ParseError("no text could be extracted from the file")
    analyzer = get_analyzer(kb.user_words)
    tokens = [analyzer.chunk_tokens(p.content, document.title, p.heading_path) for p in pieces]

    progress.step(Status.EMBEDDING)
    vectors = _embed(progress, kb, [_embedded_text(parsed, p) for p in pieces])

    progress.step(Status.INDEXING)
    chunks = [
        Chunk(
            tenant_id=document.tenant_id,
            knowledge_base_id=kb.pk,
            document_id=document.pk,
            position=piece.position,
            content=piece.content,
            tokens=chunk_tokens,
            analyzer_version=ANALYZER_VERSION,
            embedding=vectors[i] if vectors else None,
            embedding_model=kb.embedding_model if vectors else "",
            embedding_dimensions=kb.embedding_dimensions if vectors else None,
            start_char=piece.start,
            end_char=piece.end,
            page=piece.page,
            heading_path=list(piece.heading_path),
            metadata=document.metadata,
        )
        for i, (piece, chunk_tokens) in enumerate(zip(pieces, tokens, strict=True))
    ]
    return _store(document, kb, chunks)


def _embedded_text(parsed: ParsedDocument, piece: TextChunk) -> str:
    """What is embedded for a chunk: its text, preceded by its question for Q&A pairs (the
    heading path of a pair is its question)."""
    if parsed.metadata.get("qa_pairs"):
        return "\n".join([*piece.heading_path, piece.content])
    return piece.content


def _embed(progress: _Progress, kb: KnowledgeBase, texts: list[str]) -> list[list[float]] | None:
    config = config_for_knowledge_base(kb)
    embedder = get_embedder(config)
    if embedder is None:
        return None
    vectors: list[list[float]] = []
    batch = max(1, config.batch_size)  # progress moves once per provider request
    for start in range(0, len(texts), batch):
        vectors.extend(embedder.embed_documents(texts[start : start + batch]))
        progress.step(Status.EMBEDDING, min(len(texts), start + batch) / len(texts))
    if kb.embedding_dimensions and any(len(v) != kb.embedding_dimensions for v in vectors):
        raise EmbeddingError(
            f"the embedder returned vectors of another dimension than the knowledge base's "
            f"{kb.embedding_dimensions}"
        )
    return vectors


def _store(document: Document, kb: KnowledgeBase, chunks: list[Chunk]) -> str:
    with transaction.atomic():
        # Lock the KB row first (as delete does) so concurrent changes bump versions in order.
        locked_kb = KnowledgeBase.objects.select_for_update().filter(pk=kb.pk).first()
        if locked_kb is None:
            return "superseded"  # the knowledge base was deleted while this document ran
        current = Document.objects.select_for_update().filter(pk=document.pk).first()
        if current is None or current.status in Status.final():
            return "superseded"  # deleted meanwhile, or another run finished first
        if (locked_kb.embedding_model, locked_kb.embedding_dimensions) != (
            kb.embedding_model,
            kb.embedding_dimensions,
        ):
            # The knowledge base switched models while this ran: embed again with the new one.
            enqueue_processing(document.pk)
            return "requeued"
        # curation: chunks added by hand survive, after the parsed ones (same ids)
        kept = manual_chunks_after(current, document.title, len(chunks))
        Chunk.objects.filter(document_id=document.pk).delete()
        Chunk.objects.bulk_create([*chunks, *kept], batch_size=500)
        if current.replaces_id:
            replaced = Document.objects.filter(
                pk=current.replaces_id, knowledge_base_id=kb.pk, tenant_id=current.tenant_id
            ).first()
            if replaced is not None:
                # Attachments this message has too (linked, not stored twice) stay, with it.
                kept = [a.get("document_id") for a in _attachments(document)]
                Document.objects.filter(parent=replaced, pk__in=kept).update(parent=current)
                names = stored_files(replaced.pk)
                replaced.delete()
                delete_files_on_commit(names)
        current.status = Status.READY
        current.progress = 100
        current.error = ""
        current.chunk_count = len(chunks) + len(kept)
        current.analyzer_version = ANALYZER_VERSION
        current.processed_at = timezone.now()
        current.replaces = None
        current.title = document.title
        if "email" in document.metadata:
            current.metadata = document.metadata
        current.save()
        bump_index_version(locked_kb)
    return Status.READY


def _attachments(document: Document) -> list[dict]:
    return document.metadata.get("email", {}).get("attachments", [])
