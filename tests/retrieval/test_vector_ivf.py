"""The vector leg's IVF (retrieval.vector.ivf) over a large host base: written with the base
from VECTOR_IVF_MIN_ROWS rows (lowered here), searched list by list, against the exact scan."""

import json
from dataclasses import replace

import numpy as np
import pytest
from django.utils import timezone

from knowledge.embeddings import EmbeddingConfig, config_for_knowledge_base, get_embedder
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.documents import delete_document
from knowledge.services.knowledge_bases import bump_index_version, create_knowledge_base
from retrieval.core.identity import identity_of
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from retrieval.vector import hostfile, ivf, kernels
from retrieval.vector.matrix import MatrixCache, get_matrix_cache
from retrieval.vector.query_cache import remember_query_embedding
from retrieval.vector.scan import VectorMatrix, top
from tests.factories import add_document

pytestmark = pytest.mark.django_db

DIMENSIONS = 32
DOCUMENTS = 40
CHUNKS_PER_DOCUMENT = 60  # 2,400 rows: an IVF of 98 lists
TOPICS = 40


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit rows around TOPICS random directions (a topic each), like embeddings of a corpus."""
    centres = np.random.default_rng(11).standard_normal((TOPICS, DIMENSIONS))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rows = centres[rng.integers(0, TOPICS, n)] + 0.3 * rng.standard_normal((n, DIMENSIONS))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def fill(kb: KnowledgeBase, name: str, rng: np.random.Generator, chunks: int) -> Document:
    """A ready document of ``chunks`` chunks with clustered vectors (its parsed chunk's vector
    replaced, the others added beside it), in the transaction of a version bump."""
    document = add_document(kb, name, name)
    first = document.chunks.get()
    vectors = clustered(rng, chunks)
    first.embedding = vectors[0]
    first.save(update_fields=["embedding"])
    Chunk.objects.bulk_create(
        Chunk(
            tenant_id=kb.tenant_id,
            knowledge_base=kb,
            document=document,
            position=position,
            content=f"{name} part {position}",
            embedding=vector,
            embedding_model=first.embedding_model,
            embedding_dimensions=first.embedding_dimensions,
        )
        for position, vector in enumerate(vectors[1:], start=1)
    )
    Document.objects.filter(pk=document.pk).update(chunk_count=chunks)
    bump_index_version(kb)
    kb.refresh_from_db()
    return document


@pytest.fixture
def ivf_settings(settings):
    settings.VECTOR_IVF_MIN_ROWS = 1000
    settings.VECTOR_IVF_TARGET_RECALL = 0.97
    return settings


@pytest.fixture
def kb(tenant, ivf_settings):
    kb = create_knowledge_base(
        tenant=tenant, name="Large", embedding=EmbeddingConfig("hash", dimensions=DIMENSIONS)
    )
    draw = rng(3)
    for i in range(DOCUMENTS):
        fill(kb, f"doc-{i}", draw, CHUNKS_PER_DOCUMENT)
    return kb


def live_ids(matrix: VectorMatrix) -> np.ndarray:
    return matrix.live_rows()[0]


def live_vectors(matrix: VectorMatrix) -> np.ndarray:
    return matrix.live_rows()[2]


def exact_of(matrix: VectorMatrix) -> VectorMatrix:
    """The same live rows as one private part, searched by the exact scan."""
    ids, documents, vectors = matrix.live_rows()
    return VectorMatrix.of(ids, vectors, matrix.version, matrix.stamp, documents)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def queries(n: int, seed: int) -> np.ndarray:
    return clustered(rng(seed), n)


def same(hits: list[tuple[int, float]], truth: list[tuple[int, float]]) -> None:
    """The same chunks in the same order and the same similarities up to float32 rounding (a
    product over other rows may sum in another order)."""
    assert [i for i, _ in hits] == [i for i, _ in truth]
    np.testing.assert_allclose([s for _, s in hits], [s for _, s in truth], rtol=1e-6, atol=1e-7)


def recall(found: list[tuple[int, float]], truth: list[tuple[int, float]]) -> float:
    return len({i for i, _ in found[:10]} & {i for i, _ in truth[:10]}) / 10


def test_a_large_base_is_stored_list_by_list_with_its_calibrated_ivf(kb):
    handle = MatrixCache(10**8).get(kb)
    (base,) = handle.matrix.parts
    rows = DOCUMENTS * CHUNKS_PER_DOCUMENT
    assert base.shared and base.ivf is not None and len(base.ids) == rows
    assert base.ivf.lists == ivf.lists_for(rows) == 98
    assert 1 <= base.ivf.probes < base.ivf.lists and base.ivf.recall >= 0.97
    # the rows are in list order, each row in the list of its nearest centroid
    labels, _ = ivf.assign(base.vectors, base.ivf.centroids)
    assert np.all(np.diff(labels) >= 0)
    np.testing.assert_array_equal(np.bincount(labels, minlength=98), np.diff(base.ivf.offsets))
    assert np.all(np.diff(base.ids[base.order]) > 0)  # and ``order`` lists them by id
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    header = json.loads((folder / f"{handle.matrix.base_name}.json").read_text())
    assert header["ivf"]["lists"] == 98 and header["ivf"]["probes"] == base.ivf.probes
    assert header["ivf"]["recall"] == round(base.ivf.recall, 4)
    assert header["ivf"]["target_recall"] == 0.97 and header["ivf"]["build_s"] >= 0
    assert header["ivf"]["scan_share"] == round(base.ivf.scan_share, 4) > 0


def test_ivf_recall_at_10_against_the_exact_scan_meets_the_target(kb):
    matrix = MatrixCache(10**8).get(kb).matrix
    exact = exact_of(matrix)
    found = [recall(matrix.search(q, 10), exact.search(q, 10)) for q in queries(300, 21)]
    assert np.mean(found) >= 0.97
    scanned = matrix.search_traced(queries(1, 22)[0], 10)[1]["rows_scanned"]
    assert scanned < len(matrix) / 2  # and it got there scoring a part of the rows


def test_the_probed_lists_are_scanned_exactly_and_all_lists_give_the_exact_scan(kb):
    matrix = MatrixCache(10**8).get(kb).matrix
    (base,) = matrix.parts
    for query in queries(20, 23):
        # Exactly the rows of the nearest lists: their exact top, computed apart.
        nearest = np.argsort(-(base.ivf.centroids @ query), kind="stable")[: base.ivf.probes]
        rows = np.concatenate([np.arange(*base.ivf.offsets[i : i + 2]) for i in nearest])
        scores = base.vectors[rows] @ query
        best = np.lexsort((base.ids[rows], -scores))[:15]
        same(matrix.search(query, 15), list(zip(base.ids[rows][best], scores[best], strict=True)))
    everything = replace(matrix, parts=(replace(base, ivf=replace(base.ivf, probes=98)),))
    exact = exact_of(matrix)
    for query in queries(20, 24):
        hits, how = everything.search_traced(query, 15)
        assert how == {
            "index": "ivf",
            "lists": 98,
            "probes": 98,
            "rows_scanned": len(matrix),
            "codes": "int8",
        }
        same(hits, exact.search(query, 15))


def test_deleted_and_changed_documents_rows_never_come_back_and_new_ones_are_found(kb):
    cache = MatrixCache(10**8)
    (base,) = cache.get(kb).matrix.parts
    gone, changed = kb.documents.order_by("pk")[:2]
    deleted = set(gone.chunks.values_list("pk", flat=True))
    delete_document(tenant=kb.tenant, document=gone)
    # The other one reprocessed: same chunk rows, new vectors.
    pks = changed.chunks.values_list("pk", flat=True)
    moved = dict(zip(pks, clustered(rng(6), CHUNKS_PER_DOCUMENT), strict=True))
    for chunk in changed.chunks.all():
        chunk.embedding = moved[chunk.pk]
        chunk.save(update_fields=["embedding"])
    Document.objects.filter(pk=changed.pk).update(processed_at=timezone.now())
    added = set(fill(kb, "added", rng(5), 30).chunks.values_list("pk", flat=True))
    handle = cache.get(kb)
    assert handle.source == "delta"
    shared, private = handle.matrix.parts
    assert shared.vectors is base.vectors and shared.ivf is base.ivf  # the same mapped base
    assert not shared.live.all() and set(private.ids.tolist()) == set(moved) | added
    # Every old row of the two documents as a query (its own best match in the base): a
    # deleted row is never returned, a changed one only with its new vector's similarity.
    all_lists = replace(shared, ivf=replace(shared.ivf, probes=shared.ivf.lists))
    for matrix in (handle.matrix, replace(handle.matrix, parts=(all_lists, private))):
        for row in np.flatnonzero(np.isin(base.ids, [*deleted, *moved])):
            query = np.asarray(base.vectors[row], dtype=np.float32)
            hits = matrix.search(query, 15)
            assert hits and not {i for i, _ in hits} & deleted
            unit = query / np.linalg.norm(query)  # a float16 row is of unit length within 2^-11
            for chunk, similarity in hits:
                if chunk in moved:
                    assert similarity == pytest.approx(float(moved[chunk] @ unit), abs=1e-6)
    # A new document's row as a query is found, first (cosine 1), by the IVF search.
    vectors = dict(zip(private.ids.tolist(), private.vectors, strict=True))
    for chunk in sorted(added)[:10]:
        hits, how = handle.matrix.search_traced(vectors[chunk], 5)
        assert hits[0][0] == chunk and how["index"] == "ivf"
        assert how["rows_scanned"] >= len(private.ids)  # the private rows are all scored
    exact = exact_of(handle.matrix)
    found = [recall(handle.matrix.search(q, 10), exact.search(q, 10)) for q in queries(200, 25)]
    assert np.mean(found) >= 0.95


def test_a_filtered_search_stays_exact(kb):
    matrix = MatrixCache(10**8).get(kb).matrix
    exact = exact_of(matrix)
    ids = np.sort(live_ids(matrix))
    allowed = np.append(ids[::7], 10**12)  # any ids, one that is no chunk
    used = {"codes": "int8"}
    for query in queries(10, 26):
        hits, how = matrix.search_traced(query, 1000, allowed)
        assert how == {"index": "exact"} | used
        same(hits, exact.search(query, 1000, allowed))
        assert {i for i, _ in hits} == set(ids[::7].tolist())
        # Fewer wanted than allowed: the codes score a part of them, the same best exactly.
        hits, how = matrix.search_traced(query, 10, allowed)
        assert how == {"index": "exact"} | used
        same(hits, exact.search(query, 10, allowed))
    (base,) = matrix.parts
    rows = base.rows(allowed)
    query = queries(1, 34)[0]
    ids, scores, by_codes = base.scored(query, rows, 10)
    assert by_codes and len(ids) < len(rows) / 2
    same(top(ids, scores, 10), exact.search(query, 10, allowed))
    assert base.scored(query, rows[:0], 10)[0].size == 0  # nothing allowed


def test_a_base_written_without_an_ivf_is_still_searched_exactly(kb, ivf_settings):
    ivf_settings.VECTOR_IVF_MIN_ROWS = 0  # as a base written before the IVF existed
    written = MatrixCache(10**8).get(kb).matrix
    assert written.parts[0].ivf is None and written.parts[0].order is None
    ivf_settings.VECTOR_IVF_MIN_ROWS = 1000
    mapped = MatrixCache(10**8).get(kb)  # another process maps that base as it is
    assert mapped.source == "file" and mapped.matrix.base_name == written.base_name
    assert mapped.matrix.parts[0].ivf is None
    query = queries(1, 27)[0]
    hits, how = mapped.matrix.search_traced(query, 10)
    assert how == {"index": "exact"}
    same(hits, exact_of(written).search(query, 10))


def test_a_base_stores_its_rows_as_int8_codes_within_half_a_step(kb):
    handle = MatrixCache(10**8).get(kb)
    (base,) = handle.matrix.parts
    codes, scales = base.ivf.codes, base.ivf.scales
    assert codes.dtype == np.int8 and codes.shape == base.vectors.shape
    assert np.all(np.abs(codes).max(axis=1) == 127)  # each row's largest component: 127 steps
    error = np.abs(codes * scales[:, None] - base.vectors)
    assert np.all(error <= scales[:, None] * 0.5 + 1e-7)  # the rows, in their stored order
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    header = json.loads((folder / f"{handle.matrix.base_name}.json").read_text())
    assert header["ivf"]["codes"] == "int8"
    assert hostfile.host_bytes() >= base.vectors.nbytes + codes.nbytes


def test_quantize_keeps_zero_rows_zero_and_bounds_every_score():
    rows = np.vstack([clustered(rng(8), 200), np.zeros((1, DIMENSIONS), np.float32)])
    codes, scales = ivf.quantize(rows)
    assert scales[-1] == 0 and not codes[-1].any()
    for query in queries(50, 9):
        bound = scales * (codes @ query + ivf.SLACK_PER_L1 * np.abs(query).sum())
        assert np.all(bound >= rows @ query)
        assert np.all(bound - rows @ query <= scales * np.abs(query).sum() * 1.02)


def _scanned(matrix: VectorMatrix, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Every live row of the probed lists scored on the stored rows, the best ``k`` (ties by
    id): what bounding on the codes must give."""
    (base,) = matrix.parts
    ids, scores = [np.empty(0, np.int64)], [np.empty(0, np.float32)]
    for start, stop in base.ivf.runs(query):
        live = slice(None) if base.live is None else base.live[start:stop]
        ids.append(base.ids[start:stop][live])
        scores.append((base.vectors[start:stop] @ query)[live])
    ids, scores = np.concatenate(ids), np.concatenate(scores)
    best = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in best]


