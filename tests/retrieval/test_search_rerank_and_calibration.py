"""Rerank inside a search (head rescored, tail kept, unanimity skip, failure fallback) and the
label-free calibration of fusion weights."""

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval import calibration, changes
from retrieval.search import RAGService
from tests.factories import add_document
from tests.fake_services import FakeRerankServer, Scripted, fake_relevance

pytestmark = pytest.mark.django_db


@pytest.fixture
def reranker(settings):
    with FakeRerankServer("cohere") as server:
        settings.RERANK_PROVIDER = "http"
        settings.RERANK_API_STYLE = "cohere"
        settings.RERANK_BASE_URL = server.base_url
        settings.RERANK_MODEL = "rerank-test"
        settings.RERANK_MAX_RETRIES = 0
        yield server


@pytest.fixture
def parts(tenant):
    kb = create_knowledge_base(
        tenant=tenant,
        name="Parts",
        chunk_size=200,
        chunk_overlap=0,
        embedding=EmbeddingConfig(provider="hash", dimensions=64),
    )
    for i in range(12):
        add_document(
            kb, f"part{i}.txt", f"Part {i} is a bolt of size M{i}. " + ("steel washer " * (i % 3))
        )
    return kb


def test_rerank_rescores_the_head_and_keeps_the_tail(parts, reranker):
    service = RAGService(parts.tenant)
    # One leg: no second opinion to agree with, so the reranker always runs.
    plain = service.search("bolt washer", parts.pk, top_k=10, mode="keyword")
    reranked = service.search(
        "bolt washer", parts.pk, top_k=10, rerank=True, rerank_top_n=4, mode="keyword"
    )
    assert reranked.trace.rerank.ran is True and reranked.trace.rerank.head == 4
    assert reranked.trace.retrieval_path[-1] == "rerank"
    head, tail = reranked.hits[:4], reranked.hits[4:]
    assert {h.chunk_id for h in head} == {h.chunk_id for h in plain.hits[:4]}
    expected = sorted(head, key=lambda h: -fake_relevance("bolt washer", h.content))
    assert [h.chunk_id for h in head] == [h.chunk_id for h in expected]
    assert all(h.rerank_score is not None for h in head)
    assert [h.chunk_id for h in tail] == [h.chunk_id for h in plain.hits[4:10]]
    assert all(h.rerank_score is None for h in tail)
    assert len(reranker.requests) == 1 and len(reranker.requests[0]["json"]["documents"]) == 4


