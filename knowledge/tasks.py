"""Celery tasks of ``knowledge``: thin wrappers that take ids and call one service."""

from celery import shared_task

from knowledge.services import documents, processing


@shared_task(name="knowledge.process_document")
def process_document_task(document_id: int) -> str:
    return processing.process_document(document_id)


@shared_task(name="knowledge.reap_stuck_documents")
def reap_stuck_documents_task() -> dict[str, int]:
    return documents.reap_stuck_documents()
