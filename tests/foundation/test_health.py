"""GET /healthz: database with versions, Redis, live workers; 503 when a service is down."""

import tempfile
from pathlib import Path

import pytest

from rag_project import embedded
from tests.conftest import wait_until


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


@pytest.mark.django_db
def test_healthz_reports_database_pgvector_and_redis(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert version_tuple(body["database"]["postgresql"]) >= (16, 0)
    assert version_tuple(body["database"]["pgvector"]) >= (0, 8)
    assert body["redis"]["ok"] is True
    assert "workers" in body["celery"]


@pytest.mark.slow
def test_healthz_counts_a_live_celery_worker(client, celery_worker_process):
    def counted() -> dict | None:
        body = client.get("/healthz").json()
        return body if body["celery"]["workers"] >= 1 else None

    # healthz gives workers 1 s to answer its ping; a worker starved of CPU on a loaded machine
    # can miss one and answer the next.
    body = wait_until(counted, "healthz to count the running worker")
    assert body["celery"]["ok"] is True


@pytest.mark.django_db
def test_healthz_answers_503_when_redis_is_stopped(client, settings):
    root = Path(tempfile.mkdtemp(prefix="rag-health-"))
    try:
        embedded.ensure_redis(root)
        settings.REDIS_URL = embedded.redis_url(root)
        assert client.get("/healthz").status_code == 200

        embedded.stop_redis(root)
        response = client.get("/healthz")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "unavailable"
        assert body["redis"]["ok"] is False
        assert "error" in body["redis"]
        assert body["database"]["ok"] is True
    finally:
        embedded.stop_all(root)


def test_healthz_refuses_other_methods(client):
    assert client.post("/healthz").status_code == 405
