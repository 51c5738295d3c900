"""``WORKER_NICE``: a Celery worker lowers its own CPU priority when it starts, so the web
processes it shares cores with come first."""

import io
import os

import pytest
from django.db import connection, connections

from knowledge.models import Document
from knowledge.services import documents as document_services
from rag_project.priority import autogroups_on, lower_backend, server_is_local
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


def _autogroup(pid: int) -> tuple[str, int]:
    """(name, nice) of process ``pid``'s scheduling group under Linux's autogroup."""
    with open(f"/proc/{pid}/autogroup") as f:  # "/autogroup-123 nice 5"
        name, _, nice = f.read().split()
    return name, int(nice)


def test_the_worker_lowers_its_database_backend_by_the_same_steps(worker_factory):
    """The backend serving the worker's connection runs the change's transaction and the index
    builds' reads: it yields to the searches as the worker does (``rag_project.priority``), and
    no other backend moves."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        ours = cursor.fetchone()[0]
    server_nice = _nice(ours)
    before = _backends()
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
    lowered = [pid for pid, nice in new.items() if nice == min(server_nice + 7, 19)]
    assert lowered, f"no new backend at nice {server_nice + 7}: {new}"
    assert _nice(ours) == server_nice
    still = _backends()
    assert all(still[pid] == nice for pid, nice in before.items() if pid in still)
    if autogroups_on() and _autogroup(lowered[0])[0] != _autogroup(ours)[0]:
        # Each backend leads a session, so a scheduling group, of its own: the worker's is
        # lowered, the test's is not.
        assert _autogroup(lowered[0])[1] == 7
        assert _autogroup(ours)[1] == 0


@pytest.mark.django_db
def test_a_backend_on_this_host_is_lowered_and_one_elsewhere_is_never_touched():
    fresh = connections.create_connection("default")
    try:
        fresh.ensure_connection()
        with fresh.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        before = _nice(pid)
        assert lower_backend(fresh, 0) is None  # the web processes' priority: nothing to do
        assert _nice(pid) == before
        assert lower_backend(fresh, 3) == pid
        assert _nice(pid) == min(before + 3, 19)
        # The same pid on another host is some other process of this one: left alone.
        fresh.settings_dict = {
            **fresh.settings_dict,
            "ENGINE": "rag_project.postgresql",
            "HOST": "db.internal.example",
        }
        assert lower_backend(fresh, 3) is None
        assert _nice(pid) == min(before + 3, 19)
    finally:
        fresh.close()


@pytest.mark.parametrize(
    ("engine", "host", "local"),
    [
        ("rag_project.embedded_postgresql", "", True),
        ("rag_project.postgresql", "/var/run/postgresql", True),
        ("rag_project.postgresql", "", True),
        ("rag_project.postgresql", "localhost", True),
        ("rag_project.postgresql", "127.0.0.1", True),
        ("rag_project.postgresql", "::1", True),
        ("rag_project.postgresql", "10.0.0.7", False),
        ("rag_project.postgresql", "db.internal.example", False),
    ],
)
def test_which_servers_are_on_this_host(engine, host, local):
    assert server_is_local({"ENGINE": engine, "HOST": host}) is local
