"""``bench search --chunks N``: service-level search latency on a synthetic knowledge base.

A throwaway tenant gets a knowledge base of N chunks (384 dimensions; see ``bench.corpus``)
beside a second knowledge base of N chunks, and another tenant gets N more: the knowledge base
searched is a third of the rows, the HNSW index and the table.

Vectors (``--vectors``): ``realistic`` (the default) draws them from a mixture fitted to the
local model's embeddings of real text (``bench.realistic``), the knowledge bases record that
model, and each query's vector is drawn near the chunk its words come from and put in the
query-embedding cache under the query's text, so the service searches with it; ``hash`` stores
the ``hash`` provider's embeddings of each chunk's text, and the service embeds queries itself.
Then, with warm caches (BM25 index in L1, query embeddings in Redis, PostgreSQL buffers), every
query runs through ``RAGService.search`` in hybrid, keyword and vector modes (interleaved, so a
burst of load on the machine hits all three alike) and the wall time of each call is recorded.

Beside the service, in the same run:

- HNSW on these vectors at several ``hnsw.ef_search`` values (``--ef-sweep``), with and without
  a filter (a tenth of the documents: pgvector's iterative scan), recall@10 against the exact
  scan of the same rows and latency; ``hnsw_*`` keys are at the product's setting;
- with realistic vectors, the realism check: nearest-neighbour and random-pair cosine of the
  real sample, of as many generated vectors and of as many ``hash`` chunk vectors;
- the service's vector leg (the in-memory matrix of ``retrieval.vector.matrix``, scanned
  exactly or through its IVF from ``VECTOR_IVF_MIN_ROWS`` chunks, or HNSW when the knowledge
  base does not fit the matrix's budget) and the HNSW index, each against
  ``exact_vector_search`` (pgvector's exact scan of the same rows): recall@10 and latency, and
  the matrix's cold load (with the IVF's build: ``ivf_*`` keys);
- with ``--skip-hnsw``, for sizes where HNSW's build and pgvector's exact scans outlast a run
  (at 1M chunks the build alone does, and pgvector's exact scan takes seconds a query): no
  HNSW index (the fill runs without it, no ``hnsw_*`` figures), and the vector leg against the
  exact scan of the same in-memory matrix (``vector_recall_truth``: ``matrix``, not
  ``pgvector``);
- our BM25 index against ``rank_bm25.BM25Okapi`` on the knowledge base's own tokens (build time
  and query latency, on a few queries since rank_bm25 scores every chunk in Python);
- the embedding provider's own time per query (``HashEmbedder.embed_query``, uncached), which
  the service timings do not include (they read the cached vector from Redis);
- build costs (the fill, the HNSW index, the cold BM25 build from stored tokens) and memory
  (the BM25 index and the vector matrix in L1, the HNSW index and chunk table on disk, this
  process's peak RSS).

Queries are two to four distinct words of a random chunk of the knowledge base, as typed.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from bench import corpus, realistic
from bench.throwaway import throwaway_tenants
from knowledge.embeddings import EmbeddingConfig, config_for_knowledge_base, get_embedder
from knowledge.embeddings.base import ProviderUnavailable
from knowledge.models import Document, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.bm25store import Tier, get_store
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from retrieval.vector import hnsw
from retrieval.vector.hnsw import (
    ensure_vector_index,
    exact_vector_search,
    index_name,
    vector_search,
)
from retrieval.vector.matrix import get_matrix_cache
from retrieval.vector.query_cache import cached_query_embedding, remember_query_embedding
from tenancy.models import Tenant

MODES = ("hybrid", "keyword", "vector")
VECTORS = ("realistic", "hash")
FILTER_EVERY = 10  # the filtered sweep keeps every tenth document of the knowledge base


def add_search_arguments(parser) -> None:
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in the searched KB")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per mode")
    parser.add_argument("--recall-queries", type=int, default=50, help="queries for recall@10")
    parser.add_argument(
        "--rank-bm25-queries", type=int, default=5, help="queries for rank_bm25 (0: skip it)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--vectors",
        choices=VECTORS,
        default="realistic",
        help="realistic: drawn like the local model's embeddings of real text; hash: the hash "
        "provider's embeddings of the chunks' text",
    )
    parser.add_argument(
        "--ef-sweep",
        default="40,100,200,400",
        help="hnsw.ef_search values to measure recall and latency at (comma-separated)",
    )
    parser.add_argument(
        "--rebuild-index",
        action="store_true",
        help="drop the 384-dimension HNSW index before the fill and build it after (faster "
        "than inserting into it, and timed); only in a database of its own",
    )
    parser.add_argument(
        "--skip-hnsw",
        action="store_true",
        help="neither build nor measure pgvector's HNSW index (the fill runs without it) and "
        "measure the vector leg's recall@10 against the exact scan of the same in-memory matrix "
        "instead of pgvector's (~8 s a query at 1M chunks): for sizes served by the IVF",
    )
    parser.add_argument("--keep", action="store_true", help="keep the tenants and chunks")
    parser.add_argument("--profile", metavar="PATH", help="pyinstrument text profile of searches")


def bench_search(options: dict[str, Any]) -> dict[str, Any]:
    n = options["chunks"]
    if n < 20 or options["queries"] < 1:
        raise CommandError("--chunks must be at least 20 and --queries at least 1")
    vectors = options.get("vectors") or "hash"  # growth calls without it: its figures are hash
    result: dict[str, Any] = {"chunks": n, "other_chunks": 2 * n, "vectors": vectors}
    index_existed = _vector_index_exists()
    try:
        result |= _run(options, n)
    finally:
        if not options["keep"]:
            if not index_existed:
                _drop_vector_index_if_unused()
            elif not _vector_index_exists():  # --skip-hnsw dropped it, unused: back, empty
                _build_vector_index()
    return result


def _run(options: dict[str, Any], n: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    model = realistic_model(options.get("vectors"))
    with _tenants(options["keep"], embedding_config(model)) as (tenant, kbs):
        target = kbs[0]
        vocab = corpus.Vocabulary.build()
        result["embedding_check_max_diff"] = corpus.check_embeddings(vocab)
        if model is not None:
            result |= _realism(model, vocab, options["seed"])
        skip_hnsw = bool(options.get("skip_hnsw"))
        if options["rebuild_index"]:
            _drop_vector_index()
        elif skip_hnsw:
            _drop_unused_vector_index()
        started = time.perf_counter()
        targets = [corpus.Target(kb, n) for kb in kbs]
        for t in targets:
            corpus.create_documents(t)
        samples = corpus.fill(
            targets, vocab, seed=options["seed"], vectors=model.chunks if model else None
        )
        result["fill_s"] = round(time.perf_counter() - started, 2)
        result["hnsw_build_s"] = None if skip_hnsw else _build_vector_index()

        store = get_store()
        handle = store.get(target)
        result["bm25_build_s"] = round(handle.build_ms / 1000, 3)
        result["bm25_tier_first_get"] = str(handle.tier)
        result |= _matrix_load(target)
        queries, sources = _queries(vocab, samples[target.pk], options["queries"], options["seed"])
        result["queries"] = len(queries)
        if model is not None:
            remember_query_vectors(target, targets[0], model, queries, sources, options["seed"])
        service = RAGService(tenant, store=store)
        result |= _embedding_times(target, queries)
        for query in queries:  # warm-up: embedding cache, L1, buffers
            for mode in MODES:
                service.search(query, target.pk, mode=mode)
        if store.get(target).tier != Tier.L1:
            raise CommandError("the BM25 index is not in L1 after the warm-up")
        result |= _service_latency(service, target, queries, options.get("profile"))
        recall_queries = queries[: options["recall_queries"]]
        if skip_hnsw:
            result |= _matrix_leg(target, recall_queries)
        else:
            sweep = [int(v) for v in str(options.get("ef_sweep") or "").split(",") if v.strip()]
            result |= _vector_legs(tenant, target, recall_queries, sweep)
        result |= _bm25_legs(handle.index, target, queries, options["rank_bm25_queries"])
        result |= _memory(handle.index)
        result |= _matrix_delta(target)
    return result


# --------------------------------------------------------------------------- setup


def realistic_model(vectors: str | None) -> realistic.RealisticVectors | None:
    """The fitted model for ``--vectors realistic``, None for ``hash``."""
    if vectors != "realistic":
        return None
    try:
        return realistic.fit()
    except ProviderUnavailable as exc:
        raise CommandError(f"{exc} (or use --vectors hash)") from exc


def embedding_config(model: realistic.RealisticVectors | None) -> EmbeddingConfig:
    """What the benchmark's knowledge bases record: with realistic vectors the local model
    (whose embeddings the vectors are drawn like), so the query-embedding cache,
    ``embedding_p50_ms`` and documents uploaded during a run are that model's; else ``hash``."""
    if model is not None:
        return EmbeddingConfig(provider="local", model=realistic.MODEL)
    return EmbeddingConfig(provider="hash", dimensions=corpus.DIMENSIONS)


