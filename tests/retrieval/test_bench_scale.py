"""``manage.py bench search | ingest | load | growth`` at tiny sizes: one JSON object each, with
every figure docs/performance.md quotes and sane values. No timing is asserted: the machine is
shared."""

import io
import json
import re
from datetime import timedelta

import numpy as np
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from bench import corpus
from bench.search import recall_at
from knowledge.embeddings import EmbeddingConfig
from knowledge.embeddings.hashing import HashEmbedder
from knowledge.models import Chunk, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.vector import hnsw
from tenancy.models import Tenant
from tests.factories import TenantFactory, add_document

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def bench(*args: str) -> dict:
    out = io.StringIO()
    call_command("bench", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def counts() -> tuple[int, int, int]:
    return Tenant.objects.count(), KnowledgeBase.objects.count(), Chunk.objects.count()


def hnsw_indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'chunk_embedding_hnsw_%'"
        )
        return {name for (name,) in cursor.fetchall()}


def test_bench_search_measures_three_modes_recall_and_the_peers():
    with connection.cursor() as cursor:  # a data directory where no 384-d index exists yet
        cursor.execute("DROP INDEX IF EXISTS chunk_embedding_hnsw_384")
    hnsw._indexed_dimensions.discard(384)
    before, indexes = counts(), hnsw_indexes()
    result = bench(
        "search", "--chunks", "500", "--queries", "10", "--recall-queries", "5",
        "--vectors", "hash",
    )  # fmt: skip
    assert result["hnsw_build_s"] is not None  # it made the index it measured...
    assert result["vectors"] == "hash" and "real_nn_cos_mean" not in result

    assert result["chunks"] == 500 and result["other_chunks"] == 1000
    for key in ("hybrid", "keyword", "vector"):
        assert 0 < result[f"{key}_p50_ms"] <= result[f"{key}_p99_ms"]
    # the service's vector leg is the in-memory exact scan here: it finds what pgvector's does
    assert result["vector_index"] == "exact" and result["vector_recall_at_10"] == 1.0
    # one copy: ids, document ids and vectors; the base part is the host's mapped file
    assert result["vector_matrix_bytes"] == 500 * (384 * 4 + 16)
    assert result["vector_matrix_private_bytes"] < result["vector_matrix_bytes"] // 10
    assert result["vector_matrix_delta_ms"] > 0  # a version bump was applied as a delta
    assert 0 <= result["hnsw_recall_at_10"] <= 1 and result["matrix_scan_p50_ms"] > 0
    assert result["exact_scan_p50_ms"] > 0 and result["rank_bm25_query_p50_ms"] > 0
    assert result["embedding_check_max_diff"] < 1e-6  # bulk vectors = HashEmbedder's
    assert result["bm25_tier_first_get"] == "build" and result["bm25_index_bytes"] > 0
    assert counts() == before  # the throwaway tenants are gone with their chunks
    assert hnsw_indexes() == indexes  # ...and dropped it: the next run fills without it


