"""The evaluation harness behind ``manage.py evaluate DATASET_DIR``: retrieval quality on a
BEIR-layout collection.

Ingests ``corpus.jsonl`` (one document per line: title + text) into a throwaway tenant's
knowledge base (or ``--kbs N`` knowledge bases, documents dealt round-robin, searched together
with multi-KB search) through the real ingestion pipeline and KB defaults, runs every judged
query of ``queries.jsonl``, maps chunk hits to documents (a document counts once, at its best
chunk's rank) and scores the run against ``qrels/test.tsv`` with ir-measures: nDCG@10,
Recall@100 and MRR@10, plus ingestion time and query latency. It deletes what it created.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ir_measures
from django.core.management.base import CommandError
from ir_measures import RR, R, nDCG

from bench.throwaway import throwaway_tenants
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Document
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from retrieval.calibration import calibrate
from retrieval.search import RAGService
from retrieval.search.types import SearchMode
from tenancy.models import Tenant


def add_arguments(parser) -> None:
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--mode", choices=[m.value for m in SearchMode], default="auto")
    parser.add_argument(
        "--embedding",
        choices=["openai", "local", "hash", "none"],
        help="embedding provider (default: the deployment default)",
    )
    parser.add_argument("--kbs", type=int, default=1, help="split over N knowledge bases")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--chunk-size", type=int)
    parser.add_argument("--chunk-overlap", type=int)
    parser.add_argument("--weights", choices=["calibrated", "fixed"], default="calibrated")
    parser.add_argument("--max-queries", type=int, help="only the first N judged queries")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the tenant for inspection")


def run(options: dict[str, Any]) -> str:
    """Evaluate as ``options`` say; one JSON object (``--json``) or a key: value listing."""
    report = evaluate(options)
    if options["json"]:
        return json.dumps(report)
    return "\n".join(f"{key:>16}: {value}" for key, value in report.items())


def evaluate(options: dict[str, Any]) -> dict[str, Any]:
    dataset: Path = options["dataset"]
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (dataset / name).is_file():
            raise CommandError(f"{dataset / name} is missing (BEIR layout expected)")
    if options["kbs"] < 1:
        raise CommandError("--kbs must be at least 1")
    corpus = read_jsonl(dataset / "corpus.jsonl")
    qrels = read_qrels(dataset / "qrels" / "test.tsv")
    judged = {q.query_id for q in qrels}
    queries = [q for q in read_jsonl(dataset / "queries.jsonl") if q["_id"] in judged]
    if options["max_queries"]:
        queries = queries[: options["max_queries"]]
        kept = {q["_id"] for q in queries}
        qrels = [q for q in qrels if q.query_id in kept]
    with throwaway_tenants("eval", keep=options["keep"]) as (tenant,):
        return _evaluate(tenant, corpus, queries, qrels, options)


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> list[ir_measures.Qrel]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    qrels = []
    for line in lines:
        query_id, doc_id, relevance = line.split("\t")[:3]
        qrels.append(ir_measures.Qrel(query_id, doc_id, int(relevance)))
    return qrels


def _evaluate(tenant: Tenant, corpus, queries, qrels, options) -> dict[str, Any]:
    settings_fields = {}
    if options["chunk_size"]:
        settings_fields["chunk_size"] = options["chunk_size"]
    if options["chunk_overlap"] is not None:
        settings_fields["chunk_overlap"] = options["chunk_overlap"]
    embedding = EmbeddingConfig(provider=options["embedding"]) if options["embedding"] else None
    kbs = [
        create_knowledge_base(
            tenant=tenant,
            name=f"eval-{i}",
            embedding=embedding,
            weight_mode=options["weights"],
            **settings_fields,
        )
        for i in range(options["kbs"])
    ]
    started = time.perf_counter()
    for i, doc in enumerate(corpus):
        kb = kbs[i % len(kbs)]
        text = doc.get("text") or ""
        document = create_document(
            tenant=tenant,
            knowledge_base=kb,
            name=f"{doc['_id']}.txt",
            stream=io.BytesIO(text.encode("utf-8") or b" "),
            title=(doc.get("title") or doc["_id"])[:500],
            metadata={"beir_id": str(doc["_id"])},
            queue=False,
        )
        process_document(document.pk)
        if (i + 1) % 250 == 0 or i + 1 == len(corpus):
            sys.stderr.write(f"\ringested {i + 1}/{len(corpus)}")
    sys.stderr.write("\n")
    ingest_s = time.perf_counter() - started
    failed = Document.objects.filter(tenant=tenant).exclude(status="ready").count()

    calibrations = []
    if options["weights"] == "calibrated":
        for kb in kbs:
            calibrations.append(calibrate(tenant, kb).to_dict())

    service = RAGService(tenant)
    run_, latencies = [], []
    kb_ids = [kb.pk for kb in kbs]
    for i, query in enumerate(queries):
        t0 = time.perf_counter()
        result = service.search_multiple_knowledge_bases(
            query["text"],
            kb_ids,
            mode=options["mode"],
            top_k=options["top_k"],
            score_threshold=0.0,
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        seen: set[str] = set()
        for rank, hit in enumerate(result.hits):
            doc_id = hit.metadata.get("beir_id")
            if doc_id and doc_id not in seen:
                seen.add(doc_id)
                run_.append(ir_measures.ScoredDoc(query["_id"], doc_id, -float(rank)))
        if (i + 1) % 100 == 0 or i + 1 == len(queries):
            sys.stderr.write(f"\rsearched {i + 1}/{len(queries)}")
    sys.stderr.write("\n")
    scores = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, RR @ 10], qrels, run_)
    latencies.sort()
    return {
        "ndcg@10": round(scores[nDCG @ 10], 4),
        "recall@100": round(scores[R @ 100], 4),
        "mrr@10": round(scores[RR @ 10], 4),
        "queries": len(queries),
        "documents": len(corpus),
        "failed_documents": failed,
        "ingest_s": round(ingest_s, 1),
        "latency_p50_ms": round(statistics.median(latencies), 2) if latencies else None,
        "latency_p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 2)
        if latencies
        else None,
        "mode": options["mode"],
        "embedding": kbs[0].embedding_provider,
        "embedding_model": kbs[0].embedding_model,
        "kbs": len(kbs),
        "weights": options["weights"],
        "calibration": calibrations,
        "chunk_size": kbs[0].chunk_size,
        "chunk_overlap": kbs[0].chunk_overlap,
    }
