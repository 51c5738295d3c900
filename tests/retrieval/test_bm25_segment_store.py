"""BM25Store on segments against the real PostgreSQL and Redis: a change builds a small delta
segment (never the whole index again), another process loads only the segments it lacks,
merges fold segments without changing a score, and every view scores exactly as rank_bm25 over
the knowledge base's searchable chunks."""

from __future__ import annotations

import time
from datetime import timedelta

import numpy as np
import pytest
from django.db.models import F
from rank_bm25 import BM25Okapi

from knowledge.analysis import get_analyzer
from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import SEARCHABLE_CHUNK
from knowledge.services import documents as document_services
from knowledge.services.curation import ChunkChanges, set_document_enabled, update_chunk
from knowledge.services.knowledge_bases import update_knowledge_base
from knowledge.services.processing import process_document
from retrieval.bm25store import BM25Store, BM25StoreConfig, Tier, build_time_limit_s
from retrieval.bm25store import store as store_module
from retrieval.bm25store.merging import MERGE_FACTOR
from retrieval.bm25store.payload import SignedPayload, manifest_label, open_raw, seal
from retrieval.core.identity import identity_of
from retrieval.models import BM25Manifest, BM25Segment
from tests.conftest import CEILING_S, at_once
from tests.factories import add_document
from tests.retrieval.test_bm25_segments import _format_1
from tests.retrieval.test_bm25_store import chunk_ids, hits, make_kb, version_of


def doc(n: int) -> bytes:
    return f"# Report {n}\n\nThe turbine inspection found marker{n} wear on blade {n}.".encode()


def assert_exact(kb: KnowledgeBase, handle) -> None:
    """Every live chunk's score equals rank_bm25 over the searchable chunks, for a few
    queries, and the view holds exactly those chunks."""
    rows = list(
        Chunk.objects.filter(SEARCHABLE_CHUNK, knowledge_base=kb)
        .order_by("id")
        .values_list("id", "tokens")
    )
    index = handle.index
    assert sorted(index.doc_ids.tolist()) == [r[0] for r in rows]
    okapi = BM25Okapi([list(r[1]) for r in rows])
    position = {r[0]: i for i, r in enumerate(rows)}
    for query in (["turbin", "inspect"], ["marker3", "blade"], ["wear", "wear", "section"]):
        expected = okapi.get_scores(query)
        got = index.get_scores(query)
        order = [position[i] for i in index.doc_ids.tolist()]
        np.testing.assert_allclose(got, expected[order], rtol=0, atol=1e-9)


@pytest.fixture
def store(monkeypatch):
    merges_due: list[int] = []
    monkeypatch.setattr(store_module, "BUILD_WAIT_S", CEILING_S)
    store = BM25Store(on_merge_due=merges_due.append)
    store.merges_due = merges_due
    store.created = []
    yield store
    for kb_id in store.created:
        store.l2.delete(kb_id)
    store.l2.client.close()


@pytest.fixture
def kb(store, db):
    kb = make_kb()
    store.created.append(kb.pk)
    return kb


def test_a_new_document_is_a_delta_segment_and_another_process_loads_only_it(store, kb):
    add_document(kb, "a.md", doc(1))
    first = store.get(kb)
    assert (first.built, len(first.view.manifest.keys)) == ("full", 1)
    other = BM25Store()
    try:
        assert other.get(kb).tier == Tier.L2  # the other process holds the first version

        added = add_document(kb, "b.md", doc(2))
        delta = store.get(kb)
        assert (delta.tier, delta.built) == (Tier.BUILD, "delta")
        assert store.build_count == 1 and store.delta_count == 1
        assert len(delta.view.manifest.keys) == 2
        assert hits(delta, "marker2") == chunk_ids(kb, added)
        assert BM25Segment.objects.filter(knowledge_base=kb).count() == 2

        seen = other.get(kb)
        assert (seen.tier, seen.version, seen.loaded_segments) == (Tier.L2, delta.version, 1)
        assert hits(seen, "marker2") == chunk_ids(kb, added)
        assert_exact(kb, seen)
    finally:
        other.l2.client.close()


