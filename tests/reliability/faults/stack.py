"""A private deployment for fault tests: its own embedded PostgreSQL and Redis under a fresh
``RAG_DATA_DIR`` in /tmp, a gunicorn web server and Celery workers pointed at them through the
environment, exactly as a real deployment runs them. A test may stop and start any part of it;
the shared embedded services other tests use are never touched."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from rag_project import embedded

REPO = Path(__file__).resolve().parents[3]

SETUP = """
import json
from knowledge.embeddings import EmbeddingConfig
from tenancy.services import create_api_key
from knowledge.services.knowledge_bases import create_knowledge_base
from tenancy.services import get_or_create_tenant

tenant = get_or_create_tenant("Reliability")
kb = create_knowledge_base(
    tenant=tenant, name="KB", embedding=EmbeddingConfig(**EMBEDDING), chunk_size=CHUNK_SIZE,
    chunk_overlap=0,
)
_, key = create_api_key(tenant=tenant, name="rel", scopes=["read", "write"])
print("RESULT " + json.dumps({"tenant": tenant.pk, "kb": kb.pk, "key": key}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable, timeout: float = 60.0, interval: float = 0.2, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = predicate()
            if value:
                return value
        time.sleep(interval)
    raise AssertionError(f"{what or 'condition'} not met within {timeout:g} s")


class Stack:
    """``with Stack(**env) as stack:`` services, migrations, a tenant, a KB and an API key."""

    def __init__(self, embedding: dict | None = None, chunk_size: int = 400, **env: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rag-rel-"))
        self.embedding = embedding or {"provider": "hash", "dimensions": 32}
        self.chunk_size = chunk_size
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_"))},
            "PYTHONPATH": str(REPO),
            "DJANGO_SETTINGS_MODULE": "rag_project.settings.development",
            "DEBUG": "false",
            "RAG_DATA_DIR": str(self.root),
            "EMBEDDING_PROVIDER": "hash",
            "LOG_LEVEL": "WARNING",
            "API_THROTTLE_RATE": "100000/min",
            "RAG_CALIBRATION_DELAY_S": "3600",
            **env,
        }
        for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "RAG_TEST_DB_NAME"):
            self.env.pop(name, None)
        self.port = free_port()
        self.web: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.logs: list = []
        self.tenant = self.kb = self.key = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Stack:
        try:
            self.start_postgres()
            self.start_redis()
            self.manage("migrate", "--no-input", timeout=300)
            info = self.shell(
                SETUP.replace("EMBEDDING", repr(self.embedding)).replace(
                    "CHUNK_SIZE", str(self.chunk_size)
                )
            )
            self.tenant, self.kb, self.key = info["tenant"], info["kb"], info["key"]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for proc in [self.web, *self.workers]:
            self._stop(proc)
        with contextlib.suppress(Exception):
            embedded.stop_all(self.root)
        for handle in self.logs:
            handle.close()
        if os.environ.get("RAG_KEEP_RELIABILITY_DIRS"):
            print(f"kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(embedded.redis_socket_path(self.root).parent, ignore_errors=True)

    @staticmethod
    def _stop(proc: subprocess.Popen | None, timeout: float = 20) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ------------------------------------------------------------------ services

    def start_postgres(self) -> None:
        embedded.ensure_postgres(self.root)

    def stop_postgres(self) -> None:
        assert embedded.stop_postgres(self.root)

    def start_redis(self) -> None:
        embedded.ensure_redis(self.root)

    def stop_redis(self) -> None:
        assert embedded.stop_redis(self.root)

    def redis_up(self) -> bool:
        return embedded.redis_status(self.root) is not None

    # ------------------------------------------------------------------ processes

    def _log(self, name: str):
        handle = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (closed in close())
        self.logs.append(handle)
        return handle

    def log_text(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def manage(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def shell(self, code: str, timeout: float = 120) -> dict:
        """Run Python in a Django process of this deployment; it prints ``RESULT <json>``."""
        out = self.manage("shell", "-c", textwrap.dedent(code), timeout=timeout)
        line = next(line for line in out.splitlines() if line.startswith("RESULT "))
        return json.loads(line[len("RESULT ") :])

    def start_web(self, workers: int = 2, threads: int = 8) -> None:
        self.web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "rag_project.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--timeout",
                "120",
                "--graceful-timeout",
                "5",
            ],
            cwd=REPO,
            env=self.env,
            stdout=self._log("web"),
            stderr=subprocess.STDOUT,
        )
        wait_for(
            lambda: httpx.get(f"{self.url}/api/v1/schema/", timeout=5).status_code == 200,
            timeout=90,
            what="web server",
        )

    def start_worker(self, beat: bool = False) -> subprocess.Popen:
        args = [sys.executable, "-m", "celery", "-A", "rag_project", "worker", "--pool=solo"]
        args += ["--without-gossip", "--without-mingle", "-l", "warning"]
        args += ["-n", f"rel-{len(self.workers)}-{time.monotonic_ns()}@%h"]
        if beat:
            args += ["-B", "-s", str(self.root / "celerybeat-schedule")]
        proc = subprocess.Popen(
            args, cwd=REPO, env=self.env, stdout=self._log("worker"), stderr=subprocess.STDOUT
        )
        self.workers.append(proc)
        return proc

    def kill_worker(self, proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()

    # ------------------------------------------------------------------ API

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=timeout,
        )

    def document(self, client: httpx.Client, document_id: int) -> dict:
        return client.get(f"/documents/{document_id}").raise_for_status().json()

    def wait_final(self, client: httpx.Client, document_id: int, timeout: float = 90) -> dict:
        return wait_for(
            lambda: (
                (d := self.document(client, document_id))["status"] in ("ready", "failed") and d
            ),
            timeout=timeout,
            what=f"document {document_id} final",
        )
