"""BM25Store against the real PostgreSQL and Redis: tiers and promotion, versions, integrity,
one build under concurrency, Redis outages, and the vector-only switch."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import pickle
import struct
import tempfile
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from django.db import DataError, transaction
from django.db.models.expressions import RawSQL

from bench.synthetic import zipf_corpus
from knowledge.analysis import get_analyzer
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services import documents as document_services
from knowledge.services.knowledge_bases import create_knowledge_base
from rag_project import embedded
from retrieval.bm25 import SegmentedIndex
from retrieval.bm25.segment import SEGMENT_FORMAT_VERSION, Segment
from retrieval.bm25store import BM25Store, BM25StoreConfig, Tier, availability, fetch
from retrieval.bm25store import store as store_module
from retrieval.bm25store.fetch import fetch_segments
from retrieval.bm25store.handle import View, compose
from retrieval.bm25store.manifest import Manifest
from retrieval.bm25store.payload import (
    PayloadRejected,
    SignedPayload,
    open_segment,
    seal_segment,
    segment_label,
    sign,
)
from retrieval.core.identity import Identity, identity_of, knowledge_base_slot
from retrieval.core.lru import ByteLRU
from retrieval.models import BM25Manifest, BM25Segment
from tests.conftest import CEILING_S, at_once
from tests.factories import TenantFactory, add_document

MANUAL = b"# Pump manual\n\nThe zebrafish pump circulates coolant through the heat exchanger.\n"
NOTES = b"# Field notes\n\nThe quokka valve regulates pressure in the secondary loop.\n"
# Several chunks on other subjects, so that a word of one chunk has a positive idf.
FILLER = "\n\n".join(
    f"## Section {n}\n\n" + " ".join(f"{word}{n}" for word in subject.split())
    for n, subject in enumerate(
        [
            "installation requires mounting brackets anchors and a level surface",
            "electrical wiring follows the local code with grounded circuits only",
            "firmware updates arrive monthly through the management console",
            "warranty claims need the serial number and proof of purchase",
            "cleaning schedules depend on dust exposure and humidity levels",
        ]
    )
).encode()


def make_kb(name: str = "Manuals", filler: bool = True) -> KnowledgeBase:
    kb = create_knowledge_base(
        tenant=TenantFactory(),
        name=name,
        embedding=EmbeddingConfig(provider="none"),
        chunk_size=200,
        chunk_overlap=0,
    )
    if filler:
        add_document(kb, "filler.md", FILLER)
    return kb


def add_ready_chunks(kb: KnowledgeBase, corpus: list[list[str]]) -> None:
    """Many chunks at once, straight into the table (for build-sized tests)."""
    document = Document.objects.create(
        tenant=kb.tenant,
        knowledge_base=kb,
        title="bulk",
        original_filename="bulk.txt",
        file="bulk.txt",
        sha256=os.urandom(32).hex(),
        status=Document.Status.READY,
    )
    Chunk.objects.bulk_create(
        [
            Chunk(
                tenant=kb.tenant,
                knowledge_base=kb,
                document=document,
                position=i,
                content="",
                tokens=tokens,
            )
            for i, tokens in enumerate(corpus)
        ],
        batch_size=2000,
    )


def hits(handle, word: str) -> list[int]:
    return [chunk_id for chunk_id, _ in handle.index.search(get_analyzer().tokens(word), 10)]


def chunk_ids(kb: KnowledgeBase, document: Document) -> list[int]:
    chunks = Chunk.objects.filter(knowledge_base=kb, document=document)
    return list(chunks.values_list("id", flat=True))


def version_of(kb: KnowledgeBase) -> int:
    return KnowledgeBase.objects.get(pk=kb.pk).index_version


def put_in_l2(store: BM25Store, identity: Identity, view: View) -> None:
    """What another process's build leaves in Redis: the segments, then the manifest."""
    for key, segment in view.segments.items():
        store.l2.put_segment(identity, key, seal_segment(identity, key, segment))
    store.l2.put(identity, view.version, view.manifest.seal(identity))


def view_of_corpus(version: int, doc_ids: list[int], corpus: list[list[str]]) -> View:
    """A one-segment view of token lists, stored nowhere."""
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


def manifest_key(kb: KnowledgeBase) -> str:
    return f"rag:bm25:m:{kb.pk}"


def segment_key(store: BM25Store, kb: KnowledgeBase) -> str:
    (key,) = store.get(kb).view.manifest.keys
    return f"rag:bm25:s:{kb.pk}:{key}"