def test_bench_search_on_realistic_vectors_reports_hnsw_recall_and_realism():
    pytest.importorskip("sentence_transformers")
    before, indexes = counts(), hnsw_indexes()
    result = bench(
        "search", "--chunks", "300", "--queries", "6", "--recall-queries", "4",
        "--rank-bm25-queries", "1", "--ef-sweep", "10,40",
    )  # fmt: skip
    assert result["vectors"] == "realistic"  # the default
    for key in ("hybrid", "keyword", "vector"):  # every key of the hash run is there too
        assert 0 < result[f"{key}_p50_ms"] <= result[f"{key}_p99_ms"]
    assert result["vector_index"] == "exact" and result["vector_recall_at_10"] == 1.0
    assert result["embedding_p50_ms"] > 0 and result["embedding_check_max_diff"] < 1e-6
    assert 0 <= result["hnsw_recall_at_10"] <= 1 and 0 <= result["hnsw_filtered_recall_at_10"] <= 1
    ef = max(settings.RAG_HNSW_EF_SEARCH, 15)  # never below the rows asked for (top_k 5 x 3)
    assert result["hnsw_ef_search"] == ef and result["hnsw_iterative_scan"] == "relaxed_order"
    assert result["hnsw_max_scan_tuples"] == settings.RAG_HNSW_MAX_SCAN_TUPLES
    assert 0 < result["hnsw_p50_ms"] <= result["hnsw_p99_ms"]
    sweep = {row["ef_search"]: row for row in result["hnsw_sweep"]}
    assert set(sweep) == {15, 40, ef}  # 10 was raised to the 15 rows asked for
    for row in sweep.values():
        assert 0 <= row["recall_at_10"] <= 1 and 0 <= row["filtered_recall_at_10"] <= 1
        assert row["p50_ms"] > 0 and row["filtered_p50_ms"] > 0
    assert result["realism_sample_size"] > 1000
    assert result["generated_nn_margin"] > 2 * result["hash_nn_margin"]
    assert counts() == before and hnsw_indexes() == indexes


def test_bench_search_without_hnsw_measures_the_ivf_against_the_in_memory_exact_scan(settings):
    settings.VECTOR_IVF_MIN_ROWS = 300  # the searched knowledge base's 500 chunks get an IVF
    before, indexes = counts(), hnsw_indexes()
    result = bench(
        "search", "--chunks", "500", "--queries", "10", "--recall-queries", "10",
        "--vectors", "hash", "--rank-bm25-queries", "0", "--skip-hnsw",
    )  # fmt: skip
    assert result["vector_index"] == "ivf" and result["ivf_lists"] == 45
    assert 1 <= result["ivf_probes"] <= 45 and result["ivf_calibrated_recall"] >= 0.97
    assert 0 < result["ivf_scan_share"] <= 1
    # float16 rows and their int8 codes, ids, documents
    assert result["ivf_build_s"] >= 0 and result["vector_matrix_bytes"] > 500 * (384 * 3 + 16)
    assert result["vector_recall_truth"] == "matrix" and 0.5 <= result["vector_recall_at_10"] <= 1
    assert 0 < result["matrix_rows_scanned_mean"] < 500  # the probed lists only
    assert result["matrix_scan_p50_ms"] > 0 and result["matrix_exact_scan_p50_ms"] > 0
    assert result["hnsw_build_s"] is None and result["hnsw_index_bytes"] is None
    assert not {k for k in result if k.startswith("hnsw_")} - {"hnsw_build_s", "hnsw_index_bytes"}
    assert "exact_scan_p50_ms" not in result  # pgvector's exact scan did not run either
    assert counts() == before and hnsw_indexes() == indexes


def test_synthetic_chunks_hold_what_ingestion_would_store():
    vocab = corpus.Vocabulary.build(size=2000)
    text = " ".join(vocab.words[:50])
    from knowledge.analysis import get_analyzer

    assert get_analyzer().tokens(text) == vocab.tokens[:50].tolist()
    lengths = np.array([50])
    bulk = corpus.embed_batch(vocab, lengths, np.arange(50))
    assert np.allclose(bulk[0], HashEmbedder(384).embed_documents([text])[0], atol=1e-6)
    assert any(not w.isascii() for w in vocab.words.tolist())  # Chinese words too


def test_recall_counts_ties_with_the_kth_as_found():
    exact = [(1, 0.9), (2, 0.5), (3, 0.5)]
    assert recall_at([(1, 0.9), (3, 0.5)], exact[:2], 2) == 1.0
    assert recall_at([(1, 0.9), (7, 0.1)], exact[:2], 2) == 0.5
    assert recall_at([], [], 10) == 1.0


def test_bench_ingest_runs_real_workers_to_ready():
    before = counts()
    result = bench("ingest", "--docs", "20")
    assert result["docs"] == 20 and result["failed"] == 0
    assert result["chunks"] >= 20 and result["chunks_per_s"] > 0
    assert counts() == before


