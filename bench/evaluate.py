"""The evaluation harness behind ``manage.py evaluate DATASET_DIR [DATASET_DIR ...]``:
retrieval quality on BEIR-layout collections.

Ingests each ``corpus.jsonl`` (one document per line: title + text) into a throwaway tenant's
knowledge base (or ``--kbs N`` knowledge bases, documents dealt round-robin, searched together
with multi-KB search) through the real ingestion pipeline and KB defaults, runs every judged
query of each ``queries.jsonl``, maps chunk hits to documents (a document counts once, at its
best chunk's rank) and scores the run against ``qrels/test.tsv`` with ir-measures: nDCG@10,
Recall@100 and MRR@10, plus ingestion time and query latency. It deletes what it created.

Several datasets share one knowledge base (a mixed Chinese and English one is one command);
their ids are namespaced ``<folder>/<id>``, the top-level figures are over all queries and
``datasets`` holds each dataset's own, from its queries only. Judged queries that are empty or
blank are skipped and counted (``skipped_queries``). ``--typos`` makes one seeded random edit
in one word of 5+ Latin letters of every query (``add_typo``); queries without such a word
(Chinese ones) stay as they are and are counted in ``typos.unchanged``.

``--unanswerable N`` measures relevance (``Hit.relevance``): the relevant documents of N queries
(drawn by ``--seed``) are left out of the corpus, so those queries, and any other whose every
relevant document went with them, have no answer in the knowledge base. The report adds the
AUROC of the top hit's relevance (0 without a hit) between answerable and unanswerable queries
(scikit-learn), ``kept_at_0.5`` (the share of answerable queries with a relevant document
among their hits of relevance >= 0.5) and ``dropped_at_0.5`` (the share of unanswerable queries
left with no hit of relevance >= 0.5), the same at other thresholds under ``thresholds``;
nDCG, recall and MRR are over the answerable queries.
"""

from __future__ import annotations

import io
import json
import random
import re
import statistics
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ir_measures
from django.core.management.base import CommandError
from ir_measures import RR, R, nDCG
from sklearn.metrics import roc_auc_score

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
    parser.add_argument(
        "datasets",
        type=Path,
        nargs="+",
        metavar="dataset",
        help="BEIR-layout folders; several are ingested into one knowledge base",
    )
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
    parser.add_argument("--max-queries", type=int, help="only the first N judged queries of each")
    parser.add_argument(
        "--typos",
        action="store_true",
        help="one random edit in one word of 5+ letters of every query (seeded by --seed)",
    )
    parser.add_argument(
        "--unanswerable",
        type=int,
        default=0,
        metavar="N",
        help="leave out the relevant documents of N queries (drawn by --seed); report relevance",
    )
    parser.add_argument("--seed", type=int, default=13, help="seed of --typos and --unanswerable")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the tenant for inspection")


def run(options: dict[str, Any]) -> str:
    """Evaluate as ``options`` say; one JSON object (``--json``) or a key: value listing."""
    report = evaluate(options)
    if options["json"]:
        return json.dumps(report)
    return "\n".join(f"{key:>16}: {value}" for key, value in report.items())


@dataclass
class Dataset:
    """One collection, read: its documents, its judged non-blank queries and their qrels."""

    name: str
    corpus: list[dict]
    queries: list[dict]
    qrels: list[ir_measures.Qrel]
    skipped_queries: int  # judged but empty or blank


def evaluate(options: dict[str, Any]) -> dict[str, Any]:
    if options["kbs"] < 1:
        raise CommandError("--kbs must be at least 1")
    paths: list[Path] = options["datasets"]
    names = dataset_names(paths)
    several = len(paths) > 1
    datasets = [
        load_dataset(path, name, namespaced=several, max_queries=options["max_queries"])
        for path, name in zip(paths, names, strict=True)
    ]
    typos = None
    if options["typos"]:
        typos = {"changed": 0, "unchanged": 0}
        for dataset in datasets:
            for query in dataset.queries:
                seed = f"{options['seed']}:{query['_id']}"
                rng = random.Random(seed)  # noqa: S311 - reproducible test input, not a secret
                misspelt = add_typo(query["text"], rng)
                typos["unchanged" if misspelt is None else "changed"] += 1
                query["text"] = misspelt or query["text"]
    unanswerable = set()
    if options.get("unanswerable"):
        unanswerable = leave_out_answers(datasets, options["unanswerable"], options["seed"])
    with throwaway_tenants("eval", keep=options["keep"]) as (tenant,):
        report = _evaluate(tenant, datasets, options, unanswerable)
    if typos is not None:
        report["typos"] = typos
    return report


