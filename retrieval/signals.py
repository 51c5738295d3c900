"""Receivers that keep retrieval in step with ``knowledge`` and with its BM25 store (connected in
RetrievalConfig.ready).

They only schedule work for after the commit (``retrieval.changes``): a rolled-back change
queues nothing, and a task never runs before the data it needs is visible.
"""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from knowledge.models import KnowledgeBase
from knowledge.signals import knowledge_base_changed
from retrieval import changes
from retrieval.bm25store import merge_due
from retrieval.core.identity import identity_of


@receiver(knowledge_base_changed, dispatch_uid="retrieval.on_knowledge_base_changed")
def on_knowledge_base_changed(sender, knowledge_base_id: int, index_version: int, **kwargs) -> None:
    changes.on_change(knowledge_base_id, index_version)


@receiver(post_delete, sender=KnowledgeBase, dispatch_uid="retrieval.forget_bm25_index")
def forget_bm25_index(sender, instance: KnowledgeBase, **kwargs) -> None:
    identity = identity_of(instance)
    transaction.on_commit(
        partial(changes.forget_knowledge_base, instance.pk, identity.tenant_id, identity.epoch),
        robust=True,
    )


@receiver(merge_due, dispatch_uid="retrieval.queue_merge")
def on_merge_due(sender, knowledge_base_id: int, **kwargs) -> None:
    changes.queue_merge(knowledge_base_id)