@pytest.fixture
def store(monkeypatch):
    # Waiting for another builder gives up after BUILD_WAIT_S and builds too; a loaded
    # machine can stretch a build that far, and "built once" would fail. The tests that wait
    # want to see the wait end because the build ended: give it the ceiling. (The one that
    # wants the give-up sets its own.)
    monkeypatch.setattr(store_module, "BUILD_WAIT_S", CEILING_S)
    store = BM25Store()
    created: list[int] = []
    store.created = created
    yield store
    for kb_id in created:
        store.l2.delete(kb_id)  # rows roll back with the test; Redis keeps what it was given
    store.l2.client.close()


@pytest.fixture
def kb(store, db):
    kb = make_kb()
    store.created.append(kb.pk)
    return kb


@pytest.fixture
def bare_kb(store, db):
    kb = make_kb(filler=False)
    store.created.append(kb.pk)
    return kb


# --------------------------------------------------------------------------- tiers


def test_tiers_are_read_in_order_and_lower_hits_refill_the_upper_tiers(store, kb):
    document = add_document(kb, "manual.md", MANUAL)
    expected = chunk_ids(kb, document)
    identity = identity_of(kb)

    first = store.get(kb)
    assert (first.tier, first.version) == (Tier.BUILD, version_of(kb))
    assert hits(first, "zebrafish") == expected
    row = BM25Manifest.objects.get(knowledge_base=kb)
    (segment,) = BM25Segment.objects.filter(knowledge_base=kb)
    assert (row.version, row.chunk_count, row.segment_count) == (
        first.version,
        Chunk.objects.filter(knowledge_base=kb).count(),
        1,
    )
    assert segment.payload_bytes == len(bytes(segment.payload)) > 0
    assert store.l2.version(identity) == first.version

    assert store.get(kb).tier == Tier.L1

    store.l1.clear()
    from_l2 = store.get(kb)
    assert from_l2.tier == Tier.L2 and hits(from_l2, "zebrafish") == expected
    assert store.get(kb).tier == Tier.L1  # the L2 hit refilled L1

    store.l1.clear()
    store.l2.delete(kb.pk)
    from_l3 = store.get(kb)
    assert from_l3.tier == Tier.L3 and hits(from_l3, "zebrafish") == expected
    assert store.l2.version(identity) == first.version  # the L3 hit refilled L2 ...
    assert store.get(kb).tier == Tier.L1  # ... and L1
    store.l1.clear()
    assert store.get(kb).tier == Tier.L2

    assert store.build_count == 1
    assert first.trace()["tier"] == "build"
    assert from_l3.trace()["chunks"] == Chunk.objects.filter(knowledge_base=kb).count()


def test_only_ready_documents_are_indexed(store, kb):
    add_document(kb, "manual.md", MANUAL)
    pending = document_services.create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name="notes.md",
        stream=io.BytesIO(NOTES),
        queue=False,
    )
    Chunk.objects.create(
        tenant=kb.tenant,
        knowledge_base=kb,
        document=pending,
        position=0,
        content="",
        tokens=get_analyzer().tokens("quokka valve"),
    )
    handle = store.get(kb)
    assert hits(handle, "quokka") == []
    assert hits(handle, "zebrafish") != []


def test_stored_tokens_are_indexed_exactly_whatever_characters_they_hold(store, bare_kb):
    corpus = [["odd\x1ftoken", "x"], ["", "y"], [], ["z"], ["传感器", "y"]]
    add_ready_chunks(bare_kb, corpus)
    ids = list(
        Chunk.objects.filter(knowledge_base=bare_kb)
        .order_by("position")
        .values_list("id", flat=True)
    )
    index = store.get(bare_kb).index
    assert len(index) == 5
    assert [chunk_id for chunk_id, _ in index.search(["odd\x1ftoken"], 5)] == [ids[0]]
    assert index.search(["odd"], 5) == []
    assert [chunk_id for chunk_id, _ in index.search(["传感器"], 5)] == [ids[4]]
    assert index.idf("") is not None  # the empty token is kept, as stored