def dataset_names(paths: list[Path]) -> list[str]:
    """Each folder's name, made unique with a number where two folders share one."""
    names: list[str] = []
    for path in paths:
        name = path.resolve().name or "dataset"
        candidate, n = name, 2
        while candidate in names:
            candidate, n = f"{name}-{n}", n + 1
        names.append(candidate)
    return names


def load_dataset(
    path: Path, name: str, *, namespaced: bool, max_queries: int | None = None
) -> Dataset:
    """A BEIR-layout folder. With ``namespaced`` (several datasets in one knowledge base)
    document and query ids become ``name/id``, so ids that two collections share stay apart."""
    for part in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (path / part).is_file():
            raise CommandError(f"{path / part} is missing (BEIR layout expected)")
    prefix = f"{name}/" if namespaced else ""
    corpus = [{**doc, "_id": prefix + str(doc["_id"])} for doc in read_jsonl(path / "corpus.jsonl")]
    qrels = [
        ir_measures.Qrel(prefix + q.query_id, prefix + q.doc_id, q.relevance)
        for q in read_qrels(path / "qrels" / "test.tsv")
    ]
    judged = {q.query_id for q in qrels}
    queries = [
        {**q, "_id": prefix + str(q["_id"])}
        for q in read_jsonl(path / "queries.jsonl")
        if prefix + str(q["_id"]) in judged
    ]
    if max_queries:
        queries = queries[:max_queries]
    asked = [q for q in queries if str(q.get("text") or "").strip()]
    kept = {q["_id"] for q in asked}
    qrels = [q for q in qrels if q.query_id in kept]
    return Dataset(name, corpus, asked, qrels, skipped_queries=len(queries) - len(asked))


def leave_out_answers(datasets: list[Dataset], n: int, seed: int) -> set[str]:
    """Drop the relevant documents of ``n`` seeded random queries from the corpora; returns the
    ids of every query left without a relevant document (their qrels are dropped, as are the
    qrels of the documents that went)."""
    if n < 0:
        raise CommandError("--unanswerable must be at least 0")
    relevant: dict[str, set[str]] = {}
    for dataset in datasets:
        for qrel in dataset.qrels:
            if qrel.relevance > 0:
                relevant.setdefault(qrel.query_id, set()).add(qrel.doc_id)
    asked = sorted(relevant)
    if n > len(asked):
        raise CommandError(f"--unanswerable {n}: only {len(asked)} queries have answers")
    chosen = random.Random(f"unanswerable:{seed}").sample(asked, n)  # noqa: S311 - test input
    gone = set().union(*(relevant[q] for q in chosen)) if chosen else set()
    unanswerable = {q for q, docs in relevant.items() if docs <= gone}
    for dataset in datasets:
        dataset.corpus = [doc for doc in dataset.corpus if doc["_id"] not in gone]
        dataset.qrels = [
            q for q in dataset.qrels if q.doc_id not in gone and q.query_id not in unanswerable
        ]
    return unanswerable


_TYPO_WORD = re.compile(r"[A-Za-z]{5,}")


def add_typo(text: str, rng: random.Random) -> str | None:
    """``text`` with one random edit (insert, delete, substitute or swap two neighbouring
    letters) in one randomly chosen word of 5+ Latin letters; None when it has no such word."""
    words = list(_TYPO_WORD.finditer(text))
    if not words:
        return None
    word = rng.choice(words)
    letters = list(word.group())
    at = rng.randrange(len(letters))
    edit = rng.choice(("insert", "delete", "substitute", "transpose"))
    swappable = [i for i in range(len(letters) - 1) if letters[i] != letters[i + 1]]
    if edit == "transpose" and swappable:
        i = rng.choice(swappable)
        letters[i], letters[i + 1] = letters[i + 1], letters[i]
    elif edit == "insert":
        letters.insert(at, rng.choice(string.ascii_lowercase))
    elif edit == "delete":
        del letters[at]
    else:  # substitute (also a transpose where no two neighbours differ)
        letters[at] = rng.choice([c for c in string.ascii_lowercase if c != letters[at].lower()])
    return text[: word.start()] + "".join(letters) + text[word.end() :]


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


