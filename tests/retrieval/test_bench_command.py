"""``manage.py bench bm25`` on the real services: one JSON object, and a readable table."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from knowledge.models import KnowledgeBase
from retrieval.models import BM25Manifest
from tenancy.models import Tenant

KEYS = {
    "docs",
    "build_s",
    "query_p50_ms",
    "query_p95_ms",
    "rank_bm25_query_p50_ms",
    "speedup",
    "max_abs_score_diff",
    "search_max_score_diff",
    "payload_bytes",
    "load_l2_ms",
    "load_l3_ms",
    "l1_bytes",
    "segments",
    "segment_payload_bytes",
    "bm25s_query_p50_ms",
    "bm25s_ratio",
    "bm25s_max_score_diff",
}

pytestmark = pytest.mark.django_db


def bench(*args: str) -> str:
    out = io.StringIO()
    call_command("bench", "bm25", *args, stdout=out)
    return out.getvalue()


def test_bench_bm25_json_prints_one_object_with_every_figure():
    before = (Tenant.objects.count(), KnowledgeBase.objects.count())
    result = json.loads(bench("--docs", "2000", "--queries", "40", "--json"))

    assert result.keys() >= KEYS
    assert result["docs"] == 2000
    assert result["max_abs_score_diff"] <= 1e-6
    assert result["speedup"] > 1
    assert result["bm25s_query_p50_ms"] > 0 and result["bm25s_ratio"] > 0
    # bm25s's robertson idf has no epsilon floor: it differs from rank_bm25 on common terms.
    assert result["bm25s_max_score_diff"] > result["max_abs_score_diff"]
    assert sum(result["segment_payload_bytes"]) == result["payload_bytes"]
    assert result["load_l2_ms"] > 0 and result["load_l3_ms"] > 0
    assert 0 < result["payload_bytes"] < result["l1_bytes"]
    assert result["store_l1_bytes"] > result["payload_bytes"]  # the cold gets filled L1
    # The throwaway tenant and knowledge base are gone, with their L3 row.
    assert (Tenant.objects.count(), KnowledgeBase.objects.count()) == before
    assert not BM25Manifest.objects.exists()


def test_bench_bm25_table_compares_with_rank_bm25():
    table = bench("--docs", "500", "--queries", "20")
    assert "rank_bm25" in table and "cold load from L2" in table and "cold load from L3" in table
    assert "bm25s" in table
    assert "500 synthetic documents" in table


def test_bench_bm25_without_peers_still_measures_ours():
    result = json.loads(bench("--docs", "300", "--queries", "5", "--no-peers", "--json"))
    assert "bm25s_ratio" not in result and "speedup" not in result
    assert result["add_document_ms"] > 0 and result["add_document_chunks"] == 20
    table = bench("--docs", "300", "--queries", "5", "--no-peers")
    assert "add a document" in table and "300 synthetic documents" in table


def test_bench_needs_a_benchmark_name():
    with pytest.raises(CommandError):
        call_command("bench")