def test_bench_workers_run_what_earlier_work_left_queued_before_measuring(
    worker_factory, monkeypatch, capsys
):
    from bench import ingest
    from rag_project.celery import waiting_tasks
    from retrieval import tasks

    for _ in range(20):  # as a `manage.py evaluate` run without a worker leaves them
        tasks.invalidate_and_warm_bm25.apply_async((10**9,), {"index_version": 1})
    monkeypatch.setattr(ingest, "DRAIN_CEILING_S", 0.5)
    with pytest.raises(CommandError, match=r"tasks still wait on queue .* purge -Q"):
        ingest._drain()  # no worker: they stay, and the message says what to do
    assert waiting_tasks() >= 20
    monkeypatch.setattr(ingest, "DRAIN_CEILING_S", 600)
    worker_factory().start()
    ingest._drain()  # returns once the worker has taken them all
    assert waiting_tasks() == 0
    assert re.search(r"\d+ tasks were waiting on queue", capsys.readouterr().err)


def test_bench_load_serves_every_request():
    result = bench("load", "--clients", "2", "--seconds", "2", "--warmup", "1", "--chunks", "500")
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] > 0 and result["rps"] > 0
    assert 0 < result["p50_ms"] <= result["p99_ms"]


def test_bench_growth_tabulates_each_size_and_plots(tmp_path):
    png = tmp_path / "growth.png"
    result = bench(
        "growth", "--sizes", "200,400", "--queries", "5", "--recall-queries", "3",
        "--rank-bm25-queries", "1", "--plot", str(png),
    )  # fmt: skip
    assert [row["chunks"] for row in result["rows"]] == [200, 400]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("serve", "vectors"), [("gunicorn", None), ("threads", "hash")])
def test_bench_churn_searches_while_documents_come_and_go(serve, vectors):
    before = counts()
    result = bench(
        "churn", "--chunks", "2000", "--docs-per-s", "2", "--seconds", "4", "--clients", "2",
        "--serve", serve, "--quiet-seconds", "1", *(["--vectors", vectors] if vectors else []),
    )  # fmt: skip
    assert result["vectors"] == (vectors or "realistic")  # realistic by default
    assert result["serve"] == serve and result["errors"] == 0 and result["searches"] > 0
    assert 0 < result["search_p50_ms"] <= result["search_p99_ms"]
    assert result["quiet_searches"] > 0  # the peer: the same clients before the churn
    assert 0 < result["quiet_search_p50_ms"] <= result["quiet_search_p99_ms"]
    # The search's own time (its trace's) is part of what the client waited for.
    for phase in ("quiet_search", "search"):
        own, waited = result[f"{phase}_own_p50_ms"], result[f"{phase}_p50_ms"]
        assert 0 < own <= result[f"{phase}_own_p99_ms"] and own <= waited
    assert 0 < result["slowest_1pct_own_ms"] <= result["slowest_1pct_ms"]
    assert result["slowest_1pct_ms"] >= result["search_p50_ms"]
    # Each churn search is counted once: begun within the window after a change, or not. At
    # 2 documents a second every moment of the churn is within 0.5 s of a change's start.
    after, between = result["after_change_searches"], result["between_changes_searches"]
    assert after + between == result["searches"] and after > 0
    assert result["after_change_window_s"] == 0.5
    assert 0 < result["after_change_search_p50_ms"] <= result["after_change_search_p99_ms"]
    assert 0 <= result["slowest_1pct_after_change_share"] <= 1
    # Every uploaded document was found by a search once it was ready, none went missing.
    assert result["uploaded"] >= 4 and result["visible"] == result["uploaded"]
    assert result["not_visible"] == 0
    assert 0 <= result["visible_p50_s"] <= result["visible_max_s"]
    assert result["merges"] >= 0
    workers = 2 if serve == "gunicorn" else 1  # the web processes whose memory is reported
    assert len(result["web_rss_bytes"]) == workers and result["process_rss_bytes"] > 0
    assert result["host_vector_bytes"] > 0
    # Where the CPU went, per phase: the web processes served the searches, PostgreSQL and
    # Redis answered them; the writer uploaded and deleted and the worker processed that;
    # over HTTP the clients are apart.
    parts = {"web", "worker", "writer", "database", "redis"}
    parts |= {"clients"} if serve == "gunicorn" else set()
    for phase in ("quiet", "churn"):
        cores = result["cpu_cores"][phase]
        assert set(cores) == parts
        assert cores["web"] > 0 and cores["database"] > 0 and cores["redis"] >= 0
        assert result["web_cpu_ms_per_search"][phase] > 0
    # The worker's warm-up is over before the quiet phase: it works in the churn only.
    assert result["worker_warm_s"] >= 0
    assert result["cpu_cores"]["quiet"]["worker"] < result["cpu_cores"]["churn"]["worker"]
    assert result["cpu_cores"]["quiet"]["writer"] < result["cpu_cores"]["churn"]["writer"]
    # The machine's speed on either side of the run, to compare runs on like machines.
    assert set(result["machine_gauge_ms"]) == {"before", "after"}
    assert all(ms > 0 for ms in result["machine_gauge_ms"].values())
    assert counts() == before  # the throwaway tenant is gone with its chunks


