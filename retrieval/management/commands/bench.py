"""``python manage.py bench <benchmark> [options]``: benchmarks on this machine's real services.

One subcommand per benchmark, each a few small functions registered as a ``Benchmark`` in
``BENCHMARKS``: ``add_<name>_arguments(parser)``, ``bench_<name>(options) -> dict`` and a table
renderer. ``--json`` prints exactly one JSON object (the dict); without it, the table.

- ``bm25 --docs N [--queries Q] [--seed S]``: our BM25 index against rank_bm25 on one synthetic
  Zipf corpus (build, query p50/p95, largest score difference), plus the real cold-load times of
  the same index from L2 (Redis) and L3 (PostgreSQL) through BM25Store, using a throwaway
  tenant and knowledge base that are deleted at the end.
- ``fusion [--candidates N]``: weighted RRF of N + N candidates (p50 in microseconds), against
  the textbook dict-and-sort implementation, checking both give the same order.
- ``search --chunks N``, ``load --clients C --seconds S``, ``ingest --docs N`` and
  ``growth --sizes ...``: search latency and recall at scale, the HTTP API under load,
  ingestion through Celery workers, cost against corpus size (``retrieval/benchmarks/``).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
from django.core.management.base import BaseCommand, CommandError
from django.db import ProgrammingError

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import KnowledgeBase, Tenant
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.benchmarks.growth import add_growth_arguments, bench_growth, growth_table
from retrieval.benchmarks.ingest import add_ingest_arguments, bench_ingest, ingest_table
from retrieval.benchmarks.load import add_load_arguments, bench_load, load_table
from retrieval.benchmarks.search import add_search_arguments, bench_search, search_table
from retrieval.bm25 import BM25Index
from retrieval.bm25.bench import run_bm25_benchmark
from retrieval.bm25.synthetic import zipf_corpus
from retrieval.bm25store import BM25Store, Tier, identity_of
from retrieval.bm25store.payload import seal

TIER_REPEATS = 5


# --------------------------------------------------------------------------- bm25


def add_bm25_arguments(parser) -> None:
    parser.add_argument("--docs", type=int, default=100_000, help="synthetic documents")
    parser.add_argument("--queries", type=int, default=200, help="queries to time")
    parser.add_argument("--seed", type=int, default=7, help="corpus and query seed")


def bench_bm25(options: dict[str, Any]) -> dict[str, Any]:
    docs, seed = options["docs"], options["seed"]
    if docs < 1 or options["queries"] < 1:
        raise CommandError("--docs and --queries must be at least 1")
    with _throwaway_knowledge_base() as kb:  # first: a database not migrated fails fast
        result = run_bm25_benchmark(docs, queries=options["queries"], seed=seed, compare=True)
        # The same corpus again (same seed): the pure benchmark keeps its index to itself.
        ids = np.arange(1, docs + 1, dtype=np.int64)
        index = BM25Index.build(ids, zipf_corpus(docs, seed=seed))
        return result | _tier_loads(kb, index)


def _tier_loads(kb: KnowledgeBase, index: BM25Index) -> dict[str, Any]:
    """Median cold get() from L2 (L1 cleared) and from L3 (L1 and L2 cleared)."""
    store = BM25Store()
    identity = identity_of(kb)
    payload = seal(identity, kb.index_version, index)
    try:
        store.l3.put(kb.tenant_id, kb.pk, payload, len(index), 0.0)
        if not store.l2.put(identity, payload):
            raise CommandError("Redis is unreachable: cannot measure L2")
        l2 = _cold_get_ms(store, kb, Tier.L2, store.l1.clear)
        l3 = _cold_get_ms(store, kb, Tier.L3, lambda: (store.l1.clear(), store.l2.delete(kb.pk)))
        l1_bytes = store.l1.nbytes
    finally:
        store.invalidate(kb.pk)
        store.l2.client.close()
    return {
        "load_l2_ms": round(l2, 3),
        "load_l3_ms": round(l3, 3),
        "tier_repeats": TIER_REPEATS,
        "store_l1_bytes": l1_bytes,
    }


def _cold_get_ms(
    store: BM25Store, kb: KnowledgeBase, tier: Tier, make_cold: Callable[[], object]
) -> float:
    timings = []
    for _ in range(TIER_REPEATS):
        make_cold()
        handle = store.get(kb)
        if handle.tier != tier:
            raise CommandError(f"expected a load from {tier}, got {handle.tier}")
        timings.append(handle.load_ms)
    return statistics.median(timings)


@contextmanager
def _throwaway_knowledge_base():
    tag = uuid.uuid4().hex[:12]
    try:
        tenant = Tenant.objects.create(name=f"bench {tag}", slug=f"bench-{tag}")
    except ProgrammingError as exc:
        raise CommandError(f"the database is not ready ({exc}); run manage.py migrate") from exc
    try:
        yield create_knowledge_base(
            tenant=tenant, name="bm25 bench", embedding=EmbeddingConfig(provider="none")
        )
    finally:
        tenant.delete()


def _bm25_table(r: dict[str, Any]) -> str:
    mb = 1024 * 1024
    rows = [
        ("build", f"{r['build_s']:.2f} s", f"{r['rank_bm25_build_s']:.2f} s"),
        ("query p50", f"{r['query_p50_ms']:.3f} ms", f"{r['rank_bm25_query_p50_ms']:.1f} ms"),
        ("query p95", f"{r['query_p95_ms']:.3f} ms", ""),
        ("speedup (p50)", f"{r['speedup']:.0f}x", ""),
        ("max |score diff|", f"{r['max_abs_score_diff']:.1e}", ""),
        ("in memory (L1)", f"{r['l1_bytes'] / mb:.1f} MB", ""),
        (
            "payload",
            f"{r['payload_bytes'] / mb:.1f} MB (zlib {r['zlib_level']})",
            f"{r['rank_bm25_pickle_bytes'] / mb:.1f} MB (pickle)",
        ),
        ("cold load from L2", f"{r['load_l2_ms']:.0f} ms", ""),
        ("cold load from L3", f"{r['load_l3_ms']:.0f} ms", ""),
    ]
    head = (
        f"BM25: {r['docs']:,} synthetic documents, {r['tokens']:,} tokens, {r['queries']} "
        f"queries (top {r['top_k']}; rank_bm25 on {r['rank_bm25_queries']} of them)\n\n"
    )
    lines = [f"{'':20}{'ours':>22}  {'rank_bm25':>22}"]
    lines += [f"{name:20}{ours:>22}  {theirs:>22}" for name, ours, theirs in rows]
    return head + "\n".join(lines)


# --------------------------------------------------------------------------- fusion


def add_fusion_arguments(parser) -> None:
    parser.add_argument("--candidates", type=int, default=1000, help="candidates per leg")
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--overlap", type=float, default=0.3, help="share of ids in both legs")


def naive_weighted_rrf(rankings, weights, k=60):
    """The textbook dict-and-sort fusion: the peer the vectorised one is measured against."""
    scores: dict[int, float] = {}
    for leg, ids in rankings.items():
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weights[leg] / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def bench_fusion(options: dict[str, Any]) -> dict[str, Any]:
    from retrieval.fusion import weighted_rrf

    n, repeats = options["candidates"], options["repeats"]
    if n < 1 or repeats < 1:
        raise CommandError("--candidates and --repeats must be at least 1")
    rng = np.random.default_rng(3)
    shared = int(n * options["overlap"])
    pool = rng.choice(10 * n, size=2 * n - shared, replace=False)
    vector = pool[:n].tolist()
    keyword = np.concatenate([pool[:shared], pool[n:]])
    rng.shuffle(keyword)
    rankings = {"vector": vector, "keyword": keyword.tolist()}
    weights = {"vector": 0.6, "keyword": 0.4}

    def timed(fn) -> list[float]:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1e6)
        samples.sort()
        return samples

    ours = timed(lambda: weighted_rrf(rankings, weights).top(15))
    naive = timed(lambda: naive_weighted_rrf(rankings, weights)[:15])
    fused = weighted_rrf(rankings, weights)
    reference = naive_weighted_rrf(rankings, weights)
    same = [int(i) for i in fused.ids] == [i for i, _ in reference]
    return {
        "candidates_per_leg": n,
        "fused": len(fused),
        "repeats": repeats,
        "p50_us": round(statistics.median(ours), 1),
        "p95_us": round(ours[int(0.95 * (len(ours) - 1))], 1),
        "naive_p50_us": round(statistics.median(naive), 1),
        "speedup": round(statistics.median(naive) / statistics.median(ours), 1),
        "same_order_as_naive": same,
    }


def _fusion_table(r: dict[str, Any]) -> str:
    return (
        f"Weighted RRF of {r['candidates_per_leg']:,} + {r['candidates_per_leg']:,} candidates "
        f"({r['fused']:,} distinct), {r['repeats']} runs\n\n"
        f"{'':20}{'ours (numpy)':>16}{'naive (dict)':>16}\n"
        f"{'p50':20}{r['p50_us']:>13.1f} us{r['naive_p50_us']:>13.1f} us\n"
        f"{'p95':20}{r['p95_us']:>13.1f} us\n"
        f"{'speedup':20}{r['speedup']:>15.1f}x\n"
        f"{'same order':20}{r['same_order_as_naive']!s:>16}"
    )


# --------------------------------------------------------------------------- registry


class Benchmark(NamedTuple):
    help: str
    add_arguments: Callable[[Any], None]
    run: Callable[[dict[str, Any]], dict[str, Any]]
    table: Callable[[dict[str, Any]], str]


BENCHMARKS: dict[str, Benchmark] = {
    "bm25": Benchmark(
        "BM25 index vs rank_bm25, and cold loads from L2/L3",
        add_bm25_arguments,
        bench_bm25,
        _bm25_table,
    ),
    "fusion": Benchmark(
        "weighted RRF of two candidate lists vs the textbook implementation",
        add_fusion_arguments,
        bench_fusion,
        _fusion_table,
    ),
    "search": Benchmark(
        "service-level search latency and vector recall on N synthetic chunks",
        add_search_arguments,
        bench_search,
        search_table,
    ),
    "load": Benchmark(
        "C concurrent clients searching the HTTP API (gunicorn, production settings)",
        add_load_arguments,
        bench_load,
        load_table,
    ),
    "ingest": Benchmark(
        "end-to-end ingestion of N generated documents through real Celery workers",
        add_ingest_arguments,
        bench_ingest,
        ingest_table,
    ),
    "growth": Benchmark(
        "search at several corpus sizes: latency, build time and memory, with a plot",
        add_growth_arguments,
        bench_growth,
        growth_table,
    ),
}


class Command(BaseCommand):
    help = "Run a benchmark against this machine's real services."

    def add_arguments(self, parser) -> None:
        subparsers = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
        for name, benchmark in BENCHMARKS.items():
            subparser = subparsers.add_parser(name, help=benchmark.help)
            subparser.add_argument("--json", action="store_true", help="print one JSON object")
            benchmark.add_arguments(subparser)

    def handle(self, *args, **options) -> None:
        benchmark = BENCHMARKS[options["benchmark"]]
        result = benchmark.run(options)
        self.stdout.write(json.dumps(result) if options["json"] else benchmark.table(result))