def test_the_codes_score_few_rows_exactly_and_give_the_float32_top(kb):
    matrix = MatrixCache(10**8).get(kb).matrix
    (base,) = matrix.parts
    exactly = []
    for query in queries(100, 28):
        truth = _scanned(matrix, query, 15)
        same(matrix.search(query, 15), truth)
        ids, scores, scanned, by_codes = base.probed(query, 15)
        assert by_codes
        exactly.append(len(ids) / scanned)
        rows = base.order[np.searchsorted(base.ids, ids, sorter=base.order)]
        np.testing.assert_allclose(scores, base.vectors[rows] @ query, rtol=1e-6, atol=1e-6)
        assert {i for i, _ in truth} <= set(ids.tolist())
    assert np.mean(exactly) < 0.5  # most probed rows were only bounded
    # So many wanted that the head takes every probed row: all of them, scored exactly.
    for query in queries(5, 29):
        same(matrix.search(query, 500), _scanned(matrix, query, 500))


def test_a_process_without_the_loops_loads_them_at_its_first_search(kb, monkeypatch):
    matrix = MatrixCache(10**8).get(kb).matrix
    query = queries(1, 31)[0]
    truth = _scanned(matrix, query, 10)
    monkeypatch.setattr(kernels.LOOPS, "_loaded", None)  # as in a process just started
    hits, how = matrix.search_traced(query, 10)
    assert how["codes"] == "int8"  # loaded, then bounded on the codes
    same(hits, truth)
    assert kernels.LOOPS._loaded is not None


