"""Where a benchmark's CPU goes: CPU seconds used by each part of the deployment on this host.

On a machine the benchmark shares with the server (2 cores here), latency under load is the
CPU a request costs across every process it touches: the web workers, PostgreSQL, Redis, the
Celery worker doing the background work, and the benchmark's own clients. ``CpuClock`` reads
each part's cumulative CPU time, so two readings give the cores each part used in between and,
with the requests counted, the CPU a request cost (``bench churn``'s ``cpu_cores`` and
``web_cpu_ms_per_search``). ``machine_gauge_ms`` says how fast the machine itself runs Python
at the time, which on a shared host moves the same code's figures as much as a code change.

Sources: ``/proc/<pid>/stat`` (user + system time) for local processes; a process's children
are counted too where they come and go (PostgreSQL's backends: the live ones, plus what the
postmaster has collected from those that exited). Redis reports its own (``INFO cpu``), so it
is counted wherever it runs. A part this host cannot see (a remote PostgreSQL) reads None.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import redis

_TICKS = os.sysconf("SC_CLK_TCK")
GAUGE_REPEATS = 5


def machine_gauge_ms(repeats: int = GAUGE_REPEATS) -> float:
    """How fast this machine runs Python right now: the CPU time (ms, the least of ``repeats``)
    of a fixed piece of pure-Python work shaped like a request's (dicts, small objects, method
    calls, JSON, string splitting). The same code's figures follow it: a shared machine's speed
    moves within minutes, and the CPU a search costs moves with it (docs/performance.md).
    ``bench churn`` reports it before and after its run, so runs are compared on like machines.
    CPU time, not
    wall time: waiting for a core does not count, a slower core does."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        _gauge_work()
        best = min(best, time.thread_time() - start)
    return round(best * 1000, 2)


class _Item:
    def __init__(self, value: int) -> None:
        self.value = value

    def next(self) -> int:
        return self.value + 1


def _gauge_work() -> int:
    """The gauge's fixed work; returns a checksum of it (the same on every call)."""
    table = {str(i): [i, i * 2, {"a": i}] for i in range(20_000)}
    decoded = json.loads(json.dumps(table))
    total = sum(_Item(i).next() for i in range(100_000))
    words = ("hello world " * 2_000).split()
    return len(decoded) + total + len(words)


def process_seconds(pid: int, children: bool = False) -> float | None:
    """CPU seconds of ``pid`` (None if it is gone or not on this host); with ``children``,
    also its children that have exited (collected by it) and those still running."""
    fields = _stat(pid)
    if fields is None:
        return None
    seconds = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    if children:
        seconds += (int(fields[13]) + int(fields[14])) / _TICKS  # cutime, cstime
        for child in _children(pid):
            seconds += process_seconds(child) or 0.0
    return seconds


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:  # ppid
                found.append(int(entry.name))
    return found


def postgres_server_pid(connection) -> int | None:
    """The PostgreSQL server's (postmaster's) pid, when it runs on this host: the parent of
    this connection's backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    fields = _stat(backend)
    try:  # a local process of that number could be anything when the server is remote
        ours = Path(f"/proc/{backend}/comm").read_text().startswith("postgres")
    except OSError:
        ours = False
    return int(fields[1]) if fields is not None and ours else None


def redis_seconds(client) -> float | None:
    try:
        info = client.info("cpu")
    except redis.RedisError:  # no Redis, no figure
        return None
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class CpuClock:
    """``read()``: CPU seconds so far of each named part; ``cores(before, after, seconds)``:
    the cores each used in between (None where a part could not be read)."""

    def __init__(self, parts: dict[str, Callable[[], float | None]]) -> None:
        self.parts = parts

    @classmethod
    def of_processes(
        cls,
        web: Iterable[int],
        worker: Iterable[int] = (),
        database: int | None = None,
        clients: int | None = None,
        writer: int | None = None,
        redis_client=None,
    ) -> CpuClock:
        web, worker = list(web), list(worker)
        parts: dict[str, Callable[[], float | None]] = {"web": lambda: _sum(web)}
        if worker:
            parts["worker"] = lambda: _sum(worker, children=True)
        if database is not None:
            parts["database"] = lambda: process_seconds(database, children=True)
        if clients is not None:
            parts["clients"] = lambda: process_seconds(clients)
        if writer is not None:
            parts["writer"] = lambda: process_seconds(writer)
        if redis_client is not None:
            parts["redis"] = lambda: redis_seconds(redis_client)
        return cls(parts)

    def read(self) -> dict[str, float | None]:
        return {name: read() for name, read in self.parts.items()}

    @staticmethod
    def cores(
        before: dict[str, float | None], after: dict[str, float | None], seconds: float
    ) -> dict[str, float | None]:
        return {
            name: (
                round((after[name] - start) / seconds, 3)
                if start is not None and after.get(name) is not None and seconds > 0
                else None
            )
            for name, start in before.items()
        }


def _sum(pids: list[int], children: bool = False) -> float | None:
    values = [process_seconds(pid, children) for pid in pids]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def wait_until_idle(
    read: Callable[[], float | None],
    below_cores: float = 0.05,
    window_s: float = 1.0,
    ceiling_s: float = 180.0,
) -> float:
    """Wait until a part uses less than ``below_cores`` over ``window_s`` (a process that just
    started, done warming up); the seconds waited. A ceiling, not an expectation: a part that
    stays busy (or cannot be read) is waited for no longer than ``ceiling_s``."""
    started = time.monotonic()
    before = read()
    while before is not None and time.monotonic() - started < ceiling_s:
        time.sleep(window_s)  # the window the CPU use is measured over, not a wait for luck
        after = read()
        if after is None or after - before < below_cores * window_s:
            break
        before = after
    return round(time.monotonic() - started, 1)
