"""The vector leg's exact in-memory path (retrieval.vector.matrix) against pgvector itself."""

import random
import threading
from dataclasses import replace

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st

from knowledge.embeddings import EmbeddingConfig, config_for_knowledge_base, get_embedder
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import delete_document
from knowledge.services.knowledge_bases import bump_index_version, create_knowledge_base
from knowledge.services.processing import process_document
from retrieval.bm25store import get_store
from retrieval.bm25store.build import documents_state
from retrieval.core import stamps
from retrieval.core.identity import identity_of
from retrieval.core.stamps import NOT_PROCESSED, KnownDocuments, Stamps, document_stamp
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from retrieval.vector import hostfile
from retrieval.vector.hnsw import exact_vector_search
from retrieval.vector.matrix import MatrixCache, _of_documents, get_matrix_cache
from retrieval.vector.scan import VectorMatrix, top
from tests.conftest import CEILING_S, at_once
from tests.factories import TenantFactory, add_document

pytestmark = pytest.mark.django_db

WORDS = ["pump", "valve", "seal", "sensor", "belt", "motor", "gear", "alarm", "water", "steam"]
WORDS += ["oil", "filter"]


@pytest.fixture
def kb(tenant):
    """30 short documents over 12 words in 32 dimensions: many equal similarities."""
    kb = create_knowledge_base(
        tenant=tenant, name="Vectors", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    rng = random.Random(5)
    for i in range(30):
        add_document(kb, f"d{i}.txt", " ".join(rng.choices(WORDS, k=rng.randint(2, 14))))
    kb.refresh_from_db()
    return kb


def live_ids(matrix: VectorMatrix) -> np.ndarray:
    return matrix.live_rows()[0]


def live_vectors(matrix: VectorMatrix) -> np.ndarray:
    return matrix.live_rows()[2]


def wait_for_rebases(timeout: float) -> bool:
    """Wait for this process's background rebases; whether none is left under way."""
    rebases = [t for t in threading.enumerate() if t.name == "rag-vector-rebase"]
    for thread in rebases:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in rebases)


def embed(kb: KnowledgeBase, text: str) -> list[float]:
    return get_embedder(config_for_knowledge_base(kb)).embed_query(text)


def exact(kb: KnowledgeBase, vector, limit: int, filters=None) -> list[tuple[int, float]]:
    return exact_vector_search(
        tenant_id=kb.tenant_id,
        knowledge_base_id=kb.pk,
        model=kb.embedding_model,
        dimensions=kb.embedding_dimensions,
        query_vector=vector,
        limit=limit,
        filters=filters or SearchFilters(),
    )


def ranked(hits: list[tuple[int, float]]) -> list[tuple[float, int]]:
    """Order by similarity rounded to float32 noise, then chunk id: equal cosines computed by
    pgvector and by numpy may differ in the last bits."""
    return sorted((-round(s, 5), i) for i, s in hits)


@pytest.mark.parametrize("query", ["pump seal", "water steam oil", "alarm", "gear gear motor"])
def test_the_matrix_finds_what_pgvectors_exact_scan_finds(kb, query):
    vector = embed(kb, query)
    matrix = MatrixCache(10**8).get(kb).matrix
    everything = exact(kb, vector, 1000)
    assert len(matrix) == len(everything) == kb.chunks.count()
    assert ranked(matrix.search(vector, 1000)) == ranked(everything)
    top_ten = matrix.search(vector, 10)
    assert [i for _, i in ranked(top_ten)] == [i for _, i in ranked(everything)][:10]


def test_a_filtered_search_only_scores_allowed_chunks(kb):
    vector = embed(kb, "pump valve")
    matrix = MatrixCache(10**8).get(kb).matrix
    allowed = np.array([*sorted(kb.chunks.values_list("pk", flat=True))[::3], 10**12])
    hits = matrix.search(vector, 1000, allowed)
    assert {i for i, _ in hits} == set(allowed[:-1].tolist())
    full = dict(matrix.search(vector, 1000))
    assert all(full[i] == s for i, s in hits)