def float32_rows(kb: KnowledgeBase, settings) -> VectorMatrix:
    """The knowledge base's float32 unit rows as the database gives them, in this process's
    memory (no host file, so no IVF and no float16): the exact scan of the stored vectors."""
    settings.VECTOR_HOST_FILES = False
    try:
        return MatrixCache(10**8).get(kb).matrix
    finally:
        settings.VECTOR_HOST_FILES = True


def test_a_base_stores_its_rows_as_float16_and_scores_within_their_rounding(kb, ivf_settings):
    handle = MatrixCache(10**8).get(kb)
    (base,) = handle.matrix.parts
    exact = float32_rows(kb, ivf_settings)
    assert base.vectors.dtype == np.float16 and exact.parts[0].vectors.dtype == np.float32
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    header = json.loads((folder / f"{handle.matrix.base_name}.json").read_text())
    assert header["ivf"]["row_type"] == "float16"
    # Each stored row is the float32 unit row rounded to float16, nothing else.
    rows = base.order[np.searchsorted(base.ids, live_ids(exact), sorter=base.order)]
    np.testing.assert_array_equal(base.vectors[rows], live_vectors(exact).astype(np.float16))
    # So every score is within 2^-11 of the float32 one, and the top 10 (every list probed,
    # to compare the rows and nothing else) loses at most rows within that of its last score.
    everything = replace(handle.matrix, parts=(replace(base, ivf=replace(base.ivf, probes=98)),))
    found = []
    for query in queries(100, 32):
        hits, truth = everything.search(query, 10), dict(exact.search(query, 10))
        at = np.searchsorted(live_ids(exact), [chunk for chunk, _ in hits])
        error = np.array([similarity for _, similarity in hits]) - live_vectors(exact)[at] @ query
        assert np.all(np.abs(error) <= 2**-11)
        missed = [score for chunk, score in truth.items() if chunk not in dict(hits)]
        assert all(score <= hits[-1][1] + 2 * 2**-11 for score in missed)
        found.append(recall(hits, list(truth.items())))
    assert np.mean(found) >= 0.99


