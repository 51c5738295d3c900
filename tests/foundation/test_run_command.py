"""``make run``'s command (manage.py run): Ctrl-C stops everything it started, embedded services
included, even Redis, which Django's own start-up starts before the command runs, but leaves the
services running while another process is connected to them; and it says when the demo
knowledge base can be searched, which is later than ``/healthz`` says warm."""

import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from django.core.management import call_command
from django.core.management.base import OutputWrapper

from knowledge.management.commands.seed_demo import DEMO_KB, DEMO_TENANT
from knowledge.models import Document
from rag_project import embedded
from rag_project.management.commands.run import _DemoProgress
from tests.conftest import CEILING_S, REPO, subprocess_env, wait_until
from tests.factories import KnowledgeBaseFactory, TenantFactory, add_document


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_command(root: Path):
    """``manage.py run`` on the embedded services under ``root``, once it answers /healthz;
    everything stopped and removed afterwards."""
    port = free_port()
    env = subprocess_env(
        RAG_DATA_DIR=str(root), DJANGO_SETTINGS_MODULE="rag_project.settings.development"
    )
    for name in ("DATABASE_URL", "REDIS_URL", "TEST_REDIS_URL", "RAG_TEST_DB_NAME", "PGAPPNAME"):
        env.pop(name, None)
    command = [sys.executable, "manage.py", "run", "--no-demo", "--concurrency", "1"]
    command += ["--addr", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"manage.py run exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                # The first start creates a database cluster and migrates: slow, not broken.
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, "manage.py run to answer /healthz", interval=0.5)
        running = embedded.status(root)
        assert running["postgres"] is not None and running["redis"] is not None
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        embedded.stop_all(root)
        shutil.rmtree(root, ignore_errors=True)


def ctrl_c(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=CEILING_S)
    assert proc.returncode == 0, output
    return output


@pytest.mark.slow
def test_ctrl_c_stops_the_web_server_worker_and_the_services_it_started():
    root = Path(tempfile.mkdtemp(prefix="rag-run-"))  # short: Unix socket paths are limited
    with running_command(root) as proc:
        output = ctrl_c(proc)
        assert "stopped embedded postgres" in output and "stopped embedded redis" in output
        stopped = embedded.status(root)
        assert stopped["postgres"] is None and stopped["redis"] is None


@pytest.mark.slow
def test_ctrl_c_leaves_the_services_running_while_another_process_uses_them():
    # Another command (an `evaluate` from a second terminal) holds a database connection and
    # uses Redis now and then: both must outlive `make run`.
    root = Path(tempfile.mkdtemp(prefix="rag-run-"))
    with running_command(root) as proc:
        pg_url = embedded.status(root)["postgres"]["url"]
        cache = redis.Redis.from_url(embedded.redis_url(root))
        with psycopg.connect(pg_url, autocommit=True, application_name="evaluate") as other:
            backend = other.execute("SELECT pg_backend_pid()").fetchone()[0]
            assert cache.ping()
            output = ctrl_c(proc)
            assert "stopped embedded" not in output
            assert (
                "left the embedded services running: other processes use them (PostgreSQL: 1 "
                f"other connection, backend pids {backend} (evaluate); Redis: 1 other "
                "connection); `make services-stop` stops them"
            ) in output
            assert other.execute("SELECT 1").fetchone() == (1,)  # still connected
            assert cache.ping()
        cache.close()
        running = embedded.status(root)
        assert running["postgres"] is not None and running["redis"] is not None


@pytest.mark.django_db
def test_the_demo_knowledge_base_is_announced_once_its_documents_are_processed():
    out = io.StringIO()
    progress = _DemoProgress(OutputWrapper(out))  # as the command's stdout
    assert progress.check() and out.getvalue() == ""  # no demo: nothing to wait for
    kb = KnowledgeBaseFactory(tenant=TenantFactory(name=DEMO_TENANT), name=DEMO_KB)
    pump = add_document(kb, "pump.md", "# Pump\n\nThe P-100 pump is sealed mechanically.")
    valve = add_document(kb, "valve.md", "# Valve\n\nThe V-7 gate valve seat leaks.")
    Document.objects.filter(pk=valve.pk).update(status=Document.Status.EMBEDDING)
    assert not progress.check() and not progress.check()
    assert out.getvalue() == "demo documents: 1 of 2 ready\n"  # said once, not every poll
    Document.objects.filter(pk=pump.pk).update(status=Document.Status.FAILED)
    Document.objects.filter(pk=valve.pk).update(status=Document.Status.READY)
    assert progress.check()
    assert out.getvalue().splitlines()[1:] == [
        f"demo knowledge base {kb.pk} is searchable (1 document(s) failed: see the admin); "
        f"a key for it: python manage.py create_api_key --tenant Demo --kb {kb.pk}",
    ]
    printed = io.StringIO()
    call_command("demo_status", stdout=printed)  # what run asks, as a person would see it
    assert json.loads(printed.getvalue()) == {
        "knowledge_base": kb.pk,
        "documents": 2,
        "ready": 1,
        "failed": 1,
    }