@contextmanager
def _tenants(keep: bool, config: EmbeddingConfig):
    """A tenant with the searched and a neighbouring knowledge base, another with a third."""
    with throwaway_tenants("search", 2, keep=keep) as (first, second):
        try:
            kbs = [
                create_knowledge_base(
                    tenant=tenant, name=name, embedding=config, weight_mode="fixed"
                )
                for tenant, name in ((first, "searched"), (first, "neighbour"), (second, "foreign"))
            ]
        except ProviderUnavailable as exc:
            raise CommandError(f"{exc} (or use --vectors hash)") from exc
        if any(kb.embedding_dimensions != corpus.DIMENSIONS for kb in kbs):
            raise CommandError(f"the local model does not give {corpus.DIMENSIONS} dimensions")
        yield first, kbs


def _vector_index_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s", [index_name(corpus.DIMENSIONS)]
        )
        return cursor.fetchone() is not None


def _drop_vector_index_if_unused() -> bool:
    """Leave the data directory as the run found it: the HNSW index this run created goes when
    no chunk of its dimension is left (True: there is no index now). Kept, a later run's COPY
    would insert 300k rows into it one graph insertion at a time, many times as long as the
    fill and a build of the index afterwards together."""
    if not _vector_index_exists():  # also a database never migrated: nothing to undo
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM knowledge_chunk WHERE embedding_dimensions = %s LIMIT 1",
            [corpus.DIMENSIONS],
        )
        if cursor.fetchone() is not None:
            return False
    _drop_vector_index()
    return True