def test_deletion_reprocessing_and_an_edit_in_place_stay_exact(store, kb):
    documents = [add_document(kb, f"{n}.md", doc(n)) for n in range(1, 6)]
    store.get(kb)
    # Deleted: its chunks leave every later view.
    document_services.delete_document(tenant=kb.tenant, document=documents[0])
    gone = store.get(kb)
    assert gone.built == "delta" and hits(gone, "marker1") == []
    assert_exact(kb, gone)
    # Edited in place: the chunk keeps its id, its old words go and its new ones come.
    chunk = Chunk.objects.filter(document=documents[1]).order_by("position").last()
    update_chunk(
        tenant=kb.tenant,
        chunk=chunk,
        changes=ChunkChanges(content="The quokka gearbox replaced it entirely."),
    )
    edited = store.get(kb)
    assert edited.built == "delta"
    assert hits(edited, "quokka") == [chunk.pk]
    assert chunk.pk not in hits(edited, "marker2")
    assert_exact(kb, edited)
    # Edited again: deleted from the delta segment that held its first edit.
    update_chunk(tenant=kb.tenant, chunk=chunk, changes=ChunkChanges(content="A wombat now."))
    again = store.get(kb)
    assert hits(again, "quokka") == [] and hits(again, "wombat") == [chunk.pk]
    assert_exact(kb, again)
    # Reprocessed: new chunks once ready again.
    old_chunks = chunk_ids(kb, documents[2])
    document_services.reprocess_document(tenant=kb.tenant, document=documents[2])
    process_document(documents[2].pk)
    assert not set(old_chunks) & set(chunk_ids(kb, documents[2]))
    back = store.get(kb)
    assert hits(back, "marker3") == chunk_ids(kb, documents[2])
    assert_exact(kb, back)
    # Disabled: out of search, chunks kept.
    set_document_enabled(tenant=kb.tenant, document=documents[3], enabled=False)
    disabled = store.get(kb)
    assert hits(disabled, "marker4") == [] and disabled.built == "delta"
    assert_exact(kb, disabled)


def test_a_stored_version_records_its_dead_frequencies_for_the_readers(store, kb, monkeypatch):
    documents = [add_document(kb, f"{n}.md", doc(n)) for n in range(1, 4)]
    assert store.get(kb).view.manifest.dead is not None  # recorded from the first build on
    gone = chunk_ids(kb, documents[0])
    document_services.delete_document(tenant=kb.tenant, document=documents[0])
    built = store.get(kb)
    dead = built.view.manifest.dead_frequencies()
    held = built.view.manifest.deletions()
    assert sorted(np.concatenate(held).tolist()) == sorted(gone)
    # The record equals what a count over the postings finds.
    for (terms, counts), segment, deleted in zip(
        dead, built.view.index.segments, held, strict=True
    ):
        live = ~np.isin(segment.doc_ids, deleted)
        recount = np.diff(segment.offsets) - segment.document_frequencies(live)
        assert terms.tolist() == np.flatnonzero(recount).tolist()
        assert counts.tolist() == recount[terms].tolist()
    passes = []
    real = type(built.view.index.segments[0]).document_frequencies
    monkeypatch.setattr(
        type(built.view.index.segments[0]),
        "document_frequencies",
        lambda self, live=None: passes.append(live is not None) or real(self, live),
    )
    other = BM25Store()
    try:
        read = other.get(kb)  # another process: the stored manifest, composed
        assert (read.tier, read.version) == (Tier.L2, built.version)
        assert passes == []  # no count over a segment's postings
        assert hits(read, "marker1") == []
        assert_exact(kb, read)
    finally:
        other.l2.client.close()


