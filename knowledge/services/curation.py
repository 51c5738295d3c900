"""Curation by hand: edit a chunk's text, give it extra keywords and questions, add a chunk to a
document, disable and enable a chunk or a whole document.

What stays true:

- ``content`` is only ever what a person reads; extra keywords and questions are indexed (in
  ``tokens``) and the questions are embedded in front of the text (so a question asked in other
  words finds the chunk by meaning), but neither is shown as content.
- A write is one transaction that stores the new tokens and the new vector together, sets the
  document's ``processed_at`` (the BM25 segments and the vector matrix reload changed documents
  by it) and bumps the knowledge base's ``index_version``: the next search sees the new words
  and the new vector, and no longer the old ones. The vector is computed before the transaction
  (one request to the embedder, with its own retries); if that fails nothing is written and the
  error says why.
- Disabled chunks and documents are kept and listed, never searched
  (``knowledge.selectors.SEARCHABLE_CHUNK``), and enabling them again restores them as they were.
- Chunks added by hand survive reprocessing (appended after the parsed ones, in their order);
  edits to parsed chunks do not, so reprocessing asks first (``documents.reprocess_document``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from knowledge.analysis import ANALYZER_VERSION, Analyzer, get_analyzer
from knowledge.embeddings import EmbeddingError, config_for_knowledge_base, get_embedder
from knowledge.models import Chunk, Document, KnowledgeBase, StagedEmbedding
from knowledge.services.knowledge_bases import bump_index_version
from tenancy.errors import DomainError, ErrorKind, ensure_tenant
from tenancy.models import Tenant

MAX_CONTENT_CHARS = 20_000  # the largest chunk_size a knowledge base may set
MAX_EXTRAS = 50
MAX_KEYWORD_CHARS = 200
MAX_QUESTION_CHARS = 1000


class InvalidCuration(DomainError):
    code = "invalid_curation"
    kind = ErrorKind.INVALID


class DocumentNotReady(DomainError):
    """Chunks of a document being processed are about to be replaced: an edit would be lost."""

    code = "document_not_ready"
    kind = ErrorKind.CONFLICT


class CurationEmbeddingFailed(DomainError):
    code = "embedding_failed"
    kind = ErrorKind.UNAVAILABLE


class EmbeddingChanged(DomainError):
    code = "embedding_changed"
    kind = ErrorKind.CONFLICT


# ------------------------------------------------------------------ what is indexed and embedded


def curated_tokens(
    analyzer: Analyzer,
    content: str,
    title: str,
    heading_path: Sequence[str],
    extra_keywords: Sequence[str] = (),
    extra_questions: Sequence[str] = (),
) -> list[str]:
    """A chunk's tokens: what ingestion indexes, then its extra keywords and questions."""
    tokens = analyzer.chunk_tokens(content, title, heading_path)
    for extra in (*extra_keywords, *extra_questions):
        tokens.extend(analyzer.tokens(extra))
    return tokens


def embedded_text(content: str, extra_questions: Sequence[str] = ()) -> str:
    """What is embedded for a curated chunk: its questions, then its text."""
    return "\n".join([*extra_questions, content])


# ------------------------------------------------------------------ input


@dataclass(frozen=True)
class ChunkChanges:
    """A chunk write as asked; None leaves a field as it is."""

    content: str | None = None
    enabled: bool | None = None
    extra_keywords: Sequence[str] | None = None
    extra_questions: Sequence[str] | None = None

    def cleaned(self) -> ChunkChanges:
        content = self.content
        if content is not None:
            content = content.strip()
            if not content:
                raise InvalidCuration("A chunk's content cannot be empty; disable it instead.")
            if len(content) > MAX_CONTENT_CHARS:
                raise InvalidCuration(
                    f"A chunk's content is at most {MAX_CONTENT_CHARS:,} characters "
                    f"(this one has {len(content):,}); split it into several chunks."
                )
        return ChunkChanges(
            content,
            self.enabled,
            _extras(self.extra_keywords, "extra_keywords", MAX_KEYWORD_CHARS),
            _extras(self.extra_questions, "extra_questions", MAX_QUESTION_CHARS),
        )

    @property
    def text_changed(self) -> bool:
        return any(v is not None for v in (self.content, self.extra_keywords, self.extra_questions))


def _extras(values: Sequence[str] | None, field: str, longest: int) -> list[str] | None:
    """Stripped, blank ones and repeats dropped, in order; bounded in count and length."""
    if values is None:
        return None
    kept = list(dict.fromkeys(v.strip() for v in values if v and v.strip()))
    if len(kept) > MAX_EXTRAS:
        raise InvalidCuration(f"At most {MAX_EXTRAS} {field} per chunk ({len(kept)} given).")
    too_long = [v for v in kept if len(v) > longest]
    if too_long:
        raise InvalidCuration(
            f"Each of {field} is at most {longest} characters; {too_long[0][:40]!r}... is longer."
        )
    return kept


# ------------------------------------------------------------------ writes


