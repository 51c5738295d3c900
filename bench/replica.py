"""``bench replica --docs N --queries Q``: what reading searches from the replica costs.

Needs ``DATABASE_REPLICA_URL`` naming a streaming replica of the primary's database. A throwaway
tenant's knowledge base gets N generated documents (Zipf words from ``bench.synthetic``,
``hash`` embeddings, processed in this process) on the primary; once the replica has replayed
its version, the same Q hybrid queries are timed, caches warm (the matrix and the BM25 index in
this process, as on a busy web server, so the legs read no rows and the databases serve the
hydration):

- ``check``: the replica's version check alone (``retrieval.replica.route_for``);
- ``primary`` / ``replica``: the search's steps on one database (``RAGService._answer`` under
  ``reading_from``), the same hits on both (checked);
- ``search``: the whole search as clients run it, check included (its trace must say replica).

And once each, cold: the vector matrix load (this process's matrix and the host's file of it
dropped first) and a full BM25 build (``build_full``, every searchable chunk's tokens) from each
database.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.core.management.base import CommandError

from bench.synthetic import sample_queries, zipf_corpus


def add_replica_arguments(parser) -> None:
    parser.add_argument("--docs", type=int, default=100, help="documents to generate")
    parser.add_argument("--words", type=int, default=300, help="mean words per document")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for replay")


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def _p95(samples: list[float]) -> float:
    return round(statistics.quantiles(samples, n=20)[-1], 3) if len(samples) > 1 else samples[0]


def bench_replica(options: dict[str, Any]) -> dict[str, Any]:
    import io

    from bench.throwaway import throwaway_tenants
    from knowledge.embeddings import EmbeddingConfig
    from knowledge.services.documents import create_document
    from knowledge.services.knowledge_bases import create_knowledge_base
    from knowledge.services.processing import process_document
    from retrieval import replica
    from retrieval.bm25store.build import build_full
    from retrieval.core.identity import identity_of
    from retrieval.search import RAGService
    from retrieval.search.options import settle
    from retrieval.search.types import SearchOptions
    from retrieval.vector import hostfile
    from retrieval.vector.matrix import get_matrix_cache

    if not replica.replica_configured():
        raise CommandError("set DATABASE_REPLICA_URL to a streaming replica of the database")
    docs, queries = options["docs"], options["queries"]
    if docs < 1 or queries < 2:
        raise CommandError("--docs must be at least 1 and --queries at least 2")
    corpus = zipf_corpus(docs, vocab=5000, mean_len=options["words"], seed=11)
    asked = [" ".join(q) for q in sample_queries(corpus, queries, seed=5)]
    with throwaway_tenants("replica") as (tenant,):
        kb = create_knowledge_base(
            tenant=tenant,
            name="replica",
            embedding=EmbeddingConfig(provider="hash", dimensions=384),
        )
        started = time.perf_counter()
        for i, words in enumerate(corpus):
            document = create_document(
                tenant=tenant,
                knowledge_base=kb,
                name=f"doc-{i}.md",
                stream=io.BytesIO(" ".join(words).encode()),
                queue=False,
            )
            process_document(document.pk)
        kb.refresh_from_db()
        ingest_s = time.perf_counter() - started

        started = time.perf_counter()
        deadline = started + options["wait"]
        while replica.replica_versions(tenant.pk, [kb.pk]).get(kb.pk, -1) < kb.index_version:
            if time.perf_counter() > deadline:
                raise CommandError(f"the replica did not reach version {kb.index_version}")
            time.sleep(0.05)
        replay_ms = (time.perf_counter() - started) * 1000

        service = RAGService(tenant)
        settled = settle(SearchOptions(), {"top_k": 5, "mode": "hybrid"})
        routes = {"primary": replica.Route(), "replica": replica.Route(replica.REPLICA)}
        cold: dict[str, dict[str, float]] = {}
        identity = identity_of(kb)
        for name, route in routes.items():
            with replica.reading_from(route):
                # Cold: neither this process's matrix nor the host's file of it.
                get_matrix_cache().discard(kb.pk)
                hostfile.forget(identity.tenant_id, identity.knowledge_base_id, identity.epoch)
                t0 = time.perf_counter()
                handle = get_matrix_cache().get(kb)
                matrix_ms = (time.perf_counter() - t0) * 1000
                if handle is None or handle.source != "load":
                    raise CommandError("the cold matrix was not loaded from the database")
                build_s = build_full(kb).seconds  # a full build: every searchable chunk's tokens
            cold[name] = {
                "matrix_load_ms": round(matrix_ms, 1),
                "bm25_build_ms": round(build_s * 1000, 1),
            }

        def answer(route, query):
            with replica.reading_from(route):
                return service._answer(query, settled, [kb], route, time.perf_counter())

        for query in asked:  # warm-up: L1 caches, query embeddings, connections
            service.search(query, kb.pk, top_k=5, mode="hybrid")
            for route in routes.values():
                answer(route, query)
        timings: dict[str, list[float]] = {"check": [], "primary": [], "replica": [], "search": []}
        mismatched = 0
        versions = {kb.pk: kb.index_version}
        for query in asked:  # interleaved, so drift in the machine's load hits all alike
            t0 = time.perf_counter()
            replica.route_for(tenant.pk, versions)
            timings["check"].append((time.perf_counter() - t0) * 1000)
            hits = {}
            for name, route in routes.items():
                t0 = time.perf_counter()
                result = answer(route, query)
                timings[name].append((time.perf_counter() - t0) * 1000)
                hits[name] = [hit.chunk_id for hit in result.hits]
            mismatched += hits["primary"] != hits["replica"]
            t0 = time.perf_counter()
            result = service.search(query, kb.pk, top_k=5, mode="hybrid")
            timings["search"].append((time.perf_counter() - t0) * 1000)
            if result.trace.database != "replica":
                raise CommandError(f"a search was served by the {result.trace.database}")
        chunks = sum(kb.documents.values_list("chunk_count", flat=True))
    return {
        "documents": docs,
        "chunks": int(chunks),
        "queries": queries,
        "ingest_s": round(ingest_s, 1),
        "replay_wait_ms": round(replay_ms, 1),
        "hits_differ": mismatched,
        **{f"{name}_p50_ms": _p50(samples) for name, samples in timings.items()},
        **{f"{name}_p95_ms": _p95(samples) for name, samples in timings.items()},
        "cold": cold,
    }


def replica_table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['documents']} documents, {r['chunks']} chunks, {r['queries']} hybrid queries, "
        f"top 5; ingested in {r['ingest_s']} s, replica caught up {r['replay_wait_ms']} ms later",
        f"{'':28} {'p50 ms':>8} {'p95 ms':>8}",
    ]
    for name, label in (
        ("check", "replica version check"),
        ("primary", "search steps on the primary"),
        ("replica", "search steps on the replica"),
        ("search", "whole search (check + replica)"),
    ):
        lines.append(f"{label:28} {r[f'{name}_p50_ms']:>8} {r[f'{name}_p95_ms']:>8}")
    lines.append(f"queries whose hits differ between the two: {r['hits_differ']}")
    for name, cold in r["cold"].items():
        lines.append(
            f"cold from the {name}: matrix load {cold['matrix_load_ms']} ms, "
            f"BM25 build {cold['bm25_build_ms']} ms"
        )
    return "\n".join(lines)
