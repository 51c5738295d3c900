"""Search and context over one knowledge base and several: every score and rank of each hit,
the trace (summary, or whole with explain), filters, and validation."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.api.conftest import API, error_of, make_kb
from tests.factories import add_document

pytestmark = pytest.mark.django_db

HIT_FIELDS = {
    "rank",
    "chunk_id",
    "document_id",
    "knowledge_base_id",
    "document_title",
    "original_filename",
    "content",
    "score",
    "relevance",
    "vector_similarity",
    "vector_rank",
    "bm25_score",
    "bm25_rank",
    "rerank_score",
    "page",
    "start_char",
    "end_char",
    "heading_path",
    "metadata",
    "position",
}


def search(client, kb_id, **body):
    return client.post(f"{API}/knowledge-bases/{kb_id}/search", body, format="json")


def test_search_answers_ranked_hits_with_every_signal_and_a_trace(client, kb):
    response = search(client, kb.pk, query="mechanical seal of the P-100 pump")
    assert response.status_code == 200
    body = response.json()
    first = body["results"][0]
    assert set(first) == HIT_FIELDS
    assert first["rank"] == 1 and first["document_title"] == "Pump handbook"
    assert first["vector_rank"] == 1 and first["bm25_rank"] == 1 and first["score"] == 1.0
    assert first["vector_similarity"] > 0 and first["bm25_score"] > 0
    assert first["original_filename"] == "pumps.md" and first["end_char"] > first["start_char"]
    assert [hit["rank"] for hit in body["results"]] == list(range(1, len(body["results"]) + 1))
    trace = body["trace"]
    assert trace["mode_used"] == "hybrid" and trace["retrieval_path"][-1] == "fusion"
    assert trace["results"] == len(body["results"])
    assert "vector" not in trace and "knowledge_bases" not in trace  # summary only


def test_explain_returns_the_whole_trace(client, kb):
    trace = search(client, kb.pk, query="pump", explain=True).json()["trace"]
    assert trace["vector"]["ran"] and trace["keyword"]["ran"]
    assert trace["keyword"]["detail"]["tokens"] == ["pump"]
    assert trace["knowledge_bases"][0]["knowledge_base_id"] == kb.pk
    assert trace["rerank"] == {"ran": False, "reason": "disabled"} and trace["k"] == 60


def test_options_override_the_knowledge_base_defaults(client, kb):
    body = search(
        client,
        kb.pk,
        query="pump",
        top_k=1,
        mode="keyword",
        vector_weight=0.1,
        keyword_weight=0.9,
    ).json()
    assert len(body["results"]) == 1 and body["trace"]["mode_used"] == "keyword"
    assert body["results"][0]["vector_rank"] is None
    weighted = search(client, kb.pk, query="pump", vector_weight=0.1, keyword_weight=0.9)
    assert weighted.json()["trace"]["weights"] == {"vector": 0.1, "keyword": 0.9}
    assert weighted.json()["trace"]["weight_source"] == "query"


def test_chinese_query(client, kb):
    body = search(client, kb.pk, query="传感器多久校准一次").json()
    assert body["results"][0]["document_title"] == "温度传感器"


@pytest.mark.parametrize(
    ("stored", "query", "other_script_query"),
    [
        ("传感器的校准周期是十二个月。", "传感器校准周期是多久", "傳感器校準週期是多久"),
        ("傳感器的校準週期是十二個月。", "傳感器校準週期是多久", "传感器校准周期是多久"),
    ],
)
def test_traditional_and_simplified_queries_find_the_same_chunk(
    client, tenant, stored, query, other_script_query
):
    kb = make_kb(
        tenant,
        "Sensors",
        {
            "calibration.txt": stored,
            "wiring.txt": "传感器的接线说明：红线接电源，黑线接地。",
            "pump.txt": "The pump P-100 runs daily.",
        },
    )
    same = search(client, kb.pk, query=query).json()["results"]
    other = search(client, kb.pk, query=other_script_query).json()["results"]
    assert same[0]["original_filename"] == other[0]["original_filename"] == "calibration.txt"
    assert other[0]["content"] == stored  # shown as written, not folded
    for key in ("score", "bm25_score", "bm25_rank", "vector_similarity"):
        assert other[0][key] == same[0][key], key
    assert [hit["chunk_id"] for hit in other] == [hit["chunk_id"] for hit in same]


def test_filters_by_metadata_and_document(client, tenant):
    kb = make_kb(tenant, "Projects")
    apollo = add_document(
        kb, "a.txt", "The pump of project Apollo.", metadata={"project": "apollo"}
    )
    gemini = add_document(
        kb, "g.txt", "The pump of project Gemini.", metadata={"project": "gemini"}
    )
    hits = search(client, kb.pk, query="pump", filters={"metadata": {"project": "apollo"}}).json()[
        "results"
    ]
    assert [hit["document_id"] for hit in hits] == [apollo.pk]
    assert hits[0]["metadata"] == {"project": "apollo"}
    hits = search(client, kb.pk, query="pump", filters={"document_ids": [gemini.pk]}).json()
    assert [hit["document_id"] for hit in hits["results"]] == [gemini.pk]
    trace = search(
        client, kb.pk, query="pump", explain=True, filters={"metadata": {"project": ["x"]}}
    ).json()["trace"]
    assert trace["filters"] == {"metadata": {"project": ["x"]}} and trace["results"] == 0


def test_score_threshold_cuts_relevance_and_keeps_the_fused_order(client, kb):
    everything = search(client, kb.pk, query="pump seal", top_k=10).json()["results"]
    assert all(0.0 <= hit["relevance"] <= 1.0 for hit in everything)
    threshold = sorted(hit["relevance"] for hit in everything)[len(everything) // 2]
    hits = search(client, kb.pk, query="pump seal", top_k=10, score_threshold=threshold).json()
    assert [h["chunk_id"] for h in hits["results"]] == [
        h["chunk_id"] for h in everything if h["relevance"] >= threshold
    ]
    above = search(client, kb.pk, query="pump seal", score_threshold=1.0).json()["results"]
    assert all(hit["relevance"] == 1.0 for hit in above)


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({}, "invalid", "query"),
        ({"query": "   "}, "invalid", "query"),
        ({"query": "x" * 5000}, "invalid", "query"),
        ({"query": "pump", "top_k": 0}, "invalid", "top_k"),
        ({"query": "pump", "top_k": 1000}, "invalid", "top_k"),
        ({"query": "pump", "mode": "psychic"}, "invalid", "mode"),
        ({"query": "pump", "score_threshold": -1}, "invalid", "score_threshold"),
        ({"query": "pump", "filters": {"document_ids": ["a"]}}, "invalid", "filters"),
        ({"query": "pump", "vector_weight": 0, "keyword_weight": 0}, "invalid_search", None),
    ],
)
def test_invalid_searches_answer_400(client, kb, body, code, field):
    response = client.post(f"{API}/knowledge-bases/{kb.pk}/search", body, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == code
    if field:
        assert field in error["details"]["fields"]


def test_search_several_knowledge_bases(client, tenant, kb):
    other = make_kb(tenant, "Valves", {"valves.md": "# Valve guide\n\nValve V-7 near the pump."})
    response = client.post(
        f"{API}/search",
        {"query": "pump", "knowledge_base_ids": [kb.pk, other.pk], "explain": True},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert {hit["knowledge_base_id"] for hit in body["results"]} == {kb.pk, other.pk}
    assert [t["knowledge_base_id"] for t in body["trace"]["knowledge_bases"]] == [kb.pk, other.pk]
    missing = client.post(
        f"{API}/search", {"query": "pump", "knowledge_base_ids": [kb.pk, 10**17]}, format="json"
    )
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    empty = client.post(f"{API}/search", {"query": "pump", "knowledge_base_ids": []}, format="json")
    assert empty.status_code == 400


def test_context_formats_the_hits_for_an_llm(client, kb):
    response = client.post(
        f"{API}/knowledge-bases/{kb.pk}/context", {"query": "pump seal", "top_k": 2}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["context"].startswith("[1] Pump handbook")
    assert "Sources:\n[1] Pump handbook (pumps.md)" in body["context"]
    assert len(body["results"]) == 2 and body["results"][0]["rank"] == 1

    small = client.post(
        f"{API}/knowledge-bases/{kb.pk}/context",
        {"query": "pump seal", "max_chars": 200},
        format="json",
    ).json()["context"]
    assert len(small) <= 200 and "left out" in small


def test_context_over_several_knowledge_bases(client, tenant, kb):
    other = make_kb(tenant, "Valves", {"valves.md": "# Valve guide\n\nValve V-7 near the pump."})
    body = client.post(
        f"{API}/context",
        {"query": "valve V-7", "knowledge_base_ids": [other.pk, kb.pk]},
        format="json",
    ).json()
    assert body["context"].startswith("[1] Valve guide")


def test_a_search_reads_its_key_and_knowledge_base_once_and_counts_no_documents(client, kb):
    search(client, kb.pk, query="pump")  # the index built, the model loaded
    with CaptureQueriesContext(connection) as queries:
        response = search(client, kb.pk, query="mechanical seal")
    assert response.status_code == 200 and response.json()["results"]
    # Whole rows (the key's restriction reads ids only, the index its version only).
    sql = [q["sql"] for q in queries]
    reads = [s for s in sql if "calibration" in s and "knowledge_knowledgebase" in s]
    assert len(reads) == 1, reads
    assert not [s for s in sql if "COUNT(" in s.upper()]
    # The key's knowledge-base restriction is read with the key, in one query: with the
    # knowledge base and hydration, the search's only three.
    keys = [s for s in sql if re.search(r'FROM "?knowledge_apikey"?\s', s)]
    assert len(keys) == 1 and "knowledge_apikey_knowledge_bases" in keys[0], keys
    assert len(sql) == 3, sql
