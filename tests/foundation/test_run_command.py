"""``make run``'s command (manage.py run): Ctrl-C stops everything it started, embedded services
included, even Redis, which Django's own start-up starts before the command runs."""

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from rag_project import embedded
from tests.conftest import CEILING_S, REPO, subprocess_env, wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_ctrl_c_stops_the_web_server_worker_and_the_services_it_started():
    root = Path(tempfile.mkdtemp(prefix="rag-run-"))  # short: Unix socket paths are limited
    port = free_port()
    env = subprocess_env(
        RAG_DATA_DIR=str(root), DJANGO_SETTINGS_MODULE="rag_project.settings.development"
    )
    for name in ("DATABASE_URL", "REDIS_URL", "TEST_REDIS_URL", "RAG_TEST_DB_NAME"):
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
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=CEILING_S)
        assert proc.returncode == 0, output
        assert "stopped embedded postgres" in output and "stopped embedded redis" in output
        stopped = embedded.status(root)
        assert stopped["postgres"] is None and stopped["redis"] is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        embedded.stop_all(root)
        shutil.rmtree(root, ignore_errors=True)