MEASURES = (nDCG @ 10, R @ 100, RR @ 10)


def scores(qrels: list[ir_measures.Qrel], run: list[ir_measures.ScoredDoc]) -> dict[str, float]:
    """nDCG@10, Recall@100 and MRR@10 by ir-measures, rounded to 4 places."""
    values = ir_measures.calc_aggregate(MEASURES, qrels, run)
    return {
        "ndcg@10": round(values[nDCG @ 10], 4),
        "recall@100": round(values[R @ 100], 4),
        "mrr@10": round(values[RR @ 10], 4),
    }


THRESHOLDS = (0.3, 0.5, 0.7, 0.9)


def relevance_report(
    top: dict[str, float], best: dict[str, float], unanswerable: set[str]
) -> dict[str, Any]:
    """From each query's top hit relevance (``top``, 0 without a hit) and, for answerable
    queries, the best relevance of a relevant hit (``best``, 0 without one): the AUROC of the top
    hit's relevance (answerable = positive), and at each of ``THRESHOLDS`` the share of
    answerable queries keeping a relevant hit and of unanswerable ones left with no hit."""
    answerable = [q for q in top if q not in unanswerable]
    missing = [q for q in top if q in unanswerable]
    labels = [1] * len(answerable) + [0] * len(missing)
    values = [top[q] for q in answerable] + [top[q] for q in missing]

    def share(hits: int, of: list) -> float | None:
        return round(hits / len(of), 4) if of else None

    curve = {
        str(t): {
            "kept": share(sum(best.get(q, 0.0) >= t for q in answerable), answerable),
            "dropped": share(sum(top[q] < t for q in missing), missing),
        }
        for t in THRESHOLDS
    }
    return {
        "auroc": round(float(roc_auc_score(labels, values)), 4) if answerable and missing else None,
        "kept_at_0.5": curve["0.5"]["kept"],
        "dropped_at_0.5": curve["0.5"]["dropped"],
        "unanswerable": len(missing),
        "thresholds": curve,
    }


def _evaluate(
    tenant: Tenant, datasets: list[Dataset], options, unanswerable: set[str]
) -> dict[str, Any]:
    corpus = [doc for dataset in datasets for doc in dataset.corpus]
    queries = [query for dataset in datasets for query in dataset.queries]
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
    top: dict[str, float] = {}  # query id -> relevance of its first hit (0: no hit)
    best: dict[str, float] = {}  # answerable query id -> best relevance of a relevant hit
    relevant = {(q.query_id, q.doc_id) for d in datasets for q in d.qrels if q.relevance > 0}
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
        top[query["_id"]] = result.hits[0].relevance if result.hits else 0.0
        seen: set[str] = set()
        for rank, hit in enumerate(result.hits):
            doc_id = hit.metadata.get("beir_id")
            if (query["_id"], doc_id) in relevant:
                best[query["_id"]] = max(best.get(query["_id"], 0.0), hit.relevance)
            if doc_id and doc_id not in seen and query["_id"] not in unanswerable:
                seen.add(doc_id)
                run_.append(ir_measures.ScoredDoc(query["_id"], doc_id, -float(rank)))
        if (i + 1) % 100 == 0 or i + 1 == len(queries):
            sys.stderr.write(f"\rsearched {i + 1}/{len(queries)}")
    sys.stderr.write("\n")
    latencies.sort()
    per_dataset = {}
    for dataset in datasets:
        ids = {query["_id"] for query in dataset.queries}
        mine = [scored for scored in run_ if scored.query_id in ids]
        per_dataset[dataset.name] = scores(dataset.qrels, mine) | {"queries": len(ids)}
        if unanswerable:
            mine_top = {q: value for q, value in top.items() if q in ids}
            per_dataset[dataset.name] |= relevance_report(mine_top, best, unanswerable)
    relevance = relevance_report(top, best, unanswerable) if unanswerable else {}
    return {
        **scores([q for dataset in datasets for q in dataset.qrels], run_),
        **relevance,
        "queries": len(queries),
        "skipped_queries": sum(dataset.skipped_queries for dataset in datasets),
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
        "datasets": per_dataset,
    }
