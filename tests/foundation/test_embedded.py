"""Embedded PostgreSQL and Redis: started once, shared by every process, stopped on request."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
import redis

from rag_project import embedded
from tests.conftest import CEILING_S, REPO, subprocess_env, wait_until

PROBE = """
import json, sys
from pathlib import Path
from rag_project import embedded
root = Path(sys.argv[1])
pg = embedded.ensure_postgres(root)
redis_pid = embedded.ensure_redis(root)
import psycopg, redis
with psycopg.connect(pg.url()) as conn:
    backend = conn.execute("select pg_backend_pid()").fetchone()[0]
client = redis.Redis.from_url(embedded.redis_url(root))
client.incr("probes")
print(json.dumps({"pg_pid": pg.pid, "redis_pid": redis_pid, "backend": backend}))
"""


@pytest.fixture
def fresh_root():
    # A short path under /tmp: Unix socket paths are limited to about 100 characters.
    root = Path(tempfile.mkdtemp(prefix="rag-emb-"))
    yield root
    embedded.stop_all(root)


def postmasters(root: Path) -> list[psutil.Process]:
    """Postgres processes serving ``root``'s data whose parent is not itself a postgres."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] != "postgres" or str(root / "pg") not in cmdline:
            continue
        parent = proc.parent()
        if parent is None or parent.name() != "postgres":
            found.append(proc)
    return found


@pytest.mark.slow
def test_two_processes_started_at_once_share_one_postgres_and_one_redis(fresh_root):
    env = subprocess_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE, str(fresh_root)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=CEILING_S)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    assert results[0]["pg_pid"] == results[1]["pg_pid"]
    assert results[0]["redis_pid"] == results[1]["redis_pid"]
    assert results[0]["backend"] != results[1]["backend"]  # two sessions on one server
    assert len(postmasters(fresh_root)) == 1
    import redis

    assert int(redis.Redis.from_url(embedded.redis_url(fresh_root)).get("probes")) == 2

    # A third process reuses the running servers instead of starting new ones.
    assert embedded.ensure_postgres(fresh_root).pid == results[0]["pg_pid"]
    assert embedded.ensure_redis(fresh_root) == results[0]["redis_pid"]


@pytest.mark.slow
def test_stopped_services_are_started_again_and_keep_their_data(fresh_root):
    import psycopg

    pg = embedded.ensure_postgres(fresh_root)
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute("create table kept (v int)")
        conn.execute("insert into kept values (42)")
    embedded.ensure_redis(fresh_root)

    embedded.stop_all(fresh_root)
    assert embedded.status(fresh_root)["postgres"] is None
    assert embedded.status(fresh_root)["redis"] is None

    pg2 = embedded.ensure_postgres(fresh_root)
    assert pg2.pid != pg.pid
    with psycopg.connect(pg2.url()) as conn:
        assert conn.execute("select v from kept").fetchone() == (42,)


def test_celery_broker_url_speaks_kombu_socket_syntax():
    assert (
        embedded.celery_broker_url("unix:///var/x/redis.sock?db=3")
        == "redis+socket:///var/x/redis.sock?virtual_host=3"
    )
    assert embedded.celery_broker_url("redis://cache:6379/1") == "redis://cache:6379/1"


def test_socket_path_stays_short_for_deep_data_dirs():
    deep = Path("/tmp") / ("d" * 120)
    assert len(str(embedded.redis_socket_path(deep))) <= 100


HOLD = """
import sys, redis
client = redis.Redis(unix_socket_path=sys.argv[1])
client.ping()
print("connected", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_redis_clients_counts_other_processes_connections_not_this_ones(fresh_root):
    embedded.ensure_redis(fresh_root)
    assert embedded.redis_clients(fresh_root) == 0
    own = redis.Redis(unix_socket_path=str(embedded.redis_socket_path(fresh_root)))
    own.ping()
    assert embedded.redis_clients(fresh_root) == 0  # this process's: not another's

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(embedded.redis_socket_path(fresh_root))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "connected\n"
        assert embedded.redis_clients(fresh_root) == 1
    finally:
        holder.stdin.close()
        holder.wait(timeout=CEILING_S)
    wait_until(lambda: embedded.redis_clients(fresh_root) == 0, "the server to see it gone")
    own.close()
    assert embedded.redis_clients(fresh_root.parent / "nothing-runs-here") == 0
