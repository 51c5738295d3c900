"""Receivers that keep BM25Store in step with ``knowledge`` (connected in RetrievalConfig.ready).

They only schedule work for after the commit: a rolled-back change queues nothing, and a task
never runs before the data it needs is visible.
"""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from knowledge.models import KnowledgeBase
from knowledge.signals import knowledge_base_changed
from retrieval import upkeep
from retrieval.bm25store import services


@receiver(knowledge_base_changed, dispatch_uid="retrieval.queue_bm25_rebuild")
def queue_bm25_rebuild(sender, knowledge_base_id: int, index_version: int, **kwargs) -> None:
    transaction.on_commit(
        partial(services.queue_invalidate_and_warm, knowledge_base_id, index_version),
        robust=True,
    )
    transaction.on_commit(
        partial(upkeep.queue_settled_calibration, knowledge_base_id, index_version), robust=True
    )


@receiver(post_delete, sender=KnowledgeBase, dispatch_uid="retrieval.forget_bm25_index")
def forget_bm25_index(sender, instance: KnowledgeBase, **kwargs) -> None:
    transaction.on_commit(partial(services.forget_knowledge_base, instance.pk), robust=True)