@contextmanager
def vector_index_around_fill():
    """For a benchmark that bulk-fills 384-d chunks: the HNSW index of that dimension is
    dropped first if no chunk uses it (else the COPY would insert every row into the graph one
    at a time), the caller builds it after its fill with the function yielded, and it is
    dropped again at the end when the run leaves no chunk of that dimension and it was not
    there before. Enter it outside the throwaway tenants, so it ends after they are gone."""
    existed = _vector_index_exists()
    if existed:
        _drop_unused_vector_index()
    try:
        yield _build_vector_index
    finally:
        if not existed:
            _drop_vector_index_if_unused()


def _drop_unused_vector_index() -> None:
    """Drop the HNSW index before a fill unless chunks of its dimension exist (then say so)."""
    if not _drop_vector_index_if_unused():
        print(
            f"bench: chunks of {corpus.DIMENSIONS} dimensions already exist, so their HNSW index "
            "stays and the fill inserts into it row by row (slow); if an interrupted benchmark "
            "left them, `manage.py bench cleanup` removes them",
            file=sys.stderr,
        )


def _drop_vector_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {index_name(corpus.DIMENSIONS)}")
    hnsw._indexed_dimensions.discard(corpus.DIMENSIONS)


def _build_vector_index() -> float | None:
    """Build the index if it is missing (seconds), with memory enough to build it in RAM."""
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '2GB'")
        cursor.execute("SET max_parallel_maintenance_workers = 1")
    hnsw._indexed_dimensions.discard(corpus.DIMENSIONS)
    started = time.perf_counter()
    created = ensure_vector_index(corpus.DIMENSIONS)
    with connection.cursor() as cursor:
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("RESET max_parallel_maintenance_workers")
        cursor.execute("ANALYZE knowledge_chunk")
    return round(time.perf_counter() - started, 2) if created else None


