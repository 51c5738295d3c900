"""The evaluation harness: several datasets in one knowledge base, skipped blank queries, typos;
pure parts on hand-made inputs, one end-to-end run over two tiny generated collections (one
Chinese, one with a blank query) with the hash embedder."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from bench.evaluate import (
    add_typo,
    dataset_names,
    leave_out_answers,
    load_dataset,
    relevance_report,
)
from tenancy.models import Tenant


def write_beir(folder: Path, docs, queries) -> Path:
    """A BEIR folder: docs (id, title, text), queries (id, text, relevant doc id)."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "\n".join(
            json.dumps({"_id": i, "title": t, "text": x}, ensure_ascii=False) for i, t, x in docs
        )
    )
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t, _ in queries)
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(f"{q}\t{d}\t1" for q, _, d in queries)
    )
    return folder


ENGLISH_DOCS = [
    ("1", "Pumps", "The centrifugal pump moves water through the cooling loop."),
    ("2", "Valves", "A gate valve stops the flow when it is closed."),
    ("3", "Sensors", "The thermocouple sensor measures the casing temperature."),
    ("4", "Belts", "The conveyor belt carries boxes to the loading dock."),
]
ENGLISH_QUERIES = [
    ("1", "which machine moves water", "1"),
    ("2", "stop the flow", "2"),
    ("3", "   ", "3"),  # blank: skipped and counted
]
CHINESE_DOCS = [  # ids collide with the English ones on purpose
    ("1", "水泵", "离心泵把冷却水送过管路。"),
    ("2", "阀门", "闸阀关闭时切断流量。"),
    ("3", "传感器", "热电偶传感器测量外壳温度。"),
    ("4", "皮带", "输送带把箱子送到装卸台。"),
]
CHINESE_QUERIES = [("1", "冷却水管路", "1"), ("2", "外壳温度", "3")]


def test_typos_make_one_edit_in_one_long_word_and_leave_chinese_alone():
    rng = random.Random(1)
    for _ in range(200):
        query = "calibration of the temperature sensor"
        misspelt = add_typo(query, rng)
        assert misspelt != query
        changed = [(a, b) for a, b in zip(query.split(), misspelt.split(), strict=True) if a != b]
        assert len(changed) == 1 and len(changed[0][0]) >= 5
        assert abs(len(changed[0][0]) - len(changed[0][1])) <= 1
    assert add_typo("外壳温度多少", rng) is None
    assert add_typo("the fan", rng) is None  # no word of five letters
    same_seed = [add_typo("replace the mechanical seal", random.Random(7)) for _ in range(3)]
    assert len(set(same_seed)) == 1  # deterministic for a seed


def test_datasets_are_namespaced_and_blank_queries_skipped(tmp_path):
    english = write_beir(tmp_path / "en", ENGLISH_DOCS, ENGLISH_QUERIES)
    data = load_dataset(english, "en", namespaced=True)
    assert [d["_id"] for d in data.corpus] == ["en/1", "en/2", "en/3", "en/4"]
    assert [q["_id"] for q in data.queries] == ["en/1", "en/2"]
    assert {q.query_id for q in data.qrels} == {"en/1", "en/2"}
    assert data.skipped_queries == 1
    assert dataset_names([tmp_path / "a" / "x", tmp_path / "b" / "x"]) == ["x", "x-2"]


def evaluate_keyword(*args) -> dict:
    out = io.StringIO()
    call_command(
        "evaluate",
        *map(str, args),
        "--embedding",
        "hash",
        "--mode",
        "keyword",
        "--json",
        stdout=out,
    )
    return json.loads(out.getvalue())