def update_chunk(*, tenant: Tenant, chunk: Chunk, changes: ChunkChanges, user=None) -> Chunk:
    """Change a chunk's text, extra keywords and questions, and whether it is searched.

    Raises InvalidCuration (400), DocumentNotReady (409) while its document is being processed,
    CurationEmbeddingFailed (503) when the embedder cannot embed the new text (nothing is
    changed then), EmbeddingChanged (409) when the knowledge base switched models meanwhile."""
    ensure_tenant(chunk, tenant, "chunk")
    changes = changes.cleaned()
    document = Document.objects.select_related("knowledge_base").get(pk=chunk.document_id)
    _ensure_ready(document)
    kb = document.knowledge_base
    content = changes.content if changes.content is not None else chunk.content
    keywords = (
        changes.extra_keywords if changes.extra_keywords is not None else chunk.extra_keywords
    )
    questions = (
        changes.extra_questions if changes.extra_questions is not None else chunk.extra_questions
    )
    vector = None
    if changes.content is not None or changes.extra_questions is not None:
        vector = _embed(kb, embedded_text(content, questions))
    with transaction.atomic():
        locked_kb = _lock(kb)
        row = Chunk.objects.select_for_update().get(pk=chunk.pk, tenant=tenant)
        current = Document.objects.select_for_update().get(pk=row.document_id)
        _ensure_ready(current)
        fields = ["enabled"]
        if changes.enabled is not None:
            row.enabled = changes.enabled
        if changes.text_changed:
            row.content, row.extra_keywords, row.extra_questions = content, keywords, questions
            row.tokens = curated_tokens(
                get_analyzer(locked_kb.user_words),
                content,
                current.title,
                row.heading_path,
                keywords,
                questions,
            )
            row.analyzer_version = ANALYZER_VERSION
            row.edited_at, row.edited_by = timezone.now(), user
            fields += ["content", "extra_keywords", "extra_questions", "tokens"]
            fields += ["analyzer_version", "edited_at", "edited_by"]
        if vector is not None:
            _set_vector(row, locked_kb, vector)
            fields += ["embedding", "embedding_model", "embedding_dimensions"]
        row.save(update_fields=fields)
        _changed(current, locked_kb)
    return row


def add_chunk(
    *,
    tenant: Tenant,
    document: Document,
    content: str,
    extra_keywords: Sequence[str] = (),
    extra_questions: Sequence[str] = (),
    enabled: bool = True,
    user=None,
) -> Chunk:
    """Add a chunk by hand after the document's last one (``origin`` manual). Raises as
    ``update_chunk`` does."""
    ensure_tenant(document, tenant, "document")
    changes = ChunkChanges(content, enabled, list(extra_keywords), list(extra_questions)).cleaned()
    _ensure_ready(document)
    kb = KnowledgeBase.objects.get(pk=document.knowledge_base_id)
    vector = _embed(kb, embedded_text(changes.content, changes.extra_questions))
    with transaction.atomic():
        locked_kb = _lock(kb)
        current = Document.objects.select_for_update().get(pk=document.pk, tenant=tenant)
        _ensure_ready(current)
        last = Chunk.objects.filter(document=current).aggregate(last=Max("position"))["last"]
        chunk = Chunk(
            tenant_id=current.tenant_id,
            knowledge_base_id=locked_kb.pk,
            document=current,
            position=0 if last is None else last + 1,
            content=changes.content,
            tokens=curated_tokens(
                get_analyzer(locked_kb.user_words),
                changes.content,
                current.title,
                (),
                changes.extra_keywords,
                changes.extra_questions,
            ),
            analyzer_version=ANALYZER_VERSION,
            end_char=len(changes.content),
            metadata=current.metadata,
            origin=Chunk.Origin.MANUAL,
            enabled=changes.enabled,
            extra_keywords=changes.extra_keywords,
            extra_questions=changes.extra_questions,
            edited_at=timezone.now(),
            edited_by=user,
        )
        if vector is not None:
            _set_vector(chunk, locked_kb, vector)
        chunk.save()
        current.chunk_count = Chunk.objects.filter(document=current).count()
        current.save(update_fields=["chunk_count", "updated_at"])
        _changed(current, locked_kb)
    return chunk


def set_document_enabled(*, tenant: Tenant, document: Document, enabled: bool) -> Document:
    """Disable (keep, never search) or enable a whole document, in any state."""
    ensure_tenant(document, tenant, "document")
    set_documents_enabled(tenant=tenant, document_ids=[document.pk], enabled=enabled)
    document.refresh_from_db()
    return document