def postings_of(segment: Segment) -> tuple[dict[str, dict[int, int]], dict[int, int]]:
    """term -> {chunk id: tf}, and chunk id -> length: a segment whatever its order."""
    terms = {
        term: dict(
            zip(
                segment.doc_ids[segment.post_docs[start:end]].tolist(),
                segment.post_tf[start:end].tolist(),
                strict=True,
            )
        )
        for term, start, end in zip(
            segment.terms, segment.offsets[:-1], segment.offsets[1:], strict=True
        )
    }
    return terms, dict(zip(segment.doc_ids.tolist(), segment.lengths.tolist(), strict=True))


def test_segments_read_in_parts_hold_exactly_the_stored_tokens(bare_kb):
    corpus = zipf_corpus(600, vocab=400, mean_len=12, seed=5)
    # Rows the bytes path cannot split (read again as arrays), among the regular ones.
    corpus[7] = ["odd\x1ftoken", "x"]
    corpus[250] = ["a", None, "b"]
    corpus[251] = [""]
    corpus[400] = []
    add_ready_chunks(bare_kb, corpus)
    stored = Chunk.objects.filter(knowledge_base=bare_kb).values_list("id", "tokens", "document_id")
    by_id = {i: ([t for t in tokens if t is not None], group) for i, tokens, group in stored}
    ids = list(by_id)

    segments = fetch_segments(bare_kb, max_tokens=2000)

    assert len(segments) > 3
    assert sorted(i for s in segments for i in s.doc_ids.tolist()) == sorted(ids)
    for segment in segments:
        assert int(segment.lengths.sum()) <= 2000
        assert np.all(np.diff(segment.doc_ids) > 0)
        members = segment.doc_ids.tolist()
        reference = Segment.build(
            members, [by_id[i][0] for i in members], [by_id[i][1] for i in members]
        )
        assert postings_of(segment) == postings_of(reference)
        assert segment.groups.tolist() == reference.groups.tolist()


def test_an_error_while_reading_reaches_the_caller_and_leaves_no_thread(bare_kb):
    add_ready_chunks(bare_kb, [["alpha", "beta"]] * 12_000)
    failing = Chunk.objects.filter(knowledge_base=bare_kb).annotate(
        boom=RawSQL("1 / (position - 11000)", [])
    )
    before = {t.name for t in threading.enumerate()}
    with (
        pytest.raises(DataError, match="division by zero"),
        transaction.atomic(),
        fetch._batches(failing.values_list("id", "boom")) as batches,
    ):
        for _ in batches:  # the third batch of 5,000 rows fails, in the reader thread
            pass
    assert {t.name for t in threading.enumerate()} - before == set()


# --------------------------------------------------------------------------- versions


def test_a_change_through_the_services_is_served_at_its_new_version_never_the_old_l1(store, kb):
    manual = add_document(kb, "manual.md", MANUAL)
    old = store.get(kb)
    assert store.get(kb).tier == Tier.L1
    other_process = BM25Store()  # another web process: its own L1, the same L2 and L3
    assert other_process.get(kb).version == old.version
    assert other_process.get(kb).tier == Tier.L1

    notes = add_document(kb, "notes.md", NOTES)
    added = store.get(kb)
    assert added.version == version_of(kb) > old.version
    assert added.tier == Tier.BUILD
    assert hits(added, "quokka") == chunk_ids(kb, notes)
    assert hits(old, "quokka") == []
    seen_elsewhere = other_process.get(kb)
    assert (seen_elsewhere.version, seen_elsewhere.tier) == (added.version, Tier.L2)
    assert hits(seen_elsewhere, "quokka") == chunk_ids(kb, notes)

    zebrafish = chunk_ids(kb, manual)
    document_services.delete_document(tenant=kb.tenant, document=manual)
    deleted = store.get(kb)
    assert deleted.version == version_of(kb) > added.version
    assert hits(deleted, "zebrafish") == [] and hits(added, "zebrafish") == zebrafish
    assert other_process.get(kb).version == deleted.version
    assert hits(other_process.get(kb), "zebrafish") == []
    other_process.l2.client.close()


def test_a_deleted_knowledge_base_leaves_no_tier_behind(
    store, kb, django_capture_on_commit_callbacks
):
    add_document(kb, "manual.md", MANUAL)
    store.get(kb)
    assert BM25Manifest.objects.filter(knowledge_base_id=kb.pk).exists()
    assert store.l2.version(identity_of(kb)) is not None
    segment = segment_key(store, kb)

    with django_capture_on_commit_callbacks(execute=True):
        kb.tenant.delete()

    assert not BM25Manifest.objects.filter(knowledge_base_id=kb.pk).exists()
    assert not BM25Segment.objects.filter(knowledge_base_id=kb.pk).exists()
    assert store.l2.client.exists(manifest_key(kb), segment) == 0
    with pytest.raises(KnowledgeBase.DoesNotExist):
        store.get(kb)  # and nothing is served from this process's L1 either