def test_a_format_1_manifest_is_treated_as_missing_and_the_index_rebuilt(store, kb):
    """Format 1 manifests (``np.savez``) in Redis and PostgreSQL are not read: a process drops
    them and builds the index in full from PostgreSQL, storing format 2."""
    documents = [add_document(kb, f"{n}.md", doc(n)) for n in range(1, 4)]
    document_services.delete_document(tenant=kb.tenant, document=documents[0])
    built = store.get(kb)
    manifest, identity = built.view.manifest, identity_of(kb)
    old = seal(identity, manifest_label(manifest.version), _format_1(manifest))
    store.l2.put(identity, manifest.version, old)
    assert store.l3.put(kb.tenant_id, kb.pk, manifest, old, replaces=built.view.signature)
    other = BM25Store()
    try:
        read = other.get(kb)
        assert (read.tier, read.built, read.version) == (Tier.BUILD, "full", built.version)
        assert other.build_count == 1
        assert read.view.signature != old.signature
        assert hits(read, "marker1") == []
        assert_exact(kb, read)
    finally:
        other.l2.client.close()
    stored = BM25Manifest.objects.get(knowledge_base=kb)
    assert stored.signature == read.view.signature
    raw = open_raw(
        identity,
        SignedPayload(manifest_label(stored.version), stored.signature, bytes(stored.payload)),
    )
    assert raw[:8] == b"BM25MAN\x00"  # format 2


def test_a_change_of_user_words_rebuilds_in_full(store, kb):
    add_document(kb, "a.md", doc(1))
    store.get(kb)
    update_knowledge_base(
        tenant=kb.tenant, knowledge_base=kb, changes={}, user_words=["turbine1 blade"]
    )
    KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=version_of(kb) + 1)
    assert store.get(kb).built == "full"


def test_merges_fold_segments_without_changing_a_score(store, kb):
    for n in range(MERGE_FACTOR + 1):
        add_document(kb, f"{n}.md", doc(n))
        store.get(kb)
    before = store.get(kb)
    assert len(before.view.manifest.keys) == MERGE_FACTOR + 1
    assert store.merges_due  # the builds asked for a merge
    queries = [["turbin"], ["marker4", "blade"], ["wear", "inspect"]]
    scores = {tuple(q): dict(before.index.search(q, 100)) for q in queries}

    assert store.merge(kb).startswith("merged")

    row = BM25Manifest.objects.get(knowledge_base=kb)
    assert (row.version, row.merges) == (before.version, 1)
    assert row.segment_count < MERGE_FACTOR
    store.l1.clear()
    after = store.get(kb)
    assert after.tier == Tier.L2 and after.version == before.version
    for query in queries:
        found = dict(after.index.search(query, 100))
        assert found.keys() == scores[tuple(query)].keys()
        for chunk_id, score in found.items():
            assert score == pytest.approx(scores[tuple(query)][chunk_id], abs=1e-12)
    assert_exact(kb, after)
    assert store.merge(kb) == "nothing to merge"
    # Folded segments are marked, and deleted once a build may no longer name them, not before.
    dropped = BM25Segment.objects.filter(knowledge_base=kb, dropped_at__isnull=False)
    count = dropped.count()
    assert count >= MERGE_FACTOR
    dropped.update(dropped_at=F("dropped_at") - timedelta(seconds=build_time_limit_s() - 60))
    assert store.collect_garbage(kb) == 0
    dropped.update(dropped_at=F("dropped_at") - timedelta(seconds=61))
    assert store.collect_garbage(kb) == count
    assert not dropped.exists()
    store.l1.clear()
    store.l2.delete(kb.pk)
    assert_exact(kb, store.get(kb))  # everything the manifest names is still stored


