"""``bench bm25 --docs N``: our BM25 index against rank_bm25, and cold loads from L2 and L3.

One synthetic Zipf corpus (``bench.synthetic``): build time, query p50/p95 and the
largest score difference against ``rank_bm25.BM25Okapi``, and bm25s on the same corpus and
queries in the same run (``bench.bm25_index``), then the
real cold-load times of the same index through BM25Store from L2 (Redis) and L3 (PostgreSQL),
in a throwaway tenant and knowledge base deleted at the end.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np
from django.core.management.base import CommandError

from bench.bm25_index import run_bm25_benchmark
from bench.synthetic import zipf_corpus
from bench.throwaway import throwaway_tenants
from knowledge.analysis import ANALYZER_VERSION
from knowledge.embeddings import EmbeddingConfig
from knowledge.models import KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.bm25.segment import Segment, plan_segments
from retrieval.bm25store import BM25Store, Tier
from retrieval.bm25store.build import Built, new_key
from retrieval.bm25store.manifest import Manifest, analysis_basis
from retrieval.core.identity import identity_of

TIER_REPEATS = 5


def add_bm25_arguments(parser) -> None:
    parser.add_argument("--docs", type=int, default=100_000, help="synthetic documents")
    parser.add_argument("--queries", type=int, default=200, help="queries to time")
    parser.add_argument("--seed", type=int, default=7, help="corpus and query seed")
    parser.add_argument(
        "--no-peers", action="store_true", help="skip rank_bm25 and bm25s (large corpora)"
    )


def bench_bm25(options: dict[str, Any]) -> dict[str, Any]:
    docs, seed = options["docs"], options["seed"]
    if docs < 1 or options["queries"] < 1:
        raise CommandError("--docs and --queries must be at least 1")
    with _throwaway_knowledge_base() as kb:  # first: a database not migrated fails fast
        result = run_bm25_benchmark(
            docs,
            queries=options["queries"],
            seed=seed,
            compare=not options["no_peers"],
            bm25s=not options["no_peers"],
        )
        # The same corpus again (same seed): the pure benchmark keeps its index to itself.
        return result | _tier_loads(kb, zipf_corpus(docs, seed=seed))


def _tier_loads(kb: KnowledgeBase, corpus: list[list[str]]) -> dict[str, Any]:
    """Median cold get() from L2 (L1 cleared) and from L3 (L1 and L2 cleared) of the corpus
    stored as the store stores a full build (segments and their manifest)."""
    store = BM25Store()
    identity = identity_of(kb)
    ids = list(range(1, len(corpus) + 1))
    parts = plan_segments([len(tokens) for tokens in corpus])
    segments = {new_key(): Segment.build(ids[p], corpus[p], ids[p]) for p in parts}
    manifest = Manifest(
        version=kb.index_version,
        keys=tuple(segments),
        deleted=np.empty(0, np.int64),
        deleted_in=np.empty(0, np.int32),
        doc_ids=np.empty(0, np.int64),
        doc_stamps=np.empty(0, np.int64),
        basis=analysis_basis(ANALYZER_VERSION, kb.user_words),
        chunk_count=len(ids),
    )
    try:
        store.store_built(identity, kb, Built(manifest, segments, True, 0.0))
        if store.l2.version(identity) != kb.index_version:
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
    with throwaway_tenants("bm25") as (tenant,):
        yield create_knowledge_base(
            tenant=tenant, name="bm25 bench", embedding=EmbeddingConfig(provider="none")
        )


def bm25_table(r: dict[str, Any]) -> str:
    mb = 1024 * 1024

    def f(key: str, spec: str, unit: str = "", scale: float = 1.0) -> str:
        """A figure, or blank when it was not measured (``--no-peers``)."""
        return f"{r[key] * scale:{spec}}{unit}" if r.get(key) is not None else ""

    rows = [
        ("build", f("build_s", ".2f", " s"), f("rank_bm25_build_s", ".2f", " s"),
         f("bm25s_build_s", ".2f", " s")),
        ("query p50", f("query_p50_ms", ".3f", " ms"), f("rank_bm25_query_p50_ms", ".1f", " ms"),
         f("bm25s_query_p50_ms", ".3f", " ms")),
        ("query p95", f("query_p95_ms", ".3f", " ms"), "", f("bm25s_query_p95_ms", ".3f", " ms")),
        ("ours / theirs (p50)", "", f"{1 / r['speedup']:.4f}" if "speedup" in r else "",
         f("bm25s_ratio", ".2f")),
        ("max |score diff|", f("max_abs_score_diff", ".1e"),
         "(reference)" if "speedup" in r else "", f("bm25s_max_score_diff", ".1e")),
        ("in memory (L1)", f("l1_bytes", ".1f", " MB", 1 / mb), "", ""),
        ("payload", f"{r['payload_bytes'] / mb:.1f} MB in {r['segments']} segment(s)",
         f("rank_bm25_pickle_bytes", ".1f", " MB (pickle)", 1 / mb), ""),
        ("add a document", f("add_document_ms", ".0f", " ms"), "", ""),
        ("cold load from L2", f("load_l2_ms", ".0f", " ms"), "", ""),
        ("cold load from L3", f("load_l3_ms", ".0f", " ms"), "", ""),
    ]  # fmt: skip
    compared = r.get("rank_bm25_queries", 0)
    head = (
        f"BM25: {r['docs']:,} synthetic documents, {r['tokens']:,} tokens, {r['queries']} "
        f"queries (top {r['top_k']}; rank_bm25 on {compared} of them)\n\n"
    )
    bm25s = f"bm25s ({r.get('bm25s_backend', '-')})"
    lines = [f"{'':20}{'ours':>26}  {'rank_bm25':>20}  {bm25s:>18}"]
    lines += [f"{name:20}{a:>26}  {b:>20}  {c:>18}" for name, a, b, c in rows]
    return head + "\n".join(lines)
