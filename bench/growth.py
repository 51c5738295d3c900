"""``bench growth --sizes 10000,30000,100000,300000``: how cost grows with corpus size.

Runs ``bench search`` at each size in turn (each in fresh throwaway tenants, with
``--rebuild-index`` so the HNSW build is timed as a bulk build) and tabulates latency, build
times and memory per size. ``--plot PATH`` draws latency against corpus size (log-log) with
matplotlib, ``--rows PATH`` keeps the rows as JSON lines (appended as each size finishes, so a
long run that is stopped keeps what it measured); ``--replot A.jsonl,B.jsonl`` tabulates and
plots kept rows without measuring (a size measured again replaces its earlier row).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from bench.search import bench_search

COLUMNS = (
    ("chunks", "chunks", "{:,}"),
    ("hybrid_p50_ms", "hybrid p50 ms", "{:.2f}"),
    ("hybrid_p99_ms", "hybrid p99 ms", "{:.2f}"),
    ("keyword_p50_ms", "keyword p50 ms", "{:.2f}"),
    ("vector_p50_ms", "vector p50 ms", "{:.2f}"),
    ("exact_scan_p50_ms", "exact scan p50 ms", "{:.1f}"),
    ("rank_bm25_query_p50_ms", "rank_bm25 p50 ms", "{:.1f}"),
    ("vector_recall_at_10", "recall@10", "{:.3f}"),
    ("matrix_scan_p50_ms", "in-memory scan p50 ms", "{:.2f}"),
    ("hnsw_leg_p50_ms", "HNSW p50 ms", "{:.2f}"),
    ("hnsw_recall_at_10", "HNSW recall@10", "{:.3f}"),
    ("bm25_build_s", "BM25 build s", "{:.2f}"),
    ("hnsw_build_s", "HNSW build s", "{:.1f}"),
    ("bm25_index_bytes", "BM25 MB", "MB"),
    ("vector_matrix_bytes", "vectors MB", "MB"),
    ("hnsw_index_bytes", "HNSW MB", "MB"),
)


def add_growth_arguments(parser) -> None:
    parser.add_argument("--sizes", default="10000,30000,100000,300000", help="comma-separated")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--recall-queries", type=int, default=50)
    parser.add_argument("--rank-bm25-queries", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plot", metavar="PNG", help="latency against corpus size")
    parser.add_argument("--rows", metavar="JSONL", help="append each size's result here")
    parser.add_argument(
        "--replot",
        metavar="JSONL",
        help="measure nothing: tabulate (and --plot) the rows of earlier --rows files; a later "
        "row of a size replaces an earlier one",
    )


def bench_growth(options: dict[str, Any]) -> dict[str, Any]:
    if options.get("replot"):
        return _replot(options["replot"], options.get("plot"))
    try:
        sizes = [int(s) for s in options["sizes"].split(",") if s.strip()]
    except ValueError:
        raise CommandError("--sizes takes comma-separated integers") from None
    rows = []
    for size in sizes:
        row = bench_search(
            {
                "chunks": size,
                "queries": options["queries"],
                "recall_queries": options["recall_queries"],
                "rank_bm25_queries": options["rank_bm25_queries"],
                "seed": options["seed"],
                "rebuild_index": True,
                "keep": False,
                "profile": None,
            }
        )
        rows.append(row)
        if options.get("rows"):
            with open(options["rows"], "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
    if options.get("plot"):
        plot(rows, options["plot"])
    return {"sizes": sizes, "rows": rows}


def _replot(paths: str, png: str | None) -> dict[str, Any]:
    by_size: dict[int, dict[str, Any]] = {}
    for path in paths.split(","):
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        row = json.loads(line)
                        by_size[int(row["chunks"])] = row
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"cannot read rows from {path}: {exc}") from exc
    rows = [by_size[size] for size in sorted(by_size)]
    if png:
        plot(rows, png)
    return {"sizes": sorted(by_size), "rows": rows}


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    sizes = [r["chunks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    series = (
        ("hybrid_p50_ms", "hybrid search p50 (service)", "-o"),
        ("hybrid_p99_ms", "hybrid search p99 (service)", "--o"),
        ("keyword_p50_ms", "keyword search p50 (service)", "-s"),
        ("vector_p50_ms", "vector search p50 (service)", "-^"),
        ("matrix_scan_p50_ms", "in-memory exact scan p50 (leg only)", "-v"),
        ("hnsw_leg_p50_ms", "pgvector HNSW p50 (leg only)", "--^"),
        ("exact_scan_p50_ms", "pgvector exact scan p50 (leg only)", ":^"),
        ("rank_bm25_query_p50_ms", "rank_bm25 query p50 (scoring only)", ":s"),
    )
    for key, label, style in series:
        points = [(s, r[key]) for s, r in zip(sizes, rows, strict=True) if r.get(key)]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=label, markersize=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the searched knowledge base (2x as many in others)")
    ax.set_ylabel("latency, ms")
    ax.set_title("Search latency against corpus size (2-core machine)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def growth_table(r: dict[str, Any]) -> str:
    mb = 1024 * 1024
    head = " | ".join(title for _, title, _ in COLUMNS)
    lines = [f"| {head} |", "|" + "---|" * len(COLUMNS)]
    for row in r["rows"]:
        cells = []
        for key, _, fmt in COLUMNS:
            value = row.get(key)
            if value is None:
                cells.append("-")
            elif fmt == "MB":
                cells.append(f"{value / mb:.1f}")
            else:
                cells.append(fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
