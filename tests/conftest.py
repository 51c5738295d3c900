"""Shared fixtures: real services only (embedded PostgreSQL and Redis, real Celery workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child process that must see the same services as this test process."""
    env = dict(os.environ)
    env.setdefault("PYTEST_XDIST_WORKER", "gw0")
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def at_once(count: int, fn) -> list:
    """Call ``fn()`` in ``count`` threads released together; their results (any order). Each
    thread closes its own database connection; an exception in any thread fails the caller."""
    import threading

    from django.db import connection

    barrier = threading.Barrier(count)
    results, errors = [], []

    def run() -> None:
        try:
            barrier.wait()
            results.append(fn())
        except Exception as exc:  # re-raised below; a thread must not die silently
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    assert len(results) == count, "a thread did not finish within 60 s"
    return results


@pytest.fixture
def tenant():
    from tests.factories import TenantFactory

    return TenantFactory()


@pytest.fixture
def other_tenant():
    from tests.factories import TenantFactory

    return TenantFactory()


@pytest.fixture(scope="session", autouse=True)
def _fresh_test_redis(django_db_setup) -> None:
    """Start every session with an empty Redis database of this test process's own (cached
    query embeddings, BM25 payloads and queued tasks of an earlier run would otherwise leak
    in). Only the embedded server or an explicit TEST_REDIS_URL is ever flushed."""
    import redis
    from django.conf import settings

    if settings.REDIS_EMBEDDED or os.environ.get("TEST_REDIS_URL"):
        redis.Redis.from_url(settings.REDIS_URL).flushdb()


class WorkerProcess:
    """A real Celery worker process on this test process's queue, Redis db and test database."""

    def __init__(self, queue: str, database: str, env: dict[str, str]) -> None:
        self.queue, self.database, self.env = queue, database, env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> WorkerProcess:
        from rag_project.celery import app

        env = subprocess_env(
            DJANGO_SETTINGS_MODULE="rag_project.settings.test",
            RAG_TEST_DB_NAME=self.database,
            **self.env,
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "rag_project",
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "warning",
                "-Q",
                self.queue,
                "-n",
                f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
            ],
            cwd=REPO,
            env=env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.proc.returncode}")
            if app.control.ping(timeout=1.0):
                return self
        raise RuntimeError(f"celery worker did not answer a ping within {timeout:g} s")

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-task without any chance to clean up."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def worker_factory(transactional_db, settings) -> Iterator:
    """Start real Celery workers: ``worker_factory(**env).start()``. Tests using it commit their
    data (transactional_db), because a worker reads through its own connection."""
    from django.db import connection

    workers: list[WorkerProcess] = []

    def make(**env: str) -> WorkerProcess:
        worker = WorkerProcess(
            settings.CELERY_TASK_DEFAULT_QUEUE, connection.settings_dict["NAME"], env
        )
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()


@pytest.fixture
def celery_worker_process(worker_factory) -> WorkerProcess:
    return worker_factory().start()
