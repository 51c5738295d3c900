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


@pytest.fixture
def celery_worker_process(transactional_db, settings) -> Iterator[subprocess.Popen]:
    """A real Celery worker process on this test process's queue, Redis db and test database.

    Tests using it commit their data (transactional_db), because the worker reads the database
    through its own connection.
    """
    from django.db import connection

    from rag_project.celery import app

    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="rag_project.settings.test",
        RAG_TEST_DB_NAME=connection.settings_dict["NAME"],
    )
    proc = subprocess.Popen(
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
            settings.CELERY_TASK_DEFAULT_QUEUE,
            "-n",
            f"test-{os.getpid()}@%h",
        ],
        cwd=REPO,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if app.control.ping(timeout=1.0):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {proc.returncode}")
        else:
            raise RuntimeError("celery worker did not answer a ping within 60 s")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