def test_the_writer_builds_on_the_view_it_holds_while_that_is_the_stored_one(
    store, kb, monkeypatch
):
    """The worker builds change after change: its own last view is the stored manifest (L2
    has its signature), so it is the delta's base without being read and composed again. Once
    another process has stored a manifest (a merge keeps the version and changes the
    segments), the stored one is read: the held view may name folded segments."""
    for n in range(MERGE_FACTOR + 1):
        add_document(kb, f"{n}.md", doc(n))
        store.get(kb)
    reads = []  # the stored manifests this process opens
    opened = store._open

    def counted(*args, key=None, **kwargs):
        if key is None:
            reads.append(1)
        return opened(*args, key=key, **kwargs)

    monkeypatch.setattr(store, "_open", counted)
    add_document(kb, "next.md", doc(100))
    delta = store.get(kb)
    assert (delta.built, reads) == ("delta", [])
    assert_exact(kb, delta)

    other = BM25Store()
    try:
        assert other.merge(kb).startswith("merged")  # the same version, other segments
    finally:
        other.l2.client.close()
    held, row = store.l1.peek(identity_of(kb)), BM25Manifest.objects.get(knowledge_base=kb)
    assert (held.version, row.merges) == (row.version, 1) and held.signature != row.signature
    added = add_document(kb, "after-merge.md", doc(101))
    after = store.get(kb)
    assert (after.built, reads) == ("delta", [1])  # built on the merged, stored manifest
    assert hits(after, "marker101") == chunk_ids(kb, added)
    assert_exact(kb, after)
    stored = set(BM25Segment.objects.filter(knowledge_base=kb).values_list("key", flat=True))
    assert set(after.view.manifest.keys) <= stored


def test_a_search_answers_from_its_older_view_while_another_process_builds(store, kb, monkeypatch):
    add_document(kb, "a.md", doc(1))
    old = store.get(kb)
    add_document(kb, "b.md", doc(2))
    lock = store.l2.lock(identity_of(kb), version_of(kb))  # another process is building
    assert lock is not None
    monkeypatch.setattr(store_module, "STALE_WAIT_S", 0.1)
    patient = BM25Store()
    try:
        patient.l1.put(identity_of(kb), old.view, old.version)
        handle = patient.get(kb)
        assert handle.stale and handle.version == old.version < handle.asked_version
        assert handle.trace()["stale"] is True
        assert hits(handle, "marker2") == []
        lock.release()
        current = patient.get(kb)  # the lock is free: the new version is built at once
        assert not current.stale and hits(current, "marker2") != []
    finally:
        if lock.owned():
            lock.release()
        patient.l2.client.close()


def test_a_search_process_leaves_the_build_after_a_change_to_the_worker(store, kb, monkeypatch):
    """A web process holding the version before answers from it (stale, deferred) without
    building or taking the build lock; once the worker has stored the new version, the next
    search loads just its new segment."""
    add_document(kb, "a.md", doc(1))
    monkeypatch.setattr(store_module, "RECHECK_S", 0)
    web = BM25Store(BM25StoreConfig.from_settings(defer_build_s=CEILING_S))
    try:
        old = web.get(kb)
        add_document(kb, "b.md", doc(2))
        deferred = web.get(kb)
        assert deferred.stale and deferred.trace()["deferred"] is True
        assert deferred.version == old.version < deferred.asked_version == version_of(kb)
        assert (web.build_count, web.delta_count) == (1, 0) and hits(deferred, "marker2") == []
        lock = store.l2.lock(identity_of(kb), version_of(kb))
        assert lock is not None  # the deferring process did not take it
        lock.release()

        assert store.warm(kb).built == "delta"  # the worker's invalidate_and_warm
        current = web.get(kb)
        assert (current.tier, current.loaded_segments, current.stale) == (Tier.L2, 1, False)
        assert (web.build_count, web.delta_count) == (1, 0) and hits(current, "marker2") != []
        assert_exact(kb, current)
    finally:
        web.l2.client.close()


def test_while_deferring_a_search_process_asks_the_lower_tiers_at_most_every_recheck_s(
    store, kb, monkeypatch
):
    """Searches after the first that found L2 and L3 without the new version answer from the
    held view without asking again for ``RECHECK_S``: the worker's stored version is picked
    up by the first search after that, not before."""
    add_document(kb, "a.md", doc(1))
    monkeypatch.setattr(store_module, "RECHECK_S", CEILING_S)
    web = BM25Store(BM25StoreConfig.from_settings(defer_build_s=CEILING_S))
    try:
        old = web.get(kb)
        add_document(kb, "b.md", doc(2))
        assert web.get(kb).deferred  # asked L2 and L3: not there yet
        assert store.warm(kb).built == "delta"  # stored now
        again = web.get(kb)  # within RECHECK_S: not asked
        assert again.deferred and again.version == old.version < again.asked_version
        assert hits(again, "marker2") == []
        add_document(kb, "c.md", doc(3))  # another version: asked at once
        assert store.warm(kb).built == "delta"
        current = web.get(kb)
        assert (current.tier, current.stale) == (Tier.L2, False)
        assert hits(current, "marker3") != [] and hits(current, "marker2") != []
    finally:
        web.l2.client.close()