def set_documents_enabled(*, tenant: Tenant, document_ids: Sequence[int], enabled: bool) -> int:
    """Disable or enable the tenant's documents of these ids (others' are ignored) in one
    transaction; one index version per knowledge base touched. Returns how many changed."""
    rows = Document.objects.filter(tenant=tenant, pk__in=list(document_ids)).exclude(
        enabled=enabled
    )
    with transaction.atomic():
        kb_ids = sorted(set(rows.values_list("knowledge_base_id", flat=True)))
        kbs = [_lock(kb) for kb in KnowledgeBase.objects.filter(pk__in=kb_ids).order_by("pk")]
        changed = list(rows.select_for_update().values_list("pk", "knowledge_base_id", "status"))
        now = timezone.now()
        Document.objects.filter(pk__in=[pk for pk, _, _ in changed]).update(
            enabled=enabled, updated_at=now
        )
        ready = [(pk, kb) for pk, kb, status in changed if status == Document.Status.READY]
        Document.objects.filter(pk__in=[pk for pk, _ in ready]).update(processed_at=now)
        for kb in kbs:
            if any(kb_id == kb.pk for _, kb_id in ready):
                bump_index_version(kb)
    return len(changed)


def set_chunks_enabled(*, tenant: Tenant, chunk_ids: Sequence[int], enabled: bool) -> int:
    """Disable or enable the tenant's chunks of these ids in one transaction (chunks of
    documents being processed are left alone: processing replaces them). Returns how many
    changed."""
    with transaction.atomic():
        rows = Chunk.objects.filter(
            tenant=tenant, pk__in=list(chunk_ids), document__status=Document.Status.READY
        ).exclude(enabled=enabled)
        kb_ids = sorted(set(rows.values_list("knowledge_base_id", flat=True)))
        kbs = [_lock(kb) for kb in KnowledgeBase.objects.filter(pk__in=kb_ids).order_by("pk")]
        changed = list(rows.select_for_update().values_list("pk", "document_id"))
        Chunk.objects.filter(pk__in=[pk for pk, _ in changed]).update(enabled=enabled)
        documents = {document_id for _, document_id in changed}
        Document.objects.filter(pk__in=documents).update(processed_at=timezone.now())
        for kb in kbs:
            bump_index_version(kb)
    return len(changed)


def manual_chunks_after(document: Document, title: str, first_position: int) -> list[Chunk]:
    """The document's hand-added chunks, unsaved, to be stored again after a reprocess's
    ``first_position`` parsed chunks: same ids, order, text, vectors and flags; positions
    following the parsed ones; tokens analysed again under the (possibly new) title."""
    kept = list(
        Chunk.objects.filter(document=document, origin=Chunk.Origin.MANUAL)
        .select_related("knowledge_base")
        .order_by("position")
    )
    for offset, chunk in enumerate(kept):
        chunk.position = first_position + offset
        chunk.tokens = curated_tokens(
            get_analyzer(chunk.knowledge_base.user_words),
            chunk.content,
            title,
            chunk.heading_path,
            chunk.extra_keywords,
            chunk.extra_questions,
        )
        chunk.analyzer_version = ANALYZER_VERSION
    return kept


# ------------------------------------------------------------------ helpers


def _ensure_ready(document: Document) -> None:
    if document.status != Document.Status.READY:
        raise DocumentNotReady(
            f"Document {document.pk} is {document.status}; its chunks can be changed once it "
            "is ready (processing replaces them).",
            status=document.status,
        )


def _lock(kb: KnowledgeBase) -> KnowledgeBase:
    """The knowledge base row, locked first (as processing and deletion do), so concurrent
    changes bump versions in order."""
    return KnowledgeBase.objects.select_for_update().get(pk=kb.pk)


def _embed(kb: KnowledgeBase, text: str) -> tuple[str, int, list[float]] | None:
    """(model, dimensions, vector) of ``text`` under the knowledge base's model; None when it
    has no embedder (keyword search only)."""
    embedder = get_embedder(config_for_knowledge_base(kb))
    if embedder is None:
        return None
    try:
        [vector] = embedder.embed_documents([text])
    except EmbeddingError as exc:
        raise CurationEmbeddingFailed(
            f"The new text could not be embedded, so nothing was changed: {exc}. Try again "
            "once the embedding service answers."
        ) from exc
    if kb.embedding_dimensions and len(vector) != kb.embedding_dimensions:
        raise CurationEmbeddingFailed(
            f"The embedder returned a {len(vector)}-dimensional vector for a knowledge base of "
            f"{kb.embedding_dimensions}; nothing was changed."
        )
    return kb.embedding_model, kb.embedding_dimensions, vector


def _set_vector(chunk: Chunk, kb: KnowledgeBase, embedded: tuple[str, int, list[float]]) -> None:
    model, dimensions, vector = embedded
    if (kb.embedding_model, kb.embedding_dimensions) != (model, dimensions):
        raise EmbeddingChanged(
            "The knowledge base changed its embedding model while this was embedded; "
            "nothing was changed. Send it again."
        )
    chunk.embedding, chunk.embedding_model, chunk.embedding_dimensions = vector, model, dimensions
    if chunk.pk is not None:
        # A re-embedding in progress staged the old text's vector: stage this chunk again.
        StagedEmbedding.objects.filter(chunk_id=chunk.pk).delete()


def _changed(document: Document, kb: KnowledgeBase) -> None:
    """The document's searchable chunks changed: mark it for the delta readers, bump the index."""
    Document.objects.filter(pk=document.pk).update(processed_at=timezone.now())
    bump_index_version(kb)