def test_rerank_is_skipped_when_both_legs_agree(tenant, reranker):
    kb = create_knowledge_base(
        tenant=tenant, name="Two", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    add_document(kb, "a.txt", "pump seal pump seal pump seal")
    add_document(kb, "b.txt", "pump valve gasket bearing")
    add_document(kb, "c.txt", "conveyor belt motor")
    result = RAGService(tenant).search("pump seal", kb.pk, rerank=True)
    assert [h.vector_rank for h in result.hits[:2]] == [1, 2]
    assert [h.bm25_rank for h in result.hits[:2]] == [1, 2]
    assert result.trace.rerank.to_dict() == {"ran": False, "reason": "unanimity"}
    assert reranker.requests == []


def test_a_failing_reranker_keeps_the_fused_order(parts, reranker):
    reranker.script = [Scripted(500)]
    service = RAGService(parts.tenant)
    plain = service.search("bolt washer", parts.pk, top_k=10, mode="keyword")
    result = service.search("bolt washer", parts.pk, top_k=10, rerank=True, mode="keyword")
    assert result.trace.rerank.ran is False and "500" in result.trace.rerank.reason
    assert "rerank error -> fused order" in result.trace.fallbacks
    assert [h.chunk_id for h in result.hits] == [h.chunk_id for h in plain.hits]


def test_rerank_without_a_configured_reranker_says_so(manuals):
    result = RAGService(manuals.tenant).search(
        "pump valve", manuals.pk, rerank=True, mode="keyword"
    )
    assert result.trace.rerank.to_dict() == {"ran": False, "reason": "no reranker configured"}


def test_weights_come_from_the_query_the_kb_or_calibration(manuals):
    service = RAGService(manuals.tenant)
    assert service.search("pump", manuals.pk).trace.weight_source == "default"
    KnowledgeBase.objects.filter(pk=manuals.pk).update(
        weight_mode="fixed", vector_weight=0.3, keyword_weight=0.7
    )
    fixed = service.search("pump", manuals.pk).trace
    assert (fixed.weights, fixed.weight_source) == ({"vector": 0.3, "keyword": 0.7}, "fixed")
    asked = service.search("pump", manuals.pk, vector_weight=0.9).trace
    assert (asked.weights, asked.weight_source) == ({"vector": 0.9, "keyword": 0.7}, "query")


def test_calibration_measures_both_legs_and_stores_weights(manuals):
    result = calibration.calibrate(manuals.tenant, manuals, sample=10)
    assert result.queries > 0 and result.chunks == 5
    assert 0 <= result.keyword_mrr <= 1 and 0 <= result.vector_mrr <= 1
    assert result.vector_weight + result.keyword_weight == pytest.approx(1.0)
    kb = KnowledgeBase.objects.get(pk=manuals.pk)
    assert kb.calibrated_vector_weight == result.vector_weight and kb.calibrated_at
    trace = RAGService(manuals.tenant).search("pump", manuals.pk).trace
    assert trace.weight_source == "calibrated"
    assert trace.weights == {"vector": result.vector_weight, "keyword": result.keyword_weight}


def test_calibration_without_vectors_trusts_the_keyword_leg(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Plain", embedding=EmbeddingConfig(provider="none")
    )
    add_document(kb, "a.md", "# A\n\nalpha beta gamma delta epsilon zeta eta theta iota kappa")
    result = calibration.calibrate(tenant, kb)
    assert (result.vector_weight, result.keyword_weight, result.vector_mrr) == (0.0, 1.0, None)


@pytest.mark.parametrize(
    ("vector_mrr", "keyword_mrr", "expected"),
    [
        (0.09, 0.95, (0.0, 1.0)),  # an English model on Chinese text: distrusted entirely
        (0.8, 0.9, (0.4706, 0.5294)),  # both useful: proportional
        (0.9, 0.3, (1.0, 0.0)),
        (0.0, 0.0, (0.5, 0.5)),
    ],
)
def test_weight_rule(vector_mrr, keyword_mrr, expected):
    assert calibration.weights_from(vector_mrr, keyword_mrr)[:2] == expected


def test_pseudo_queries_are_windows_of_the_chunk():
    import random

    rng = random.Random(1)
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    query = calibration.pseudo_query(text, rng)
    assert len(query.split()) == 12 and query in text
    chinese = "温度传感器每六个月校准一次校准时使用标准温度计并记录读数差值"
    assert calibration.pseudo_query(chinese, rng) in chinese


def test_settled_calibration_is_debounced(manuals, settings):
    settings.RAG_CALIBRATION_MIN_CHUNKS = 1
    version = KnowledgeBase.objects.get(pk=manuals.pk).index_version
    assert changes.calibrate_when_settled(manuals.pk, version - 1) == "superseded"
    assert changes.calibrate_when_settled(manuals.pk, version).startswith("calibrated")
    assert changes.calibrate_when_settled(manuals.pk, version) == "unchanged enough"
    # Fixed weights still calibrate (relevance needs it) but keep their weights.
    KnowledgeBase.objects.filter(pk=manuals.pk).update(weight_mode="fixed", calibration=None)
    assert changes.calibrate_when_settled(manuals.pk, version).startswith("calibrated")
    kb = KnowledgeBase.objects.get(pk=manuals.pk)
    assert kb.calibration["relevance"]
    trace = RAGService(manuals.tenant).search("pump seal", manuals.pk).trace
    assert trace.weight_source == "fixed"
