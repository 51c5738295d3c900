"""BM25Store: a knowledge base's BM25 index at its current version, from the cheapest tier.

- Tiers: L1 this process's byte-bounded LRU of composed views, L2 Redis, L3 the
  ``bm25_manifests`` and ``bm25_indexes`` rows, else a build; what a lower tier or a build
  gives fills the tiers above. A view loads only the segments it does not hold.
- A get answers at least the KB's current ``index_version``, or an older complete view marked
  ``stale``: while another process builds it (for ``STALE_WAIT_S``), or ``deferred`` while
  the worker's ``warm`` builds it (for at most ``BM25_DEFER_BUILD_S``); then it builds.
- A new version is a delta on the newest stored manifest (``build``); a build that leaves
  segments to fold sends ``merge_due``.
- One build per (KB, version) across processes (the build lock); the others poll the tiers
  and build too only after ``BUILD_WAIT_S``. Within a process one get composes a KB's view.
- Segments are stored before the manifest naming them; a merge replaces the manifest only if
  it is still the one merged, and its folded segments are deleted after
  ``build_time_limit_s``.
- A payload whose HMAC does not check out is never unpickled: it is dropped, logged on
  ``rag.security``, and the get goes on to the next tier or builds.
- In a search routed to a replica the version and a build's rows come from the replica; L3
  and the lock's fallback are the primary's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.dispatch import Signal

from knowledge.models import KnowledgeBase
from retrieval.bm25.segment import Segment
from retrieval.bm25store.build import Built, build_delta, build_full, current_version, new_key
from retrieval.bm25store.handle import IndexHandle, Tier, View, compose, sealed_view
from retrieval.bm25store.l2 import Malformed, RedisTier
from retrieval.bm25store.l3 import TableTier
from retrieval.bm25store.locks import build_lock, build_time_limit_s
from retrieval.bm25store.manifest import Manifest, open_manifest
from retrieval.bm25store.merging import plan_merge
from retrieval.bm25store.payload import (
    PayloadRejected,
    PayloadUnreadable,
    SignedPayload,
    manifest_label,
    open_segment,
    seal_segments,
)
from retrieval.core.identity import Identity, identity_of, knowledge_base_slot
from retrieval.core.lru import ByteLRU

logger = logging.getLogger(__name__)
security_logger = logging.getLogger("rag.security")

# How long a get waits for another process's build of its version before building it too ...
BUILD_WAIT_S = 30.0
# ... or, with an older complete view to answer from, before answering from it.
STALE_WAIT_S = 1.0
# While deferring to the worker, a process asks L2 and L3 for the new version at most this often.
RECHECK_S = 0.05
_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.25
_MERGE_LOCK = -1  # the build lock's "version" for merges (versions are >= 0)

merge_due = Signal()  # (knowledge_base_id): a build left segments to fold


@dataclass(frozen=True)
class BM25StoreConfig:
    redis_url: str
    l1_max_bytes: int
    l2_ttl_s: int
    lock_timeout_s: int
    defer_build_s: float = 0.0

    @classmethod
    def from_settings(cls, **overrides: Any) -> BM25StoreConfig:
        values = {
            "redis_url": settings.REDIS_URL,
            "l1_max_bytes": settings.BM25_L1_MAX_BYTES,
            "l2_ttl_s": settings.BM25_L2_TTL_S,
            "lock_timeout_s": build_time_limit_s(),
            "defer_build_s": settings.BM25_DEFER_BUILD_S,
        }
        return cls(**(values | overrides))


class _Unusable(Exception):
    """A stored manifest names a segment no tier holds intact: build instead."""


@dataclass
class _Attempt:
    """What one get() has seen so far."""

    knowledge_base: KnowledgeBase
    identity: Identity
    current: int
    started: float
    build_ms: float = 0.0
    built: str = ""  # "full" or "delta" when this get built
    loaded_segments: int = 0  # fetched from L2/L3 by this get
    wait_started: float | None = None
    waited_ms: float = 0.0
    wait_timed_out: bool = False
    rejected: list[str] = field(default_factory=list)


class BM25Store:
    """Per-process (``get_store``), thread-safe. ``on_merge_due(knowledge_base_id)``: called
    when a build leaves segments to fold (default: sends ``merge_due``)."""

    def __init__(
        self,
        config: BM25StoreConfig | None = None,
        on_merge_due: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config or BM25StoreConfig.from_settings()
        self.l1: ByteLRU[Identity, View] = ByteLRU(
            self.config.l1_max_bytes, slot_of=knowledge_base_slot
        )
        self.l2 = RedisTier(self.config.redis_url, self.config.l2_ttl_s, self.config.lock_timeout_s)
        self.l3 = TableTier()
        self.on_merge_due = on_merge_due or _announce_merge_due
        self.build_count = 0  # full builds run by this store (tests, metrics)
        self.delta_count = 0  # delta builds
        self._flights: dict[int, threading.Lock] = {}
        self._flights_lock = threading.Lock()
        # kb id -> (version of the view held, when a newer version was first asked for)
        self._outdated: dict[int, tuple[int, float]] = {}
        # kb id -> (version L2 and L3 were last found without, when)
        self._missing: dict[int, tuple[int, float]] = {}

    def get(self, knowledge_base: KnowledgeBase, *, fresh: bool = False) -> IndexHandle:
        """The KB's index at (at least) its current version, or an older one (``stale``).
        Raises KnowledgeBase.DoesNotExist. ``fresh``: the instance's version is current."""
        return self._get(knowledge_base, fresh=fresh)

    def warm(self, knowledge_base: KnowledgeBase) -> IndexHandle:
        """Like get, but never answers with an older view: the worker's build of a change
        into L2 and L3. The view stays in this process's L1, so the next change's delta
        starts from the segments held."""
        return self._get(knowledge_base, allow_stale=False)

    def invalidate(self, knowledge_base_id: int) -> None:
        """Remove the KB from L1 (of this process), L2 and L3: the next get builds in full."""
        self.l1.discard(knowledge_base_id)
        self.l2.delete(knowledge_base_id)
        self.l3.delete(knowledge_base_id)

    def _get(
        self,
        knowledge_base: KnowledgeBase,
        fresh: bool = False,
        allow_stale: bool = True,
    ) -> IndexHandle:
        attempt = _Attempt(
            knowledge_base,
            identity_of(knowledge_base),
            knowledge_base.index_version if fresh else current_version(knowledge_base),
            time.perf_counter(),
        )
        hit = self._l1_get(attempt)
        if hit is not None:
            return self._handle(attempt, Tier.L1, hit)
        flight = self._flight(knowledge_base.pk)
        if not flight.acquire(blocking=False):
            # Another thread composes the new view: answer from the one held meanwhile.
            held = self.l1.peek(attempt.identity) if allow_stale else None
            if held is not None:
                return self._handle(attempt, Tier.L1, held, stale=held.version < attempt.current)
            flight.acquire()
        try:
            hit = self._l1_get(attempt)  # another thread's work
            if hit is not None:
                return self._handle(attempt, Tier.L1, hit)
            deferred = self._deferring_to(attempt) if allow_stale else None
            if deferred is not None and self._asked_lately(attempt):
                return self._handle(attempt, Tier.L1, deferred, stale=True, deferred=True)
            found = self._from_lower_tiers(attempt)
            if found is not None:
                return found
            with self._flights_lock:
                self._missing[knowledge_base.pk] = (attempt.current, time.monotonic())
            if deferred is not None:
                return self._handle(attempt, Tier.L1, deferred, stale=True, deferred=True)
            return self._build_or_wait(attempt, allow_stale)
        finally:
            flight.release()

    def _l1_get(self, attempt: _Attempt) -> View | None:
        return self.l1.get(attempt.identity, attempt.current, drop_older=False)

    def _flight(self, knowledge_base_id: int) -> threading.Lock:
        with self._flights_lock:
            return self._flights.setdefault(knowledge_base_id, threading.Lock())

    def _deferring_to(self, attempt: _Attempt) -> View | None:
        """The older view held while the worker builds the current version: for
        ``defer_build_s`` from the first get that asked for a newer version than it; else None."""
        held = self.l1.peek(attempt.identity)
        if held is None or held.version >= attempt.current or self.config.defer_build_s <= 0:
            return None
        now = time.monotonic()
        with self._flights_lock:
            version, since = self._outdated.get(attempt.knowledge_base.pk, (-1, now))
            if version != held.version:
                since = now
                self._outdated[attempt.knowledge_base.pk] = (held.version, since)
        return held if now - since < self.config.defer_build_s else None

    def _asked_lately(self, attempt: _Attempt) -> bool:
        """Whether L2 and L3 were found without the current version less than ``RECHECK_S``
        ago."""
        with self._flights_lock:
            version, when = self._missing.get(attempt.knowledge_base.pk, (-1, 0.0))
        return version == attempt.current and time.monotonic() - when < RECHECK_S

    def _from_lower_tiers(self, attempt: _Attempt) -> IndexHandle | None:
        view, tier = self._stored_view(attempt, attempt.current)
        if view is None:
            return None
        self._fill_l1(attempt, view)
        return self._handle(attempt, tier, view)

    def _stored_view(self, attempt: _Attempt, min_version: int) -> tuple[View | None, Tier]:
        """The stored manifest of at least ``min_version`` composed (None if no tier holds it
        intact), and the lowest tier read."""
        identity = attempt.identity
        for tier in (Tier.L2, Tier.L3):
            try:
                found = self._tier(tier).get(identity, min_version)
            except Malformed:
                self._rejected(attempt, tier, None)
                continue
            manifest = found and self._open(attempt, tier, found[1], version=found[0])
            if not manifest:
                continue
            try:
                segments, lowest = self._segments(attempt, manifest, tier)
            except _Unusable:
                return None, tier
            version, payload = found
            if tier is Tier.L3:
                self.l2.put(identity, version, payload)
            previous = self.l1.peek(identity)
            return compose(manifest, segments, payload.signature, previous), lowest
        return None, Tier.L3

    def _segments(
        self, attempt: _Attempt, manifest: Manifest, tier: Tier
    ) -> tuple[dict[str, Segment], Tier]:
        """The manifest's segments (L1's view, then L2, then L3, refilling L2) and the lowest
        tier read. Raises _Unusable when one is nowhere intact."""
        kb, identity = attempt.knowledge_base, attempt.identity
        held = self.l1.peek(identity)
        segments = {
            key: held.segments[key]
            for key in manifest.keys
            if held is not None and key in held.segments
        }
        missing = [key for key in manifest.keys if key not in segments]
        attempt.loaded_segments += len(missing)
        lowest = tier
        for source in (Tier.L2, Tier.L3):
            if not missing:
                break
            if source is Tier.L3:
                lowest = Tier.L3
            for key, payload in self._tier(source).get_segments(identity, missing).items():
                segment = self._open(attempt, source, payload, key=key)
                if segment is not None:
                    segments[key] = segment
                    if source is Tier.L3:
                        self.l2.put_segment(identity, key, payload)
            missing = [key for key in missing if key not in segments]
        if missing:
            logger.warning(
                "BM25 index of knowledge base %s v%s names %d segments no tier holds intact; "
                "rebuilding",
                kb.pk,
                manifest.version,
                len(missing),
            )
            raise _Unusable
        return segments, lowest

    def _open(
        self,
        attempt: _Attempt,
        tier: Tier,
        payload: SignedPayload,
        version: int = 0,
        key: str | None = None,
    ) -> Manifest | Segment | None:
        """The payload loaded (the segment ``key``, else the manifest of ``version``); None, and
        dropped from its tier, when it fails its check or cannot be loaded."""
        try:
            if key is None:
                return open_manifest(attempt.identity, version, payload)
            return open_segment(attempt.identity, key, payload)
        except PayloadRejected:
            self._rejected(attempt, tier, payload.signature, key)
        except PayloadUnreadable as exc:
            logger.warning(
                "BM25 index of knowledge base %s in %s cannot be loaded (%s); rebuilding",
                attempt.knowledge_base.pk,
                tier,
                exc,
            )
            self._tier(tier).drop(attempt.knowledge_base.pk, payload.signature, key)
        return None

    def _rejected(
        self, attempt: _Attempt, tier: Tier, signature: str | None, key: str | None = None
    ) -> None:
        """Log and drop a payload that failed its integrity check (``signature`` None: not
        ours at all)."""
        kb = attempt.knowledge_base
        security_logger.warning(
            "BM25 index payload (%s) of knowledge base %s (tenant %s) in %s failed its "
            "integrity check; dropped it without loading it",
            f"segment {key}" if key else "manifest",
            kb.pk,
            kb.tenant_id,
            tier,
        )
        attempt.rejected.append(str(tier))
        self._tier(tier).drop(kb.pk, signature, key)

    def _tier(self, tier: Tier) -> RedisTier | TableTier:
        return self.l2 if tier is Tier.L2 else self.l3

    def _build_or_wait(self, attempt: _Attempt, allow_stale: bool) -> IndexHandle:
        """Build the current version under its build lock, or wait for the process holding
        it: ``STALE_WAIT_S`` when an older view can answer (then it does), else
        ``BUILD_WAIT_S`` (then this get builds it too)."""
        deadline = None  # the wait starts when the lock is first refused
        delay = _POLL_FIRST_S
        older: View | None = None
        while True:
            with build_lock(self.l2, attempt.identity, attempt.current) as taken:
                if taken:  # another build may have finished between our miss and the lock
                    return self._from_lower_tiers(attempt) or self._build(attempt)
            now = time.perf_counter()
            if deadline is None:
                attempt.wait_started = now
                older = self._older_view(attempt, held_first=True) if allow_stale else None
                deadline = now + (BUILD_WAIT_S if older is None else STALE_WAIT_S)
            if now >= deadline:
                if older is not None:
                    self._fill_l1(attempt, older)
                    return self._handle(attempt, Tier.L1, older, stale=True)
                attempt.wait_timed_out = True
                logger.warning(
                    "BM25 index of knowledge base %s v%s: waited %.1fs for another process's "
                    "build; building it here too",
                    attempt.knowledge_base.pk,
                    attempt.current,
                    BUILD_WAIT_S,
                )
                return self._build(attempt)
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 1.5, _POLL_MAX_S)
            stored = (self.l2.version(attempt.identity), self.l3.version(attempt.knowledge_base.pk))
            if any(version is not None and version >= attempt.current for version in stored):
                found = self._from_lower_tiers(attempt)
                if found is not None:
                    return found

    def _older_view(self, attempt: _Attempt, held_first: bool) -> View | None:
        """A complete view older than asked for: this process's own (``held_first``) or the
        stored one (a delta's base: a view held since before a merge may name segments deleted
        since), which is the one held when L2's manifest has its signature."""
        held = self.l1.peek(attempt.identity)
        if held is not None and held_first:
            return held
        if held is not None and held.signature:
            stored = self.l2.signature(attempt.identity)
            if stored == (held.version, held.signature):
                return held
        view, _ = self._stored_view(attempt, 0)
        return view or held

    def _build(self, attempt: _Attempt) -> IndexHandle:
        """Build the current version: a delta on the newest stored view, else in full."""
        kb = attempt.knowledge_base
        started = time.perf_counter()
        if attempt.wait_started is not None:
            attempt.waited_ms = (started - attempt.wait_started) * 1000
        base = self._older_view(attempt, held_first=False)
        built = build_delta(kb, base.manifest, base.segments) if base is not None else None
        if built is None:
            built = build_full(kb)
        view = self.store_built(attempt.identity, kb, built, base)
        with self._flights_lock:
            if built.full:
                self.build_count += 1
            else:
                self.delta_count += 1
        self._fill_l1(attempt, view)
        attempt.build_ms = (time.perf_counter() - started) * 1000
        attempt.built = "full" if built.full else "delta"
        logger.info(
            "built BM25 index of knowledge base %s v%s (%s): %d chunks in %d segments "
            "(%d new), %d deleted, %.0f ms",
            kb.pk,
            built.manifest.version,
            attempt.built,
            built.manifest.chunk_count,
            len(built.manifest.keys),
            len(built.new_segments),
            built.manifest.deleted.size,
            attempt.build_ms,
        )
        if plan_merge(view) is not None:
            self.on_merge_due(kb.pk)
        return self._handle(attempt, Tier.BUILD, view)

    def store_built(
        self,
        identity: Identity,
        kb: KnowledgeBase,
        built: Built,
        base: View | None = None,
        replaces: str | None = None,
    ) -> View | None:
        """Write a build's new segments to L3 and L2, then the manifest naming them; the
        composed view (``base``: a delta's). With ``replaces`` (a merge's base signature) the
        manifest is written only if that is still the stored one; else None."""
        for (key, segment), payload in zip(
            built.new_segments.items(), seal_segments(identity, built.new_segments), strict=True
        ):
            self.l3.put_segment(
                kb.tenant_id, kb.pk, key, payload, len(segment), segment.postings, built.seconds
            )
            self.l2.put_segment(identity, key, payload)
        segments = dict(built.new_segments)
        previous = None
        if base is not None and not built.full:
            segments |= base.segments
            previous = base
        view, payload = sealed_view(identity, compose(built.manifest, segments, "", previous))
        written = self.l3.put(kb.tenant_id, kb.pk, view.manifest, payload, replaces=replaces)
        if replaces is not None and not written:
            return None
        self.l2.put(identity, view.version, payload)
        return view

    def merge(self, knowledge_base: KnowledgeBase) -> str:
        """Fold the segments ``plan_merge`` picks into one, dropping their deleted chunks, under
        the same version (unless the stored manifest changed meanwhile); then
        ``collect_garbage``."""
        identity = identity_of(knowledge_base)
        with build_lock(self.l2, identity, _MERGE_LOCK) as taken:
            if not taken:
                return "another merge is running"
            view = self.warm(knowledge_base).view
            plan = plan_merge(view)
            if plan is None:
                result = "nothing to merge"
            else:
                result = self._merge(identity, knowledge_base, view, plan)
            self.collect_garbage(knowledge_base)
            return result

    def _merge(self, identity: Identity, kb: KnowledgeBase, view: View, plan: list[int]) -> str:
        started = time.perf_counter()
        deletions = view.manifest.deletions()
        folded = [view.manifest.keys[i] for i in plan]
        merged = Segment.merge(
            [view.segments[k] for k in folded],
            deleted_per_segment=[deletions[i] for i in plan],
        )
        key = new_key() if len(merged) else None
        manifest = view.manifest.folded(plan, key)
        built = Built(manifest, {key: merged} if key else {}, False, time.perf_counter() - started)
        stored = view.signature and self.store_built(identity, kb, built, view, view.signature)
        if not stored:
            return "superseded: the index changed during the merge"
        self.l3.mark_dropped(kb.pk, folded)
        for dropped in folded:
            self.l2.drop(kb.pk, None, dropped)
        held = self.l1.peek(identity)
        if held is not None and held.version == stored.version:
            self.l1.put(identity, stored, stored.version)
        return (
            f"merged {len(folded)} segments into one of {len(merged)} chunks "
            f"in {time.perf_counter() - started:.2f} s"
        )

    def collect_garbage(self, knowledge_base: KnowledgeBase) -> int:
        """Delete the unnamed segments a merge folded away ``build_time_limit_s`` ago; how many."""
        identity = identity_of(knowledge_base)

        def keys_of(data: bytes, signature: str, version: int) -> tuple[str, ...]:
            payload = SignedPayload(manifest_label(version), signature, data)
            return open_manifest(identity, version, payload).keys

        try:
            return self.l3.collect_garbage(knowledge_base.pk, keys_of, build_time_limit_s())
        except (PayloadRejected, PayloadUnreadable):
            return 0  # the next get drops and rebuilds that manifest

    def _fill_l1(self, attempt: _Attempt, view: View) -> None:
        self.l1.put(attempt.identity, view, view.version)

    def _handle(
        self,
        attempt: _Attempt,
        tier: Tier,
        view: View,
        stale: bool = False,
        deferred: bool = False,
    ) -> IndexHandle:
        finished = time.perf_counter()
        waited = attempt.wait_started is not None
        waited_ms = attempt.waited_ms or ((finished - attempt.wait_started) * 1000 if waited else 0)
        return IndexHandle(
            index=view.index,
            knowledge_base_id=attempt.knowledge_base.pk,
            version=view.version,
            tier=tier,
            load_ms=(finished - attempt.started) * 1000,
            build_ms=attempt.build_ms,
            waited_ms=waited_ms,
            waited_for_build=waited,
            wait_timed_out=attempt.wait_timed_out,
            l2_available=self.l2.available,
            rejected=tuple(attempt.rejected),
            view=view,
            built=attempt.built,
            loaded_segments=attempt.loaded_segments if tier is not Tier.L1 else 0,
            stale=stale,
            deferred=deferred,
            asked_version=attempt.current,
        )


def _announce_merge_due(knowledge_base_id: int) -> None:
    merge_due.send(sender=BM25Store, knowledge_base_id=knowledge_base_id)


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
