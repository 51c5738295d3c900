"""``bench fusion --candidates N``: weighted RRF of N + N candidates against the textbook
dict-and-sort implementation (p50 in microseconds), checking both give the same order."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from django.core.management.base import CommandError


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


def fusion_table(r: dict[str, Any]) -> str:
    return (
        f"Weighted RRF of {r['candidates_per_leg']:,} + {r['candidates_per_leg']:,} candidates "
        f"({r['fused']:,} distinct), {r['repeats']} runs\n\n"
        f"{'':20}{'ours (numpy)':>16}{'naive (dict)':>16}\n"
        f"{'p50':20}{r['p50_us']:>13.1f} us{r['naive_p50_us']:>13.1f} us\n"
        f"{'p95':20}{r['p95_us']:>13.1f} us\n"
        f"{'speedup':20}{r['speedup']:>15.1f}x\n"
        f"{'same order':20}{r['same_order_as_naive']!s:>16}"
    )
