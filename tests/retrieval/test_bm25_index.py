"""One segment's view: rank_bm25-exact scores, search ordering, edge cases and the serialised
form (many segments and deletions: tests/retrieval/test_bm25_segments.py)."""

import math
from collections import Counter
from itertools import chain

import numpy as np
import pytest
import rank_bm25
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bm25_index import run_bm25_benchmark
from bench.synthetic import sample_queries, zipf_corpus
from retrieval.bm25 import BM25Params, Segment, SegmentedIndex

TOKENS = ["sensor", "the", "pump", "a", "传感器", "温度", "压力", "设备", "th01", "v2.3.1", "TH-01"]
QUERY_TOKENS = [*TOKENS, "unknown", "未知", "v2"]


def _index(doc_ids, corpus, params: BM25Params | None = None) -> SegmentedIndex:
    return SegmentedIndex([Segment.build(doc_ids, corpus)], params=params)


def _scores(index: SegmentedIndex, doc_ids, query) -> np.ndarray:
    """The scores of `doc_ids`, in that order (a view reports them by ascending id)."""
    return index.get_scores(query)[np.searchsorted(index.doc_ids, np.asarray(doc_ids))]


def _norm(dl: float, avgdl: float, k1: float = 1.5, b: float = 0.75) -> float:
    return k1 * (1 - b + b * dl / avgdl)


def test_scores_match_a_hand_computed_example_with_the_epsilon_floor():
    corpus = [["sensor", "temperature", "sensor"], ["sensor", "pressure"], ["valve"]]
    index = _index([10, 20, 30], corpus)

    avgdl = 6 / 3
    # "sensor" is in 2 of 3 documents: its raw idf is negative and gets the floor.
    sensor_raw = math.log(3 - 2 + 0.5) - math.log(2 + 0.5)
    rare = math.log(3 - 1 + 0.5) - math.log(1 + 0.5)  # temperature, pressure, valve
    floor = 0.25 * (sensor_raw + 3 * rare) / 4
    expected = [
        floor * (2 * 2.5 / (2 + _norm(3, avgdl))) + rare * (1 * 2.5 / (1 + _norm(3, avgdl))),
        floor * (1 * 2.5 / (1 + _norm(2, avgdl))),
        0.0,
    ]

    assert sensor_raw < 0 < floor
    np.testing.assert_allclose(
        index.get_scores(["sensor", "temperature"]), expected, rtol=0, atol=1e-12
    )
    assert index.idf("sensor") == pytest.approx(floor, abs=1e-12)
    assert index.idf("valve") == pytest.approx(rare, abs=1e-12)
    assert index.idf("unknown") is None
    hits = index.search(["sensor", "temperature"], top_k=10)
    assert [doc_id for doc_id, _ in hits] == [10, 20]
    assert [score for _, score in hits] == pytest.approx(expected[:2], abs=1e-12)


def test_a_negative_average_idf_gives_negative_scores_that_still_rank():
    index = _index([1, 2], [["a"], ["a", "b"]])

    avgdl = 3 / 2
    a_raw = math.log(2 - 2 + 0.5) - math.log(2 + 0.5)
    b_raw = math.log(2 - 1 + 0.5) - math.log(1 + 0.5)  # exactly 0: not negative, not floored
    floor = 0.25 * (a_raw + b_raw) / 2
    expected_a = [floor * 2.5 / (1 + _norm(1, avgdl)), floor * 2.5 / (1 + _norm(2, avgdl))]

    assert floor < 0
    np.testing.assert_allclose(index.get_scores(["a"]), expected_a, rtol=0, atol=1e-12)
    assert index.idf("b") == 0.0
    np.testing.assert_array_equal(index.get_scores(["b"]), [0.0, 0.0])
    # Both documents match "a": negative, but candidates, best (least negative) first.
    hits = index.search(["a"], top_k=5)
    assert [doc_id for doc_id, _ in hits] == [2, 1]
    assert [score for _, score in hits] == pytest.approx([expected_a[1], expected_a[0]], abs=1e-12)
    assert index.search(["b"], top_k=5) == []  # idf exactly 0: scores 0, not a candidate