def test_a_stored_version_is_found_once_recheck_s_has_passed(store, kb, monkeypatch):
    add_document(kb, "a.md", doc(1))
    monkeypatch.setattr(store_module, "RECHECK_S", 0.2)
    web = BM25Store(BM25StoreConfig.from_settings(defer_build_s=CEILING_S))
    try:
        web.get(kb)
        add_document(kb, "b.md", doc(2))
        began = time.monotonic()
        assert web.get(kb).deferred
        assert store.warm(kb).built == "delta"
        deadline = began + CEILING_S
        handle = web.get(kb)
        while handle.stale and time.monotonic() < deadline:
            time.sleep(0.01)
            handle = web.get(kb)
        assert (handle.tier, handle.stale) == (Tier.L2, False)
        assert time.monotonic() - began >= 0.2
        assert hits(handle, "marker2") != []
    finally:
        web.l2.client.close()


def test_the_deferral_is_bounded_even_while_changes_keep_coming(store, kb):
    """Without a worker, a process holding an old view builds once ``defer_build_s`` has
    passed since it first saw a newer version: later changes do not restart the clock."""
    add_document(kb, "a.md", doc(1))
    web = BM25Store(BM25StoreConfig.from_settings(defer_build_s=0.3))
    try:
        web.get(kb)
        add_document(kb, "b.md", doc(2))
        began = time.monotonic()
        assert web.get(kb).deferred
        n, handle = 3, None
        deadline = began + CEILING_S
        while time.monotonic() < deadline:
            add_document(kb, f"{n}.md", doc(n))  # a new version each time
            n += 1
            handle = web.get(kb)
            if not handle.stale:
                break
        assert handle is not None and not handle.stale and handle.tier == Tier.BUILD
        assert time.monotonic() - began >= 0.3
        assert hits(handle, f"marker{n - 1}") != []
        assert_exact(kb, handle)
    finally:
        web.l2.client.close()


def test_a_process_holding_no_view_builds_at_once_even_when_deferring(store, kb):
    add_document(kb, "a.md", doc(1))
    cold = BM25Store(BM25StoreConfig.from_settings(defer_build_s=CEILING_S))
    try:
        handle = cold.get(kb)
        assert (handle.tier, handle.built, handle.stale) == (Tier.BUILD, "full", False)
    finally:
        cold.l2.client.close()


@pytest.mark.django_db(transaction=True)
def test_concurrent_searches_after_a_change_build_one_delta(store):
    kb = make_kb()
    store.created.append(kb.pk)
    for n in range(3):
        add_document(kb, f"{n}.md", doc(n))
    previous = store.get(kb).version
    add_document(kb, "new.md", doc(9))
    handles = at_once(8, lambda: store.get(kb))
    assert store.delta_count == 1 and store.build_count == 1
    assert [h.tier for h in handles].count(Tier.BUILD) == 1
    # The others waited for that build, or answered from the view held meanwhile (stale, the
    # version before): never a second build, never an error.
    fresh = [h for h in handles if not h.stale]
    assert {h.version for h in fresh} == {version_of(kb)}
    assert {h.version for h in handles if h.stale} <= {previous}
    assert all(hits(h, "marker9") for h in fresh)
    assert_exact(kb, fresh[0])
    assert store.get(kb).version == version_of(kb) and not store.get(kb).stale
    kb.tenant.delete()


def test_the_analysed_query_words_exist_in_the_documents():
    """The queries above are analysed forms of the documents' words (a typo here would make
    the exactness checks compare zeros)."""
    tokens = get_analyzer().tokens(doc(3).decode())
    assert {"turbin", "inspect", "marker3", "blade", "wear"} <= set(tokens)