def test_only_ready_chunks_of_this_knowledge_base_and_model_are_held(kb, tenant):
    twin = create_knowledge_base(
        tenant=TenantFactory(), name="Twin", embedding=EmbeddingConfig("hash", dimensions=32)
    )
    foreign = add_document(twin, "d0.txt", "pump seal water")
    neighbour = create_knowledge_base(
        tenant=tenant, name="Neighbour", embedding=EmbeddingConfig("hash", dimensions=32)
    )
    add_document(neighbour, "n.txt", "pump seal water")
    hidden = kb.documents.order_by("pk").first()
    Document.objects.filter(pk=hidden.pk).update(status=Document.Status.EMBEDDING)
    bump_index_version(kb)
    matrix = MatrixCache(10**8).get(kb).matrix
    expected = set(
        kb.chunks.filter(document__status=Document.Status.READY).values_list("pk", flat=True)
    )
    assert set(live_ids(matrix).tolist()) == expected
    assert not set(live_ids(matrix).tolist()) & set(foreign.chunks.values_list("pk", flat=True))
    assert not set(live_ids(matrix).tolist()) & set(hidden.chunks.values_list("pk", flat=True))


def test_a_new_version_is_applied_as_a_delta_equal_to_a_full_load(kb):
    cache = MatrixCache(10**8)
    first = cache.get(kb)
    assert first.source == "load"
    assert cache.get(kb).source == "l1"
    added = add_document(kb, "new.txt", "steam filter alarm")
    delete_document(tenant=kb.tenant, document=kb.documents.order_by("pk").first())
    kb.refresh_from_db()
    delta = cache.get(kb)
    assert delta.source == "delta"
    assert delta.matrix.version == kb.index_version > first.matrix.version
    fresh = MatrixCache(10**8).get(kb).matrix
    np.testing.assert_array_equal(live_ids(delta.matrix), live_ids(fresh))
    np.testing.assert_array_equal(live_vectors(delta.matrix), live_vectors(fresh))
    assert set(added.chunks.values_list("pk", flat=True)) <= set(live_ids(fresh).tolist())


def test_a_reprocessed_document_is_fetched_again_by_the_delta(kb):
    cache = MatrixCache(10**8)
    cache.get(kb)
    document = kb.documents.order_by("pk")[3]
    before = set(document.chunks.values_list("pk", flat=True))
    Document.objects.filter(pk=document.pk).update(status=Document.Status.PENDING)
    assert process_document(document.pk) == Document.Status.READY
    after = set(document.chunks.values_list("pk", flat=True))
    assert after and not before & after  # new chunk rows under the same document
    kb.refresh_from_db()
    delta = cache.get(kb)
    assert delta.source == "delta"
    held = set(live_ids(delta.matrix).tolist())
    assert after <= held and not before & held
    fresh = MatrixCache(10**8).get(kb).matrix
    np.testing.assert_array_equal(live_ids(delta.matrix), live_ids(fresh))
    np.testing.assert_array_equal(live_vectors(delta.matrix), live_vectors(fresh))


def test_document_stamps_read_packed_match_the_text_a_host_file_header_keeps(kb):
    Document.objects.filter(pk=kb.documents.order_by("pk")[0].pk).update(processed_at=None)
    with connection.cursor() as cursor:
        cursor.execute(stamps.SELECT, [kb.tenant_id, kb.pk])
        packed, chunks = cursor.fetchone()
        cursor.execute(
            "SELECT id, (extract(epoch FROM processed_at) * 1000000)::bigint::text "
            "FROM knowledge_document WHERE knowledge_base_id = %s AND status = 'ready'",
            [kb.pk],
        )
        as_text = {str(doc): at for doc, at in cursor.fetchall()}
    read = Stamps.from_row(packed)
    assert int(chunks) == sum(d.chunk_count for d in kb.documents.all())
    assert read.to_mapping() == as_text  # what older processes wrote, and read
    header = Stamps.from_mapping(as_text)
    np.testing.assert_array_equal(header.ids, read.ids)
    np.testing.assert_array_equal(header.at, read.at)
    assert (read.at == NOT_PROCESSED).sum() == 1
    assert read.unchanged_since(header).all() and not read.unchanged_since(Stamps.empty()).any()
    later = Stamps(read.ids[1:], read.at[1:] + 1)  # one document gone, the others processed again
    assert not read.unchanged_since(later).any()
    assert Stamps.from_row(None).ids.size == 0