# --------------------------------------------------------------------------- integrity


class _Exploit:
    """A pickle that runs a shell command when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def exploit_payload(marker: Path) -> bytes:
    header = struct.pack("<8sH", b"BM25SEG\x00", SEGMENT_FORMAT_VERSION)
    return zlib.compress(header + pickle.dumps(_Exploit(marker)))


def test_the_exploit_payload_would_run_if_it_were_ever_loaded(tmp_path):
    marker = tmp_path / "loaded"
    with pytest.raises(Exception):  # noqa: B017 - os.system returns 0, not a segment
        Segment.from_bytes(zlib.decompress(exploit_payload(marker)))
    assert marker.exists()  # so the tests below, where it never appears, mean something


def _flip_a_byte(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


@pytest.mark.parametrize("part", ["segment", "manifest"])
@pytest.mark.parametrize("attack", ["flipped byte", "exploit", "forged signature"])
def test_a_tampered_l2_payload_is_never_loaded_but_dropped_logged_and_rebuilt(
    store, kb, attack, part, tmp_path, caplog
):
    document = add_document(kb, "manual.md", MANUAL)
    built = store.get(kb)
    key = manifest_key(kb) if part == "manifest" else segment_key(store, kb)
    store.l1.clear()
    BM25Manifest.objects.filter(knowledge_base=kb).delete()  # so only L2 can answer
    BM25Segment.objects.filter(knowledge_base=kb).delete()
    marker = tmp_path / "pwned"
    if attack == "flipped byte":
        store.l2.client.hset(key, "p", _flip_a_byte(store.l2.client.hget(key, "p")))
    else:
        evil = exploit_payload(marker)
        store.l2.client.hset(key, "p", evil)
        if attack == "forged signature":
            label = f"m:{built.version}" if part == "manifest" else f"s:{key.rsplit(':', 1)[1]}"
            forged = sign(identity_of(kb), label, evil, secret="a guessed secret key")
            store.l2.client.hset(key, "s", forged)
    tampered = store.l2.client.hget(key, "p")

    with caplog.at_level(logging.WARNING, logger="rag.security"):
        handle = store.get(kb)

    assert not marker.exists()
    assert (handle.tier, handle.rejected) == (Tier.BUILD, ("l2",))
    assert hits(handle, "zebrafish") == chunk_ids(kb, document)
    warnings = [r for r in caplog.records if r.name == "rag.security"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert f"knowledge base {kb.pk}" in message and "l2" in message and part in message
    assert "test-only-secret-key" not in message
    assert store.l2.client.hget(key, "p") != tampered  # dropped (the rebuild wrote anew)
    store.l1.clear()
    assert store.get(kb).tier == Tier.L2  # and what is there now checks out


@pytest.mark.parametrize("part", ["segment", "manifest"])
@pytest.mark.parametrize("attack", ["flipped byte", "exploit", "relabelled"])
def test_a_tampered_l3_payload_is_never_loaded_but_dropped_logged_and_rebuilt(
    store, kb, attack, part, tmp_path, caplog
):
    document = add_document(kb, "manual.md", MANUAL)
    store.get(kb)
    store.l1.clear()
    store.l2.delete(kb.pk)
    marker = tmp_path / "pwned"
    if part == "manifest":
        row = BM25Manifest.objects.get(knowledge_base=kb)
    else:
        row = BM25Segment.objects.get(knowledge_base=kb)
    if attack == "flipped byte":
        row.payload = _flip_a_byte(bytes(row.payload))
    elif attack == "exploit":
        row.payload = exploit_payload(marker)
    elif part == "manifest":  # an old manifest passed off as the current version
        row.version += 1
        KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=row.version)
    else:  # a valid segment passed off as another
        row.key = "0" * 32
        BM25Manifest.objects.filter(knowledge_base=kb).delete()
        stored = view_of_corpus(version_of(kb), [1], [["zebrafish"]])
        manifest = dataclasses.replace(stored.manifest, keys=("0" * 32,))
        payload = manifest.seal(identity_of(kb))
        store.l3.put(kb.tenant_id, kb.pk, manifest, payload)
    row.save()
    builds = store.build_count

    with caplog.at_level(logging.WARNING, logger="rag.security"):
        handle = store.get(kb)

    assert not marker.exists()
    assert (handle.tier, handle.rejected) == (Tier.BUILD, ("l3",))
    assert store.build_count == builds + 1
    assert hits(handle, "zebrafish") == chunk_ids(kb, document)
    warnings = [r for r in caplog.records if r.name == "rag.security"]
    assert len(warnings) == 1 and "l3" in warnings[0].getMessage()
    store.l1.clear()
    store.l2.delete(kb.pk)
    assert store.get(kb).tier == Tier.L3  # the rebuilt rows replaced the rejected one


def test_an_entry_left_by_another_kb_of_the_same_id_is_discarded_not_served(store, kb, caplog):
    """A database made afresh reuses KB ids while Redis keeps the old ones' entries."""
    identity = identity_of(kb)
    stranger = Identity(identity.tenant_id, identity.knowledge_base_id, identity.epoch + 1)
    foreign = view_of_corpus(version_of(kb) + 5, [1, 2, 3], [["zebrafish"], ["other"], ["words"]])
    put_in_l2(store, stranger, foreign)

    with caplog.at_level(logging.WARNING, logger="rag.security"):
        handle = store.get(kb)

    assert handle.tier == Tier.BUILD and hits(handle, "zebrafish") == []
    assert not [r for r in caplog.records if r.name == "rag.security"]  # stale, not tampered
    store.l1.clear()
    assert store.get(kb).tier == Tier.L2  # the build replaced the leftover