def _queries(
    vocab: corpus.Vocabulary, samples: list[list[int]], n: int, seed: int
) -> tuple[list[str], list[int]]:
    """Queries of 2-4 distinct words of a random sampled chunk, and that chunk's sample index."""
    rng = np.random.default_rng([seed, 2])
    queries, sources = [], []
    for i in rng.integers(0, len(samples), size=n).tolist():
        distinct = list(dict.fromkeys(samples[i]))
        size = min(int(rng.integers(2, 5)), len(distinct))
        picks = rng.choice(len(distinct), size=size, replace=False).tolist()
        queries.append(" ".join(vocab.words[distinct[p]] for p in picks))
        sources.append(i)
    return queries, sources


def remember_query_vectors(
    kb: KnowledgeBase,
    target: corpus.Target,
    model: realistic.RealisticVectors,
    queries: list[str],
    sources: list[int],
    seed: int,
) -> None:
    """Each query's vector, drawn near the chunk its words come from, in the query-embedding
    cache under its text: every search of the run (service and legs) embeds it so."""
    embedder = get_embedder(config_for_knowledge_base(kb))
    chosen = np.stack([target.sample_vectors[i] for i in sources])
    vectors = model.queries(np.random.default_rng([seed, 6]), chosen)
    for query, vector in zip(queries, vectors, strict=True):
        remember_query_embedding(embedder, query, vector)


def _realism(
    model: realistic.RealisticVectors, vocab: corpus.Vocabulary, seed: int
) -> dict[str, Any]:
    """The realism check: the real sample, as many generated vectors and as many ``hash``
    chunk vectors (nearest-neighbour and random-pair cosine)."""
    rng = np.random.default_rng([seed, 7])
    n = len(model.sample)
    lengths = np.maximum(3, np.rint(rng.gamma(4.0, corpus.MEAN_WORDS / 4.0, size=n))).astype(
        np.int64
    )
    hashed = corpus.embed_batch(vocab, lengths, vocab.draw(rng, int(lengths.sum())))
    result = {"realism_sample_size": n} | model.realism(seed)
    result |= realistic.cosine_profile(hashed, rng, prefix="hash")
    sources = model.chunks(rng, n)
    queries = model.queries(rng, sources)
    result["generated_query_cos_mean"] = round(float(np.mean(np.sum(queries * sources, 1))), 4)
    result["real_query_cos_mean"] = round(float(np.mean(model.query_cosines)), 4)
    return result


# --------------------------------------------------------------------------- measurements


def percentiles(samples: list[float], prefix: str) -> dict[str, float]:
    values = np.asarray(samples, dtype=np.float64)
    return {
        f"{prefix}_p50_ms": round(float(np.percentile(values, 50)), 3),
        f"{prefix}_p95_ms": round(float(np.percentile(values, 95)), 3),
        f"{prefix}_p99_ms": round(float(np.percentile(values, 99)), 3),
    }


def _embedding_times(kb: KnowledgeBase, queries: list[str]) -> dict[str, float]:
    embedder = get_embedder(config_for_knowledge_base(kb))
    samples = []
    for query in queries:
        started = time.perf_counter()
        embedder.embed_query(query)
        samples.append((time.perf_counter() - started) * 1000)
    return {"embedding_p50_ms": round(statistics.median(samples), 3)}


def _service_latency(
    service: RAGService, kb: KnowledgeBase, queries: list[str], profile: str | None
) -> dict[str, Any]:
    timings: dict[str, list[float]] = {mode: [] for mode in MODES}
    for query in queries:
        for mode in MODES:
            started = time.perf_counter()
            service.search(query, kb.pk, mode=mode)
            timings[mode].append((time.perf_counter() - started) * 1000)
    result: dict[str, Any] = {}
    for mode in MODES:
        result |= percentiles(timings[mode], mode)
    if profile:
        _profile(service, kb, queries, profile)
    return result


def _profile(service: RAGService, kb: KnowledgeBase, queries: list[str], path: str) -> None:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002)
    with profiler:
        for query in queries:
            service.search(query, kb.pk, mode="hybrid")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(profiler.output_text(unicode=True, show_all=False))


