"""One build per (knowledge base, version) at a time across processes: a Redis lock that
expires after ``build_time_limit_s`` (a builder that dies frees it), or while Redis is down a
PostgreSQL session-level advisory lock on the caller's connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import DatabaseError, connection

from retrieval.bm25store.l2 import RedisTier
from retrieval.core.identity import Identity

logger = logging.getLogger(__name__)


def build_time_limit_s() -> int:
    """The longest a build may run (a Celery task's): a build lock's expiry, and how long
    segments a merge folded away stay stored."""
    return settings.CELERY_TASK_TIME_LIMIT


@contextmanager
def build_lock(l2: RedisTier, identity: Identity, version: int) -> Iterator[bool]:
    """Whether the build lock of (KB, ``version``) was taken, without waiting; held until the
    block ends."""
    try:
        lock = l2.lock(identity, version)
    except redis.RedisError:
        name = f"rag.bm25.build:{identity.knowledge_base_id}:{identity.epoch}:{version}"
        with _advisory_lock(name) as taken:
            yield taken
        return
    try:
        yield lock is not None
    finally:
        if lock is not None:
            try:
                lock.release()
            except redis.exceptions.LockNotOwnedError:
                logger.warning("a BM25 build outlasted its lock; another may have run beside it")
            except redis.RedisError:
                pass  # it expires on its own


@contextmanager
def _advisory_lock(name: str) -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        taken = cursor.fetchone()[0]
    try:
        yield taken
    finally:
        if taken:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
            except DatabaseError:
                pass  # the session is gone, and its advisory locks with it