# --------------------------------------------------------------------------- one build


@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_cold_gets_build_once(store):
    kb = make_kb(filler=False)
    store.created.append(kb.pk)
    add_ready_chunks(kb, zipf_corpus(4000, vocab=5000, mean_len=40, seed=3))
    handles = at_once(10, lambda: store.get(kb))
    assert store.build_count == 1
    assert [h.tier for h in handles].count(Tier.BUILD) == 1
    assert {h.version for h in handles} == {version_of(kb)}
    assert {len(h.index) for h in handles} == {4000}


@pytest.fixture
def holder(store, bare_kb):
    """Another process's build lock on the KB's current version, released at the end."""
    lock = store.l2.lock(identity_of(bare_kb), version_of(bare_kb))
    assert lock is not None
    yield lock
    if lock.owned():
        lock.release()


def test_a_cold_get_waits_for_another_process_build_instead_of_building(
    store, bare_kb, holder, monkeypatch
):
    kb = bare_kb
    corpus = [["alpha", "beta"], ["beta", "gamma"], ["delta"]]
    add_ready_chunks(kb, corpus)
    identity, version = identity_of(kb), version_of(kb)
    ids = Chunk.objects.filter(knowledge_base=kb).order_by("position").values_list("id", flat=True)
    built = view_of_corpus(version, list(ids), corpus)

    # The other builder finishes once our get is waiting: when the get, refused the lock,
    # first polls L2 for the other's result. (Finishing after a fixed delay instead raced the
    # get on a loaded machine: finished before the get began, there was nothing to wait for.)
    waiting = threading.Event()
    stored_version = store.l2.version

    def polled_version(of):
        waiting.set()
        return stored_version(of)

    monkeypatch.setattr(store.l2, "version", polled_version)

    def other_process_finishes() -> None:  # (in L2: this test's rows are not committed)
        if waiting.wait(CEILING_S):
            put_in_l2(store, identity, built)
        holder.release()

    finisher = threading.Thread(target=other_process_finishes)
    finisher.start()
    try:
        handle = store.get(kb)
    finally:
        waiting.set()  # a get that did not wait must not leave the finisher waiting
        finisher.join()
    assert handle.waited_for_build and not handle.wait_timed_out
    assert handle.tier == Tier.L2 and handle.version == version
    assert store.build_count == 0
    assert handle.index.search(["gamma"], 5) == [(ids[1], pytest.approx(0.468647, abs=1e-6))]


def test_when_the_wait_runs_out_the_get_builds_itself_and_says_so(bare_kb, holder, monkeypatch):
    kb = bare_kb
    add_ready_chunks(kb, [["alpha", "beta"], ["beta", "gamma"]])
    monkeypatch.setattr(store_module, "BUILD_WAIT_S", 0.2)
    impatient = BM25Store()
    try:
        handle = impatient.get(kb)
    finally:
        impatient.l2.delete(kb.pk)
        impatient.l2.client.close()
    assert (handle.tier, handle.waited_for_build, handle.wait_timed_out) == (Tier.BUILD, True, True)
    assert handle.waited_ms >= 200
    assert impatient.build_count == 1 and len(handle.index) == 2