def test_saving_the_knowledge_base_row_reloads_in_full(kb):
    """A re-embedding switch saves the row and changes vectors under the same chunk ids: a
    delta would keep the old vectors, so any change of the row's stamp reloads."""
    cache = MatrixCache(10**8)
    cache.get(kb)
    kb.top_k = 7
    kb.save()
    bump_index_version(kb)
    assert cache.get(kb).source == "load"


def test_a_knowledge_base_too_large_for_the_budget_is_left_to_hnsw(kb):
    one_row = 32 * 4 + 16  # the vector, its chunk id and document id
    rows = kb.chunks.count()
    assert MatrixCache(one_row * rows - 1).get(kb) is None
    cache = MatrixCache(one_row * rows)
    assert cache.get(kb).source == "load"
    assert cache.get(kb).source == "l1"  # kept: what fits the check fits the cache


def test_a_change_keeps_the_shared_base_and_holds_only_the_changed_rows(kb):
    cache = MatrixCache(10**8)
    first = cache.get(kb).matrix
    (base,) = first.parts
    assert base.shared and first.nbytes == 0  # every row is on the host file
    bump_index_version(kb)
    unchanged = cache.get(kb)
    assert unchanged.source == "delta" and unchanged.matrix.parts[0].vectors is base.vectors
    add_document(kb, "more.txt", "belt motor gear")
    kb.refresh_from_db()
    grown = cache.get(kb).matrix
    shared, private = grown.parts
    assert shared.vectors is base.vectors and not private.shared
    assert len(private.ids) == 1 and len(grown) == len(first) + 1
    assert grown.nbytes == private.private_bytes  # what this process holds: the new row
    fresh = MatrixCache(10**8).get(kb).matrix
    np.testing.assert_array_equal(live_ids(grown), live_ids(fresh))
    np.testing.assert_array_equal(live_vectors(grown), live_vectors(fresh))


def test_a_second_process_maps_the_file_the_first_wrote(kb):
    first = MatrixCache(10**8).get(kb)
    assert first.source == "load" and first.matrix.base_name
    other = MatrixCache(10**8).get(kb)  # another process: its own cache, the same host
    assert other.source == "file" and other.matrix.base_name == first.matrix.base_name
    assert other.matrix.parts[0].shared
    vector = embed(kb, "steam oil filter")
    assert other.matrix.search(vector, 5) == first.matrix.search(vector, 5)


def test_many_changes_rewrite_the_base_and_remove_the_old_file(kb, settings):
    cache = MatrixCache(10**8)
    first = cache.get(kb).matrix
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    for n in range(4):  # past REBASE_FRACTION of the base's rows
        add_document(kb, f"extra-{n}.txt", f"valve {n} pressure gauge")
    kb.refresh_from_db()
    # The search that finds the private rows past the fraction answers with them at once and
    # leaves the new base to a thread beside it.
    handle = cache.get(kb)
    assert handle.source == "delta" and handle.matrix.base_name == first.base_name
    assert wait_for_rebases(CEILING_S)
    written = [p.name.split(".")[0] for p in folder.glob("*.json")]
    assert len(written) == 1 and written != [first.base_name]  # the old one removed
    add_document(kb, "one-more.txt", "valve pressure relief")
    kb.refresh_from_db()
    taken_up = cache.get(kb)  # the next change's delta takes the new base up
    assert taken_up.source == "file" and taken_up.matrix.base_name == written[0]
    assert taken_up.matrix.parts[0].shared
    fresh = MatrixCache(10**8).get(kb).matrix
    np.testing.assert_array_equal(live_ids(taken_up.matrix), live_ids(fresh))
    vector = embed(kb, "valve pressure")
    assert taken_up.matrix.search(vector, 5) == fresh.search(vector, 5)


