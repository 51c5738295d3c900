"""BM25Store: a knowledge base's BM25 index at its current version, from the cheapest tier.

The index is a list of immutable segments plus deletions (``retrieval.bm25.SegmentedIndex``),
named by a manifest per version (``manifest``). Tiers: L1 this process's byte-bounded LRU of
composed views, L2 Redis, L3 the ``bm25_manifests`` row and ``bm25_indexes`` segment rows, else
a build. A hit promotes upward (what came from L3 fills L2 and L1, a build fills all three).

Every ``get`` first reads the KB's current ``index_version`` from PostgreSQL (one primary-key
lookup; skipped with ``fresh=True`` when the caller has just read the KB row) and accepts a
manifest from any tier only if it is at least that version. A new version's view reuses the
segments this process already holds and loads only those it lacks, so after a change a process
fetches one small segment, not the index.

After a change the first get (or the worker's ``invalidate_and_warm``) builds the new version as
a **delta** on the newest stored manifest: one small segment for the documents new or changed,
their old chunks added to the deletions (``build.build_delta``; a small read for a document).
Only a knowledge base never built, a change of analysis (analyser version, user words) or a
change to more than ``DELTA_MAX_FRACTION`` of the chunks builds in full. Merges fold small
segments and drop deleted chunks in the background (``merge``, a Celery task): a build that
leaves segments to fold sends ``merge_due``, and ``retrieval.changes`` queues the merge (the
store queues no task itself).

A payload from L2 or L3 whose HMAC does not check out is never unpickled: it is deleted from
that tier, logged on ``rag.security``, and the store carries on to the next tier or rebuilds.

**Builds after a change are the Celery worker's.** Every change queues ``invalidate_and_warm``,
which builds the new version into L2 and L3; a search process that holds an older complete view
of the knowledge base answers from it (the handle says ``stale`` and ``deferred``) for up to
``BM25_DEFER_BUILD_S`` after it first saw a newer version than that view, without taking the
build lock, and then loads the worker's segment (one small read). A delta built in the request
path would hold a sync web worker, and every request queued behind it, at every change, and
under load a build takes far longer than a search. Past the deferral (no worker, or one far
behind) the search builds it as below, so staleness stays bounded.

One build per (KB, version) across processes: the first get takes the build lock; the others
wait for its result, polling the tiers, and build it themselves (correctness first) if the wait
runs out. A get that has an older complete view (in L1 or stored) waits only
``BM25_STALE_WAIT_S`` and then answers from that older view (the handle says ``stale``) rather
than queue behind another process's build; without one it waits up to ``BM25_BUILD_WAIT_S``.
Within a process, concurrent gets of the same knowledge base that miss L1 are single-flight:
one composes (or builds) the view; the others answer from the view this process already holds
(``stale``, milliseconds behind) or, holding none, wait for it instead of composing it again.

Inside a search routed to a read replica (``retrieval.replica``), the rows an index is built
from (the version, documents and tokens: ``build``) and ``current_version`` are read there; the
replica was chosen because it holds at least the version asked for, and a build labels its
manifest with the version of its own snapshot. L3 (``bm25_manifests``, ``bm25_indexes``) is read
and written on the primary only: it is this store's shared cache, written by every process's
builds and merges, and a process polling for another's build must see the row the moment it
commits, not when a replica replays it (else it would wait out its wait and build again). The
build lock's PostgreSQL fallback is the primary's too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
from django.conf import settings
from django.dispatch import Signal

from knowledge.models import KnowledgeBase
from retrieval.bm25.segment import Segment
from retrieval.bm25.segmented import SegmentedIndex
from retrieval.bm25store.build import Built, build_delta, build_full, new_key
from retrieval.bm25store.handle import IndexHandle, Tier
from retrieval.bm25store.l2 import Malformed, RedisTier
from retrieval.bm25store.l3 import TableTier
from retrieval.bm25store.locks import try_build_lock
from retrieval.bm25store.manifest import Manifest, open_manifest
from retrieval.bm25store.merging import plan_merge
from retrieval.bm25store.payload import (
    PayloadRejected,
    PayloadUnreadable,
    SignedPayload,
    manifest_label,
    open_segment,
    seal_segment,
)
from retrieval.core.identity import Identity, identity_of, knowledge_base_slot
from retrieval.core.lru import ByteLRU
from retrieval.replica import search_reads

logger = logging.getLogger(__name__)
security_logger = logging.getLogger("rag.security")

_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.25
# The build lock's "version" for merges of a KB (versions are >= 0).
_MERGE_LOCK = -1

# Sent (``knowledge_base_id``) when a build leaves segments to fold (``merging.plan_merge``):
# ``retrieval.signals`` has ``retrieval.changes`` queue the merge.
merge_due = Signal()


@dataclass(frozen=True)
class BM25StoreConfig:
    redis_url: str
    l1_max_bytes: int
    l2_ttl_s: int
    build_lock_timeout_s: int
    build_wait_s: float
    stale_wait_s: float = 1.0
    segment_grace_s: float = 600.0
    defer_build_s: float = 0.0
    recheck_s: float = 0.0

    @classmethod
    def from_settings(cls, **overrides: Any) -> BM25StoreConfig:
        values = {
            "redis_url": settings.REDIS_URL,
            "l1_max_bytes": settings.BM25_L1_MAX_BYTES,
            "l2_ttl_s": settings.BM25_L2_TTL_S,
            "build_lock_timeout_s": settings.BM25_BUILD_LOCK_TIMEOUT_S,
            "build_wait_s": settings.BM25_BUILD_WAIT_S,
            "stale_wait_s": settings.BM25_STALE_WAIT_S,
            "segment_grace_s": settings.BM25_SEGMENT_GRACE_S,
            "defer_build_s": settings.BM25_DEFER_BUILD_S,
            "recheck_s": settings.BM25_RECHECK_S,
        }
        return cls(**(values | overrides))


@dataclass(frozen=True)
class View:
    """What L1 holds for a knowledge base: a manifest, its segments and their composed view."""

    manifest: Manifest
    segments: dict[str, Segment]
    index: SegmentedIndex
    signature: str = ""  # of the stored manifest it was read from ("" if built here)

    @property
    def version(self) -> int:
        return self.manifest.version

    @cached_property
    def nbytes(self) -> int:
        return self.index.total_nbytes

    @classmethod
    def of_corpus(cls, version: int, doc_ids: list[int], corpus: list[list[str]]) -> View:
        """A one-segment view of token lists, stored nowhere (tests and benchmarks)."""
        manifest = Manifest(
            version=version,
            keys=("corpus",),
            deleted=np.empty(0, np.int64),
            deleted_in=np.empty(0, np.int32),
            doc_ids=np.empty(0, np.int64),
            doc_stamps=np.empty(0, np.int64),
            basis="",
            chunk_count=len(doc_ids),
        )
        return compose(manifest, {"corpus": Segment.build(doc_ids, corpus, doc_ids)})


def compose(
    manifest: Manifest,
    segments: dict[str, Segment],
    signature: str = "",
    previous: View | None = None,
) -> View:
    """The view of ``manifest``; ``previous`` (an older view of the same knowledge base)
    lends what it composed for the segments both hold, and the manifest's dead frequencies
    spare a count over the postings of a segment with new deletions (``SegmentedIndex``)."""
    ordered = [segments[key] for key in manifest.keys]
    index = SegmentedIndex(
        ordered,
        deleted_per_segment=manifest.deletions(),
        previous=previous.index if previous is not None else None,
        dead_frequencies=manifest.dead_frequencies(),
    )
    return View(manifest, {key: segments[key] for key in manifest.keys}, index, signature)


def _sealed_view(identity: Identity, view: View) -> tuple[View, SignedPayload]:
    """A view composed by the writer of its manifest, with the manifest recording the view's
    dead frequencies (so readers need not count them), and that manifest's payload."""
    manifest = view.manifest.with_dead(view.index.dead_frequencies())
    payload = manifest.seal(identity)
    return replace(view, manifest=manifest, signature=payload.signature), payload


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
    """Per-process object (see ``get_store``); thread-safe. ``on_merge_due(knowledge_base_id)``
    is called when a build leaves segments to fold (by default: ``merge_due`` is sent)."""

    def __init__(
        self,
        config: BM25StoreConfig | None = None,
        on_merge_due: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config or BM25StoreConfig.from_settings()
        self.l1: ByteLRU[Identity, View] = ByteLRU(
            self.config.l1_max_bytes, slot_of=knowledge_base_slot
        )
        self.l2 = RedisTier(
            self.config.redis_url, self.config.l2_ttl_s, self.config.build_lock_timeout_s
        )
        self.l3 = TableTier()
        self.on_merge_due = on_merge_due or _announce_merge_due
        self._build_count = 0
        self._delta_count = 0
        self._count_lock = threading.Lock()
        self._flights: dict[int, threading.Lock] = {}
        self._flights_lock = threading.Lock()
        # kb id -> (version of the view held, when a newer version was first asked for)
        self._outdated: dict[int, tuple[int, float]] = {}
        # kb id -> (version L2 and L3 were last found without, when)
        self._missing: dict[int, tuple[int, float]] = {}

    @property
    def build_count(self) -> int:
        """Full builds this store has run (for tests and metrics)."""
        return self._build_count

    @property
    def delta_count(self) -> int:
        """Delta builds this store has run."""
        return self._delta_count

    def get(self, knowledge_base: KnowledgeBase, *, fresh: bool = False) -> IndexHandle:
        """The KB's index at (at least) its current version, or an older complete one while
        another process builds the current (``handle.stale``). Raises
        KnowledgeBase.DoesNotExist when the KB is gone (or is not the tenant's the instance
        says).

        ``fresh=True`` says the instance was read from the database by the caller's current
        request (as RAGService does at the start of every search), so its ``index_version``
        is the current one and the lookup is skipped."""
        return self._get(knowledge_base, fresh=fresh)

    def warm(self, knowledge_base: KnowledgeBase) -> IndexHandle:
        """Like get, but never answers with an older view: the worker's build of a change
        into L2 and L3 for the search processes. The view stays in this process's L1 (least
        recently used first beyond ``BM25_L1_MAX_BYTES``), so the next change's delta starts
        from the segments held instead of loading them all again (that load would be most of
        what a delta costs)."""
        return self._get(knowledge_base, allow_stale=False)

    def invalidate(self, knowledge_base_id: int) -> None:
        """Remove the KB from L1 (of this process), L2 and L3: the next get builds in full.
        Other processes' L1 entries are skipped by the version check on their next get."""
        self.l1.discard(knowledge_base_id)
        self.l2.delete(knowledge_base_id)
        self.l3.delete(knowledge_base_id)

    # ------------------------------------------------------------------ reading

    def _get(
        self,
        knowledge_base: KnowledgeBase,
        fresh: bool = False,
        allow_stale: bool = True,
    ) -> IndexHandle:
        started = time.perf_counter()
        attempt = _Attempt(
            knowledge_base,
            identity_of(knowledge_base),
            knowledge_base.index_version if fresh else current_version(knowledge_base),
            started,
        )
        hit = self._l1_get(attempt)
        if hit is not None:
            return self._handle(attempt, Tier.L1, hit)
        flight = self._flight(knowledge_base.pk)
        if not flight.acquire(blocking=False):
            # Another thread is composing (or building) the new view: answer from the one
            # held until it is there (milliseconds behind) rather than queue behind it.
            held = self.l1.peek(attempt.identity) if allow_stale else None
            if held is not None:
                return self._handle(attempt, Tier.L1, held, stale=held.version < attempt.current)
            flight.acquire()
        try:
            hit = self._l1_get(attempt)  # another thread's work
            if hit is not None:
                return self._handle(attempt, Tier.L1, hit)
            held = self._deferring_without_asking(attempt, allow_stale)
            if held is not None:
                return self._handle(attempt, Tier.L1, held, stale=True, deferred=True)
            found = self._from_lower_tiers(attempt)
            if found is not None:
                return found
            with self._flights_lock:
                self._missing[knowledge_base.pk] = (attempt.current, time.monotonic())
            return self._build_or_wait(attempt, allow_stale)
        finally:
            flight.release()

    def _l1_get(self, attempt: _Attempt) -> View | None:
        return self.l1.get(attempt.identity, attempt.current, drop_older=False)

    def _flight(self, knowledge_base_id: int) -> threading.Lock:
        with self._flights_lock:
            lock = self._flights.get(knowledge_base_id)
            if lock is None:
                lock = self._flights[knowledge_base_id] = threading.Lock()
            return lock

    def _from_lower_tiers(self, attempt: _Attempt, min_version: int | None = None):
        """The handle of a stored manifest of at least ``min_version`` (the current version
        by default) with all its segments, or None."""
        wanted = attempt.current if min_version is None else min_version
        view, tier = self._stored_view(attempt, wanted)
        if view is None:
            return None
        self._fill_l1(attempt, view)
        return self._handle(attempt, tier, view)

    def _stored_view(self, attempt: _Attempt, min_version: int) -> tuple[View | None, Tier]:
        kb, identity = attempt.knowledge_base, attempt.identity
        for tier in (Tier.L2, Tier.L3):
            if tier is Tier.L2:
                try:
                    found = self.l2.get(identity, min_version)
                except Malformed:
                    self._reject(attempt, Tier.L2, None)
                    found = None
            else:
                found = self.l3.get(kb.tenant_id, kb.pk, min_version)
            if found is None:
                continue
            version, payload = found
            manifest = self._open_manifest(attempt, tier, version, payload)
            if manifest is None:
                continue
            try:
                segments, lowest = self._segments(attempt, manifest, tier)
            except _Unusable:
                return None, tier
            if tier is Tier.L3:
                self.l2.put(identity, version, payload)
            previous = self.l1.peek(identity)
            return compose(manifest, segments, payload.signature, previous), lowest
        return None, Tier.L3

    def _open_manifest(
        self, attempt: _Attempt, tier: Tier, version: int, payload: SignedPayload
    ) -> Manifest | None:
        try:
            return open_manifest(attempt.identity, version, payload)
        except PayloadRejected:
            self._reject(attempt, tier, payload.signature)
        except PayloadUnreadable as exc:
            self._unreadable(attempt, tier, exc)
            self._drop(tier, attempt.knowledge_base.pk, payload.signature)
        return None

    def _segments(
        self, attempt: _Attempt, manifest: Manifest, tier: Tier
    ) -> tuple[dict[str, Segment], Tier]:
        """The manifest's segments: this process's own first (any view of the KB in L1), then
        L2, then L3 (refilling L2). Raises _Unusable when one is nowhere intact. Also says the
        lowest tier read."""
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
        for key in list(missing):
            payload = self.l2.get_segment(identity, key)
            segment = payload and self._open_segment(attempt, Tier.L2, key, payload)
            if segment is not None:
                segments[key] = segment
                missing.remove(key)
        if missing:
            lowest = Tier.L3
            for key, payload in self.l3.get_segments(kb.tenant_id, kb.pk, missing).items():
                segment = self._open_segment(attempt, Tier.L3, key, payload)
                if segment is not None:
                    segments[key] = segment
                    self.l2.put_segment(identity, key, payload)
        if len(segments) != len(manifest.keys):
            logger.warning(
                "BM25 index of knowledge base %s v%s names %d segments no tier holds intact; "
                "rebuilding",
                kb.pk,
                manifest.version,
                len(manifest.keys) - len(segments),
            )
            raise _Unusable
        return segments, lowest

    def _open_segment(
        self, attempt: _Attempt, tier: Tier, key: str, payload: SignedPayload
    ) -> Segment | None:
        try:
            return open_segment(attempt.identity, key, payload)
        except PayloadRejected:
            self._reject(attempt, tier, payload.signature, key)
        except PayloadUnreadable as exc:
            self._unreadable(attempt, tier, exc)
            self._drop(tier, attempt.knowledge_base.pk, payload.signature, key)
        return None

    def _unreadable(self, attempt: _Attempt, tier: Tier, exc: Exception) -> None:
        logger.warning(
            "BM25 index of knowledge base %s in %s cannot be loaded (%s); rebuilding",
            attempt.knowledge_base.pk,
            tier,
            exc,
        )

    def _reject(
        self, attempt: _Attempt, tier: Tier, signature: str | None, key: str | None = None
    ) -> None:
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
        self._drop(tier, kb.pk, signature, key)

    def _drop(
        self, tier: Tier, knowledge_base_id: int, signature: str | None, key: str | None = None
    ) -> None:
        if key is not None:
            if tier is Tier.L2:
                self.l2.drop_segment(knowledge_base_id, key)
            elif signature is not None:
                self.l3.drop_segment(knowledge_base_id, key, signature)
        elif tier is Tier.L2:
            if signature is None:
                self.l2.delete(knowledge_base_id)
            else:
                self.l2.drop(knowledge_base_id, signature)
        elif signature is not None:
            self.l3.drop(knowledge_base_id, signature)

    # ------------------------------------------------------------------ building

    def _build_or_wait(self, attempt: _Attempt, allow_stale: bool) -> IndexHandle:
        kb = attempt.knowledge_base
        if allow_stale:
            held = self._deferring_to(attempt)
            if held is not None:
                return self._handle(attempt, Tier.L1, held, stale=True, deferred=True)
        deadline = None  # the wait starts when the lock is first refused
        delay = _POLL_FIRST_S
        older: View | None = None
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
                older = self._older_view(attempt, held_first=True) if allow_stale else None
                wait = self.config.build_wait_s
                if older is not None:
                    wait = min(wait, self.config.stale_wait_s)
                deadline = now + wait
            if now >= deadline:
                if older is not None:
                    attempt.waited_ms = (now - attempt.wait_started) * 1000
                    self._fill_l1(attempt, older)
                    return self._handle(attempt, Tier.L1, older, stale=True)
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

    def _deferring_without_asking(self, attempt: _Attempt, allow_stale: bool) -> View | None:
        """The older view to answer from, without asking L2 and L3 for the current version,
        when they were found without it less than ``BM25_RECHECK_S`` ago and the build is
        still left to the worker; else None.

        Between a change and the worker storing its version (its delta and the writes), every
        search of every process would otherwise ask Redis and PostgreSQL for a manifest that is
        not there yet, two round trips each, and answer from the view it holds all the same.
        The cost of asking less often: the new version is picked up at most ``recheck_s``
        after it is stored."""
        if not allow_stale or self.config.recheck_s <= 0:
            return None
        with self._flights_lock:
            version, when = self._missing.get(attempt.knowledge_base.pk, (-1, 0.0))
        if version != attempt.current or time.monotonic() - when >= self.config.recheck_s:
            return None
        return self._deferring_to(attempt)

    def _deferring_to(self, attempt: _Attempt) -> View | None:
        """The older view this process holds, while the build of a newer version is left to
        the worker (``BM25_DEFER_BUILD_S`` from the first get that asked for a newer version
        than it: a stream of changes does not defer forever); None when this get must build
        or wait as usual."""
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

    def _older_view(self, attempt: _Attempt, held_first: bool) -> View | None:
        """A complete view older than asked for: this process's own (``held_first``: cheapest,
        to answer from) or the stored one (the base of a delta: its segments are sure to stay
        stored, where a view held since before a merge may name segments deleted since). The
        one held is the stored one when L2's manifest has its signature."""
        held = self.l1.peek(attempt.identity)
        if held is not None and held_first:
            return held
        # The writer of the stored manifest (the Celery worker, change after change) holds it
        # already: reading and composing it again at every change would be work thrown away.
        if held is not None and held.signature:
            stored = self.l2.signature(attempt.identity)
            if stored == (held.version, held.signature):
                return held
        view, _ = self._stored_view(attempt, 0)
        return view or held

    def _poll(self, attempt: _Attempt) -> IndexHandle | None:
        kb = attempt.knowledge_base
        hit = self._l1_get(attempt)
        if hit is not None:
            return self._handle(attempt, Tier.L1, hit)
        for version in (self.l2.version(attempt.identity), self.l3.version(kb.pk)):
            if version is not None and version >= attempt.current:
                return self._from_lower_tiers(attempt)
        return None

    def _build(self, attempt: _Attempt) -> IndexHandle:
        """Build the current version: a delta on the newest stored (or held) view when one
        exists, else in full. Stores segments before the manifest naming them."""
        kb = attempt.knowledge_base
        started = time.perf_counter()
        if attempt.wait_started is not None and not attempt.waited_ms:
            attempt.waited_ms = (started - attempt.wait_started) * 1000
        base = self._older_view(attempt, held_first=False)
        built = None
        if base is not None:
            built = build_delta(kb, base.manifest, base.segments)
        if built is None:
            built = build_full(kb, merges=0)
        view = self.store_built(attempt.identity, kb, built, base)
        with self._count_lock:
            if built.full:
                self._build_count += 1
            else:
                self._delta_count += 1
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
        self, identity: Identity, kb: KnowledgeBase, built: Built, base: View | None = None
    ) -> View:
        """Write a build's new segments to L3 and L2, then the manifest naming them; the
        composed view (``base`` gives the segments a delta kept)."""
        for (key, segment), payload in zip(
            built.new_segments.items(), _sealed(identity, built.new_segments), strict=True
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
        view, payload = _sealed_view(identity, compose(built.manifest, segments, "", previous))
        self.l3.put(kb.tenant_id, kb.pk, view.manifest, payload)
        self.l2.put(identity, view.version, payload)
        return view

    # ------------------------------------------------------------------ merging

    def merge(self, knowledge_base: KnowledgeBase) -> str:
        """Fold the segments ``plan_merge`` picks into one, dropping their deleted chunks, and
        store the manifest of the same version naming it (only if the stored manifest is still
        the one merged: a change meanwhile wins, and the next merge starts from it). Then
        delete segments dropped longer than the grace period ago."""
        identity = identity_of(knowledge_base)
        lock = try_build_lock(self.l2, identity, _MERGE_LOCK)
        if lock is None:
            return "another merge is running"
        try:
            handle = self.warm(knowledge_base)
            view = handle.view
            plan = plan_merge(view)
            if plan is None:
                result = "nothing to merge"
            else:
                result = self._merge(identity, knowledge_base, view, plan)
            self.collect_garbage(knowledge_base)
            return result
        finally:
            lock.release()

    def _merge(self, identity: Identity, kb: KnowledgeBase, view: View, plan: list[int]) -> str:
        started = time.perf_counter()
        manifest = view.manifest
        deletions = manifest.deletions()
        folded = [manifest.keys[i] for i in plan]
        merged = Segment.merge(
            [view.segments[k] for k in folded],
            deleted_per_segment=[deletions[i] for i in plan],
        )
        kept = [i for i in range(len(manifest.keys)) if i not in set(plan)]
        keys = [manifest.keys[i] for i in kept]
        deleted = [deletions[i] for i in kept]
        segments = {k: view.segments[k] for k in keys}
        if len(merged):
            key = new_key()
            keys.append(key)
            deleted.append(np.empty(0, np.int64))
            segments[key] = merged
            payload = seal_segment(identity, key, merged)
            seconds = time.perf_counter() - started
            self.l3.put_segment(
                kb.tenant_id, kb.pk, key, payload, len(merged), merged.postings, seconds
            )
            self.l2.put_segment(identity, key, payload)
        new = Manifest(
            version=manifest.version,
            keys=tuple(keys),
            deleted=np.concatenate(deleted) if deleted else np.empty(0, np.int64),
            deleted_in=np.concatenate([np.full(d.size, i, np.int32) for i, d in enumerate(deleted)])
            if deleted
            else np.empty(0, np.int32),
            doc_ids=manifest.doc_ids,
            doc_stamps=manifest.doc_stamps,
            basis=manifest.basis,
            merges=manifest.merges + 1,
            chunk_count=manifest.chunk_count,
            build_seconds=manifest.build_seconds,
        )
        merged_view, payload = _sealed_view(identity, compose(new, segments, "", view))
        if not view.signature or not self.l3.put(
            kb.tenant_id, kb.pk, merged_view.manifest, payload, replaces=view.signature
        ):
            return "superseded: the index changed during the merge"
        self.l2.put(identity, new.version, payload)
        self.l3.mark_dropped(kb.pk, folded)
        for key in folded:
            self.l2.drop_segment(kb.pk, key)
        self._fill_l1_if_held(identity, merged_view)
        return (
            f"merged {len(folded)} segments into one of {len(merged)} chunks "
            f"in {time.perf_counter() - started:.2f} s"
        )

    def collect_garbage(self, knowledge_base: KnowledgeBase) -> int:
        identity = identity_of(knowledge_base)

        def keys_of(data: bytes, signature: str, version: int) -> tuple[str, ...]:
            payload = SignedPayload(manifest_label(version), signature, data)
            return open_manifest(identity, version, payload).keys

        try:
            return self.l3.collect_garbage(knowledge_base.pk, keys_of, self.config.segment_grace_s)
        except (PayloadRejected, PayloadUnreadable):
            return 0  # the next get drops and rebuilds that manifest

    # ------------------------------------------------------------------ helpers

    def _fill_l1(self, attempt: _Attempt, view: View) -> None:
        self.l1.put(attempt.identity, view, view.version)

    def _fill_l1_if_held(self, identity: Identity, view: View) -> None:
        """A merge replaces this process's view of the same version, if it still holds one."""
        held = self.l1.peek(identity)
        if held is not None and held.version == view.version:
            self.l1.put(identity, view, view.version)

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


def _sealed(identity: Identity, segments: dict[str, Segment]) -> Iterator[SignedPayload]:
    """The segments' payloads in order. Several (a full build) are sealed by two threads while
    the caller writes the ones before (zlib and the HMAC release the GIL), so sealing and
    writing overlap instead of adding up."""
    if len(segments) < 2:
        yield from (seal_segment(identity, key, s) for key, s in segments.items())
        return
    with ThreadPoolExecutor(2, thread_name_prefix="bm25-seal") as pool:
        yield from pool.map(lambda item: seal_segment(identity, *item), segments.items())


def current_version(knowledge_base: KnowledgeBase) -> int:
    """The KB's index_version as committed now (one primary-key lookup), on the database a
    build would read (``retrieval.replica.search_reads``: a search's route, else the
    primary), so the version asked for and the version built agree."""
    version = (
        KnowledgeBase.objects.using(search_reads())
        .filter(pk=knowledge_base.pk, tenant_id=knowledge_base.tenant_id)
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
