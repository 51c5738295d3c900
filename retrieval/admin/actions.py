"""Index actions of the knowledge-base page that belong to retrieval."""

from __future__ import annotations

from knowledge.models import KnowledgeBase
from rag_project.celery import enqueue
from retrieval import tasks
from retrieval.bm25store import get_store


def rebuild_index(knowledge_base: KnowledgeBase) -> None:
    """Drop the knowledge base's BM25 index from every tier and queue the worker to build it
    again (``retrieval.invalidate_and_warm_bm25``). The task alone would find the stored index
    current and keep it; a rebuild on request is for an index someone distrusts. A search that
    comes before the worker builds it on demand, as after any invalidation."""
    get_store().invalidate(knowledge_base.pk)
    enqueue(
        tasks.invalidate_and_warm_bm25,
        knowledge_base.pk,
        index_version=knowledge_base.index_version,
    )