@st.composite
def indexed_corpora(draw):
    corpus = draw(st.lists(st.lists(st.sampled_from(TOKENS), max_size=30), min_size=1, max_size=40))
    doc_ids = draw(
        st.lists(
            st.integers(-(2**63), 2**63 - 1),
            min_size=len(corpus),
            max_size=len(corpus),
            unique=True,
        )
    )
    return doc_ids, corpus


@settings(max_examples=200, deadline=None)
@given(
    indexed_corpora(),
    st.lists(st.sampled_from(QUERY_TOKENS), max_size=8),
    st.integers(min_value=1, max_value=45),
)
def test_matches_rank_bm25_and_search_ranks_non_zero_scores(indexed, query, top_k):
    doc_ids, corpus = indexed
    index = _index(doc_ids, corpus)

    scores = _scores(index, doc_ids, query)
    if any(corpus):
        expected = rank_bm25.BM25Okapi(corpus).get_scores(query)
    else:  # rank_bm25 divides by zero on a corpus without tokens; nothing can match
        expected = np.zeros(len(corpus))
    assert scores.dtype == np.float64
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-6)

    ranked = _ranked(doc_ids, scores)
    assert index.search(query, top_k=len(corpus)) == ranked
    assert index.search(query, top_k=top_k) == ranked[:top_k]


def _ranked(doc_ids, scores):
    """What search must return: non-zero scores, best first, ties by doc id."""
    matched = [(d, s) for d, s in zip(doc_ids, scores.tolist(), strict=True) if s != 0]
    return sorted(matched, key=lambda hit: (-hit[1], hit[0]))


def test_queries_of_rare_terms_in_a_larger_corpus_match_rank_bm25():
    # Postings far smaller than the corpus take the union path rather than a dense scan.
    corpus = zipf_corpus(3_000, vocab=4_000, mean_len=40, seed=5)
    doc_ids = list(range(3_000, 0, -1))
    index = _index(doc_ids, corpus)
    reference = rank_bm25.BM25Okapi(corpus)
    document_frequency = Counter(chain.from_iterable(map(set, corpus)))
    rare = sorted(t for t, df in document_frequency.items() if 2 <= df <= 40)[:60]
    queries = [rare[i : i + 3] for i in range(0, 60, 3)] + [[rare[0], rare[5], rare[0], "zz"]]

    for query in queries:
        scores = _scores(index, doc_ids, query)
        np.testing.assert_allclose(scores, reference.get_scores(query), rtol=0, atol=1e-6)
        assert index.search(query, top_k=20) == _ranked(doc_ids, scores)[:20]


def test_custom_parameters_match_rank_bm25():
    corpus = zipf_corpus(200, vocab=300, mean_len=20, seed=3)
    params = BM25Params(k1=1.2, b=0.5, epsilon=0.1)
    index = _index(range(len(corpus)), corpus, params)
    reference = rank_bm25.BM25Okapi(corpus, k1=1.2, b=0.5, epsilon=0.1)

    for query in sample_queries(corpus, 20, seed=3):
        np.testing.assert_allclose(
            index.get_scores(query), reference.get_scores(query), rtol=0, atol=1e-6
        )


def test_ties_break_by_doc_id_and_top_k_is_respected():
    filler = [["f"]] * 10
    corpus = [["x", "y"]] * 6 + [["x", "x", "y"]] + filler
    doc_ids = [60, 50, 40, 30, 20, 10, 99, *range(100, 110)]
    index = _index(doc_ids, corpus)

    hits = index.search(["x"], top_k=3)

    assert [doc_id for doc_id, _ in hits] == [99, 10, 20]
    assert hits[1][1] == hits[2][1] < hits[0][1]
    assert [doc_id for doc_id, _ in index.search(["x"], top_k=100)] == [99, 10, 20, 30, 40, 50, 60]
    assert index.search(["x"], top_k=0) == []


