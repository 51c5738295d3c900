"""Keeping the store in step with knowledge: queue a rebuild on change, clean up on deletion."""

from __future__ import annotations

import logging

from knowledge.models import KnowledgeBase
from retrieval.bm25store.store import get_store

logger = logging.getLogger(__name__)


def queue_invalidate_and_warm(knowledge_base_id: int, index_version: int | None = None) -> None:
    """Queue the rebuild task now (call it from transaction.on_commit). A broker that cannot be
    reached is logged, not raised: searches then build the new version on demand."""
    from retrieval.tasks import invalidate_and_warm_bm25

    try:
        invalidate_and_warm_bm25.apply_async(
            (knowledge_base_id,),
            {"index_version": index_version},
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2},
        )
    except Exception as exc:  # broker down: the first search builds instead
        logger.warning(
            "could not queue the BM25 rebuild of knowledge base %s (%s); the next search builds it",
            knowledge_base_id,
            exc,
        )


def invalidate_and_warm(knowledge_base_id: int, index_version: int | None = None) -> str:
    """Drop the KB's old index from every tier and build the current one into L3 and L2, so the
    first search after a change does not pay for the build. Safe to run twice.

    ``index_version`` is the version the change produced: if the KB has moved past it, a later
    task is queued for the later change and this one leaves the work to it (a burst of uploads
    builds once, not once per document).
    """
    store = get_store()
    kb = KnowledgeBase.objects.filter(pk=knowledge_base_id).first()
    if kb is None:
        store.invalidate(knowledge_base_id)
        return "deleted"
    if index_version is not None and kb.index_version > index_version:
        return "superseded"
    stored = store.l3.version(kb.pk)
    if stored is not None and stored >= kb.index_version:
        return "current"  # a duplicate delivery, or a search built it first
    store.invalidate(kb.pk)
    try:
        handle = store.warm(kb)
    except KnowledgeBase.DoesNotExist:
        return "deleted"
    from retrieval.upkeep import ensure_vector_index_for

    ensure_vector_index_for(kb)
    return f"warmed v{handle.version} from {handle.tier}"


def forget_knowledge_base(knowledge_base_id: int) -> None:
    """A deleted KB leaves nothing behind: its row cascades; L2 and this process's L1 go here."""
    get_store().invalidate(knowledge_base_id)
