"""A Celery worker keeps its database connection from task to task, as a web process keeps its
own from request to request (``CELERY_DB_REUSE_MAX`` and ``rag_project.celery``): a document's
processing and index build run several tasks, and a new PostgreSQL connection per task cost the
server a backend each time. A connection the server ended is replaced, not failed on."""

from __future__ import annotations

import io

import pytest
from django.db import connection

from knowledge.models import Document, KnowledgeBase
from knowledge.services import documents as document_services
from rag_project.celery import app, waiting_tasks
from tests.conftest import WorkerProcess, other_backends, wait_until
from tests.factories import KnowledgeBaseFactory

pytestmark = pytest.mark.e2e


def _sessions() -> int:
    """Connections ever made to the test database (pg_stat_database.sessions)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def _upload_and_wait(worker: WorkerProcess, kb: KnowledgeBase, number: int) -> None:
    document = document_services.create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name=f"report-{number}.md",
        stream=io.BytesIO(f"# Report {number}\n\nThe pump number {number} was checked.\n".encode()),
    )
    wait_until(
        lambda: Document.objects.get(pk=document.pk).status == Document.Status.READY,
        f"the worker to process report {number}",
    )
    # The index build the document queued (invalidate and warm) runs next: wait for the
    # worker to go idle, so each document's tasks have all run.
    inspect = app.control.inspect(destination=[worker.name], timeout=1.0)
    wait_until(
        lambda: not any((inspect.active() or {}).values()) and not waiting_tasks(),
        f"the worker to finish report {number}'s tasks",
    )


def test_the_worker_keeps_its_connection_across_tasks(celery_worker_process):
    kb = KnowledgeBaseFactory()
    _upload_and_wait(celery_worker_process, kb, 0)
    before = _sessions()
    for number in (1, 2, 3):
        _upload_and_wait(celery_worker_process, kb, number)
    # Three documents ran at least six tasks (processing and index build each); with a
    # connection per task each would have opened one.
    assert _sessions() - before <= 1


def test_a_connection_the_server_ended_is_replaced(celery_worker_process):
    kb = KnowledgeBaseFactory()
    _upload_and_wait(celery_worker_process, kb, 0)
    backends = other_backends()
    assert backends, "the worker keeps a connection between tasks"
    with connection.cursor() as cursor:
        for pid in backends:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    _upload_and_wait(celery_worker_process, kb, 1)
    assert Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).count() == 2
