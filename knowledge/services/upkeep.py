"""The reapers: periodic tasks (Celery beat) that find work whose task was lost.

A task can be lost when the broker was down as it was queued (``enqueue`` logs and goes on),
or when its worker died. Each reaper finds such work from the database alone: documents whose
processing stopped moving, documents marked for re-analysis, re-embeddings that stopped moving.
All the tasks they queue are safe to run twice.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge.analysis import ANALYZER_VERSION
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import enqueue_processing
from rag_project.celery import enqueue

logger = logging.getLogger(__name__)


def reap_stuck_documents(now=None) -> dict[str, int]:
    """Re-queue documents stuck in a non-final state for longer than ``RAG_STUCK_AFTER_S``
    (their worker died, or the broker lost the task); fail them after
    ``RAG_MAX_PROCESSING_ATTEMPTS`` attempts with a message saying so."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.RAG_STUCK_AFTER_S)
    stuck = (
        Document.objects.exclude(status__in=Document.Status.final())
        .filter(updated_at__lt=cutoff)
        # waiting for its turn in the fair dispatch is not stuck (the beat dispatches it)
        .exclude(status=Document.Status.PENDING, dispatched_at__isnull=True)
    )
    failed = stuck.filter(attempts__gte=settings.RAG_MAX_PROCESSING_ATTEMPTS).update(
        status=Document.Status.FAILED,
        error=(
            f"processing did not finish after {settings.RAG_MAX_PROCESSING_ATTEMPTS} attempts; "
            "check the worker logs, then reprocess the document"
        ),
        updated_at=now,
    )
    requeued = 0
    for document_id in stuck.values_list("pk", flat=True):
        with transaction.atomic():
            touched = (
                Document.objects.filter(pk=document_id, updated_at__lt=cutoff)
                .exclude(status__in=Document.Status.final())
                .update(status=Document.Status.PENDING, progress=0, updated_at=now)
            )
            if touched:
                enqueue_processing(document_id)
                requeued += 1
    if failed or requeued:
        logger.warning("reaper: %d stuck documents re-queued, %d failed", requeued, failed)
    return {"requeued": requeued, "failed": failed}


def queue_outdated_reanalysis() -> list[int]:
    """Queue re-analysis of every knowledge base holding ready documents analysed with another
    analyser version or marked for re-analysis (run periodically by beat; cheap: it reads the
    documents table)."""
    kb_ids = sorted(
        set(
            Document.objects.filter(status=Document.Status.READY)
            .exclude(analyzer_version=ANALYZER_VERSION)
            .values_list("knowledge_base_id", flat=True)
        )
    )
    for kb_id in kb_ids:
        enqueue("knowledge.reanalyze_knowledge_base", kb_id)
    return kb_ids


def reap_stalled_reembedding(now: datetime | None = None) -> list[int]:
    """Queue again every re-embedding whose progress has not moved for ``RAG_STUCK_AFTER_S``
    (its task was never queued, or its worker died)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.RAG_STUCK_AFTER_S)
    stalled = []
    for kb_id, migration in KnowledgeBase.objects.filter(
        embedding_migration__isnull=False
    ).values_list("pk", "embedding_migration"):
        moved = (migration or {}).get("updated_at") or (migration or {}).get("started_at")
        if moved and datetime.fromisoformat(moved) < cutoff:
            enqueue("knowledge.reembed_knowledge_base", kb_id)
            stalled.append(kb_id)
    if stalled:
        logger.warning("reaper: re-embedding of knowledge bases %s queued again", stalled)
    return stalled