def test_a_late_writer_of_an_older_base_leaves_the_newer_one(tmp_path):
    # Two processes wrote bases: one of v5 first, then one that loaded v3 before v5 existed.
    stamp, rows = ("2026-11-23", "hash", "hash-v1", 4), np.arange(3, dtype=np.int64)
    vectors = np.eye(3, 4, dtype=np.float32)
    (tmp_path / ".vec.npy.999.tmp").write_bytes(b"a writer that died")
    newer = hostfile.write(tmp_path, stamp, 5, rows, rows, vectors, Stamps.empty())
    older = hostfile.write(tmp_path, stamp, 3, rows, rows, vectors, Stamps.empty())
    assert newer is not None and older is not None
    assert hostfile.newest(tmp_path, stamp, 4).version == 5  # still there, still the newest
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    # A base of another stamp (the model changed) is superseded whatever its version.
    hostfile.write(
        tmp_path, ("2026-11-24", "hash", "hash-v1", 4), 1, rows, rows, vectors, Stamps.empty()
    )
    assert hostfile.newest(tmp_path, stamp, 4) is None


def test_a_process_takes_up_the_newer_base_another_one_wrote(kb):
    one, other = MatrixCache(10**8), MatrixCache(10**8)
    one.get(kb)
    other.get(kb)
    for n in range(4):  # past REBASE_FRACTION of the base's rows
        add_document(kb, f"extra-{n}.txt", f"valve {n} pressure gauge")
    kb.refresh_from_db()
    rebasing = other.get(kb)
    assert rebasing.source == "delta" and wait_for_rebases(CEILING_S)
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    (written,) = [p.name.split(".")[0] for p in folder.glob("*.json")]
    taken_up = one.get(kb)
    assert taken_up.source == "file"  # not a third base: the one the other process wrote
    assert taken_up.matrix.base_name == written
    np.testing.assert_array_equal(live_ids(taken_up.matrix), live_ids(rebasing.matrix))


def test_a_damaged_or_mismatching_file_is_ignored_and_replaced(kb):
    written = MatrixCache(10**8).get(kb).matrix
    expected = live_vectors(written)  # a copy: the mapped file is damaged in place below
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    vectors = folder / f"{written.base_name}.vec.npy"
    vectors.write_bytes(vectors.read_bytes()[:-64])  # truncated
    again = MatrixCache(10**8).get(kb)
    assert again.source == "load"  # not trusted: fetched from the database, written anew
    np.testing.assert_array_equal(live_vectors(again.matrix), expected)


def test_without_host_files_the_matrix_is_private(kb, settings):
    settings.VECTOR_HOST_FILES = False
    cache = MatrixCache(10**8)
    matrix = cache.get(kb).matrix
    assert not matrix.parts[0].shared and matrix.nbytes > 0
    add_document(kb, "more.txt", "belt motor gear")
    kb.refresh_from_db()
    grown = cache.get(kb).matrix
    np.testing.assert_array_equal(live_ids(grown), live_ids(MatrixCache(10**8).get(kb).matrix))


def test_service_searches_exactly_from_memory_and_says_so(kb):
    service = RAGService(kb.tenant)
    get_matrix_cache().discard(kb.pk)
    first = service.search("pump seal", kb.pk, mode="vector")
    second = service.search("pump seal", kb.pk, mode="vector")
    assert first.trace.vector.detail["index"]["source"] == "load"
    assert second.trace.vector.detail["index"] == {
        "index": "exact",
        "source": "l1",
        "chunks": kb.chunks.count(),
        "load_ms": second.trace.vector.detail["index"]["load_ms"],
    }
    assert [h.chunk_id for h in first.hits] == [h.chunk_id for h in second.hits]


