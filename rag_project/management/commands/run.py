"""``python manage.py run``: everything `make run` serves, in one foreground command.

Starts (or reuses) the embedded services, migrates, loads the demo knowledge base, then runs the
web server and a Celery worker + beat beside it. Ctrl-C stops what this command started: the
web server, the worker, beat, and the embedded services if they were not running before, unless
another process is still connected to one of them (a command from a second terminal, a test
run): then both are left running, and the command says who uses them and how to stop them.
Its own processes' PostgreSQL connections carry the application name ``rag-run-<pid>``
(``PGAPPNAME``), which tells them from others'; its Redis connections are told apart by process
(``rag_project.embedded.redis_clients``), once its children have exited.

The worker processes the demo documents after the server is up (``/healthz`` says ``warm``
when the processes are, well before the documents are, on a fresh machine): the command prints
how many are ready as that changes, and says when the demo knowledge base can be searched.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from rag_project import embedded

# After the children exit, how long the embedded Redis may take to notice their connections
# closed before the ones left are taken for another process's.
CHILDREN_GONE_S = 2.0


class Command(BaseCommand):
    help = "Serve the site with a Celery worker and beat beside it (what `make run` does)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default=os.environ.get("RAG_ADDR", "127.0.0.1:8000"))
        parser.add_argument("--no-demo", action="store_true", help="skip loading the demo data")
        parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes")

    def handle(self, *args, addr: str, no_demo: bool, concurrency: int, **options) -> None:
        # This process's and its children's PostgreSQL connections, from here on, are named
        # so: any other connection is another process's.
        family = f"rag-run-{os.getpid()}"
        os.environ["PGAPPNAME"] = family
        connection.close()
        root = settings.RAG_DATA_DIR
        if settings.DATABASE_EMBEDDED:
            embedded.ensure_postgres(root)
        if settings.REDIS_EMBEDDED:
            embedded.ensure_redis(root)  # usually started already, by Django's start-up
        embedded_started = [s for s in ("postgres", "redis") if embedded.started_here(s, root)]

        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        if not no_demo:
            call_command("seed_demo")

        children = _children(addr, concurrency)
        procs: dict[str, subprocess.Popen] = {}
        stop_requested: list[int] = []

        def request_stop(signum: int, frame) -> None:
            # Ctrl-C reaches the children too (same process group); a flag, not an exception,
            # so a child exiting from that same Ctrl-C is not mistaken for a crash.
            stop_requested.append(signum)

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        failure = None
        demo = None if no_demo else _DemoProgress(self.stdout)
        try:
            for name, cmd in children.items():
                procs[name] = subprocess.Popen(cmd, cwd=settings.BASE_DIR)
            self.stdout.write(
                self.style.SUCCESS(
                    f"serving on http://{addr}/  (admin: /admin/, health: /healthz, "
                    "MCP: /mcp); Ctrl-C stops"
                )
            )
            while not stop_requested and failure is None:
                time.sleep(0.5)
                if demo is not None and demo.check():
                    demo = None  # said once
                for name, proc in procs.items():
                    if proc.poll() is not None and not stop_requested:
                        failure = f"{name} exited with code {proc.returncode}"
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup
            self._stop_children(procs)
            self._stop_services(embedded_started, family)
        if failure:
            raise CommandError(f"{failure}; everything else was stopped")
        self.stdout.write("stopped")

    def _stop_services(self, started: list[str], family: str) -> None:
        """Stop the embedded services this command started, unless another process uses one
        of them: that process (a Django command) needs both."""
        if not started:
            return
        users = self._other_users(family)
        if users:
            self.stdout.write(
                self.style.WARNING(
                    "left the embedded services running: other processes use them ("
                    + "; ".join(users)
                    + "); `make services-stop` stops them"
                )
            )
            return
        for service in reversed(started):
            try:
                getattr(embedded, f"stop_{service}")(settings.RAG_DATA_DIR)
                self.stdout.write(f"stopped embedded {service}")
            except RuntimeError as exc:
                self.stderr.write(str(exc))

    def _other_users(self, family: str) -> list[str]:
        """What else is connected to the embedded services, said for a person; empty when
        nothing is (or when it cannot be told: then they stop, as they always did)."""
        root = settings.RAG_DATA_DIR
        users = []
        try:
            backends = embedded.postgres_clients(root, family)
            deadline = time.monotonic() + CHILDREN_GONE_S
            while (redis_clients := embedded.redis_clients(root)) and time.monotonic() < deadline:
                time.sleep(0.05)  # the children's connections, closing
        except Exception as exc:  # a service that cannot answer is stopped all the same
            self.stderr.write(f"could not tell whether other processes use the services: {exc}")
            return []
        if backends:
            users.append(
                f"PostgreSQL: {_connections(len(backends))}, backend pids {', '.join(backends)}"
            )
        if redis_clients:
            users.append(f"Redis: {_connections(redis_clients)}")
        return users

    def _stop_children(self, procs: dict[str, subprocess.Popen]) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _connections(count: int) -> str:
    return f"{count} other connection{'' if count == 1 else 's'}"


class _DemoProgress:
    """Reports the demo documents' processing (``manage.py demo_status``, named here, not
    imported: the project imports no app): each change of the ready count, then once that the
    demo knowledge base is searchable (every document ready or failed)."""

    def __init__(self, stdout) -> None:
        self.stdout = stdout
        self.said: int | None = None  # the ready count last reported

    def check(self) -> bool:
        """True once every demo document has been processed (reported then). A database that
        does not answer is asked again next time."""
        try:
            status = json.loads(call_command("demo_status", stdout=io.StringIO()))
        except DatabaseError:
            connection.close()  # a new one next time
            return False
        if not status:
            return True  # no demo knowledge base: nothing to wait for
        kb_id, ready, failed = status["knowledge_base"], status["ready"], status["failed"]
        if ready != self.said:
            self.said = ready
            self.stdout.write(f"demo documents: {ready} of {status['documents']} ready")
        if ready + failed < status["documents"]:
            return False
        self.stdout.write(
            f"demo knowledge base {kb_id} is searchable"
            + (f" ({failed} document(s) failed: see the admin)" if failed else "")
            + f"; a key for it: python manage.py create_api_key --tenant Demo --kb {kb_id}"
        )
        return True


def _children(addr: str, concurrency: int) -> dict[str, list[str]]:
    """The commands of the processes ``run`` starts and watches, by name."""
    celery = [sys.executable, "-m", "celery", "-A", "rag_project"]
    schedule = str(settings.RAG_DATA_DIR / "celerybeat-schedule")
    return {
        "worker": [*celery, "worker", "-l", "info", "-c", str(concurrency), "-n", "worker@%h"],
        "beat": [*celery, "beat", "-l", "warning", "-s", schedule],
        "web": [sys.executable, "manage.py", "runserver", addr],
    }