def _matrix_load(kb: KnowledgeBase) -> dict[str, Any]:
    """The cold load of the knowledge base's vector matrix (what a first search pays)."""
    cache = get_matrix_cache()
    cache.discard(kb.pk)
    started = time.perf_counter()
    handle = cache.get(kb)
    if handle is None:
        return {"vector_index": "hnsw", "vector_matrix_bytes": 0}
    index = handle.matrix.parts[0].ivf
    result = {
        "vector_index": "exact" if index is None else "ivf",
        "vector_matrix_load_s": round(time.perf_counter() - started, 2),  # with the IVF's build
        "vector_matrix_bytes": handle.matrix.total_bytes,  # one copy, shared or not
        "vector_matrix_private_bytes": handle.matrix.nbytes,  # what this process holds alone
    }
    if index is not None:
        result |= {
            "ivf_lists": index.lists,
            "ivf_probes": index.probes,
            "ivf_build_s": round(index.build_s, 2),
            "ivf_calibrated_recall": round(index.recall, 4),
            "ivf_scan_share": round(index.scan_share, 4),
        }
    return result


def _matrix_delta(kb: KnowledgeBase) -> dict[str, Any]:
    """What the first search after a change pays to bring the matrix up to date: the
    version is moved on (directly, so no rebuild task is queued) with no rows changed, which
    leaves the id list read to find what changed."""
    cache = get_matrix_cache()
    if cache.get(kb) is None:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE knowledge_knowledgebase SET index_version = index_version + 1 "
            "WHERE id = %s RETURNING index_version",
            [kb.pk],
        )
        kb.index_version = cursor.fetchone()[0]
    handle = cache.get(kb)
    if handle is None or handle.source != "delta":
        raise CommandError("the matrix was not brought up to date by a delta")
    return {"vector_matrix_delta_ms": round(handle.load_ms, 1)}


