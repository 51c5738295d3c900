"""BM25Store: a knowledge base's BM25 index at its current version, from the cheapest tier.

Tiers: L1 this process's byte-bounded LRU, L2 Redis, L3 the ``bm25_indexes`` row, else a build
from the chunk tokens stored at ingestion. A hit promotes upward (an L3 hit fills L2 and L1, a
build fills all three).

Every ``get`` first reads the KB's current ``index_version`` from PostgreSQL (one primary-key
lookup; skipped with ``fresh=True`` when the caller has just read the KB row) and accepts an
entry from any tier only if it is at least that version. An invalidation in the worker
therefore reaches every web process's L1 without any message: their next get sees the bumped
version and skips the old entry.

A payload from L2 or L3 whose HMAC does not check out is never unpickled: it is deleted from
that tier, logged on ``rag.security``, and the store carries on to the next tier or rebuilds.

A cold KB is built once per (KB, version) across processes: the first get takes the build lock,
the others wait up to ``BM25_BUILD_WAIT_S`` polling the tiers for the result, and build it
themselves (correctness first) if the wait runs out. The handle says which happened.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from knowledge.models import KnowledgeBase
from retrieval.bm25 import BM25Index
from retrieval.bm25store.build import build_from_database
from retrieval.bm25store.handle import IndexHandle, Tier
from retrieval.bm25store.l1 import ByteLRU
from retrieval.bm25store.l2 import Malformed, RedisTier
from retrieval.bm25store.l3 import TableTier
from retrieval.bm25store.locks import try_build_lock
from retrieval.bm25store.payload import (
    Identity,
    PayloadRejected,
    PayloadUnreadable,
    SignedPayload,
    open_payload,
    seal,
)

logger = logging.getLogger(__name__)
security_logger = logging.getLogger("rag.security")

_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.25
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class BM25StoreConfig:
    redis_url: str
    l1_max_bytes: int
    l2_ttl_s: int
    build_lock_timeout_s: int
    build_wait_s: float

    @classmethod
    def from_settings(cls, **overrides: Any) -> BM25StoreConfig:
        values = {
            "redis_url": settings.REDIS_URL,
            "l1_max_bytes": settings.BM25_L1_MAX_BYTES,
            "l2_ttl_s": settings.BM25_L2_TTL_S,
            "build_lock_timeout_s": settings.BM25_BUILD_LOCK_TIMEOUT_S,
            "build_wait_s": settings.BM25_BUILD_WAIT_S,
        }
        return cls(**(values | overrides))


@dataclass
class _Attempt:
    """What one get() has seen so far."""

    knowledge_base: KnowledgeBase
    identity: Identity
    current: int
    fill_l1: bool
    started: float
    build_ms: float = 0.0
    wait_started: float | None = None
    waited_ms: float = 0.0
    wait_timed_out: bool = False
    rejected: list[str] = field(default_factory=list)


class BM25Store:
    """Per-process object (see ``get_store``); thread-safe."""

    def __init__(self, config: BM25StoreConfig | None = None) -> None:
        self.config = config or BM25StoreConfig.from_settings()
        self.l1 = ByteLRU(self.config.l1_max_bytes)
        self.l2 = RedisTier(
            self.config.redis_url, self.config.l2_ttl_s, self.config.build_lock_timeout_s
        )
        self.l3 = TableTier()
        self._build_count = 0
        self._count_lock = threading.Lock()

    @property
    def build_count(self) -> int:
        """Builds this store has run (for tests and metrics)."""
        return self._build_count

    def get(self, knowledge_base: KnowledgeBase, *, fresh: bool = False) -> IndexHandle:
        """The KB's index at (at least) its current version. Raises KnowledgeBase.DoesNotExist
        when the KB is gone (or is not the tenant's the instance says).

        ``fresh=True`` says the instance was read from the database by the caller's current
        request (as RAGService does at the start of every search), so its ``index_version``
        is the current one and the lookup is skipped: it would read the same row again a few
        milliseconds later."""
        return self._get(knowledge_base, fill_l1=True, fresh=fresh)

    def warm(self, knowledge_base: KnowledgeBase) -> IndexHandle:
        """Like get, but leaves this process's L1 alone: the worker prepares L2 and L3 for the
        web processes without holding every KB it touched in its own memory."""
        return self._get(knowledge_base, fill_l1=False)

    def invalidate(self, knowledge_base_id: int) -> None:
        """Remove the KB from L1 (of this process), L2 and L3. Other processes' L1 entries are
        skipped by the version check on their next get."""
        self.l1.discard(knowledge_base_id)
        self.l2.delete(knowledge_base_id)
        self.l3.delete(knowledge_base_id)

    # ------------------------------------------------------------------ reading

    def _get(
        self, knowledge_base: KnowledgeBase, fill_l1: bool, fresh: bool = False
    ) -> IndexHandle:
        started = time.perf_counter()
        attempt = _Attempt(
            knowledge_base,
            identity_of(knowledge_base),
            knowledge_base.index_version if fresh else current_version(knowledge_base),
            fill_l1,
            started,
        )
        hit = self.l1.get(attempt.identity, attempt.current)
        if hit is not None:
            return self._handle(attempt, Tier.L1, *hit)
        return self._from_lower_tiers(attempt) or self._build_or_wait(attempt)

    def _from_lower_tiers(self, attempt: _Attempt) -> IndexHandle | None:
        kb, identity = attempt.knowledge_base, attempt.identity
        try:
            payload = self.l2.get(identity, attempt.current)
        except Malformed:
            self._reject(attempt, Tier.L2, None)
            payload = None
        if payload is not None:
            index = self._open(attempt, Tier.L2, payload)
            if index is not None:
                self._fill_l1(attempt, payload.version, index)
                return self._handle(attempt, Tier.L2, payload.version, index)
        payload = self.l3.get(kb.tenant_id, kb.pk, attempt.current)
        if payload is not None:
            index = self._open(attempt, Tier.L3, payload)
            if index is not None:
                self.l2.put(identity, payload)
                self._fill_l1(attempt, payload.version, index)
                return self._handle(attempt, Tier.L3, payload.version, index)
        return None

    def _open(self, attempt: _Attempt, tier: Tier, payload: SignedPayload) -> BM25Index | None:
        kb = attempt.knowledge_base
        try:
            return open_payload(attempt.identity, payload)
        except PayloadRejected:
            self._reject(attempt, tier, payload.signature)
        except PayloadUnreadable as exc:
            logger.warning(
                "BM25 index of knowledge base %s in %s cannot be loaded (%s); rebuilding",
                kb.pk,
                tier,
                exc,
            )
            self._drop(tier, kb.pk, payload.signature)
        return None

    def _reject(self, attempt: _Attempt, tier: Tier, signature: str | None) -> None:
        kb = attempt.knowledge_base
        security_logger.warning(
            "BM25 index payload of knowledge base %s (tenant %s) in %s failed its integrity "
            "check; dropped it without loading it",
            kb.pk,
            kb.tenant_id,
            tier,
        )
        attempt.rejected.append(str(tier))
        self._drop(tier, kb.pk, signature)

    def _drop(self, tier: Tier, knowledge_base_id: int, signature: str | None) -> None:
        if tier is Tier.L2:
            if signature is None:
                self.l2.delete(knowledge_base_id)
            else:
                self.l2.drop(knowledge_base_id, signature)
        elif signature is not None:
            self.l3.drop(knowledge_base_id, signature)

    # ------------------------------------------------------------------ building

    def _build_or_wait(self, attempt: _Attempt) -> IndexHandle:
        kb = attempt.knowledge_base
        deadline = None  # the wait starts when the lock is first refused, and lasts build_wait_s
        delay = _POLL_FIRST_S
        while True:
            lock = try_build_lock(self.l2, attempt.identity, attempt.current)
            if lock is not None:
                try:
                    # Another build may have finished between our miss and taking the lock.
                    return self._from_lower_tiers(attempt) or self._build(attempt)
                finally:
                    lock.release()
            now = time.perf_counter()
            if deadline is None:
                attempt.wait_started = now
                deadline = now + self.config.build_wait_s
            if now >= deadline:
                attempt.wait_timed_out = True
                logger.warning(
                    "BM25 index of knowledge base %s v%s: waited %.1fs for another process's "
                    "build; building it here too",
                    kb.pk,
                    attempt.current,
                    self.config.build_wait_s,
                )
                return self._build(attempt)
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 1.5, _POLL_MAX_S)
            found = self._poll(attempt)
            if found is not None:
                return found

    def _poll(self, attempt: _Attempt) -> IndexHandle | None:
        kb = attempt.knowledge_base
        hit = self.l1.get(attempt.identity, attempt.current)  # a builder here fills L1 first
        if hit is not None:
            return self._handle(attempt, Tier.L1, *hit)
        for version in (self.l2.version(attempt.identity), self.l3.version(kb.pk)):
            if version is not None and version >= attempt.current:
                return self._from_lower_tiers(attempt)
        return None

    def _build(self, attempt: _Attempt) -> IndexHandle:
        kb = attempt.knowledge_base
        started = time.perf_counter()
        if attempt.wait_started is not None:
            attempt.waited_ms = (started - attempt.wait_started) * 1000
        built = build_from_database(kb)
        with self._count_lock:
            self._build_count += 1
        self._fill_l1(attempt, built.version, built.index)
        payload = seal(attempt.identity, built.version, built.index)
        self.l3.put(kb.tenant_id, kb.pk, payload, built.chunk_count, built.seconds)
        self.l2.put(attempt.identity, payload)
        attempt.build_ms = (time.perf_counter() - started) * 1000
        logger.info(
            "built BM25 index of knowledge base %s v%s: %d chunks, %d bytes stored, %.0f ms",
            kb.pk,
            built.version,
            built.chunk_count,
            len(payload.data),
            attempt.build_ms,
        )
        return self._handle(attempt, Tier.BUILD, built.version, built.index)

    # ------------------------------------------------------------------ helpers

    def _fill_l1(self, attempt: _Attempt, version: int, index: BM25Index) -> None:
        if attempt.fill_l1:
            self.l1.put(attempt.identity, version, index)

    def _handle(self, attempt: _Attempt, tier: Tier, version: int, index: BM25Index) -> IndexHandle:
        finished = time.perf_counter()
        waited = attempt.wait_started is not None
        waited_ms = attempt.waited_ms or ((finished - attempt.wait_started) * 1000 if waited else 0)
        return IndexHandle(
            index=index,
            knowledge_base_id=attempt.knowledge_base.pk,
            version=version,
            tier=tier,
            load_ms=(finished - attempt.started) * 1000,
            build_ms=attempt.build_ms,
            waited_ms=waited_ms,
            waited_for_build=waited,
            wait_timed_out=attempt.wait_timed_out,
            l2_available=self.l2.available,
            rejected=tuple(attempt.rejected),
        )


def identity_of(knowledge_base: KnowledgeBase) -> Identity:
    epoch = (knowledge_base.created_at - _UNIX_EPOCH) // timedelta(microseconds=1)
    return Identity(knowledge_base.tenant_id, knowledge_base.pk, epoch)


def current_version(knowledge_base: KnowledgeBase) -> int:
    """The KB's index_version as committed now (one primary-key lookup)."""
    version = (
        KnowledgeBase.objects.filter(pk=knowledge_base.pk, tenant_id=knowledge_base.tenant_id)
        .values_list("index_version", flat=True)
        .first()
    )
    if version is None:
        raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} does not exist")
    return version


_store: BM25Store | None = None
_store_lock = threading.Lock()


def get_store() -> BM25Store:
    """This process's store (created on first use from settings)."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                _store = BM25Store()
    return _store