@pytest.mark.parametrize("filtered", [False, True])
def test_the_exact_and_the_hnsw_paths_return_the_same_hits(kb, settings, filtered):
    service = RAGService(kb.tenant)
    options = {}
    ids = tuple(kb.documents.order_by("pk").values_list("pk", flat=True))[::2]
    if filtered:
        options["filters"] = SearchFilters(document_ids=ids)
    queries = ["pump seal", "water steam", "gear alarm motor", "oil"]
    in_memory = [service.search(q, kb.pk, mode="vector", top_k=8, **options) for q in queries]
    settings.VECTOR_L1_MAX_BYTES = 0
    through_sql = [service.search(q, kb.pk, mode="vector", top_k=8, **options) for q in queries]
    for a, b in zip(in_memory, through_sql, strict=True):
        assert b.trace.vector.detail["index"] == {"index": "hnsw"}
        assert ranked([(h.chunk_id, h.vector_similarity) for h in a.hits]) == ranked(
            [(h.chunk_id, h.vector_similarity) for h in b.hits]
        )
        if filtered:
            assert {h.document_id for h in a.hits} <= set(ids)


def test_a_poisoned_matrix_cannot_surface_another_tenants_chunk(kb):
    """Hydration filters by tenant, knowledge base and ready documents, whatever L1 holds."""
    other = create_knowledge_base(
        tenant=TenantFactory(), name="Other", embedding=EmbeddingConfig("hash", dimensions=32)
    )
    secret = add_document(other, "secret.txt", "pump seal").chunks.get()
    cache = get_matrix_cache()
    honest = cache.get(kb).matrix
    vector = np.asarray(embed(kb, "pump seal"), dtype=np.float32)
    poisoned = VectorMatrix.of(
        np.append(live_ids(honest), secret.pk),
        np.vstack([live_vectors(honest), vector / np.linalg.norm(vector)]),
        honest.version,
        honest.stamp,
    )
    cache.lru.put(identity_of(kb), poisoned, kb.index_version)
    try:
        result = RAGService(kb.tenant).search("pump seal", kb.pk, mode="vector")
        assert result.trace.vector.detail["index"]["source"] == "l1"
        assert result.hits
        assert secret.pk not in {h.chunk_id for h in result.hits}
    finally:
        cache.discard(kb.pk)


def test_queries_the_matrix_cannot_answer():
    matrix = VectorMatrix.of(
        np.array([1, 2]), np.eye(2, dtype=np.float32), version=1, stamp=("", "", "", 2)
    )
    assert matrix.search([0.0, 0.0], 5) == []
    assert matrix.search([1.0, 0.0], 0) == []
    with pytest.raises(ValueError, match="3 dimensions"):
        matrix.search([1.0, 0.0, 0.0], 5)


@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=45),
    st.randoms(use_true_random=False),
)
def test_top_keeps_the_best_with_ties_broken_by_id(scores, limit, rnd):
    ids = list(range(100, 100 + len(scores)))
    rnd.shuffle(ids)
    expected = sorted(zip(ids, scores, strict=True), key=lambda p: (-p[1], p[0]))[:limit]
    found = top(np.array(ids), np.array(scores, dtype=np.float32), limit)
    assert found == expected


@pytest.mark.parametrize("budget", [10**8, 0])
def test_the_langchain_store_takes_the_same_path_to_the_same_neighbours(kb, settings, budget):
    from retrieval.langchain.vectorstore import KnowledgeBaseVectorStore

    settings.VECTOR_L1_MAX_BYTES = budget
    store = KnowledgeBaseVectorStore(kb.tenant, kb)
    vector = embed(kb, "steam oil filter")
    found = store.similarity_search_with_score_by_vector(vector, k=kb.chunks.count())
    content = dict(kb.chunks.values_list("pk", "content"))
    assert sorted((-round(s, 5), doc.page_content) for doc, s in found) == sorted(
        (-round(s, 5), content[i]) for i, s in exact(kb, vector, 1000)
    )


@pytest.fixture
def committed_kb():
    """Six documents in a knowledge base committed for other threads to read (transactional
    tests), removed with its tenant afterwards."""
    tenant = TenantFactory()
    kb = create_knowledge_base(
        tenant=tenant, name="Concurrent", embedding=EmbeddingConfig("hash", dimensions=32)
    )
    try:
        for i in range(6):
            add_document(kb, f"c{i}.txt", " ".join(WORDS[i : i + 5]))
        kb.refresh_from_db()
        yield kb
    finally:
        tenant.delete()


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_cold_searches_load_the_matrix_once(committed_kb):
    cache = MatrixCache(10**8)
    handles = at_once(8, lambda: cache.get(KnowledgeBase.objects.get(pk=committed_kb.pk)))
    assert sorted(h.source for h in handles) == ["l1"] * 7 + ["load"]
    assert len({id(h.matrix) for h in handles}) == 1


