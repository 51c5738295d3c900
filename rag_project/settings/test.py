"""Test profile: the real (embedded) PostgreSQL and Redis, isolated per pytest-xdist worker.

Each xdist worker gets its own Redis database number and Celery queue, so parallel test
processes (and the Celery workers they start) never see each other's keys or tasks; pytest-django
gives each its own PostgreSQL database (test_rag_gw0, ...).
"""

import os

from rag_project import embedded

from .base import *
from .base import REDIS_EMBEDDED, REDIS_URL, env

SECRET_KEY = "test-only-secret-key-for-the-test-suite-0123456789abcdefghijklmnop"
DEBUG = False
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_worker_number = int(_worker[2:]) if _worker[2:].isdigit() else 0
# db 0 belongs to development (make run); tests use 1 + worker number.
TEST_REDIS_DB = 1 + _worker_number
if REDIS_EMBEDDED:
    REDIS_URL = embedded.redis_url(RAG_DATA_DIR, db=TEST_REDIS_DB)
else:
    REDIS_URL = env.str("TEST_REDIS_URL", default=REDIS_URL)
CACHES = {
    "default": {
        "BACKEND": "rag_project.cache.SignedRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"rag-test-{_worker}",
    }
}
CELERY_BROKER_URL = embedded.celery_broker_url(REDIS_URL)
CELERY_TASK_DEFAULT_QUEUE = f"rag-test-{_worker}"
MEDIA_ROOT = Path(
    env.str("RAG_TEST_MEDIA_ROOT", default=str(RAG_DATA_DIR / "test-media" / _worker))
)
EMBEDDING_PROVIDER = env.str("EMBEDDING_PROVIDER", default="hash")
LOG_LEVEL = "WARNING"
LOGGING["root"]["level"] = "WARNING"

# Every request of the suite comes from one address: its tests of refused keys must not push
# each other past the failed-authentication limit (the tests of that limit set their own).
RAG_AUTH_FAILURE_RATE = env.str("RAG_AUTH_FAILURE_RATE", default="100000/min")

# A Celery worker process started by a test must use that test's database.
if env.str("RAG_TEST_DB_NAME", default=""):
    DATABASES["default"]["NAME"] = env.str("RAG_TEST_DB_NAME")

# Workers and servers the suite starts stay cold unless a test asks (tests/foundation/test_warmup).
RAG_WARM_ON_START = env.bool("RAG_WARM_ON_START", default=False)
# Nor do they freeze their heap (a frozen test process would keep every test's cycles; the
# tests of rag_project.heap turn it on and unfreeze after).
RAG_GC_FREEZE_ABOVE_MS = env.float("RAG_GC_FREEZE_ABOVE_MS", default=0.0)
# Vector host files of the suite, per xdist worker (emptied at the start of a session).
VECTOR_HOST_DIR = Path(
    env.str("RAG_TEST_VECTOR_DIR", default=str(RAG_DATA_DIR / "test-vectors" / _worker))
)

# Test databases are created on the primary only; a replica could never hold them.
DATABASES.pop("replica", None)

# Most tests run no Celery worker to build the index after a change, and search right after
# it: the search builds the new version itself, as with no worker in production. The deferral
# to the worker (BM25_DEFER_BUILD_S, 1 s by default) is tested where a test asks for it
# (tests/retrieval/test_bm25_segment_store.py) and runs in the benchmarks' served processes.
BM25_DEFER_BUILD_S = env.float("BM25_DEFER_BUILD_S", default=0.0)