@pytest.mark.django_db(transaction=True)
def test_evaluate_two_datasets_in_one_knowledge_base(tmp_path):
    english = write_beir(tmp_path / "en", ENGLISH_DOCS, ENGLISH_QUERIES)
    chinese = write_beir(tmp_path / "zh", CHINESE_DOCS, CHINESE_QUERIES)
    tenants_before = Tenant.objects.count()
    report = evaluate_keyword(english, chinese)
    assert report["documents"] == 8 and report["failed_documents"] == 0
    assert report["queries"] == 4 and report["skipped_queries"] == 1
    assert set(report["datasets"]) == {"en", "zh"}
    for name in ("en", "zh"):
        assert set(report["datasets"][name]) == {"ndcg@10", "recall@100", "mrr@10", "queries"}
        assert report["datasets"][name]["queries"] == 2
        assert report["datasets"][name]["ndcg@10"] == 1.0  # ids that collide stayed apart
    assert {"ndcg@10", "recall@100", "mrr@10", "latency_p50_ms", "kbs"} <= set(report)
    assert Tenant.objects.count() == tenants_before

    # "stop the flow" and the Chinese queries have no word of five Latin letters
    assert evaluate_keyword(english, chinese, "--typos")["typos"] == {"changed": 1, "unchanged": 3}


def test_evaluate_refuses_a_folder_that_is_not_beir_before_ingesting(tmp_path):
    english = write_beir(tmp_path / "en", ENGLISH_DOCS, ENGLISH_QUERIES)
    with pytest.raises(CommandError, match=r"nowhere/corpus\.jsonl is missing"):
        call_command("evaluate", str(english), str(tmp_path / "nowhere"))


def test_leaving_out_answers_makes_queries_unanswerable(tmp_path):
    docs = [*ENGLISH_DOCS, ("5", "Pumps again", "Pumps move water.")]
    queries = [
        ("1", "which machine moves water", "1"),
        ("2", "stop the flow", "2"),
        ("4", "boxes to the dock", "4"),
    ]
    english = write_beir(tmp_path / "en", docs, queries)
    data = load_dataset(english, "en", namespaced=False)
    data.qrels.append(data.qrels[0]._replace(doc_id="5"))  # query 1 has two answers
    gone = leave_out_answers([data], 3, seed=1)
    assert gone == {"1", "2", "4"}
    assert {d["_id"] for d in data.corpus} == {"3"}  # every relevant document went
    assert data.qrels == []
    with pytest.raises(CommandError, match="only 3 queries have answers"):
        leave_out_answers([load_dataset(english, "en", namespaced=False)], 4, seed=1)


def test_relevance_report_counts_auroc_kept_and_dropped():
    top = {"a": 0.9, "b": 0.6, "c": 0.2, "x": 0.7, "y": 0.1}
    best = {"a": 0.9, "b": 0.55, "c": 0.0}  # c's relevant document was not found
    report = relevance_report(top, best, unanswerable={"x", "y"})
    # answerable a, b, c against unanswerable x, y: 4 of 6 pairs ordered right.
    assert report["auroc"] == pytest.approx(4 / 6, abs=1e-4)
    assert report["kept_at_0.5"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["dropped_at_0.5"] == 0.5 and report["unanswerable"] == 2
    assert report["thresholds"]["0.3"] == {"kept": pytest.approx(2 / 3, abs=1e-4), "dropped": 0.5}
    assert report["thresholds"]["0.9"] == {"kept": pytest.approx(1 / 3, abs=1e-4), "dropped": 1.0}


@pytest.mark.django_db(transaction=True)
def test_evaluate_unanswerable_reports_relevance(tmp_path):
    english = write_beir(tmp_path / "en", ENGLISH_DOCS, ENGLISH_QUERIES)
    chinese = write_beir(tmp_path / "zh", CHINESE_DOCS, CHINESE_QUERIES)
    report = evaluate_keyword(english, chinese, "--unanswerable", "2")
    assert report["documents"] == 6 and report["unanswerable"] == 2
    assert 0.0 <= report["auroc"] <= 1.0
    assert 0.0 <= report["kept_at_0.5"] <= 1.0 and 0.0 <= report["dropped_at_0.5"] <= 1.0
    for name in ("en", "zh"):
        assert {"auroc", "kept_at_0.5", "dropped_at_0.5"} <= set(report["datasets"][name])