def test_bench_coldstart_times_a_new_web_process_warm_and_cold():
    before = counts()
    result = bench("coldstart", "--chunks", "300", "--embedding", "hash")
    assert result["warm_state"]["state"] == "warm"
    assert result["warm_state"]["loaded"]["knowledge_bases"]  # it loaded the bench's KB
    assert 0 < result["start_to_healthy_s"] <= result["start_to_warm_s"]
    for key in ("first_query_ms", "during_warm_query_ms", "cold_first_query_ms"):
        assert result[key] > 0
    assert counts() == before


def test_bench_hostmem_reads_each_workers_memory_with_and_without_host_files():
    before = counts()
    result = bench("hostmem", "--chunks", "2000", "--workers", "2")
    shared, private = result["host_files"], result["private"]
    assert len(shared["per_worker"]) == len(private["per_worker"]) == 2
    # Both workers map the vector file; the page cache holds it once, so their PSS of it sums
    # to about one copy, and nothing like it grows privately.
    assert all(w["vector_rss_bytes"] > 0 for w in shared["per_worker"])
    # Both scan every row, so each vector page one worker holds the other maps too: shared.
    for worker in shared["per_worker"]:
        assert worker["vector_shared_bytes"] == worker["vector_rss_bytes"]
        assert worker["vector_shared_bytes"] <= worker["shared_bytes"] < worker["rss_bytes"]
    assert 0 < shared["vector_pss_bytes"] <= 1.2 * result["one_copy_bytes"]
    assert private["vector_pss_bytes"] == 0  # without host files nothing is mapped
    assert counts() == before


def test_bench_cleanup_removes_only_old_benchmark_tenants():
    leftover = TenantFactory(name="bench load 0123456789", slug="bench-load-0123456789")
    running = TenantFactory(name="bench churn 9876543210", slug="bench-churn-9876543210")
    customer = TenantFactory(name="Benchmark Ltd", slug="benchmark-ltd")  # not "bench-"
    old = timezone.now() - timedelta(hours=2)
    Tenant.objects.filter(pk__in=[leftover.pk, customer.pk]).update(created_at=old)
    kb = create_knowledge_base(
        tenant=leftover, name="left behind", embedding=EmbeddingConfig("hash", dimensions=32)
    )
    add_document(kb, "pumps.md", "# Pumps\n\nThe pump needs oil every week.")

    result = bench("cleanup", "--older-than", "60")

    assert result["removed_tenants"] == ["bench load 0123456789"]
    assert result["removed_chunks"] >= 1
    assert not Tenant.objects.filter(pk=leftover.pk).exists()
    assert not Chunk.objects.filter(knowledge_base_id=kb.pk).exists()
    assert Tenant.objects.filter(pk__in=[running.pk, customer.pk]).count() == 2
