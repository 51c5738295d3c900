"""SearchFilters.from_dict (the one way a dict becomes filters: REST API, Dify, LangChain,
the search options) and the typed traces' JSON. Pure: no database."""

import json
from datetime import UTC, date, datetime, timedelta, timezone

import numpy as np
import pytest

from retrieval.search.types import (
    Hit,
    KeywordSummary,
    KnowledgeBaseTrace,
    RerankTrace,
    SearchFilters,
    Trace,
    VectorSummary,
    plain,
)


def test_the_rest_shape_with_iso_dates():
    filters = SearchFilters.from_dict(
        {
            "document_ids": [3, 1],
            "metadata": {"project": "apollo", "lang": ["en", "de"]},
            "max_age_days": 30.5,
            "created_after": "2024-05-01T08:00:00+02:00",
            "created_before": "2024-06-01T00:00:00Z",
        }
    )
    assert filters == SearchFilters(
        document_ids=(3, 1),
        metadata={"project": "apollo", "lang": ["en", "de"]},
        max_age_days=30.5,
        created_after=datetime(2024, 5, 1, 8, tzinfo=timezone(timedelta(hours=2))),
        created_before=datetime(2024, 6, 1, tzinfo=UTC),
    )
    assert filters.active


def test_dates_as_datetimes_dates_or_date_only_text():
    moment = datetime(2024, 5, 1, 8, 30, tzinfo=UTC)
    filters = SearchFilters.from_dict({"created_after": moment, "created_before": date(2024, 6, 1)})
    assert filters.created_after is moment
    assert filters.created_before == datetime(2024, 6, 1)
    assert SearchFilters.from_dict({"created_after": "2024-06-01"}).created_after == datetime(
        2024, 6, 1
    )


@pytest.mark.parametrize(
    "ids", [(5, 2), [5, 2], range(5, 1, -3), np.array([5, 2]), (i for i in (5, 2))]
)
def test_document_ids_from_any_sequence_of_integers(ids):
    document_ids = SearchFilters.from_dict({"document_ids": ids}).document_ids
    assert document_ids == (5, 2) and all(type(i) is int for i in document_ids)


@pytest.mark.parametrize(
    "value",
    [
        None,
        {},
        {
            "document_ids": None,
            "metadata": None,
            "max_age_days": None,
            "created_after": None,
            "created_before": None,
        },
    ],
)
def test_missing_or_null_keys_filter_nothing(value):
    filters = SearchFilters.from_dict(value)
    assert filters == SearchFilters() and not filters.active


def test_empty_document_ids_are_a_filter_that_lets_nothing_through():
    filters = SearchFilters.from_dict({"document_ids": []})
    assert filters.document_ids == () and filters.active


def test_search_filters_are_taken_as_they_are():
    filters = SearchFilters(metadata={"project": "apollo"})
    assert SearchFilters.from_dict(filters) is filters


