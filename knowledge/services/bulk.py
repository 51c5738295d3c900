"""Bulk operations that must not time out: every failed document of a knowledge base retried,
many documents deleted at once.

What stays true:

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

import logging
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import (
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


class NothingSelected(DomainError):
    code = "nothing_selected"
    kind = ErrorKind.INVALID


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