def _vector_legs(
    tenant: Tenant, kb: KnowledgeBase, queries: list[str], sweep: list[int] | None = None
) -> dict[str, Any]:
    """The service's vector leg (the in-memory matrix, exact or IVF, or HNSW when the knowledge
    base is too large for the matrix) and the HNSW index at the product's ef_search, each
    against pgvector's exact scan, on the vectors the service searched with; then HNSW at each
    ef_search of ``sweep``, without and with a filter (every FILTER_EVERY-th document)."""
    if not queries:
        return {}
    embedder = get_embedder(config_for_knowledge_base(kb))
    vectors = [cached_query_embedding(embedder, query)[0] for query in queries]
    limit = kb.top_k * kb.candidate_multiplier
    common = {
        "tenant_id": tenant.pk,
        "knowledge_base_id": kb.pk,
        "model": kb.embedding_model,
        "dimensions": kb.embedding_dimensions,
        "limit": limit,
    }
    handle = get_matrix_cache().get(kb)
    hnsw_ms, exact_ms, matrix_ms, leg_recalls, hnsw_recalls = [], [], [], [], []
    exact_of: dict[str, list] = {"none": [], "filtered": []}
    for vector in vectors:
        started = time.perf_counter()
        approximate = vector_search(query_vector=vector, filters=SearchFilters(), **common)
        hnsw_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        exact = exact_vector_search(query_vector=vector, filters=SearchFilters(), **common)
        exact_ms.append((time.perf_counter() - started) * 1000)
        exact_of["none"].append(exact)
        hnsw_recalls.append(recall_at(approximate, exact, 10))
        if handle is not None:
            started = time.perf_counter()
            leg = handle.matrix.search(vector, limit)
            matrix_ms.append((time.perf_counter() - started) * 1000)
        else:
            leg = approximate
        leg_recalls.append(recall_at(leg, exact, 10))
    result = {
        "vector_recall_at_10": round(statistics.fmean(leg_recalls), 4),
        "vector_recall_truth": "pgvector",
        "hnsw_recall_at_10": round(statistics.fmean(hnsw_recalls), 4),
        "recall_queries": len(queries),
        "hnsw_leg_p50_ms": round(statistics.median(hnsw_ms), 3),
        "hnsw_ef_search": hnsw.ef_search(limit),
        "hnsw_iterative_scan": hnsw.ITERATIVE_SCAN,
        "hnsw_max_scan_tuples": settings.RAG_HNSW_MAX_SCAN_TUPLES,
        "exact_scan_p50_ms": round(statistics.median(exact_ms), 3),
        "exact_scan_p95_ms": round(float(np.percentile(exact_ms, 95)), 3),
    }
    if matrix_ms:
        result["matrix_scan_p50_ms"] = round(statistics.median(matrix_ms), 3)
    filtered = _filter_of(kb)
    exact_of["filtered"] = [
        exact_vector_search(query_vector=vector, filters=filtered, **common) for vector in vectors
    ]
    result["hnsw_filter_share"] = round(1 / FILTER_EVERY, 3)
    result["hnsw_sweep"] = []
    for ef in sorted(set(sweep or []) | {hnsw.ef_search(limit)}):
        row: dict[str, Any] = {"ef_search": hnsw.ef_search(limit, ef)}
        for name, filters in (("none", SearchFilters()), ("filtered", filtered)):
            times, recalls = [], []
            for vector, exact in zip(vectors, exact_of[name], strict=True):
                started = time.perf_counter()
                found = vector_search(query_vector=vector, filters=filters, ef=ef, **common)
                times.append((time.perf_counter() - started) * 1000)
                recalls.append(recall_at(found, exact, 10))
            prefix = "" if name == "none" else "filtered_"
            row[f"{prefix}recall_at_10"] = round(statistics.fmean(recalls), 4)
            row[f"{prefix}p50_ms"] = round(statistics.median(times), 3)
            row[f"{prefix}p99_ms"] = round(float(np.percentile(times, 99)), 3)
        result["hnsw_sweep"].append(row)
        if row["ef_search"] == result["hnsw_ef_search"]:  # HNSW queries back to back
            result["hnsw_p50_ms"], result["hnsw_p99_ms"] = row["p50_ms"], row["p99_ms"]
            result["hnsw_filtered_recall_at_10"] = row["filtered_recall_at_10"]
            result["hnsw_filtered_p50_ms"] = row["filtered_p50_ms"]
    return result


def _matrix_leg(kb: KnowledgeBase, queries: list[str]) -> dict[str, Any]:
    """Without HNSW: the service's vector leg (the IVF or the exact scan of the in-memory
    matrix) against the exact scan of the same matrix in numpy, which is what pgvector's exact
    scan would return, without its seconds per query at 1M chunks."""
    handle = get_matrix_cache().get(kb)
    if not queries or handle is None:
        return {}
    embedder = get_embedder(config_for_knowledge_base(kb))
    vectors = [cached_query_embedding(embedder, query)[0] for query in queries]
    limit = kb.top_k * kb.candidate_multiplier
    matrix = handle.matrix
    exact = replace(matrix, parts=tuple(replace(part, ivf=None) for part in matrix.parts))
    leg_ms, exact_ms, recalls, scanned = [], [], [], []
    for vector in vectors:
        started = time.perf_counter()
        leg, how = matrix.search_traced(vector, limit)
        leg_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        truth = exact.search(vector, limit)
        exact_ms.append((time.perf_counter() - started) * 1000)
        recalls.append(recall_at(leg, truth, 10))
        scanned.append(how.get("rows_scanned", len(matrix)))
    return {
        "vector_recall_at_10": round(statistics.fmean(recalls), 4),
        "vector_recall_truth": "matrix",  # the in-memory exact scan, not pgvector's
        "recall_queries": len(queries),
        "matrix_scan_p50_ms": round(statistics.median(leg_ms), 3),
        "matrix_scan_p99_ms": round(float(np.percentile(leg_ms, 99)), 3),
        "matrix_exact_scan_p50_ms": round(statistics.median(exact_ms), 3),
        "matrix_rows_scanned_mean": round(statistics.fmean(scanned)),
    }


