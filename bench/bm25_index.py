"""Benchmark BM25Index against rank_bm25 on a synthetic Zipf corpus.

A plain function returning a dict, so the `bench bm25` management command can add the L2
(Redis) and L3 (PostgreSQL) load times of the same payload and print JSON. Timings are medians:
the machine is shared, and a median of repeated runs is what survives the noise.

The payload is compressed with zlib level `PAYLOAD_ZLIB_LEVEL` = 1. Measured at 100k documents,
levels 1-6 inflate equally fast (~0.13 s, the output size sets the cost) and level 6 is only ~6%
smaller, but it takes about 2.5x longer to compress, which a rebuild pays while others wait.
"""

from __future__ import annotations

import pickle
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import rank_bm25

from bench.synthetic import sample_queries, zipf_corpus
from retrieval.bm25.index import BM25Index
from retrieval.bm25store.payload import PAYLOAD_ZLIB_LEVEL

TOP_K = 30  # a KB's default top_k (10) times the candidate multiplier (3)
_QUERY_REPEATS = 3
_LOAD_REPEATS = 5
# rank_bm25 scans every document per query term; past this size compare a subset of queries.
_FULL_COMPARE_DOCS = 20_000
_SUBSET_QUERIES = 30


def run_bm25_benchmark(
    docs: int, queries: int = 200, seed: int = 7, compare: bool = True
) -> dict[str, Any]:
    """Build, query and (de)serialise an index of `docs` synthetic documents; report figures.

    Query latencies are per query the median of a few repeats, then p50/p95 across queries.
    With `compare`, rank_bm25 is built on the same corpus, timed on the same queries (a subset
    of 30 beyond 20k documents: it is slow there) as get_scores plus its argsort top-k, and the
    largest absolute score difference over those queries is reported. `speedup` divides the
    two p50s over those same queries.
    """
    if docs < 1 or queries < 1:
        raise ValueError("the benchmark needs at least one document and one query")
    corpus = zipf_corpus(docs, seed=seed)
    query_set = sample_queries(corpus, queries, seed=seed)
    doc_ids = np.arange(1, docs + 1, dtype=np.int64)

    started = time.perf_counter()
    index = BM25Index.build(doc_ids, corpus)
    build_s = time.perf_counter() - started

    latencies = [_median_s(lambda q=q: index.search(q, TOP_K), _QUERY_REPEATS) for q in query_set]
    payload = index.to_bytes()
    compressed = zlib.compress(payload, PAYLOAD_ZLIB_LEVEL)
    result: dict[str, Any] = {
        "docs": docs,
        "tokens": sum(map(len, corpus)),
        "queries": len(query_set),
        "top_k": TOP_K,
        "build_s": round(build_s, 3),
        "query_p50_ms": _ms(np.percentile(latencies, 50)),
        "query_p95_ms": _ms(np.percentile(latencies, 95)),
        "l1_bytes": index.nbytes,
        "raw_payload_bytes": len(payload),
        "payload_bytes": len(compressed),
        "zlib_level": PAYLOAD_ZLIB_LEVEL,
        "decompress_ms": _ms(_median_s(lambda: zlib.decompress(compressed), _LOAD_REPEATS)),
        "load_ms": _ms(_median_s(lambda: BM25Index.from_bytes(payload), _LOAD_REPEATS)),
    }
    if compare:
        result |= _compare_with_rank_bm25(index, corpus, query_set, latencies)
    return result


def _compare_with_rank_bm25(
    index: BM25Index,
    corpus: list[list[str]],
    query_set: list[list[str]],
    our_latencies: list[float],
) -> dict[str, Any]:
    started = time.perf_counter()
    reference = rank_bm25.BM25Okapi(corpus)
    build_s = time.perf_counter() - started
    compared = query_set if len(corpus) <= _FULL_COMPARE_DOCS else query_set[:_SUBSET_QUERIES]
    latencies = []
    for query in compared:
        started = time.perf_counter()
        np.argsort(reference.get_scores(query))[::-1][:TOP_K]  # its top-k, as get_top_n does
        latencies.append(time.perf_counter() - started)
    max_diff = max(
        (float(np.abs(index.get_scores(q) - reference.get_scores(q)).max()) for q in compared),
        default=0.0,
    )
    reference_p50_s = float(np.percentile(latencies, 50))
    # Same queries on both sides: the subset's mix of common and rare terms sets both p50s.
    our_p50_s = float(np.percentile(our_latencies[: len(compared)], 50))
    return {
        "rank_bm25_build_s": round(build_s, 3),
        "rank_bm25_queries": len(compared),
        "rank_bm25_query_p50_ms": _ms(reference_p50_s),
        "speedup": round(reference_p50_s / our_p50_s, 1),
        "max_abs_score_diff": max_diff,
        "rank_bm25_pickle_bytes": len(pickle.dumps(reference, protocol=5)),
    }


def _median_s(call: Callable[[], object], repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        timings.append(time.perf_counter() - started)
    return float(np.median(timings))


def _ms(seconds: float) -> float:
    return round(float(seconds) * 1000, 3)