def test_calibration_reports_the_share_its_probes_scan():
    # Unstructured vectors need most lists for the target; clustered ones far fewer.
    draw = rng(5)
    noise = draw.standard_normal((3000, 64))
    unstructured = (noise / np.linalg.norm(noise, axis=1, keepdims=True)).astype(np.float32)
    centres = rng(6).standard_normal((60, 64))
    topics = centres[draw.integers(0, 60, 3000)] + 0.05 * draw.standard_normal((3000, 64))
    clustered_rows = (topics / np.linalg.norm(topics, axis=1, keepdims=True)).astype(np.float32)
    loose = ivf.build(unstructured, 0.97).ivf
    tight = ivf.build(clustered_rows, 0.97).ivf
    assert loose.scan_share > 0.5 > 0.2 > tight.scan_share
    for built in (loose, tight):  # the share is that of the probed lists' rows
        assert built.probes / built.lists / 4 < built.scan_share <= 1


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-16])


def _shuffle_order(path):
    order = np.load(path)
    np.save(path, np.roll(order, 1))


def _offsets_off_by_one(path):
    offsets = np.load(path)
    offsets[-1] -= 1
    np.save(path, offsets)


def _remove(path):
    path.unlink()


def _as_float32(path):
    np.save(path, np.load(path).astype(np.float32))  # the header says float16


