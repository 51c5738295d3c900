"""Celery tasks of ``knowledge``: thin wrappers that take ids and call one service.

The services queue these by name (``enqueue("knowledge.process_document", ...)``) and never
import this module; it imports them, and hands processing the web layer's fetch step."""

from celery import shared_task

from knowledge.services import bulk, dispatch, processing, reindex, upkeep
from knowledge.web import sources, sync
from knowledge.web.documents import fetch_into


@shared_task(name="knowledge.process_document")
def process_document_task(document_id: int) -> str:
    result = processing.process_document(document_id, fetch=fetch_into)
    dispatch.dispatch()  # its place is free: the next document, in its tenant's turn
    return result


@shared_task(name="knowledge.dispatch_documents")
def dispatch_documents_task() -> int:
    return len(dispatch.dispatch())


@shared_task(name="knowledge.reap_stuck_documents")
def reap_stuck_documents_task() -> dict[str, int]:
    """The reaper of lost ingestion work (beat, every RAG_REAPER_INTERVAL_S)."""
    reaped = upkeep.reap_stuck_documents()
    reaped["reembedding"] = len(upkeep.reap_stalled_reembedding())
    reaped["deletions"] = len(bulk.reap_requested_deletions())
    reaped["dispatched"] = len(dispatch.dispatch())
    return reaped


@shared_task(name="knowledge.reanalyze_knowledge_base")
def reanalyze_knowledge_base_task(knowledge_base_id: int, all_chunks: bool = False) -> int:
    return reindex.reanalyze_knowledge_base(knowledge_base_id, all_chunks=all_chunks)


@shared_task(name="knowledge.queue_outdated_reanalysis")
def queue_outdated_reanalysis_task() -> list[int]:
    return upkeep.queue_outdated_reanalysis()


@shared_task(name="knowledge.reembed_knowledge_base")
def reembed_knowledge_base_task(knowledge_base_id: int) -> str:
    return reindex.reembed_knowledge_base(knowledge_base_id)


@shared_task(name="knowledge.sync_web_source")
def sync_web_source_task(web_source_id: int) -> str:
    return sync.sync_web_source(web_source_id)


@shared_task(name="knowledge.queue_due_web_syncs")
def queue_due_web_syncs_task() -> list[int]:
    """Web sources whose sync interval has passed, and lost syncs (beat, every minute)."""
    return sources.queue_due_syncs()


@shared_task(name="knowledge.queue_documents")
def queue_documents_task(document_ids: list[int]) -> int:
    return bulk.queue_documents(document_ids)


@shared_task(name="knowledge.delete_requested_documents")
def delete_requested_documents_task(knowledge_base_id: int) -> int:
    return bulk.delete_requested_documents(knowledge_base_id)
