"""Processing one document: parse -> chunk -> analyse -> embed -> store, with visible status.

Runs in a Celery worker (``knowledge.tasks.process_document_task``) or in-process
(``ingest --sync``). Safe to run twice: a final document is left alone, and the chunks are
replaced in one transaction, so a reader sees the old set or the new set, never half of one.
Every failure a person can act on ends as ``failed`` with its message; nothing crashes the
worker.
"""

from __future__ import annotations

import logging
import time
from pathlib import PurePosixPath

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge.analysis import ANALYZER_VERSION, get_analyzer
from knowledge.embeddings import EmbeddingError, config_for_knowledge_base, get_embedder
from knowledge.ingestion.chunking import ChunkingConfig, chunk_document
from knowledge.ingestion.parsing import ParseError, ParseLimits, parse_document
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.documents import enqueue_processing, record_attempt
from knowledge.services.knowledge_bases import bump_index_version

logger = logging.getLogger(__name__)
Status = Document.Status

# Progress (0-100) at the start of each step; embedding moves between its start and indexing.
PROGRESS = {Status.PARSING: 2, Status.CHUNKING: 15, Status.EMBEDDING: 25, Status.INDEXING: 92}


def parse_limits() -> ParseLimits:
    return ParseLimits(
        max_file_bytes=settings.RAG_MAX_UPLOAD_BYTES,
        max_text_chars=settings.RAG_MAX_TEXT_CHARS,
        max_unzipped_bytes=settings.RAG_MAX_UNZIPPED_BYTES,
        max_ocr_pages=settings.RAG_MAX_OCR_PAGES,
    )


def _set(document_id: int, status: str, progress: int | None = None) -> None:
    fields = {"status": status, "updated_at": timezone.now()}
    if progress is not None:
        fields["progress"] = progress
    Document.objects.filter(pk=document_id).update(**fields)


def _fail(document_id: int, message: str) -> None:
    Document.objects.filter(pk=document_id).update(
        status=Status.FAILED, error=message[:2000], updated_at=timezone.now()
    )


def process_document(document_id: int) -> str:
    """Process one document; returns its final status (or why nothing was done)."""
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        return "missing"
    if document.status in Status.final():
        return document.status
    record_attempt(document_id)
    started = time.perf_counter()
    try:
        result = _run(document)
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


def _run(document: Document) -> str:
    kb = document.knowledge_base
    _set(document.pk, Status.PARSING, PROGRESS[Status.PARSING])
    with document.file.open("rb") as handle:
        data = handle.read()
    parsed = parse_document(document.original_filename, data, parse_limits())
    if parsed.title and document.title == PurePosixPath(document.original_filename).stem:
        # No title was given: the document's own (Markdown/HTML heading, .docx or PDF title)
        # names it better than its file name, in citations and in every chunk's tokens.
        document.title = parsed.title.strip()[:500]

    _set(document.pk, Status.CHUNKING, PROGRESS[Status.CHUNKING])
    pieces = chunk_document(parsed, ChunkingConfig(kb.chunk_size, kb.chunk_overlap))
    if not pieces:
        raise ParseError("no text could be extracted from the file")
    analyzer = get_analyzer(kb.user_words)
    tokens = [analyzer.chunk_tokens(p.content, document.title, p.heading_path) for p in pieces]

    _set(document.pk, Status.EMBEDDING, PROGRESS[Status.EMBEDDING])
    vectors = _embed(document.pk, kb, [p.content for p in pieces])

    _set(document.pk, Status.INDEXING, PROGRESS[Status.INDEXING])
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


def _embed(document_id: int, kb: KnowledgeBase, texts: list[str]) -> list[list[float]] | None:
    config = config_for_knowledge_base(kb)
    embedder = get_embedder(config)
    if embedder is None:
        return None
    vectors: list[list[float]] = []
    span = PROGRESS[Status.INDEXING] - PROGRESS[Status.EMBEDDING]
    batch = max(1, config.batch_size)  # progress moves once per provider request
    for start in range(0, len(texts), batch):
        vectors.extend(embedder.embed_documents(texts[start : start + batch]))
        done = min(len(texts), start + batch) / len(texts)
        _set(document_id, Status.EMBEDDING, PROGRESS[Status.EMBEDDING] + int(span * done))
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
        Chunk.objects.filter(document_id=document.pk).delete()
        Chunk.objects.bulk_create(chunks, batch_size=500)
        if current.replaces_id:
            replaced = Document.objects.filter(
                pk=current.replaces_id, knowledge_base_id=kb.pk, tenant_id=current.tenant_id
            ).first()
            if replaced is not None:
                storage, stored_name = replaced.file.storage, replaced.file.name
                replaced.delete()
                transaction.on_commit(lambda: storage.delete(stored_name))
        current.status = Status.READY
        current.progress = 100
        current.error = ""
        current.chunk_count = len(chunks)
        current.analyzer_version = ANALYZER_VERSION
        current.processed_at = timezone.now()
        current.replaces = None
        current.title = document.title
        current.save()
        bump_index_version(locked_kb)
    return Status.READY
