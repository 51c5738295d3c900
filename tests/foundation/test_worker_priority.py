"""``WORKER_NICE``: a Celery worker lowers its own CPU priority when it starts, so the web
processes it shares cores with come first; it never touches another server's processes."""

import io
import os

import pytest
from django.db import connection

from knowledge.models import Document
from knowledge.services import documents as document_services
from tests.conftest import other_backends, wait_until
from tests.factories import KnowledgeBaseFactory

pytestmark = pytest.mark.e2e


def _nice(pid: int) -> int:
    """The nice value of process ``pid`` (field 19 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_a_worker_runs_the_configured_steps_below_the_process_that_started_it(worker_factory):
    ours = os.nice(0)
    lowered = worker_factory(WORKER_NICE="7").start()
    level = worker_factory(WORKER_NICE="0").start()
    assert _nice(lowered.proc.pid) == min(ours + 7, 19)
    assert _nice(level.proc.pid) == ours


def _backends() -> dict[int, int]:
    """pid -> nice of the test database's client backends other than this connection's."""
    return {pid: _nice(pid) for pid in other_backends()}


def test_the_worker_leaves_its_database_backends_priority_alone(worker_factory):
    """Only the application's own processes yield: the PostgreSQL backend serving the worker's
    connection keeps the server's priority (the server is its operator's to tune)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        server_nice = _nice(cursor.fetchone()[0])
    before = set(other_backends())
    worker_factory(WORKER_NICE="7").start()
    kb = KnowledgeBaseFactory()
    document = document_services.create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name="pump.md",
        stream=io.BytesIO(b"# Pump\n\nThe pump seal is replaced every year.\n"),
    )
    wait_until(
        lambda: Document.objects.get(pk=document.pk).status == Document.Status.READY,
        "the worker to process the document",
    )
    new = {pid: nice for pid, nice in _backends().items() if pid not in before}
    assert new, "the worker opened no database connection of its own"
    assert set(new.values()) == {server_nice}, new