def _without_recall(path):
    header = json.loads(path.read_text())
    del header["ivf"]["recall"]
    path.write_text(json.dumps(header))


def _processed_not_a_mapping(path):
    header = json.loads(path.read_text())
    header["processed"] = ["not", "a", "mapping"]
    path.write_text(json.dumps(header))


@pytest.mark.parametrize(
    ("suffix", "damage"),
    [
        ("centroids.npy", _truncate),
        ("order.npy", _shuffle_order),
        ("offsets.npy", _offsets_off_by_one),
        ("offsets.npy", _remove),
        ("codes.npy", _truncate),
        ("scales.npy", _remove),
        ("vec.npy", _as_float32),
        ("json", _without_recall),
        ("json", _processed_not_a_mapping),
    ],
)
def test_a_damaged_or_mismatching_ivf_file_is_ignored_and_replaced(kb, suffix, damage):
    written = MatrixCache(10**8).get(kb).matrix
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    damage(folder / f"{written.base_name}.{suffix}")
    again = MatrixCache(10**8).get(kb)
    assert again.source == "load"  # not trusted: fetched from the database, written anew
    assert again.matrix.parts[0].ivf is not None
    np.testing.assert_array_equal(live_ids(again.matrix), live_ids(written))
    assert hostfile.newest(folder, written.stamp, DIMENSIONS) is not None  # it checks out


