"""Benchmark the segmented BM25 index against rank_bm25 and bm25s on a synthetic Zipf corpus.

The index measured is the segmented one: the corpus cut into full-size segments
(``plan_segments``) composed by ``SegmentedIndex``. bm25s (``method="robertson"``, the same
Okapi variant without rank_bm25's epsilon floor) indexes the same token lists, with no stemming
or stopwords, and answers the same queries in the same process through its ``retrieve`` (top
k, one thread), with the numba backend when numba is installed (its fastest) and its numpy
backend otherwise (a Python loop over postings: tens of times slower); ``bm25s_backend`` says
which.
``bm25s_ratio`` = our query p50 / bm25s's (below 1: we are faster). Ours is timed with the
compiled query loops loaded (``retrieval.bm25.kernels``, as a warm web process has them).
``bm25s_max_score_diff`` is bm25s's largest score difference against rank_bm25 on the compared
queries (ours is ``max_abs_score_diff``).

A plain function returning a dict, so the `bench bm25` management command can add the L2
(Redis) and L3 (PostgreSQL) load times of the same payload and print JSON. Timings are medians:
the machine is shared, and a median of repeated runs is what survives the noise.

The payload is compressed with zlib level `PAYLOAD_ZLIB_LEVEL` = 1: levels 1-6 inflate equally
fast (the output size sets the cost) and the higher levels make the payload only a little
smaller, but compress several times slower, which a rebuild pays while others wait.
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
from retrieval.bm25 import MAX_SEGMENT_TOKENS, Segment, SegmentedIndex, kernels, plan_segments
from retrieval.bm25store.payload import PAYLOAD_ZLIB_LEVEL

TOP_K = 30  # a KB's default top_k (10) times the candidate multiplier (3)
_QUERY_REPEATS = 3
_LOAD_REPEATS = 5
# rank_bm25 scans every document per query term; past this size compare a subset of queries.
_FULL_COMPARE_DOCS = 20_000
_SUBSET_QUERIES = 30


def run_bm25_benchmark(
    docs: int,
    queries: int = 200,
    seed: int = 7,
    compare: bool = True,
    max_segment_tokens: int = MAX_SEGMENT_TOKENS,
    bm25s: bool = False,
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
    lengths = list(map(len, corpus))
    segments = [
        Segment.build(doc_ids[p], corpus[p]) for p in plan_segments(lengths, max_segment_tokens)
    ]
    index = SegmentedIndex(segments)
    build_s = time.perf_counter() - started

    kernels.get()  # as a warm web process has them
    cold = [_median_s(lambda q=q: index.search(q, TOP_K), 1) for q in query_set]
    latencies = [_median_s(lambda q=q: index.search(q, TOP_K), _QUERY_REPEATS) for q in query_set]
    payloads = [s.to_bytes() for s in segments]
    compressed_parts = [zlib.compress(p, PAYLOAD_ZLIB_LEVEL) for p in payloads]
    largest = max(range(len(segments)), key=lambda i: len(payloads[i]))
    payload, compressed = payloads[largest], compressed_parts[largest]
    result: dict[str, Any] = {
        "docs": docs,
        "tokens": sum(map(len, corpus)),
        "queries": len(query_set),
        "top_k": TOP_K,
        "build_s": round(build_s, 3),
        "query_p50_ms": _ms(np.percentile(latencies, 50)),
        "query_p95_ms": _ms(np.percentile(latencies, 95)),
        "query_first_p50_ms": _ms(np.percentile(cold, 50)),
        "segments": len(segments),
        "segment_docs": [len(s) for s in segments],
        "segment_payload_bytes": [len(c) for c in compressed_parts],
        "l1_bytes": index.total_nbytes,
        "raw_payload_bytes": sum(map(len, payloads)),
        "payload_bytes": sum(map(len, compressed_parts)),
        "zlib_level": PAYLOAD_ZLIB_LEVEL,
        "decompress_ms": _ms(_median_s(lambda: zlib.decompress(compressed), _LOAD_REPEATS)),
        "load_ms": _ms(_median_s(lambda: Segment.from_bytes(payload), _LOAD_REPEATS)),
        "compose_ms": _ms(_median_s(lambda: SegmentedIndex(segments), _LOAD_REPEATS)),
        "add_document_ms": _ms(_median_s(lambda: _add_document(segments, docs, seed), 3)),
        "add_document_chunks": _DOCUMENT_CHUNKS,
    }
    if compare:
        result |= _compare_with_rank_bm25(index, corpus, query_set, latencies)
    if bm25s:
        result |= _compare_with_bm25s(corpus, query_set, latencies)
    return result


_DOCUMENT_CHUNKS = 20  # one new document's chunks


def _add_document(segments: list[Segment], docs: int, seed: int) -> SegmentedIndex:
    """What a new document costs the index: a segment of its chunks, and the view composed
    over the old segments plus that one (the tokens at hand, as after fetching them)."""
    corpus = zipf_corpus(_DOCUMENT_CHUNKS, seed=seed + 1)
    ids = np.arange(docs + 1, docs + 1 + _DOCUMENT_CHUNKS, dtype=np.int64)
    return SegmentedIndex([*segments, Segment.build(ids, corpus)])


def _compare_with_rank_bm25(
    index: SegmentedIndex,
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
    # What a search returns: its top k scores
    # against rank_bm25's best non-zero scores, and whether they come in the same order.
    top_diff, same_order = 0.0, True
    for query in compared:
        found = index.search(query, TOP_K)
        scores = reference.get_scores(query)
        best = np.sort(scores[scores != 0])[::-1][:TOP_K]
        ours = np.array([score for _, score in found])
        same_order &= ours.size == best.size and bool(np.all(np.diff(ours) <= 0))
        if ours.size == best.size and ours.size:
            top_diff = max(top_diff, float(np.abs(ours - best).max()))
    reference_p50_s = float(np.percentile(latencies, 50))
    # Same queries on both sides: the subset's mix of common and rare terms sets both p50s.
    our_p50_s = float(np.percentile(our_latencies[: len(compared)], 50))
    _REFERENCE_SCORES.clear()
    _REFERENCE_SCORES.extend(reference.get_scores(q) for q in compared)
    return {
        "rank_bm25_build_s": round(build_s, 3),
        "rank_bm25_queries": len(compared),
        "rank_bm25_query_p50_ms": _ms(reference_p50_s),
        "speedup": round(reference_p50_s / our_p50_s, 1),
        "max_abs_score_diff": max_diff,
        "search_max_score_diff": top_diff,
        "search_top_k_complete": same_order,
        "rank_bm25_pickle_bytes": len(pickle.dumps(reference, protocol=5)),
    }


# rank_bm25's scores of the compared queries, for bm25s's difference (kept between the calls).
_REFERENCE_SCORES: list[np.ndarray] = []


def _compare_with_bm25s(
    corpus: list[list[str]], query_set: list[list[str]], our_latencies: list[float]
) -> dict[str, Any]:
    import bm25s

    try:
        import numba  # noqa: F401

        backend = "numba"
    except ImportError:
        backend = "numpy"
    started = time.perf_counter()
    retriever = bm25s.BM25(method="robertson", backend=backend)
    retriever.index(corpus, show_progress=False)
    build_s = time.perf_counter() - started

    def retrieve(query: list[str]) -> object:
        return retriever.retrieve(
            [query], k=TOP_K, show_progress=False, n_threads=1, backend_selection=backend
        )

    retrieve(query_set[0])  # numba compiles on first use: not a query's cost
    latencies = [_median_s(lambda q=q: retrieve(q), _QUERY_REPEATS) for q in query_set]
    theirs = float(np.percentile(latencies, 50))
    ours = float(np.percentile(our_latencies, 50))
    diff = max(
        (
            float(np.abs(retriever.get_scores(q) - reference).max())
            for q, reference in zip(query_set, _REFERENCE_SCORES, strict=False)
        ),
        default=None,
    )
    return {
        "bm25s_backend": backend,
        "bm25s_build_s": round(build_s, 3),
        "bm25s_query_p50_ms": _ms(theirs),
        "bm25s_query_p95_ms": _ms(np.percentile(latencies, 95)),
        "bm25s_ratio": round(ours / theirs, 3),
        "bm25s_max_score_diff": diff,
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
