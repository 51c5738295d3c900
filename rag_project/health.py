"""``GET /healthz``: is this deployment able to serve? Database, pgvector, Redis, workers.

Answers 200 when PostgreSQL and Redis both answer, 503 otherwise. Anyone may ask, so an answer
costs next to nothing: the checks run at most once per ``RAG_HEALTH_INTERVAL_S`` in each
process (``_Probe``: callers meanwhile, concurrent ones included, share the last result, and
callers arriving while a check runs wait for it rather than run their own), and an anonymous
caller is told only ``status`` and this process's ``warm.state``, what a load balancer acts on.

The full report (each part's state and failure, PostgreSQL, pgvector and Redis versions, live
Celery workers, the whole warm-up, ``heap``, ``checked_at``) goes to a signed-in staff user, or
to anyone with ``RAG_HEALTH_DETAILS=public`` (the development profile's default). Not to API
keys: they are tenants', and the deployment's versions and workers are its operators' business.
Workers are counted by a broadcast ping that waits a second, run only for the full report (at
most once per interval too); they do not decide the status: searches work without a worker,
only ingestion waits for one.

``warm`` is this process's warm-up (``rag_project.lifecycle``): ``warming``, ``warm``,
``failed`` or ``off``; it does not decide the status either (a search during warm-up is
answered, no slower than a cold one), but a deployment that wants first searches fast can wait
for ``warm`` before routing traffic. ``heap`` says how this process's long-lived objects are
kept out of full garbage collections (``rag_project.heap``) and how long its full collections
last. Both are this process's own and read afresh on every call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from rag_project import heap
from rag_project.celery import app
from rag_project.lifecycle import WARM

# A solo or busy worker reads control messages about once a second; a shorter wait misses it.
WORKER_PING_TIMEOUT_S = 1.0


def _check_database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {"ok": True, "postgresql": version, "pgvector": row[0] if row else None}


def _check_redis() -> dict:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        info = client.info("server")
    finally:
        client.close()
    return {"ok": True, "version": info.get("redis_version")}


def _count_workers() -> dict:
    try:
        replies = app.control.ping(timeout=WORKER_PING_TIMEOUT_S) or []
    except redis.ConnectionError:
        # The pooled broker connection died with a restarted Redis; one fresh attempt.
        replies = app.control.ping(timeout=WORKER_PING_TIMEOUT_S) or []
    return {"ok": bool(replies), "workers": len(replies)}


def _run(check) -> dict:
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:  # a health check reports any failure instead of raising it
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def _services() -> tuple[str, str]:
    """What a probe's answer is about: a process asking other servers (a test pointing
    ``REDIS_URL`` elsewhere) probes afresh rather than reuse an answer about the old ones."""
    return settings.REDIS_URL, str(connection.settings_dict.get("NAME"))


class _Probe:
    """The last result of ``check`` in this process, run again once it is older than
    ``RAG_HEALTH_INTERVAL_S``; one run at a time, and callers that waited for it take its
    result."""

    def __init__(self, check: Callable[[], dict]) -> None:
        self._check = check
        self._lock = threading.Lock()
        self._last: tuple[tuple[str, str], float, dict] | None = None  # services, when, result

    def _fresh(self, services: tuple[str, str]) -> dict | None:
        last = self._last
        if last is None or last[0] != services:
            return None
        if time.monotonic() - last[1] >= settings.RAG_HEALTH_INTERVAL_S:
            return None
        return last[2]

    def result(self) -> dict:
        services = _services()
        found = self._fresh(services)
        if found is not None:
            return found
        with self._lock:
            found = self._fresh(services)  # run by the caller this one waited for
            if found is None:
                found = self._check()
                self._last = (services, time.monotonic(), found)
            return found


def _core() -> dict:
    return {
        "database": _run(_check_database),
        "redis": _run(_check_redis),
        "checked_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }


def _workers() -> dict:
    return _run(_count_workers)


CORE = _Probe(_core)
WORKERS = _Probe(_workers)


def _details_for(request: HttpRequest) -> bool:
    if settings.RAG_HEALTH_DETAILS == "public":
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    core = CORE.result()
    healthy = core["database"]["ok"] and core["redis"]["ok"]
    status = 200 if healthy else 503
    body: dict = {"status": "ok" if healthy else "unavailable"}
    if not _details_for(request):
        body["warm"] = {"state": WARM.as_dict()["state"]}
        return JsonResponse(body, status=status)
    celery = WORKERS.result() if core["redis"]["ok"] else {"ok": False, "workers": 0}
    body.update(
        database=core["database"],
        redis=core["redis"],
        celery=celery,
        warm=WARM.as_dict(),
        heap=heap.stats(),
        checked_at=core["checked_at"],
    )
    return JsonResponse(body, status=status)
