"""Background upkeep of stored chunks: re-analysis and re-embedding, never re-parsing.

Re-analysis recomputes chunk tokens from the stored chunk text (plus the document title and
heading path, as at ingestion) when the analyser version changes or a knowledge base's user
words change. Re-embedding computes every chunk's vector under a knowledge base's new model into
``StagedEmbedding`` while search keeps using the old vectors, then swaps them in for the whole
knowledge base in one transaction. Both are the work of tasks that the changes queue
(``knowledge.services.knowledge_bases``: ``set_user_words``, ``change_embedding``, whose
``embedding_migration`` record says the target model) and the reapers find again
(``knowledge.services.upkeep``); both are safe to run twice.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from knowledge.analysis import ANALYZER_VERSION, get_analyzer
from knowledge.embeddings import EmbeddingConfig, get_embedder
from knowledge.embeddings.registry import with_model
from knowledge.models import Chunk, Document, KnowledgeBase, StagedEmbedding
from knowledge.services.curation import curated_tokens, embedded_text
from knowledge.services.knowledge_bases import bump_index_version

logger = logging.getLogger(__name__)
BATCH = 500


# --------------------------------------------------------------------------- re-analysis


def reanalyze_knowledge_base(knowledge_base_id: int, *, all_chunks: bool = False) -> int:
    """Recompute tokens of the knowledge base's chunks that are out of date (analysed with
    another analyser version, or belonging to a document marked for re-analysis with
    ``analyzer_version`` 0), or of all of them; returns how many changed. Bumps the index
    version once at the end."""
    kb = KnowledgeBase.objects.filter(pk=knowledge_base_id).first()
    if kb is None:
        return 0
    analyzer = get_analyzer(kb.user_words)
    chunks = Chunk.objects.filter(knowledge_base=kb).select_related("document").order_by("pk")
    if not all_chunks:
        chunks = chunks.filter(
            ~Q(analyzer_version=ANALYZER_VERSION) | ~Q(document__analyzer_version=ANALYZER_VERSION)
        )
    changed, last_pk = 0, 0
    while True:
        batch = list(chunks.filter(pk__gt=last_pk)[:BATCH])
        if not batch:
            break
        for chunk in batch:
            chunk.tokens = curated_tokens(  # with its extra keywords and questions
                analyzer,
                chunk.content,
                chunk.document.title,
                chunk.heading_path,
                chunk.extra_keywords,
                chunk.extra_questions,
            )
            chunk.analyzer_version = ANALYZER_VERSION
        Chunk.objects.bulk_update(batch, ["tokens", "analyzer_version"])
        changed += len(batch)
        last_pk = batch[-1].pk
    with transaction.atomic():
        Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).update(
            analyzer_version=ANALYZER_VERSION
        )
        if changed:
            bump_index_version(KnowledgeBase.objects.select_for_update().get(pk=kb.pk))
    if changed:
        logger.info("re-analysed %d chunks of knowledge base %s", changed, kb.pk)
    return changed


# --------------------------------------------------------------------------- re-embedding


def _target(kb: KnowledgeBase) -> EmbeddingConfig | None:
    migration = kb.embedding_migration
    if not migration:
        return None
    return with_model(migration["provider"], migration["model"], migration["dimensions"])


def reembed_knowledge_base(knowledge_base_id: int) -> str:
    """Stage vectors of every chunk under the target model, then switch in one transaction.
    Chunks added while it runs are staged too before the switch; safe to run twice."""
    kb = KnowledgeBase.objects.filter(pk=knowledge_base_id).first()
    if kb is None or (target := _target(kb)) is None:
        return "nothing to do"
    embedder = get_embedder(target)
    while True:
        staged = _stage_missing(kb, target, embedder) if embedder is not None else 0
        with transaction.atomic():
            locked = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
            if not _same_migration(locked.embedding_migration, kb.embedding_migration):
                return "superseded by another change"
            if embedder is not None and _unstaged(kb, target).exists():
                continue  # chunks arrived meanwhile: stage them first
            _switch(locked, target)
            logger.info("knowledge base %s now uses %s (%d chunks)", kb.pk, target.model, staged)
            return "switched"


def _same_migration(a: dict | None, b: dict | None) -> bool:
    keys = ("provider", "model", "dimensions", "started_at")
    return bool(a and b) and all(a.get(k) == b.get(k) for k in keys)


def _unstaged(kb: KnowledgeBase, target: EmbeddingConfig):
    return Chunk.objects.filter(knowledge_base=kb).exclude(
        pk__in=StagedEmbedding.objects.filter(
            knowledge_base=kb, embedding_model=target.model
        ).values("chunk_id")
    )


def _stage_missing(kb: KnowledgeBase, target: EmbeddingConfig, embedder) -> int:
    done = 0
    while True:
        rows = _unstaged(kb, target).order_by("pk").values_list("pk", "content", "extra_questions")
        batch = list(rows[:BATCH])
        if not batch:
            return done
        # a curated chunk's questions are embedded with it, as when it was edited
        vectors = embedder.embed_documents([embedded_text(c, q) for _, c, q in batch])
        StagedEmbedding.objects.filter(chunk_id__in=[pk for pk, _, _ in batch]).delete()
        StagedEmbedding.objects.bulk_create(
            [
                StagedEmbedding(
                    chunk_id=pk, knowledge_base=kb, embedding=vector, embedding_model=target.model
                )
                for (pk, _, _), vector in zip(batch, vectors, strict=True)
            ]
        )
        done += len(batch)
        kb.embedding_migration = {
            **kb.embedding_migration,
            "done": done,
            "updated_at": timezone.now().isoformat(),
        }
        KnowledgeBase.objects.filter(  # only while this migration is still the current one
            pk=kb.pk, embedding_migration__started_at=kb.embedding_migration["started_at"]
        ).update(embedding_migration=kb.embedding_migration)


def _switch(kb: KnowledgeBase, target: EmbeddingConfig) -> None:
    with connection.cursor() as cursor:
        if target.provider == "none":
            cursor.execute(
                "UPDATE knowledge_chunk SET embedding = NULL, embedding_model = '', "
                "embedding_dimensions = NULL WHERE knowledge_base_id = %s",
                [kb.pk],
            )
        else:
            cursor.execute(
                "UPDATE knowledge_chunk AS c SET embedding = s.embedding, "
                "embedding_model = s.embedding_model, embedding_dimensions = %s "
                "FROM knowledge_stagedembedding AS s "
                "WHERE s.chunk_id = c.id AND c.knowledge_base_id = %s",
                [target.dimensions, kb.pk],
            )
    StagedEmbedding.objects.filter(knowledge_base=kb).delete()
    kb.embedding_provider = target.provider
    kb.embedding_model = target.model
    kb.embedding_dimensions = target.dimensions
    kb.embedding_migration = None
    kb.save(
        update_fields=[
            "embedding_provider",
            "embedding_model",
            "embedding_dimensions",
            "embedding_migration",
            "updated_at",
        ]
    )
    bump_index_version(kb)
