"""RAGService against real PostgreSQL, Redis and BM25Store: legs, fusion, fallbacks, the retry
ladder, filters, thresholds, multi-KB search, and hits that can never leak."""

import sys

import numpy as np
import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.bm25store import BM25Store, availability
from retrieval.core.identity import identity_of
from retrieval.search import InvalidSearch, KnowledgeBaseNotFound, RAGService
from retrieval.search.types import SearchFilters
from tests.factories import TenantFactory, add_document
from tests.fake_services import FakeEmbeddingsServer, Scripted
from tests.retrieval.test_bm25_store import view_of_corpus

pytestmark = pytest.mark.django_db


def titles(result):
    return [hit.document_title for hit in result.hits]


def test_hybrid_search_ranks_the_right_chunk_first_with_every_signal(manuals):
    result = RAGService(manuals.tenant).search("mechanical seal of the P-100 pump", manuals.pk)
    assert titles(result)[0] == "Pump handbook"
    hit = result.hits[0]
    assert hit.vector_rank == 1 and hit.bm25_rank == 1
    assert hit.vector_similarity > 0 and hit.bm25_score > 0
    assert 0 < hit.score <= 1.0 and hit.score == max(h.score for h in result.hits)
    assert hit.heading_path == ["Pump handbook"]
    assert hit.content.startswith("# Pump handbook") and hit.end_char > hit.start_char
    assert hit.original_filename == "pumps.md"
    trace = result.trace
    assert trace.mode_used == "hybrid" and trace.retrieval_path == ["vector", "keyword", "fusion"]
    assert trace.weights == {"vector": 0.6, "keyword": 0.4}
    assert trace.weight_source == "default"  # calibration has not run on this new KB
    assert trace.vector.ran and trace.keyword.ran and trace.fallbacks == []
    assert trace.keyword.detail["bm25"]["tier"] in {"build", "l1", "l2", "l3"}
    assert trace.knowledge_bases[0].hits == len(result.hits)


def test_chinese_query_finds_the_chinese_manual(manuals):
    result = RAGService(manuals.tenant).search("传感器多久校准", manuals.pk, mode="keyword")
    assert titles(result)[0] == "温度传感器"


def test_results_are_deterministic(manuals):
    runs = [
        [h.chunk_id for h in RAGService(manuals.tenant).search("valve", manuals.pk).hits]
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]


