"""Shared fixtures: real services only (embedded PostgreSQL and Redis, real Celery workers)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# Hypothesis times examples by default: 200 ms each (a "deadline") and a health check that
# fails when generating data is "too slow". Both fail correct code on a loaded machine; the
# properties tested here are about answers, not speed.
hypothesis_settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("suite")

REPO = Path(__file__).resolve().parent.parent
API = "/api/v1"
_key_names = itertools.count()
# How long a test waits for something that must happen (a worker to answer, an upload to be
# processed, a server or a subprocess to finish) before calling it broken. Generous on purpose:
# on a loaded machine things are slow, not broken, and a healthy run never gets near it. Tests
# wait on the condition itself, never for a fixed time.
CEILING_S = 300.0


def wait_until(condition, what: str, timeout: float = CEILING_S, interval: float = 0.1):
    """Poll ``condition()`` until it returns something true and return that; fail naming
    ``what`` once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def other_backends() -> list[int]:
    """Pids of the test database's client backends other than this connection's (a worker's,
    another process's)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


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
        thread.join(timeout=CEILING_S)
    if errors:
        raise errors[0]
    if len(results) != count:  # explicit: helpers must check under python -O as well
        raise AssertionError(f"{count - len(results)} threads did not finish in {CEILING_S:g} s")
    return results


def bearer(raw_key: str):
    """An API client sending ``raw_key`` as its Bearer token."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def signed_in(user, tenant_slug: str | None = None):
    """An API client of a signed-in session user, naming ``tenant_slug`` in X-Tenant if given."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user=user)
    if tenant_slug:
        client.credentials(HTTP_X_TENANT=tenant_slug)
    return client


def error_of(response) -> dict:
    """The error body, checked to have the one error shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


@pytest.fixture
def make_key():
    """``make_key(tenant, scopes=("read", "write"), kbs=())`` -> the raw key."""
    from tenancy.services import create_api_key

    def make(tenant, scopes=("read", "write"), kbs=(), name=None) -> str:
        _, raw = create_api_key(
            tenant=tenant,
            name=name or f"key {next(_key_names)}",
            scopes=scopes,
            knowledge_bases=kbs,
        )
        return raw

    return make


@pytest.fixture
def member():
    """``member(tenant, role)`` -> a user with that role in the tenant."""
    from tenancy.models import Membership
    from tests.factories import MembershipFactory, UserFactory

    def make(tenant, role=Membership.Role.OWNER):
        return MembershipFactory(tenant=tenant, role=role, user=UserFactory()).user

    return make


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
    # Vector host files of an earlier run (this worker's own directory) go too.
    import shutil

    shutil.rmtree(settings.VECTOR_HOST_DIR, ignore_errors=True)


class WorkerProcess:
    """A real Celery worker process on this test process's queue, Redis db and test database."""

    def __init__(self, queue: str, database: str, env: dict[str, str]) -> None:
        self.queue, self.database, self.env = queue, database, env
        self.proc: subprocess.Popen | None = None
        self.name = ""

    def start(self, timeout: float = CEILING_S) -> WorkerProcess:
        """Start the worker and return once it answers a ping. Starting takes seconds on an
        idle machine and much longer on a loaded one; only a worker that died or never answers
        within the ceiling fails the test."""
        from rag_project.celery import app

        # This worker's own name: the ping below must be answered by it, not by another worker
        # (one still stopping, or another test's) on the same broker.
        self.name = f"test-{os.getpid()}-{time.monotonic_ns()}@tests"

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
                self.name,
            ],
            cwd=REPO,
            env=env,
        )

        def answered() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.proc.returncode}")
            return bool(app.control.ping(destination=[self.name], timeout=1.0))

        wait_until(answered, f"celery worker {self.name} to answer a ping", timeout)
        return self

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
