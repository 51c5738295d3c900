"""``GET /healthz``: is this deployment able to serve? Database, pgvector, Redis, workers.

Answers 200 when PostgreSQL and Redis both answer, 503 otherwise; the body says which part
failed and why. Live Celery workers are counted (a broadcast ping) but do not decide the status:
searches work without a worker, only ingestion waits for one. ``warm`` is this process's
warm-up (``rag_project.lifecycle``): ``warming``, ``warm``, ``failed`` or ``off``; it does not
decide the status either (a search during warm-up is answered, no slower than a cold one), but
a deployment that wants first searches fast can wait for ``warm`` before routing traffic.
``heap`` says how this process's long-lived objects are kept out of full garbage collections
(``rag_project.heap``) and how long its full collections took.
"""

import time

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from rag_project import heap
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
    from rag_project.celery import app

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


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    database = _run(_check_database)
    redis_state = _run(_check_redis)
    celery = _run(_count_workers) if redis_state["ok"] else {"ok": False, "workers": 0}
    healthy = database["ok"] and redis_state["ok"]
    body = {
        "status": "ok" if healthy else "unavailable",
        "database": database,
        "redis": redis_state,
        "celery": celery,
        "warm": WARM.as_dict(),
        "heap": heap.stats(),
    }
    return JsonResponse(body, status=200 if healthy else 503)
