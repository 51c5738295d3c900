"""GET /healthz: cheap for anyone (checks run at most once per interval per process, shared by
concurrent callers), status and warm state only to anonymous callers; database with versions,
Redis, live workers for staff or with RAG_HEALTH_DETAILS=public; 503 when a service is down."""

import shutil
import tempfile
from pathlib import Path

import pytest
import redis
from django.test import Client

from rag_project import embedded
from tests.conftest import at_once, bearer, wait_until
from tests.factories import TenantFactory, UserFactory

FULL = {"status", "database", "redis", "celery", "warm", "heap", "checked_at"}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


@pytest.fixture
def staff(db):
    """A client signed in as a staff user (the Django admin's operators)."""
    signed_in = Client()
    signed_in.force_login(UserFactory(is_staff=True))
    return signed_in


def summary(response) -> dict:
    """The anonymous answer: the status and this process's warm-up state, nothing else."""
    body = response.json()
    assert set(body) == {"status", "warm"} and set(body["warm"]) == {"state"}, body
    return body


class PrivateRedis:
    """A Redis of a test's own, as the health check's: nobody else sends it a command, so its
    command counts are the health check's."""

    def __init__(self, root: Path) -> None:
        self.root, self.reads = root, 0

    def probes(self) -> int:
        """How many times the health check has asked this Redis for its version (INFO): the
        server's count of INFO calls, less this method's own earlier ones."""
        stats = redis.Redis.from_url(embedded.redis_url(self.root)).info("commandstats")
        calls = stats.get("cmdstat_info", {}).get("calls", 0) - self.reads
        self.reads += 1
        return calls


@pytest.fixture
def private_redis(settings):
    root = Path(tempfile.mkdtemp(prefix="rag-health-"))
    embedded.ensure_redis(root)
    settings.REDIS_URL = embedded.redis_url(root)
    yield PrivateRedis(root)
    embedded.stop_all(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.django_db
def test_an_anonymous_caller_gets_the_status_and_warm_state_only(client, settings, make_key):
    settings.RAG_HEALTH_DETAILS = "staff"
    response = client.get("/healthz")
    assert response.status_code == 200
    assert summary(response)["status"] == "ok"
    # An API key is a tenant's: the deployment's details are not.
    keyed = bearer(make_key(TenantFactory())).get("/healthz")
    assert summary(keyed)["status"] == "ok"


@pytest.mark.django_db
def test_staff_get_database_pgvector_redis_and_workers(staff, settings):
    settings.RAG_HEALTH_DETAILS = "staff"
    response = staff.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == FULL
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert version_tuple(body["database"]["postgresql"]) >= (16, 0)
    assert version_tuple(body["database"]["pgvector"]) >= (0, 8)
    assert body["redis"]["ok"] is True
    assert "workers" in body["celery"]


@pytest.mark.django_db
def test_public_details_give_everyone_the_full_report(client, settings):
    settings.RAG_HEALTH_DETAILS = "public"
    assert set(client.get("/healthz").json()) == FULL


@pytest.mark.django_db
def test_the_checks_run_once_per_interval(client, staff, settings, private_redis):
    settings.RAG_HEALTH_INTERVAL_S = 3600
    first = staff.get("/healthz").json()
    assert private_redis.probes() == 1
    assert [Client().get("/healthz").status_code for _ in range(20)] == [200] * 20
    assert staff.get("/healthz").json()["checked_at"] == first["checked_at"]
    assert private_redis.probes() == 1  # 22 answers, one check

    settings.RAG_HEALTH_INTERVAL_S = 0  # the interval has passed
    assert staff.get("/healthz").json()["checked_at"] != first["checked_at"]
    assert private_redis.probes() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_share_one_check(settings, private_redis):
    settings.RAG_HEALTH_INTERVAL_S = 3600
    answers = at_once(8, lambda: Client().get("/healthz").status_code)
    assert answers == [200] * 8
    assert private_redis.probes() == 1


@pytest.mark.slow
def test_healthz_counts_a_live_celery_worker(staff, settings, celery_worker_process):
    settings.RAG_HEALTH_INTERVAL_S = 0

    def counted() -> dict | None:
        body = staff.get("/healthz").json()
        return body if body["celery"]["workers"] >= 1 else None

    # healthz gives workers 1 s to answer its ping; a worker starved of CPU on a loaded machine
    # can miss one and answer the next.
    body = wait_until(counted, "healthz to count the running worker")
    assert body["celery"]["ok"] is True


@pytest.mark.django_db
def test_healthz_answers_503_within_the_interval_when_redis_is_stopped(
    client, staff, settings, private_redis
):
    settings.RAG_HEALTH_INTERVAL_S = 0.2
    assert client.get("/healthz").status_code == 200

    embedded.stop_redis(private_redis.root)
    response = wait_until(
        lambda: (answer := client.get("/healthz")).status_code == 503 and answer,
        "healthz to see Redis stopped",
    )
    assert summary(response)["status"] == "unavailable"
    body = staff.get("/healthz").json()
    assert body["status"] == "unavailable"
    assert body["redis"]["ok"] is False
    assert "error" in body["redis"]
    assert body["database"]["ok"] is True


def test_healthz_refuses_other_methods(client):
    assert client.post("/healthz").status_code == 405