def _filter_of(kb: KnowledgeBase) -> SearchFilters:
    """Every FILTER_EVERY-th document of the knowledge base, as a search filter."""
    ids = (
        Document.objects.filter(tenant_id=kb.tenant_id, knowledge_base=kb)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return SearchFilters(document_ids=tuple(ids[i] for i in range(0, len(ids), FILTER_EVERY)))


def recall_at(approximate: list[tuple[int, float]], exact: list[tuple[int, float]], k: int):
    """Share of the exact top k found in the approximate top k; a chunk tied with the exact
    k-th similarity counts as found (which of the tied ones fill the last places is arbitrary)."""
    truth = exact[:k]
    if not truth:
        return 1.0
    kth = truth[-1][1] - 1e-6
    found = sum(1 for _, similarity in approximate[:k] if similarity >= kth)
    return min(found, len(truth)) / len(truth)


def _bm25_legs(index, kb: KnowledgeBase, queries: list[str], rank_queries: int) -> dict[str, Any]:
    from knowledge.analysis import get_analyzer

    analyzer = get_analyzer(kb.user_words)
    analysed = [analyzer.tokens(q) for q in queries]
    limit = kb.top_k * kb.candidate_multiplier
    ours = []
    for tokens in analysed:
        started = time.perf_counter()
        index.search(tokens, limit)
        ours.append((time.perf_counter() - started) * 1000)
    result: dict[str, Any] = {"bm25_index_p50_ms": round(statistics.median(ours), 3)}
    if rank_queries <= 0:
        return result
    from rank_bm25 import BM25Okapi

    from retrieval.bm25store.fetch import ready_chunks

    tokens = list(ready_chunks(kb).values_list("tokens", flat=True))
    started = time.perf_counter()
    reference = BM25Okapi(tokens)
    result["rank_bm25_build_s"] = round(time.perf_counter() - started, 2)
    theirs = []
    for query in analysed[:rank_queries]:
        started = time.perf_counter()
        scores = reference.get_scores(query)
        np.argsort(-scores)[:limit]
        theirs.append((time.perf_counter() - started) * 1000)
    result["rank_bm25_query_p50_ms"] = round(statistics.median(theirs), 2)
    result["rank_bm25_queries"] = len(theirs)
    return result


def _memory(index) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(  # to_regclass: NULL when there is no index (--skip-hnsw)
            "SELECT pg_relation_size(to_regclass(%s)), pg_total_relation_size('knowledge_chunk')",
            [index_name(corpus.DIMENSIONS)],
        )
        hnsw, table = cursor.fetchone()
    return {
        "bm25_index_bytes": int(index.nbytes),
        "hnsw_index_bytes": None if hnsw is None else int(hnsw),
        "chunk_table_bytes": int(table),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def search_table(r: dict[str, Any]) -> str:
    mb = 1024 * 1024
    lines = [
        f"Search: {r['chunks']:,} chunks in the searched knowledge base, {r['other_chunks']:,} "
        f"in others, {r.get('vectors', 'hash')} vectors; {r['queries']} queries per mode, "
        "warm caches\n",
        f"{'mode':10}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}",
    ]
    for mode in MODES:
        lines.append(
            f"{mode:10}{r[f'{mode}_p50_ms']:>10.2f}{r[f'{mode}_p95_ms']:>10.2f}"
            f"{r[f'{mode}_p99_ms']:>10.2f}"
        )
    lines += [
        "",
        f"query embedding ({'local model' if r.get('vectors') == 'realistic' else 'hash'}, "
        f"uncached) p50 {r['embedding_p50_ms']:.3f} ms",
        f"vector leg ({r['vector_index']}): recall@10 {r['vector_recall_at_10']:.3f}"
        + (
            f", in-memory scan p50 {r['matrix_scan_p50_ms']:.2f} ms (cold load "
            f"{r['vector_matrix_load_s']:.2f} s, delta on a new version "
            f"{r.get('vector_matrix_delta_ms', 0):.0f} ms)"
            if "matrix_scan_p50_ms" in r
            else ""
        ),
        *_ivf_lines(r),
        *_hnsw_lines(r),
        f"BM25: our index p50 {r['bm25_index_p50_ms']:.3f} ms"
        + (
            f", rank_bm25 p50 {r['rank_bm25_query_p50_ms']:.1f} ms "
            f"(build {r['rank_bm25_build_s']:.1f} s, {r['rank_bm25_queries']} queries)"
            if "rank_bm25_query_p50_ms" in r
            else ""
        ),
        f"build: fill {r['fill_s']:.1f} s, HNSW {r['hnsw_build_s'] or 0:.1f} s, "
        f"BM25 {r['bm25_build_s']:.2f} s",
        f"memory: BM25 {r['bm25_index_bytes'] / mb:.1f} MB, vectors "
        f"{r['vector_matrix_bytes'] / mb:.1f} MB, HNSW {(r['hnsw_index_bytes'] or 0) / mb:.1f} "
        f"MB, chunk table {r['chunk_table_bytes'] / mb:.0f} MB, peak RSS "
        f"{r['peak_rss_bytes'] / mb:.0f} MB",
    ]
    return "\n".join(lines)


def _ivf_lines(r: dict[str, Any]) -> list[str]:
    lines = []
    if "ivf_lists" in r:
        lines.append(
            f"IVF: {r['ivf_lists']} lists, {r['ivf_probes']} probed (calibrated recall@10 "
            f"{r['ivf_calibrated_recall']:.3f}, {100 * r['ivf_scan_share']:.1f}% of the rows), "
            f"built in {r['ivf_build_s']:.1f} s"
        )
    if "matrix_exact_scan_p50_ms" in r:
        lines.append(
            f"vs the exact scan of the same matrix p50 {r['matrix_exact_scan_p50_ms']:.2f} ms "
            f"(recall truth; {r['recall_queries']} queries, "
            f"{r['matrix_rows_scanned_mean']:,} rows scanned a query); HNSW not measured"
        )
    return lines


def _hnsw_lines(r: dict[str, Any]) -> list[str]:
    lines = []
    if "hnsw_leg_p50_ms" in r:
        lines.append(
            f"vs HNSW p50 {r['hnsw_leg_p50_ms']:.2f} ms recall@10 {r['hnsw_recall_at_10']:.3f}, "
            f"pgvector exact scan p50 {r['exact_scan_p50_ms']:.2f} ms "
            f"({r['recall_queries']} queries)"
        )
    if "hnsw_sweep" in r:
        lines += [
            f"HNSW at the product's ef_search {r['hnsw_ef_search']} (iterative scan "
            f"{r['hnsw_iterative_scan']}, max_scan_tuples {r['hnsw_max_scan_tuples']}): p50 "
            f"{r['hnsw_p50_ms']:.2f} ms, p99 {r['hnsw_p99_ms']:.2f} ms; sweep, recall@10 and p50 "
            f"ms, unfiltered | filtered to {r['hnsw_filter_share']:.0%} of the documents:",
        ]
        lines += [
            f"  ef_search {row['ef_search']:>4}: {row['recall_at_10']:.3f} {row['p50_ms']:7.2f} ms"
            f" | {row['filtered_recall_at_10']:.3f} {row['filtered_p50_ms']:7.2f} ms"
            for row in r["hnsw_sweep"]
        ]
    if "real_nn_cos_mean" in r:
        lines.append(
            f"realism ({r['realism_sample_size']} vectors each), cosine mean [p10 p50 p90]:"
        )
        for who in ("real", "generated", "hash"):
            lines.append(
                f"  {who:9} nearest neighbour "
                + _profile_text(r, f"{who}_nn")
                + ", random pair "
                + _profile_text(r, f"{who}_pair")
                + f", margin {r[f'{who}_nn_margin']:.3f}"
            )
        lines.append(
            f"  query to its chunk: real (a sentence of a paragraph) {r['real_query_cos_mean']:.3f}"
            f", generated {r['generated_query_cos_mean']:.3f}"
        )
    return lines


def _profile_text(r: dict[str, Any], prefix: str) -> str:
    return (
        f"{r[f'{prefix}_cos_mean']:.3f} [{r[f'{prefix}_cos_p10']:.3f} "
        f"{r[f'{prefix}_cos_p50']:.3f} {r[f'{prefix}_cos_p90']:.3f}]"
    )