@pytest.mark.django_db(transaction=True)
def test_cold_processes_of_a_host_write_the_file_once_and_map_it(committed_kb):
    # Four processes starting cold at once (each its own cache; threads here, and the host's
    # lock is a file lock, which threads contend for as processes do): one loads and writes
    # the file, the others wait for it and map it instead of each holding a private copy.
    pk = committed_kb.pk
    handles = at_once(4, lambda: MatrixCache(10**8).get(KnowledgeBase.objects.get(pk=pk)))
    assert sorted(h.source for h in handles) == ["file", "file", "file", "load"]
    assert all(h.matrix.parts[0].shared for h in handles)
    assert len({h.matrix.base_name for h in handles}) == 1
    assert all(h.matrix.nbytes < h.matrix.total_bytes // 10 for h in handles)


def test_the_bm25_builds_read_the_searchable_documents_stamps_as_they_always_were(kb):
    """``documents_state`` reads the stamps packed in one value; they are the values the row by
    row query gave, which the manifests stored so far hold (a different value would make every
    document look changed)."""
    first, second, third = kb.documents.order_by("pk")[:3]
    Document.objects.filter(pk=first.pk).update(processed_at=None, analyzer_version=3)
    Document.objects.filter(pk=second.pk).update(enabled=False)  # not searchable
    Document.objects.filter(pk=third.pk).update(status=Document.Status.EMBEDDING)  # nor this
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, (extract(epoch FROM processed_at) * 1000000)::bigint, analyzer_version "
            "FROM knowledge_document d WHERE tenant_id = %s AND knowledge_base_id = %s AND "
            "d.status = 'ready' AND d.enabled ORDER BY id",
            [kb.tenant_id, kb.pk],
        )
        rows = cursor.fetchall()
    ids, stamped = documents_state(kb)
    assert ids.tolist() == [row[0] for row in rows]
    assert second.pk not in ids and third.pk not in ids and first.pk in ids
    expected = document_stamp(
        np.array([row[1] or 0 for row in rows]), np.array([row[2] for row in rows])
    )
    np.testing.assert_array_equal(stamped, expected)
    assert stamped[ids.tolist().index(first.pk)] == 3  # never processed: 0, then the analyser
    Document.objects.filter(knowledge_base=kb).delete()
    assert documents_state(kb)[0].size == 0


@pytest.mark.parametrize("span", [50, 10**9])
def test_rows_of_documents_is_membership(span):
    """A catch-up's rows still valid (``_of_documents``) are ``np.isin``'s, by a table over the
    rows' document ids when they span little and by ``np.isin`` when they span much."""
    rng = np.random.default_rng(11)
    documents = rng.integers(1_000, 1_000 + span, 2_000)
    wanted = np.unique(np.concatenate([rng.choice(documents, 40), [0, 1_000 + span + 5]]))
    got = _of_documents(documents, wanted)
    assert got.tolist() == np.isin(documents, wanted).tolist()
    assert 0 < got.sum() < documents.size
    assert _of_documents(np.empty(0, np.int64), wanted).size == 0


def _manifest_documents(kb: KnowledgeBase) -> KnownDocuments:
    """The documents a BM25 manifest of the knowledge base's current version records."""
    kb.refresh_from_db()
    view = get_store().get(kb, fresh=True).view
    assert view.version == kb.index_version
    manifest = view.manifest
    return KnownDocuments(view.version, manifest.doc_ids, manifest.doc_stamps, manifest.chunk_count)


def _stamp_queries(queries) -> int:
    return sum("string_agg(int8send(id)" in q["sql"] for q in queries)