def _float32_rows(folder, name: str, header: dict, codes: bool) -> None:
    """Rewrite a base as an IVF base with float32 rows was written (with or without codes),
    under the header ``header`` gives; each file replaced, never changed under its mapping."""
    vec = np.load(folder / f"{name}.vec.npy").astype(np.float32)
    np.save(folder / "rows.npy", vec)
    (folder / "rows.npy").replace(folder / f"{name}.vec.npy")
    if not codes:
        (folder / f"{name}.codes.npy").unlink()
        (folder / f"{name}.scales.npy").unlink()
    (folder / f"{name}.json").write_text(json.dumps(header))


def _without_codes(folder, name: str, header: dict) -> None:
    del header["ivf"]["codes"]
    header["ivf"]["row_type"] = "float32"
    _float32_rows(folder, name, header, codes=False)


def _with_codes(folder, name: str, header: dict) -> None:
    header["ivf"]["row_type"] = "float32"
    _float32_rows(folder, name, header, codes=True)


def _naming_no_row_type(folder, name: str, header: dict) -> None:
    del header["ivf"]["codes"], header["ivf"]["row_type"]
    _float32_rows(folder, name, header, codes=False)


@pytest.mark.parametrize("older", [_without_codes, _with_codes, _naming_no_row_type])
def test_a_base_in_an_older_layout_is_rewritten_not_misread(kb, older):
    written = MatrixCache(10**8).get(kb).matrix
    asked = queries(10, 35)
    truth = [written.search(query, 10) for query in asked]
    folder = hostfile.directory(kb.tenant_id, kb.pk, identity_of(kb).epoch)
    header = json.loads((folder / f"{written.base_name}.json").read_text())
    older(folder, written.base_name, header)
    again = MatrixCache(10**8).get(kb)
    assert again.source == "load"  # not mapped as it is: fetched and written anew
    (base,) = again.matrix.parts
    assert base.vectors.dtype == np.float16 and base.ivf.codes is not None
    header = json.loads((folder / f"{again.matrix.base_name}.json").read_text())
    assert header["ivf"]["row_type"] == "float16" and header["ivf"]["codes"] == "int8"
    np.testing.assert_array_equal(live_ids(again.matrix), live_ids(written))
    for query, hits in zip(asked, truth, strict=True):
        same(again.matrix.search(query, 10), hits)
    assert MatrixCache(10**8).get(kb).source == "file"  # and the new base is mapped as it is


def test_the_service_searches_a_large_knowledge_base_through_the_ivf(kb):
    get_matrix_cache().discard(kb.pk)
    embedder = get_embedder(config_for_knowledge_base(kb))
    target = kb.chunks.order_by("pk")[1234]
    remember_query_embedding(embedder, "the chunk's own vector", np.asarray(target.embedding))
    service = RAGService(kb.tenant)
    result = service.search("the chunk's own vector", kb.pk, mode="vector", top_k=5)
    index = result.trace.vector.detail["index"]
    base = get_matrix_cache().get(kb).matrix.parts[0]
    assert index["index"] == "ivf" and index["lists"] == base.ivf.lists
    assert index["probes"] == base.ivf.probes and 0 < index["rows_scanned"] < kb.chunks.count()
    assert result.hits[0].chunk_id == target.pk
    assert result.hits[0].vector_similarity == pytest.approx(1.0, abs=1e-5)
    filtered = service.search(
        "the chunk's own vector",
        kb.pk,
        mode="vector",
        top_k=5,
        filters=SearchFilters(document_ids=(target.document_id,)),
    )
    assert filtered.trace.vector.detail["index"]["index"] == "exact"
    assert {h.document_id for h in filtered.hits} == {target.document_id}