# --------------------------------------------------------------------------- Redis down


@pytest.mark.django_db
def test_searches_stay_correct_while_redis_is_down(caplog):
    root = Path(tempfile.mkdtemp(prefix="rag-bm25-"))
    try:
        embedded.ensure_redis(root)
        store = BM25Store(BM25StoreConfig.from_settings(redis_url=embedded.redis_url(root)))
        kb = make_kb()
        document = add_document(kb, "manual.md", MANUAL)
        expected = chunk_ids(kb, document)
        assert store.get(kb).tier == Tier.BUILD
        store.l1.clear()
        assert store.get(kb).tier == Tier.L2

        embedded.stop_redis(root)
        store.l1.clear()
        with caplog.at_level(logging.WARNING, logger="retrieval.bm25store.l2"):
            from_l3 = store.get(kb)
            store.l1.clear()
            again = store.get(kb)
            # The build path too: its lock falls back to a PostgreSQL advisory lock.
            store.invalidate(kb.pk)
            rebuilt = store.get(kb)

        assert (from_l3.tier, again.tier, rebuilt.tier) == (Tier.L3, Tier.L3, Tier.BUILD)
        assert not from_l3.l2_available
        for handle in (from_l3, again, rebuilt):
            assert handle.version == version_of(kb)
            assert hits(handle, "zebrafish") == expected
        outage_logs = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(outage_logs) == 1  # once per outage, not once per call
        store.l2.client.close()
    finally:
        embedded.stop_all(root)


# --------------------------------------------------------------------------- pieces


def test_l1_is_bounded_in_bytes_and_evicts_the_least_recently_used():
    def index(n: int) -> SegmentedIndex:
        return SegmentedIndex([Segment.build(range(n), [[f"t{i}", "common"] for i in range(n)])])

    small, other, large = index(50), index(50), index(400)
    lru = ByteLRU(max_bytes=small.nbytes + other.nbytes + 10, slot_of=knowledge_base_slot)
    a, b, c = (Identity(1, kb_id, 7) for kb_id in (1, 2, 3))
    lru.put(a, small, 1)
    lru.put(b, other, 1)
    assert lru.get(a, 1) is not None  # a is now the most recently used
    lru.put(c, index(50), 1)
    assert 2 not in lru and 1 in lru and 3 in lru
    assert lru.nbytes <= lru.max_bytes
    lru.put(a, large, 2)  # larger than the whole budget: not kept, and the old a is gone
    assert 1 not in lru
    assert lru.get(c, 2) is None and 3 not in lru  # an older version is dropped on sight
    lru.put(b, other, 1)
    assert lru.get(Identity(1, 2, 8), 1) is None  # same id, another KB (recreated database)
    assert 2 not in lru  # ... dropped on sight too


def test_a_payload_is_bound_to_its_knowledge_base_and_key():
    segment = Segment.build([1, 2, 3], [["alpha"], ["beta"], ["gamma"]])
    identity = Identity(tenant_id=1, knowledge_base_id=2, epoch=3)
    sealed = seal_segment(identity, "a" * 32, segment)

    assert postings_of(open_segment(identity, "a" * 32, sealed))[0]["alpha"] == {1: 1}
    for other, key in [
        (Identity(1, 5, 3), "a" * 32),
        (Identity(9, 2, 3), "a" * 32),
        (Identity(1, 2, 6), "a" * 32),
        (identity, "b" * 32),
    ]:
        with pytest.raises(PayloadRejected):
            open_segment(
                other, key, SignedPayload(segment_label(key), sealed.signature, sealed.data)
            )


def test_bm25_available_reports_missing_dependencies_once(monkeypatch, caplog):
    monkeypatch.setattr(availability, "_available", None)
    assert availability.bm25_available() is True

    monkeypatch.setattr(availability, "_available", None)
    monkeypatch.setitem(__import__("sys").modules, "rank_bm25", None)
    with caplog.at_level(logging.WARNING, logger="retrieval.bm25store.availability"):
        assert availability.bm25_available() is False
        assert availability.bm25_available() is False
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    first_line, detail = messages[0].split("\n", 1)
    assert first_line == "⚠️ BM25 dependencies unavailable, using vector-only search mode"
    assert "rank_bm25" in detail