def test_a_manifests_documents_are_the_stamps_postgresql_gives(kb):
    """What a BM25 manifest records of each document (``document_stamp``) gives the vector
    matrix's own stamps, a document never processed included."""
    never = kb.documents.order_by("pk")[2]
    Document.objects.filter(pk=never.pk).update(processed_at=None)
    bump_index_version(kb)
    known = _manifest_documents(kb)
    with connection.cursor() as cursor:
        cursor.execute(stamps.SELECT, [kb.tenant_id, kb.pk])
        packed, chunks = cursor.fetchone()
    read = Stamps.from_row(packed)
    np.testing.assert_array_equal(known.stamps.ids, read.ids)
    np.testing.assert_array_equal(known.stamps.at, read.at)
    assert NOT_PROCESSED in known.stamps.at.tolist()
    assert known.chunks == chunks


def test_a_matrix_catching_up_to_the_keyword_views_version_takes_its_documents(kb):
    """The vector leg follows the keyword leg's view: catching up to the same version, the
    delta takes the documents from the manifest (no scan of the document rows) and holds
    exactly the rows a full load does."""
    cache = MatrixCache(10**8)
    cache.get(kb)
    add_document(kb, "new.txt", "steam filter alarm")
    delete_document(tenant=kb.tenant, document=kb.documents.order_by("pk").first())
    known = _manifest_documents(kb)
    with CaptureQueriesContext(connection) as queries:
        delta = cache.get(kb, known)
    assert delta.source == "delta"
    assert delta.matrix.version == kb.index_version
    assert _stamp_queries(queries.captured_queries) == 0
    fresh = MatrixCache(10**8).get(kb).matrix
    np.testing.assert_array_equal(live_ids(delta.matrix), live_ids(fresh))
    np.testing.assert_array_equal(live_vectors(delta.matrix), live_vectors(fresh))
    # A manifest of another version than the one read is not used: the documents are read.
    add_document(kb, "newer.txt", "gear motor")
    kb.refresh_from_db()
    with CaptureQueriesContext(connection) as queries:
        again = cache.get(kb, replace(known, version=kb.index_version + 1))
    assert again.source == "delta" and again.matrix.version == kb.index_version
    assert _stamp_queries(queries.captured_queries) == 1


def test_a_matrix_answers_at_the_version_of_a_deferring_keyword_view(kb):
    """While the keyword leg answers from an older view (the worker builds the new one), the
    vector leg answers from a matrix of that version too, without reading anything; once the
    keyword view is the knowledge base's version, the matrix catches up."""
    cache = MatrixCache(10**8)
    older = _manifest_documents(kb)
    first = cache.get(kb)
    add_document(kb, "new.txt", "steam filter alarm")
    kb.refresh_from_db()
    assert kb.index_version > first.matrix.version
    with CaptureQueriesContext(connection) as queries:
        deferred = cache.get(kb, older)
    assert deferred.source == "deferred"
    assert deferred.matrix is first.matrix
    assert not queries.captured_queries
    assert cache.get(kb, _manifest_documents(kb)).matrix.version == kb.index_version
    # Without a keyword view (a vector-only search) the matrix is the knowledge base's now.
    cache.discard(kb.pk)
    cache.get(kb, older)
    add_document(kb, "newer.txt", "gear motor")
    kb.refresh_from_db()
    assert cache.get(kb).matrix.version == kb.index_version


def test_a_hybrid_search_after_a_change_reads_no_document_stamps_for_its_vectors(kb):
    """End to end: the keyword leg runs first and its view's documents spare the vector leg's
    catch-up the scan of the document rows; the new document is found by both legs."""
    service = RAGService(kb.tenant)
    service.search("pump seal", kb.pk, mode="hybrid")
    added = add_document(kb, "new.txt", "zebra crossing alarm")
    get_store().warm(kb)  # the worker's build of the new version
    with CaptureQueriesContext(connection) as queries:
        result = service.search("zebra crossing", kb.pk, mode="hybrid", top_k=3)
    assert _stamp_queries(queries.captured_queries) == 0
    assert result.trace.vector.detail["index"]["source"] == "delta"
    found = {hit.chunk_id for hit in result.hits}
    assert found & set(added.chunks.values_list("pk", flat=True))