def test_top_k_and_score_threshold(manuals):
    service = RAGService(manuals.tenant)
    assert len(service.search("the", manuals.pk, top_k=2, mode="vector").hits) == 2
    everything = service.search("pump seal valve sensor", manuals.pk, top_k=10)
    # The threshold cuts relevance (0-1, per hit), not the fused score: the order stays fused.
    assert all(0.0 <= h.relevance <= 1.0 for h in everything.hits)
    relevances = sorted({h.relevance for h in everything.hits})
    threshold = relevances[len(relevances) // 2]
    cut = service.search("pump seal valve sensor", manuals.pk, top_k=10, score_threshold=threshold)
    assert [h.chunk_id for h in cut.hits] == [
        h.chunk_id for h in everything.hits if h.relevance >= threshold
    ]
    assert 0 < len(cut.hits) < len(everything.hits)


def test_keyword_mode_and_zero_vector_weight_never_call_the_embedder(tenant):
    with FakeEmbeddingsServer(dimensions=8) as server:
        from django.test import override_settings

        with override_settings(EMBEDDING_BASE_URL=server.base_url):
            kb = create_knowledge_base(
                tenant=tenant,
                name="Remote",
                embedding=EmbeddingConfig(
                    provider="openai", model="m", dimensions=8, base_url=server.base_url
                ),
            )
            add_document(kb, "pumps.md", "# Pumps\n\nThe P-100 pump.")
            calls = len(server.requests)
            service = RAGService(tenant)
            keyword = service.search("pump", kb.pk, mode="keyword")
            weightless = service.search("pump", kb.pk, vector_weight=0)
            assert len(server.requests) == calls  # no embedding request at all
            assert not keyword.trace.vector.ran and not weightless.trace.vector.ran
            assert weightless.trace.retrieval_path == ["keyword"]
            assert all(h.vector_rank is None for h in weightless.hits)
            hybrid = service.search("pump", kb.pk)
            assert len(server.requests) == calls + 1 and hybrid.trace.vector.ran
            service.search("pump", kb.pk)  # the query embedding is cached in Redis
            assert len(server.requests) == calls + 1


def test_zero_keyword_weight_never_loads_the_bm25_index(manuals):
    store = BM25Store()
    result = RAGService(manuals.tenant, store=store).search("pump", manuals.pk, keyword_weight=0)
    assert result.trace.retrieval_path == ["vector"] and not result.trace.keyword.ran
    assert store.build_count == 0 and store.l1.nbytes == 0
    assert all(h.bm25_rank is None for h in result.hits)


def test_no_embedder_falls_back_to_keyword(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Plain", embedding=EmbeddingConfig(provider="none")
    )
    add_document(kb, "pumps.md", "# Pumps\n\nThe P-100 pump.")
    result = RAGService(tenant).search("pump", kb.pk, mode="vector")
    assert result.trace.fallbacks == ["no embedder -> keyword"]
    assert result.trace.mode_used == "keyword" and titles(result) == ["Pumps"]
    hybrid = RAGService(tenant).search("pump", kb.pk)
    assert hybrid.trace.fallbacks == ["no embedder -> keyword only"]


def test_embedding_error_falls_back_to_keyword_for_that_query(tenant, settings):
    with FakeEmbeddingsServer(dimensions=8) as server:
        settings.EMBEDDING_BASE_URL = server.base_url
        settings.EMBEDDING_MAX_RETRIES = 0
        kb = create_knowledge_base(
            tenant=tenant,
            name="Flaky",
            embedding=EmbeddingConfig(
                provider="openai", model="m", dimensions=8, base_url=server.base_url
            ),
        )
        add_document(kb, "pumps.md", "# Pumps\n\nThe P-100 pump.")
        server.script = [Scripted(500)]
        failed = RAGService(tenant).search("centrifugal pump", kb.pk)
        assert failed.trace.fallbacks == ["embedding error -> keyword only"]
        assert "500" in failed.trace.vector.detail["error"]
        assert titles(failed) == ["Pumps"]
        recovered = RAGService(tenant).search("centrifugal pump", kb.pk)
        assert recovered.trace.fallbacks == [] and recovered.trace.mode_used == "hybrid"


def test_bm25_unavailable_falls_back_to_vector(manuals, monkeypatch):
    monkeypatch.setitem(sys.modules, "rank_bm25", None)  # as if not installed
    monkeypatch.setattr(availability, "_available", None)
    result = RAGService(manuals.tenant).search("pump seal", manuals.pk, mode="keyword")
    assert result.trace.fallbacks == ["BM25 unavailable -> vector"]
    assert result.trace.mode_used == "vector" and result.hits


def test_retry_ladder_sanitised_query(manuals):
    result = RAGService(manuals.tenant).search("ZX81?", manuals.pk, mode="keyword")
    rungs = [(a["rung"], a["hits"] > 0) for a in result.trace.retry_ladder]
    # ("strongest_term" is gone: the query's own term alone could never find more.)
    assert rungs == [("sanitised_query", True)]
    assert titles(result) == ["controller"]


def test_retry_ladder_corrects_a_typo_against_the_vocabulary(manuals):
    # "handbok" (7 letters) is one edit from "handbook"; "Pmup" is too short to correct.
    result = RAGService(manuals.tenant).search("Pmup handbok", manuals.pk, mode="keyword")
    ladder = result.trace.retry_ladder
    assert [(a["rung"], a["hits"] > 0) for a in ladder] == [("corrected_query", True)]
    assert ladder[0]["corrected"] == {"handbok": ["handbook"]}
    assert titles(result)[0] == "Pump handbook"


def test_retry_ladder_ends_with_fuzzy_titles(manuals):
    # Nothing to correct ("pmp" is short, "handbk" two edits from "handbook") and no new term
    # once sanitised: only the titles' trigrams are left.
    result = RAGService(manuals.tenant).search("pmp handbk", manuals.pk, mode="keyword")
    rungs = [a["rung"] for a in result.trace.retry_ladder]
    assert rungs == ["fuzzy_title"]
    assert titles(result) == ["Pump handbook"]


def test_filters_by_metadata_document_and_age(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Projects", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    apollo = add_document(kb, "a.md", "# A\n\nengine test report", metadata={"project": "apollo"})
    gemini = add_document(kb, "g.md", "# G\n\nengine test summary", metadata={"project": "gemini"})
    old = add_document(kb, "o.md", "# O\n\nengine test archive", metadata={"project": "mercury"})
    Document.objects.filter(pk=old.pk).update(created_at="2020-01-01T00:00:00Z")
    service = RAGService(tenant)

    def found(**filters):
        return {
            h.document_id
            for h in service.search(
                "engine test", kb.pk, top_k=10, filters=SearchFilters.from_dict(filters)
            ).hits
        }

    assert found() == {apollo.pk, gemini.pk, old.pk}
    assert found(metadata={"project": "apollo"}) == {apollo.pk}
    assert found(metadata={"project": ["apollo", "mercury"]}) == {apollo.pk, old.pk}
    assert found(document_ids=(gemini.pk,)) == {gemini.pk}
    assert found(max_age_days=30) == {apollo.pk, gemini.pk}
    assert found(metadata={"project": "nobody"}) == set()
    for mode in ("keyword", "vector"):
        hits = service.search(
            "engine", kb.pk, mode=mode, filters=SearchFilters(metadata={"project": "gemini"})
        ).hits
        assert {h.document_id for h in hits} == {gemini.pk}


def test_a_deleted_documents_chunk_is_never_returned_even_from_a_warm_cache(manuals):
    service = RAGService(manuals.tenant)
    assert titles(service.search("gate valve", manuals.pk))[0] == "Valve guide"
    valves = manuals.documents_by_name["valves.md"]
    # Delete behind the services' back: no version bump, so every cache still holds it.
    Document.objects.filter(pk=valves.pk).delete()
    result = service.search("gate valve", manuals.pk)
    assert "Valve guide" not in titles(result)
    assert result.trace.keyword.detail["bm25"]["tier"] == "l1"  # the stale index was used...
    # ...and its chunk was dropped at hydration.


def test_a_document_being_reprocessed_is_not_returned(manuals):
    valves = manuals.documents_by_name["valves.md"]
    Document.objects.filter(pk=valves.pk).update(status=Document.Status.PARSING)
    assert "Valve guide" not in titles(RAGService(manuals.tenant).search("gate valve", manuals.pk))


def test_a_foreign_chunk_in_a_cached_index_is_never_returned(manuals):
    other = create_knowledge_base(
        tenant=TenantFactory(), name="Secret", embedding=EmbeddingConfig(provider="none")
    )
    secret = add_document(other, "secret.md", "# Secret\n\nThe gate valve master key is 1234.")
    secret_chunk = Chunk.objects.get(document=secret)
    store = BM25Store()
    kb = KnowledgeBase.objects.get(pk=manuals.pk)
    poisoned = view_of_corpus(kb.index_version, [secret_chunk.pk], [secret_chunk.tokens])
    store.l1.put(identity_of(kb), poisoned, kb.index_version)
    result = RAGService(manuals.tenant, store=store).search("gate valve key", kb.pk, mode="keyword")
    assert result.trace.keyword.candidates == 1  # the poisoned cache offered it...
    assert result.hits == []  # ...hydration refused it


def test_another_tenants_knowledge_base_is_not_found(manuals):
    stranger = TenantFactory()
    with pytest.raises(KnowledgeBaseNotFound):
        RAGService(stranger).search("pump", manuals.pk)
    with pytest.raises(KnowledgeBaseNotFound):
        RAGService(manuals.tenant).search("pump", 10**9)


def test_multi_kb_search_merges_kbs_with_different_models(manuals, tenant):
    second = create_knowledge_base(
        tenant=tenant, name="Second", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    add_document(second, "compressor.md", "# Compressor\n\nThe C-9 compressor needs oil.")
    result = RAGService(tenant).search_multiple_knowledge_bases(
        "compressor oil and pump seal", [manuals.pk, second.pk], top_k=5
    )
    kbs = {h.knowledge_base_id for h in result.hits}
    assert kbs == {manuals.pk, second.pk}
    contributions = {kb.knowledge_base_id: kb.hits for kb in result.trace.knowledge_bases}
    assert set(contributions) == {manuals.pk, second.pk} and all(contributions.values())
    assert sum(contributions.values()) >= len(result.hits)
    with pytest.raises(KnowledgeBaseNotFound):
        other = create_knowledge_base(
            tenant=TenantFactory(), name="X", embedding=EmbeddingConfig(provider="none")
        )
        RAGService(tenant).search_multiple_knowledge_bases("pump", [manuals.pk, other.pk])


@pytest.mark.parametrize(
    ("query", "options", "message"),
    [
        ("   ", {}, "empty"),
        ("x" * 5000, {}, "longer than"),
        ("pump", {"mode": "psychic"}, "mode must be one of"),
        ("pump", {"vector_weight": 0, "keyword_weight": 0}, "cannot both be 0"),
        ("pump", {"top_k": 0}, "top_k"),
        ("pump", {"vector_weight": -1}, ">= 0"),
    ],
)
def test_bad_requests_are_clear_errors(manuals, query, options, message):
    with pytest.raises(InvalidSearch, match=message):
        RAGService(manuals.tenant).search(query, manuals.pk, **options)


@pytest.mark.parametrize(
    "query",
    [
        "the of and",
        "🙂🙃",
        "pump 泵 насос",
        "'; DROP TABLE knowledge_chunk; --",
        "a & !b | c:*",
        "nul\x00byte",
    ],
)
def test_odd_queries_answer_without_errors(manuals, query):
    result = RAGService(manuals.tenant).search(query, manuals.pk)
    assert isinstance(result.hits, list)
    assert Chunk.objects.filter(knowledge_base=manuals).exists()


def test_fused_scores_follow_weighted_rrf(manuals):
    result = RAGService(manuals.tenant).search("pump", manuals.pk, top_k=10)
    k, best = 60, (0.6 + 0.4) / 61
    for hit in result.hits:
        expected = (
            sum(
                w / (k + r)
                for w, r in ((0.6, hit.vector_rank), (0.4, hit.bm25_rank))
                if r is not None
            )
            / best
        )
        assert hit.score == pytest.approx(expected, abs=1e-6)
    assert np.all(np.diff([h.score for h in result.hits]) <= 0)
