"""``python manage.py run``: everything `make run` serves, in one foreground command.

Starts (or reuses) the embedded services, migrates, loads the demo knowledge base, then runs the
web server and a Celery worker + beat beside it. Ctrl-C stops what this command started: the
web server, the worker, beat, and the embedded services if they were not running before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from rag_project import embedded


class Command(BaseCommand):
    help = "Serve the site with a Celery worker and beat beside it (what `make run` does)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default=os.environ.get("RAG_ADDR", "127.0.0.1:8000"))
        parser.add_argument("--no-demo", action="store_true", help="skip loading the demo data")
        parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes")

    def handle(self, *args, addr: str, no_demo: bool, concurrency: int, **options) -> None:
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

        python = sys.executable
        children = {
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "rag_project",
                "worker",
                "-l",
                "info",
                "-c",
                str(concurrency),
                "-n",
                "worker@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "rag_project",
                "beat",
                "-l",
                "warning",
                "-s",
                str(settings.RAG_DATA_DIR / "celerybeat-schedule"),
            ],
            "web": [python, "manage.py", "runserver", addr],
        }
        procs: dict[str, subprocess.Popen] = {}
        stop_requested: list[int] = []

        def request_stop(signum: int, frame) -> None:
            # Ctrl-C reaches the children too (same process group); a flag, not an exception,
            # so a child exiting from that same Ctrl-C is not mistaken for a crash.
            stop_requested.append(signum)

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        failure = None
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
                for name, proc in procs.items():
                    if proc.poll() is not None and not stop_requested:
                        failure = f"{name} exited with code {proc.returncode}"
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup
            self._stop_children(procs)
            for service in reversed(embedded_started):
                try:
                    getattr(embedded, f"stop_{service}")(settings.RAG_DATA_DIR)
                    self.stdout.write(f"stopped embedded {service}")
                except RuntimeError as exc:
                    self.stderr.write(str(exc))
        if failure:
            raise CommandError(f"{failure}; everything else was stopped")
        self.stdout.write("stopped")

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
