"""A Celery worker yields the CPU to the web processes it shares a host with, and so does the
PostgreSQL backend that runs its queries.

``WORKER_NICE`` lowers the worker's own priority (``rag_project.celery``). Half of a change's
work is not in the worker, though: its transaction, the delta's reads and the merges' writes
run in the PostgreSQL backend serving the worker's connection, at the server's priority. On a
host that runs PostgreSQL beside the web processes (the embedded server, or a server reached
by a local socket) the worker lowers that backend's priority too, by the same steps, once per
connection (``lower_backend``).

Linux's scheduler groups processes by session when ``/proc/sys/kernel/sched_autogroup_enabled``
is 1 (most desktop and cloud images): ``nice`` then orders processes within a group only.
PostgreSQL makes every backend a session leader, so each backend is a group of its own and
weighs as much as the whole session of the web processes; there the backend's group is
lowered instead (``/proc/<pid>/autogroup``), which moves no other process. Under systemd or
in a container, cgroups share the CPU between services and this changes nothing that matters.

Nothing is done when the server is elsewhere (the pid it reports is not a process of this
host), when the pid is not a ``postgres`` process, or when the operating system refuses (a
server run by another user, without the privilege): the worker then runs as before.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}
_AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def lower_own(steps: int) -> None:
    """This process (and the children it forks from now on) ``steps`` nice steps lower."""
    if steps > 0:
        os.nice(min(steps, 19))


def server_is_local(settings_dict: dict) -> bool:
    """Whether a connection with these Django settings reaches a server on this host: the
    embedded one, a Unix socket, or a loopback address."""
    if settings_dict.get("ENGINE", "").endswith("embedded_postgresql"):
        return True
    host = str(settings_dict.get("HOST") or "")
    return host.startswith("/") or host in _LOCAL_HOSTS


def lower_backend(connection, steps: int) -> int | None:
    """Lower the CPU priority of the PostgreSQL backend serving ``connection`` (a Django
    connection, open) by ``steps`` nice steps, when it runs on this host. Returns the backend's
    pid when it was lowered, else None (said why at debug level)."""
    if steps <= 0 or connection.vendor != "postgresql":
        return None
    if not server_is_local(connection.settings_dict):
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    proc = Path(f"/proc/{pid}")
    try:
        if proc.joinpath("comm").read_text().strip() != "postgres":
            logger.debug("process %s is not a postgres backend; priority left alone", pid)
            return None
        os.setpriority(os.PRIO_PROCESS, pid, min(os.getpriority(os.PRIO_PROCESS, pid) + steps, 19))
        if autogroups_on():
            _lower_own_autogroup(proc, min(steps, 19))
    except OSError as exc:  # gone, or another user's without the privilege to lower it
        logger.debug("could not lower backend %s's priority: %s", pid, exc)
        return None
    return pid


def autogroups_on() -> bool:
    """Whether Linux groups processes by session for scheduling (``sched_autogroup_enabled``)."""
    try:
        return _AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False


def _lower_own_autogroup(proc: Path, steps: int) -> None:
    """Lower the backend's scheduling group when it is its own: never the postmaster's, which
    every backend that is not a session leader shares."""
    group = proc.joinpath("autogroup").read_text().split()[0]
    parent = proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1]
    if Path(f"/proc/{parent}/autogroup").read_text().split()[0] == group:
        return
    proc.joinpath("autogroup").write_text(str(steps))