def test_empty_corpus_and_empty_query_give_no_results():
    empty = _index([], [])
    assert len(empty) == 0
    assert empty.get_scores(["sensor"]).shape == (0,)
    assert empty.search(["sensor"], top_k=5) == []
    loaded = Segment.from_bytes(empty.segments[0].to_bytes())
    assert SegmentedIndex([loaded]).search(["sensor"], top_k=5) == []

    index = _index([1, 2, 3], [["sensor", "温度"], [], ["pump"]])
    assert index.search([], top_k=5) == []
    np.testing.assert_array_equal(index.get_scores([]), [0.0, 0.0, 0.0])
    assert index.search(["unknown"], top_k=5) == []
    [(doc_id, score)] = index.search(["温度"], top_k=5)
    assert doc_id == 1 and score > 0


def test_round_trip_preserves_scores_and_ids():
    corpus = [*zipf_corpus(300, vocab=500, mean_len=30, seed=11), ["t0"] * 300 + ["传感器"]]
    doc_ids = np.random.default_rng(1).choice(10**12, size=len(corpus), replace=False) - 5 * 10**11
    index = _index(doc_ids, corpus)

    loaded = SegmentedIndex([Segment.from_bytes(index.segments[0].to_bytes())])

    np.testing.assert_array_equal(loaded.doc_ids, np.sort(doc_ids))
    assert len(loaded) == len(index)
    for query in [*sample_queries(corpus, 30, seed=11), ["t0", "传感器", "t0"]]:
        np.testing.assert_array_equal(loaded.get_scores(query), index.get_scores(query))
        assert loaded.search(query, top_k=10) == index.search(query, top_k=10)
        assert loaded.idf(query[0]) == index.idf(query[0])


def test_benchmark_reports_parity_with_rank_bm25():
    result = run_bm25_benchmark(2_000, queries=20)

    expected_keys = {
        "docs", "build_s", "query_p50_ms", "query_p95_ms", "rank_bm25_query_p50_ms", "speedup",
        "max_abs_score_diff", "payload_bytes", "decompress_ms", "load_ms", "l1_bytes",
    }  # fmt: skip
    assert expected_keys <= result.keys()
    assert result["docs"] == 2_000
    assert result["max_abs_score_diff"] <= 1e-6
    # What searches return: rank_bm25's best.
    assert result["search_top_k_complete"] and result["search_max_score_diff"] <= 1e-6
    assert 0 < result["payload_bytes"] < result["raw_payload_bytes"]


def test_synthetic_corpus_is_deterministic_and_queries_hit_documents():
    corpus = zipf_corpus(500, vocab=2_000, mean_len=30, seed=3)
    queries = sample_queries(corpus, 50, seed=3)

    assert corpus == zipf_corpus(500, vocab=2_000, mean_len=30, seed=3)
    assert corpus != zipf_corpus(500, vocab=2_000, mean_len=30, seed=4)
    assert queries == sample_queries(corpus, 50, seed=3)
    assert any(not term.startswith("t") for doc in corpus for term in doc)  # CJK terms mixed in
    documents = [set(doc) for doc in corpus]
    for query in queries:
        assert 2 <= len(query) <= 5
        assert any(terms.issuperset(query) for terms in documents)


def test_allowed_ids_restrict_candidates_without_changing_scores():
    corpus = [["pump", "valve"], ["pump"], ["valve", "seal"], ["gasket"], ["seal"], ["bolt"]]
    index = _index([10, 20, 30, 40, 50, 60], corpus)
    everything = dict(index.search(["pump"], 10))
    restricted = index.search(["pump"], 10, allowed=np.array([20, 30], dtype=np.int64))
    assert restricted == [(20, everything[20])]
    assert index.search(["pump"], 10, allowed=np.array([], dtype=np.int64)) == []