def test_unknown_keys_are_named():
    with pytest.raises(ValueError, match=r"^unknown filters: project, tags$"):
        SearchFilters.from_dict({"metadata": {}, "tags": ["a"], "project": "apollo"})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["document_ids"], "filters must be an object, not list"),
        ("project=apollo", "filters must be an object, not str"),
        ({"document_ids": "12"}, "document_ids must be a list of integers"),
        ({"document_ids": 12}, "document_ids must be a list of integers"),
        ({"document_ids": [1, "2"]}, "document_ids must be a list of integers"),
        ({"document_ids": [1.0]}, "document_ids must be a list of integers"),
        ({"document_ids": [True]}, "document_ids must be a list of integers"),
        ({"document_ids": {"id": 1}}, "document_ids must be a list of integers"),
        ({"metadata": ["project"]}, "metadata must be an object"),
        ({"metadata": {1: "a"}}, "metadata must be an object"),
        ({"max_age_days": "30"}, "max_age_days must be a number"),
        ({"max_age_days": True}, "max_age_days must be a number"),
        ({"max_age_days": float("nan")}, "max_age_days must be a number"),
        ({"max_age_days": -1}, "max_age_days must be >= 0"),
        ({"created_after": "yesterday"}, "created_after must be an ISO 8601 date"),
        ({"created_before": 1_700_000_000}, "created_before must be an ISO 8601 date"),
    ],
)
def test_bad_types_are_named(value, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        SearchFilters.from_dict(value)


def test_to_dict_is_the_json_shape_that_from_dict_reads_back():
    filters = SearchFilters(
        document_ids=(3,),
        metadata={"lang": ["en"]},
        max_age_days=7,
        created_after=datetime(2024, 5, 1, tzinfo=UTC),
        created_before=datetime(2024, 6, 1, tzinfo=UTC),
    )
    shape = filters.to_dict()
    assert shape == {
        "document_ids": [3],
        "metadata": {"lang": ["en"]},
        "max_age_days": 7,
        "created_after": "2024-05-01T00:00:00+00:00",
        "created_before": "2024-06-01T00:00:00+00:00",
    }
    assert SearchFilters.from_dict(json.loads(json.dumps(shape))) == filters
    assert SearchFilters().to_dict() == {}


# --------------------------------------------------------------------------- traces


def test_a_rerank_trace_says_what_ran_or_why_not():
    assert RerankTrace().to_dict() == {"ran": False, "reason": "disabled"}
    assert RerankTrace.skipped("unanimity").to_dict() == {"ran": False, "reason": "unanimity"}
    done = RerankTrace.done("http:cohere:m", head=4, ms=1.5).to_dict()
    assert list(done.items()) == [
        ("ran", True),
        ("reranker", "http:cohere:m"),
        ("head", 4),
        ("ms", 1.5),
    ]


def test_a_knowledge_base_trace_lists_only_the_legs_that_ran():
    trace = KnowledgeBaseTrace(7, "Manuals", {"vector": 0.6, "keyword": 0.4}, "default")
    trace.keyword = KeywordSummary(candidates=3, tier="l1", index_version=2, ladder=[])
    trace.retrieval_path, trace.mode_used, trace.hits = ["keyword"], "keyword", 2
    assert list(trace.to_dict().items()) == [
        ("knowledge_base_id", 7),
        ("name", "Manuals"),
        ("weights", {"vector": 0.6, "keyword": 0.4}),
        ("weight_source", "default"),
        ("retrieval_path", ["keyword"]),
        ("fallbacks", []),
        ("keyword", {"candidates": 3, "tier": "l1", "index_version": 2, "ladder": []}),
        ("mode_used", "keyword"),
        ("hits", 2),
        ("warnings", []),  # the language rule's note ("language") only when it acted
    ]
    trace.vector = VectorSummary(candidates=5, embedding_cache_hit=True, index="exact")
    assert trace.to_dict()["vector"] == {
        "candidates": 5,
        "embedding_cache_hit": True,
        "index": "exact",
    }


def test_the_trace_as_json_nests_the_typed_parts():
    kb = KnowledgeBaseTrace(7, "Manuals", {"keyword": 1.0}, "query")
    trace = Trace(rerank=RerankTrace.skipped("no results"), knowledge_bases=[kb])
    data = json.loads(json.dumps(trace.to_dict()))
    assert data["rerank"] == {"ran": False, "reason": "no results"}
    assert data["knowledge_bases"] == [kb.to_dict()]
    assert list(data) == [
        "mode_requested",
        "mode_used",
        "retrieval_path",
        "fallbacks",
        "weights",
        "weight_source",
        "k",
        "top_k",
        "candidate_count",
        "vector",
        "keyword",
        "retry_ladder",
        "fusion_ms",
        "rerank",
        "filters",
        "query_script",
        "warnings",
        "knowledge_bases",
        "database",
        "replica_lag_fallback",
        "total_ms",
        "results",
    ]


def test_plain_is_asdict_without_sharing_a_container():
    from dataclasses import asdict

    hit = Hit(1, 2, 3, "Pump", "text", 0.5, heading_path=["A", "B"], page=4,
              metadata={"tags": ["x", {"deep": [1, 2]}], "when": date(2024, 5, 1)})  # fmt: skip
    trace = Trace(weights={"vector": 0.7}, retrieval_path=["vector"], retry_ladder=[{"rung": "x"}])
    trace.keyword.detail = {"tokens": ["pump"], "bm25": {"tier": "l1", "segments": (1, 2)}}
    trace.knowledge_bases = [KnowledgeBaseTrace(7, "Manuals", {"keyword": 1.0}, "query")]
    for value in (hit, trace, trace.knowledge_bases[0]):
        assert plain(value) == asdict(value)
    shape = plain(trace)
    shape["keyword"]["detail"]["tokens"].append("seal")
    shape["retry_ladder"][0]["rung"] = "changed"
    shape["knowledge_bases"][0]["weights"]["vector"] = 1.0
    assert trace.keyword.detail["tokens"] == ["pump"] and trace.retry_ladder == [{"rung": "x"}]
    assert trace.knowledge_bases[0].weights == {"keyword": 1.0}
    shape = hit.to_dict()
    shape["metadata"]["tags"][1]["deep"].append(3)
    assert hit.metadata["tags"][1] == {"deep": [1, 2]} and "signals" not in shape
