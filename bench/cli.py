"""``python manage.py bench <benchmark> [options]``: benchmarks on this machine's real services.

One subcommand per benchmark, each a module of this package registered as a
``Benchmark`` in ``BENCHMARKS``: ``add_<name>_arguments(parser)``, ``bench_<name>(options) ->
dict`` and a table renderer. ``--json`` prints exactly one JSON object (the dict); without it,
the table.

- ``bm25 --docs N [--queries Q] [--seed S]``: our BM25 index against rank_bm25 on one synthetic
  Zipf corpus (build, query p50/p95, largest score difference), plus the real cold-load times of
  the same index from L2 (Redis) and L3 (PostgreSQL) through BM25Store, using a throwaway
  tenant and knowledge base that are deleted at the end.
- ``fusion [--candidates N]``: weighted RRF of N + N candidates (p50 in microseconds), against
  the textbook dict-and-sort implementation, checking both give the same order.
- ``ocr [--pages N]``: character accuracy of OCR on N scanned pages per language (Chinese,
  English) rendered from known text, and pages per minute on this machine.
- ``search --chunks N [--vectors realistic|hash]``, ``load --clients C --seconds S``,
  ``ingest --docs N`` and ``growth --sizes ...``: search latency and recall at scale (HNSW's
  at several ef_search values, on vectors shaped like real embeddings by default), the HTTP API
  under load, ingestion through Celery workers, cost against corpus size.
- ``mcp --clients C --seconds S``: the MCP endpoint under load, beside REST search in the same
  run (requests, errors, p50/p95/p99).
- ``churn --chunks N --docs-per-s R --seconds S``: searches (8 clients) while documents are
  uploaded and deleted at R per second: latency p50/p99, errors, how soon a new document is
  found after it is ready, BM25 merges, memory.
- ``cleanup [--older-than MIN]``: not a benchmark: removes the tenants interrupted runs left
  (their chunks would keep the HNSW index every later fill inserts into row by row).
- ``coldstart --chunks N``: a new web process's first search with the start-up warm-up on
  (process start to warm, first search) and off (the cold first search).
- ``hostmem --chunks N --workers W``: memory of W gunicorn workers searching one knowledge
  base's vectors, with the vectors as shared host files and without (RSS, PSS per worker).
- ``fairness --docs N``: tenant B's one document while tenant A has N queued on real workers,
  against B's document alone (the fair dispatch target: within 3x).
- ``replica --docs N --queries Q``: with ``DATABASE_REPLICA_URL`` set, the replica's version
  check and the same searches' steps on the primary and on the replica (docs/scaling.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from bench.bm25 import add_bm25_arguments, bench_bm25, bm25_table
from bench.churn import add_churn_arguments, bench_churn, churn_table
from bench.coldstart import add_coldstart_arguments, bench_coldstart, coldstart_table
from bench.fairness import add_fairness_arguments, bench_fairness, fairness_table
from bench.fusion import add_fusion_arguments, bench_fusion, fusion_table
from bench.growth import add_growth_arguments, bench_growth, growth_table
from bench.hostmem import add_hostmem_arguments, bench_hostmem, hostmem_table
from bench.ingest import add_ingest_arguments, bench_ingest, ingest_table
from bench.load import add_load_arguments, bench_load, load_table
from bench.mcp import add_mcp_arguments, bench_mcp, mcp_table
from bench.ocr import add_ocr_arguments, bench_ocr, ocr_table
from bench.replica import add_replica_arguments, bench_replica, replica_table
from bench.search import add_search_arguments, bench_search, search_table
from bench.throwaway import add_cleanup_arguments, cleanup, cleanup_table


class Benchmark(NamedTuple):
    help: str
    add_arguments: Callable[[Any], None]
    run: Callable[[dict[str, Any]], dict[str, Any]]
    table: Callable[[dict[str, Any]], str]
    database: bool = True  # reads or writes the database (checked to be migrated first)


BENCHMARKS: dict[str, Benchmark] = {
    "bm25": Benchmark(
        "BM25 index vs rank_bm25, and cold loads from L2/L3",
        add_bm25_arguments,
        bench_bm25,
        bm25_table,
    ),
    "churn": Benchmark(
        "search latency and freshness while documents arrive and leave (Celery worker)",
        add_churn_arguments,
        bench_churn,
        churn_table,
    ),
    "cleanup": Benchmark(
        "remove the tenants interrupted benchmark runs left behind (not a benchmark)",
        add_cleanup_arguments,
        cleanup,
        cleanup_table,
    ),
    "coldstart": Benchmark(
        "a new web process: start to warm, first search warmed, during warm-up and cold",
        add_coldstart_arguments,
        bench_coldstart,
        coldstart_table,
    ),
    "fusion": Benchmark(
        "weighted RRF of two candidate lists vs the textbook implementation",
        add_fusion_arguments,
        bench_fusion,
        fusion_table,
        database=False,
    ),
    "ocr": Benchmark(
        "OCR character accuracy (Chinese, English) and pages per minute on scanned pages",
        add_ocr_arguments,
        bench_ocr,
        ocr_table,
        database=False,
    ),
    "search": Benchmark(
        "service-level search latency and vector recall on N synthetic chunks",
        add_search_arguments,
        bench_search,
        search_table,
    ),
    "hostmem": Benchmark(
        "memory of W gunicorn workers for one knowledge base's vectors, shared files or not",
        add_hostmem_arguments,
        bench_hostmem,
        hostmem_table,
    ),
    "load": Benchmark(
        "C concurrent clients searching the HTTP API (gunicorn, production settings)",
        add_load_arguments,
        bench_load,
        load_table,
    ),
    "mcp": Benchmark(
        "C concurrent MCP clients calling the search tool at /mcp, beside REST search",
        add_mcp_arguments,
        bench_mcp,
        mcp_table,
    ),
    "ingest": Benchmark(
        "end-to-end ingestion of N generated documents through real Celery workers",
        add_ingest_arguments,
        bench_ingest,
        ingest_table,
    ),
    "fairness": Benchmark(
        "one tenant's document behind another tenant's N queued documents, against it alone",
        add_fairness_arguments,
        bench_fairness,
        fairness_table,
    ),
    "growth": Benchmark(
        "search at several corpus sizes: latency, build time and memory, with a plot",
        add_growth_arguments,
        bench_growth,
        growth_table,
    ),
    "replica": Benchmark(
        "searches read from DATABASE_REPLICA_URL against the primary: check, hydration, cold loads",
        add_replica_arguments,
        bench_replica,
        replica_table,
    ),
}


def add_arguments(parser) -> None:
    subparsers = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, benchmark in BENCHMARKS.items():
        subparser = subparsers.add_parser(name, help=benchmark.help)
        subparser.add_argument("--json", action="store_true", help="print one JSON object")
        benchmark.add_arguments(subparser)


def run(options: dict[str, Any]) -> str:
    """The benchmark named in ``options``, as one JSON object (``--json``) or its table."""
    benchmark = BENCHMARKS[options["benchmark"]]
    if benchmark.database:
        _check_migrated()
    result = benchmark.run(options)
    return json.dumps(result) if options["json"] else benchmark.table(result)


def _check_migrated() -> None:
    """A benchmark on a database behind the code fails minutes in, in its fill or teardown:
    say so before it starts."""
    from django.core.management.base import CommandError
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
        raise CommandError(
            f"The database has {len(pending)} unapplied migration(s) ({names}): run "
            "`manage.py migrate` first."
        )
