"""One build per (knowledge base, version) at a time across processes.

The lock lives in Redis (SET NX PX with a random token, released by compare-and-delete: redis-py's
Lock), expiring after ``BM25_BUILD_LOCK_TIMEOUT_S`` so a builder that dies frees it. While Redis
is down a PostgreSQL session-level advisory lock on the caller's connection takes its place.
"""

from __future__ import annotations

import logging
from typing import Protocol

import redis
from django.db import DatabaseError, connection

from retrieval.bm25store.l2 import RedisTier
from retrieval.core.identity import Identity

logger = logging.getLogger(__name__)


class HeldLock(Protocol):
    def release(self) -> None: ...


class _RedisLock:
    def __init__(self, lock) -> None:
        self._lock = lock

    def release(self) -> None:
        try:
            self._lock.release()
        except redis.exceptions.LockNotOwnedError:
            logger.warning(
                "a BM25 build outlasted BM25_BUILD_LOCK_TIMEOUT_S; another build may have run "
                "beside it"
            )
        except redis.RedisError:
            pass  # it expires on its own


class _AdvisoryLock:
    def __init__(self, name: str) -> None:
        self._name = name

    def release(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [self._name])
        except DatabaseError:
            pass  # the session is gone, and its advisory locks with it


def try_build_lock(l2: RedisTier, identity: Identity, version: int) -> HeldLock | None:
    """Take the build lock without waiting; None if another process holds it."""
    try:
        lock = l2.lock(identity, version)
    except redis.RedisError:
        name = f"rag.bm25.build:{identity.knowledge_base_id}:{identity.epoch}:{version}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
            acquired = cursor.fetchone()[0]
        return _AdvisoryLock(name) if acquired else None
    return _RedisLock(lock) if lock is not None else None
