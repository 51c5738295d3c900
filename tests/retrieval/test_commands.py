"""The search, calibrate, evaluate and bench fusion commands, as a person runs them."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tenancy.models import Tenant

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_search_command_prints_hits_and_trace(manuals):
    text = run("search", "--tenant", manuals.tenant.name, "--kb", "Manuals", "gate valve V-7")
    assert text.startswith("[1] Valve guide")
    assert "mode auto -> hybrid" in text
    data = json.loads(
        run(
            "search",
            "--tenant",
            manuals.tenant.name,
            "--kb",
            "Manuals",
            "--mode",
            "keyword",
            "--json",
            "gate valve",
        )
    )
    assert data["results"][0]["document_title"] == "Valve guide"
    assert {"content", "score", "bm25_score", "bm25_rank"} <= set(data["results"][0])
    assert data["trace"]["mode_used"] == "keyword"


def test_search_command_errors_are_clear(manuals):
    with pytest.raises(CommandError, match="no knowledge base 'Nope'"):
        run("search", "--tenant", manuals.tenant.name, "--kb", "Nope", "q")
    with pytest.raises(CommandError, match="query is empty"):
        run("search", "--tenant", manuals.tenant.name, "--kb", "Manuals", "  ")


def test_calibrate_command(manuals):
    data = json.loads(
        run("calibrate", "--tenant", manuals.tenant.name, "--kb", "Manuals", "--json")
    )
    assert data["chunks"] == 5 and data["vector_weight"] + data["keyword_weight"] == 1.0


def test_evaluate_command_scores_a_small_collection_and_cleans_up(tmp_path):
    docs = [
        ("d1", "Pumps", "The centrifugal pump moves water through the cooling loop."),
        ("d2", "Valves", "A gate valve stops the flow when it is closed."),
        ("d3", "Sensors", "The thermocouple sensor measures the casing temperature."),
        ("d4", "Belts", "The conveyor belt carries boxes to the loading dock."),
        ("d5", "Lamps", "An LED lamp lights the aisle."),
        ("d6", "Doors", "The fire door closes by itself."),
        ("d7", "Fans", "The ceiling fan turns slowly."),
        ("d8", "Cables", "A copper cable carries power."),
    ]
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": i, "title": t, "text": x}) for i, t, x in docs)
    )
    queries = [
        ("q1", "which machine moves water", "d1"),
        ("q2", "stop the flow", "d2"),
        ("q3", "temperature of the casing", "d3"),
        ("q4", "boxes to the dock", "d4"),
    ]
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": q, "text": t}) for q, t, _ in queries)
    )
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(f"{q}\t{d}\t1" for q, _, d in queries)
    )
    tenants_before = Tenant.objects.count()

    report = json.loads(
        run("evaluate", str(tmp_path), "--embedding", "hash", "--mode", "keyword", "--json")
    )
    assert report["ndcg@10"] == 1.0 and report["mrr@10"] == 1.0 and report["recall@100"] == 1.0
    assert report["queries"] == 4 and report["documents"] == 8 and report["failed_documents"] == 0
    assert {"ingest_s", "latency_p50_ms", "latency_p95_ms", "mode", "embedding"} <= set(report)
    assert Tenant.objects.count() == tenants_before  # it deleted what it created

    split = json.loads(
        run(
            "evaluate",
            str(tmp_path),
            "--embedding",
            "hash",
            "--mode",
            "keyword",
            "--kbs",
            "2",
            "--json",
        )
    )
    assert split["kbs"] == 2 and split["ndcg@10"] == 1.0


def test_evaluate_refuses_a_folder_that_is_not_beir(tmp_path):
    with pytest.raises(CommandError, match=r"corpus\.jsonl is missing"):
        run("evaluate", str(tmp_path))


def test_bench_fusion_is_fast_and_agrees_with_the_textbook_version():
    data = json.loads(run("bench", "fusion", "--repeats", "50", "--json"))
    assert data["candidates_per_leg"] == 1000 and data["same_order_as_naive"] is True
    assert data["p50_us"] > 0 and data["naive_p50_us"] > 0
