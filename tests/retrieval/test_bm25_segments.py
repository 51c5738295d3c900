"""Segments and the composed view: exact rank_bm25 scores over the live documents, whatever the
segment list and deletions (pure: no database)."""

from __future__ import annotations

import collections
import copy
import io
import itertools
import json
import math
import struct
from dataclasses import replace

import numpy as np
import pytest
import rank_bm25
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bench.synthetic import sample_queries, zipf_corpus
from retrieval.bm25 import (
    Segment,
    SegmentedIndex,
    _compiled,
    kernels,
    layouts,
    plan_segments,
    vocabulary,
)
from retrieval.bm25store.manifest import Manifest

TOKENS = ["sensor", "the", "pump", "a", "传感器", "温度", "th01", "v2.3.1"]
QUERIES = [["sensor"], ["the", "pump"], ["传感器", "温度", "sensor"], ["a", "a", "th01"], ["zz"]]


def _norm(dl: float, avgdl: float, k1: float = 1.5, b: float = 0.75) -> float:
    return k1 * (1 - b + b * dl / avgdl)


def reference_scores(corpus: list[list[str]], query: list[str]) -> np.ndarray:
    if not any(corpus):  # rank_bm25 divides by zero without tokens: nothing can match
        return np.zeros(len(corpus))
    return rank_bm25.BM25Okapi(corpus).get_scores(query)


def reference_top(ids, scores: np.ndarray, k: int, allowed=None) -> list[tuple[int, float]]:
    """What a search must return given every document's scores (rank_bm25's): the non-zero
    ones of allowed ids, best first, ties by id."""
    hits = [
        (d, s)
        for d, s in zip(ids, scores.tolist(), strict=True)
        if s != 0 and (allowed is None or d in allowed)
    ]
    return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:k]


def test_a_deletion_in_one_segment_changes_every_statistic_exactly_by_hand():
    first = Segment.build([1, 2], [["sensor", "temperature", "sensor"], ["sensor", "pressure"]])
    second = Segment.build([3, 4], [["valve"], ["sensor", "valve", "valve"]])
    view = SegmentedIndex([first, second], deleted=[4])

    # Live: documents 1, 2, 3, as if document 4 had never been indexed.
    avgdl = 6 / 3
    sensor_raw = math.log(3 - 2 + 0.5) - math.log(2 + 0.5)  # negative: floored
    rare = math.log(3 - 1 + 0.5) - math.log(1 + 0.5)  # temperature, pressure, valve
    floor = 0.25 * (sensor_raw + 3 * rare) / 4
    expected = [
        floor * (2 * 2.5 / (2 + _norm(3, avgdl))) + rare * (1 * 2.5 / (1 + _norm(3, avgdl))),
        floor * (1 * 2.5 / (1 + _norm(2, avgdl))),
        0.0,
    ]
    np.testing.assert_allclose(
        view.get_scores(["sensor", "temperature"]), expected, rtol=0, atol=1e-12
    )
    assert view.doc_ids.tolist() == [1, 2, 3] and len(view) == 3
    assert view.document_frequency("sensor") == 2 and view.document_frequency("valve") == 1
    assert view.idf("sensor") == pytest.approx(floor, abs=1e-12)
    assert view.idf("valve") == pytest.approx(rare, abs=1e-12)
    assert sorted(view.terms()) == ["pressure", "sensor", "temperature", "valve"]
    assert [d for d, _ in view.search(["valve"], 5)] == [3]  # 4 has more "valve" but is gone


def test_a_term_whose_documents_are_all_deleted_leaves_the_vocabulary_and_the_floor():
    segment = Segment.build([1, 2, 3], [["a", "gone"], ["a", "b"], ["c"]])
    view = SegmentedIndex([segment], deleted=[1])
    assert view.idf("gone") is None and view.document_frequency("gone") == 0
    assert "gone" not in set(view.terms())
    assert view.search(["gone"], 5) == []
    expected = rank_bm25.BM25Okapi([["a", "b"], ["c"]])
    for query in (["a"], ["b", "c"], ["a", "gone"]):
        np.testing.assert_allclose(
            view.get_scores(query), expected.get_scores(query), rtol=0, atol=1e-12
        )


def test_empty_segments_and_everything_deleted_score_nothing():
    assert SegmentedIndex([]).search(["a"], 5) == []
    assert len(SegmentedIndex([Segment.build([], [])])) == 0
    segment = Segment.build([5, 6], [["a"], ["a", "b"]])
    view = SegmentedIndex([Segment.build([], []), segment, Segment.build([], [])], deleted=[5, 6])
    assert len(view) == 0 and view.get_scores(["a"]).shape == (0,)
    assert view.search(["a", "b"], 5) == [] and list(view.terms()) == []
    no_tokens = SegmentedIndex([Segment.build([1, 2], [[], []])])
    assert no_tokens.search(["a"], 5) == [] and len(no_tokens) == 2


def test_a_negative_average_idf_ranks_as_in_one_index():
    view = SegmentedIndex([Segment.build([1], [["a"]]), Segment.build([2], [["a", "b"]])])
    theirs = reference_top([1, 2], reference_scores([["a"], ["a", "b"]], ["a"]), 5)
    ours = view.search(["a"], 5)
    assert [d for d, _ in ours] == [d for d, _ in theirs] == [2, 1]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-12)
    assert all(s < 0 for _, s in ours)
    assert view.search(["b"], 5) == []  # idf exactly 0


def test_segments_of_a_larger_corpus_match_one_index_and_survive_a_round_trip():
    corpus = zipf_corpus(3_000, vocab=4_000, mean_len=40, seed=5)
    ids = np.arange(10, 3_010)
    parts = [slice(0, 1_800), slice(1_800, 2_900), slice(2_900, 3_000)]
    segments = [Segment.from_bytes(Segment.build(ids[p], corpus[p]).to_bytes()) for p in parts]
    deleted = ids[::7]
    view = SegmentedIndex(segments, deleted=deleted)
    live = [doc for i, doc in zip(ids.tolist(), corpus, strict=True) if i % 7 != 3]
    live_ids = [i for i in ids.tolist() if i % 7 != 3]
    reference = rank_bm25.BM25Okapi(live)
    for query in sample_queries(corpus, 40, seed=5):
        np.testing.assert_allclose(
            view.get_scores(query), reference.get_scores(query), rtol=0, atol=1e-6
        )
        ours = view.search(query, 30)
        theirs = reference_top(live_ids, reference.get_scores(query), 30)
        assert [d for d, _ in ours] == [d for d, _ in theirs]
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-9)
    merged = SegmentedIndex([Segment.merge(segments, [deleted] * len(segments))])
    assert len(merged.segments[0]) == len(live)
    query = sample_queries(corpus, 1, seed=9)[0]
    np.testing.assert_allclose(
        merged.get_scores(query), reference.get_scores(query), rtol=0, atol=1e-6
    )


def test_recorded_dead_frequencies_spare_the_count_and_a_wrong_record_is_not_trusted(
    monkeypatch,
):
    corpus = zipf_corpus(3_000, vocab=300, mean_len=20, seed=4)
    segments = [
        Segment.build(range(i, i + 1_000), corpus[i : i + 1_000]) for i in range(0, 3_000, 1_000)
    ]
    deleted = list(range(5, 3_000, 11))
    counted = SegmentedIndex(segments, deleted=deleted)
    record = counted.dead_frequencies()
    assert all(terms.size and counts.min() > 0 for terms, counts in record)
    passes = []
    real = Segment.document_frequencies
    monkeypatch.setattr(
        Segment,
        "document_frequencies",
        lambda self, live=None: passes.append(live is not None) or real(self, live),
    )
    queries = sample_queries(corpus, 20, seed=4)
    recorded = SegmentedIndex(segments, deleted=deleted, dead_frequencies=record)
    assert passes == []  # no pass over any segment's postings
    for query in queries:
        np.testing.assert_array_equal(recorded.get_scores(query), counted.get_scores(query))
    # Another set of deletions' record (too many deleted documents for a term, or a term the
    # segment lacks) is ignored: that segment is counted, and the scores stay exact.
    terms, counts = record[0]
    wrong = [(terms, counts + 10_000), record[1], (np.array([10_000], np.int32), counts[:1])]
    checked = SegmentedIndex(segments, deleted=deleted, dead_frequencies=wrong)
    assert passes == [True, True]
    for query in queries:
        np.testing.assert_array_equal(checked.get_scores(query), counted.get_scores(query))
    with pytest.raises(ValueError, match="one entry per segment"):
        SegmentedIndex(segments, deleted=deleted, dead_frequencies=record[:2])


def test_the_writer_counts_a_few_new_deletions_from_the_view_before_without_a_pass(monkeypatch):
    # The Celery worker composes each change's view on the one before, with no record of the
    # dead (it writes that record): a few documents deleted since are looked up in each term's
    # postings by the compiled loops instead of a pass over all of them.
    corpus = zipf_corpus(4_000, vocab=400, mean_len=20, seed=6)
    segments = [
        Segment.build(range(i, i + 2_000), corpus[i : i + 2_000]) for i in range(0, 4_000, 2_000)
    ]
    first = list(range(3, 4_000, 13))
    before = SegmentedIndex(segments, deleted=first)
    passes = []
    real = Segment.document_frequencies
    monkeypatch.setattr(
        Segment,
        "document_frequencies",
        lambda self, live=None: passes.append(len(self)) or real(self, live),
    )
    queries = sample_queries(corpus, 20, seed=6)

    def check(deleted, previous, expected_passes):
        passes.clear()
        followed = SegmentedIndex(segments, deleted=deleted, previous=previous)
        assert passes == expected_passes
        passes.clear()
        fresh = SegmentedIndex(segments, deleted=deleted)
        for ours, theirs in zip(
            followed._composition.df_parts, fresh._composition.df_parts, strict=True
        ):
            np.testing.assert_array_equal(ours, theirs)
        for query in queries:
            np.testing.assert_array_equal(followed.get_scores(query), fresh.get_scores(query))
        return followed

    # Two documents of the first segment deleted since: counted from the view before.
    after = check([*first, 10, 1_990], before, [])
    # Again on that view, with a document of the second segment whose df had no deletions.
    check([*first, 10, 1_990, 3_001], after, [])
    # Hundreds deleted since: one pass is cheaper than the searches, and is taken.
    many = [*first, *range(1, 2_000, 5)]
    check(many, before, [2_000])
    # A document deleted before is live again (not a view this one follows): counted afresh.
    check([*first[1:], 10], before, [2_000])


def test_holders_by_term_counts_what_a_pass_over_the_postings_counts():
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        terms = int(rng.integers(1, 12))
        per_term = [np.flatnonzero(rng.random(n) < rng.random()) for _ in range(terms)]
        offsets = np.concatenate([[0], np.cumsum([p.size for p in per_term])]).astype(np.int64)
        post_docs = np.concatenate(per_term).astype(np.int32)
        # Neighbouring documents (a document's chunks) or scattered ones.
        if trial % 2:
            start = int(rng.integers(0, n))
            docs = np.arange(start, min(n, start + int(rng.integers(1, 8))), dtype=np.int64)
        else:
            docs = np.unique(rng.integers(0, n, int(rng.integers(1, 10)))).astype(np.int64)
        out = np.full(terms, -1, dtype=np.int64)
        _compiled.holders_by_term(offsets, post_docs, docs, out)
        expected = [np.isin(p, docs).sum() for p in per_term]
        assert out.tolist() == expected, (per_term, docs)


def test_a_view_composed_on_the_one_before_a_merge_scores_like_a_fresh_one_to_the_bit():
    # Found by the stateful test: the reused vocabulary keeps the order it grew in ("the"
    # first), a fresh one starts from the merged segment, which only a deleted document gave
    # "the" ("sensor" first), and an idf floor summed term by term differed in the last bit.
    segments = [
        Segment.build([], []),
        Segment.build([1, 2], [[], ["the"]]),
        Segment.build([3], [["sensor", "pump", "the"]]),
        Segment.build(range(4, 9), [["sensor"]] + [["sensor", "the"]] * 4),
    ]
    before = SegmentedIndex(segments, deleted=[2])
    segments[0:2] = [Segment.merge(segments[0:2], [np.array([2])] * 2)]
    followed = SegmentedIndex(segments, deleted=[2], previous=before)
    fresh = SegmentedIndex(segments, deleted=[2])
    orders = [[t for t, _ in view._composition.vocab.items()] for view in (followed, fresh)]
    assert orders[0] != orders[1]  # the two orders
    for query in (["the"], ["sensor"], ["pump", "the"]):
        np.testing.assert_array_equal(followed.get_scores(query), fresh.get_scores(query))


def test_a_vocabulary_keeps_its_ids_along_successors_and_folds_what_they_added():
    first = vocabulary.Vocabulary()
    assert first.ids_of(["pump", "seal", "pump"]).tolist() == [0, 1, 0]
    second = first.successor()  # the first's terms become the base, shared
    assert second._base is first._added and not second._added
    base = {f"t{i}": i for i in range(16)}
    grown = vocabulary.Vocabulary(base)
    for step in range(3):  # up to an eighth of the base added (2 of 16): the base is shared
        grown = grown.successor()
        assert grown._base is base and len(grown._added) == step
        assert grown.ids_of(["t1", f"new{step}"]).tolist() == [1, 16 + step]
    folded = grown.successor()  # 3 terms added: folded into a new base
    assert folded._base == dict(grown.items()) and not folded._added and len(folded) == 19
    terms = [[t for t, _ in vocab.items()] for vocab in (folded, grown)]
    assert terms[0] == terms[1] == [*base, "new0", "new1", "new2"]
    assert folded["new2"] == 18 and folded.get("valve") is None
    with pytest.raises(KeyError):
        folded["valve"]


def test_a_manifest_keeps_its_dead_frequencies_and_one_without_them_still_reads():
    manifest = Manifest(
        version=3,
        keys=("a", "b"),
        deleted=np.array([4, 9]),
        deleted_in=np.array([0, 0], np.int32),
        doc_ids=np.array([1, 2]),
        doc_stamps=np.array([5, 6]),
        basis="a1:x",
    )
    plain = Manifest.from_bytes(manifest.to_bytes())
    assert plain.dead is None and plain.dead_frequencies() is None
    dead = [(np.array([0, 7], np.int32), np.array([2, 1], np.int32)), (np.empty(0, np.int32),) * 2]
    recorded = Manifest.from_bytes(manifest.with_dead(dead).to_bytes())
    [(terms, counts), (none, zero)] = recorded.dead_frequencies()
    assert (terms.tolist(), counts.tolist(), none.size, zero.size) == ([0, 7], [2, 1], 0, 0)
    with pytest.raises(ValueError, match="one entry per segment"):
        manifest.with_dead(dead[:1])
    for sizes, match in (([2], "one entry per segment"), ([2, 1], "unequal lengths")):
        wrong = replace(manifest, dead=(np.array(sizes), np.arange(2), np.ones(2)))
        with pytest.raises(ValueError, match=match):
            Manifest.from_bytes(wrong.to_bytes())


def _stored_types(raw: bytes) -> dict[str, str]:
    """The stored type of each array of a format 2 manifest, from its JSON header."""
    (length,) = struct.unpack_from("<I", raw, 8)
    return {name: kind for name, kind, _ in json.loads(raw[12 : 12 + length])["arrays"]}


def _format_1(manifest: Manifest) -> bytes:
    """A manifest as earlier releases wrote it (format 1: ``np.savez``)."""
    buffer = io.BytesIO()
    sizes, terms, counts = manifest.dead
    np.savez(
        buffer,
        format=np.array([1, manifest.version, manifest.merges, manifest.chunk_count]),
        keys=np.array(manifest.keys, dtype="U32"),
        deleted=manifest.deleted,
        deleted_in=manifest.deleted_in.astype(np.uint16),
        doc_ids=manifest.doc_ids.astype(np.uint32),
        doc_stamps=manifest.doc_stamps,
        basis=np.array([manifest.basis]),
        build_seconds=np.array([manifest.build_seconds]),
        dead_sizes=sizes,
        dead_terms=terms.astype(np.uint16),
        dead_counts=counts.astype(np.uint16),
    )
    return buffer.getvalue()


def _assert_same_manifest(read: Manifest, manifest: Manifest) -> None:
    for name in ("version", "merges", "chunk_count", "keys", "basis", "build_seconds"):
        assert getattr(read, name) == getattr(manifest, name), name
    for name in ("deleted", "deleted_in", "doc_ids", "doc_stamps"):
        ours, theirs = getattr(read, name), getattr(manifest, name)
        assert ours.dtype == np.dtype(np.int32 if name == "deleted_in" else np.int64), name
        assert ours.tolist() == theirs.tolist(), name
    assert [(t.tolist(), c.tolist()) for t, c in read.dead_frequencies()] == [
        (t.tolist(), c.tolist()) for t, c in manifest.dead_frequencies()
    ]


def _wide_manifest() -> Manifest:
    big = 2**40  # a chunk id past 32 bits stays 64 bits wide
    return Manifest(
        version=9,
        keys=tuple(f"k{i}" for i in range(300)),
        deleted=np.array([7, 70_000, big]),
        deleted_in=np.array([0, 1, 299], np.int32),
        doc_ids=np.array([1, 2, 65_536, 65_537]),
        doc_stamps=np.array([(1_700_000_000_000_000 << 8) | 3, 5, 5, 6]),
        basis="a1:y",
        merges=4,
        chunk_count=12,
        build_seconds=1.5,
    ).with_dead(
        [(np.array([1, 60_000], np.int32), np.array([1, 300], np.int32))]
        + [(np.empty(0, np.int32),) * 2] * 298
        + [(np.array([5, 6, 9], np.int32), np.array([2, 2, 1], np.int32))]
    )


def test_a_manifest_is_written_in_narrow_integers_and_read_back_exactly():
    manifest = _wide_manifest()
    raw = manifest.to_bytes()
    assert _stored_types(raw) == {
        "deleted": "<i8",  # holds 2**40
        "deleted_in": "<u2",
        "doc_ids": "<u2",  # as differences: 1, 1, 65,534, 1
        "doc_stamps": "<i8",  # less the least stamp, still past 32 bits
        "dead_sizes": "|u1",
        "dead_terms": "<u2",  # as differences within each segment: 1, 59,999; 5, 1, 3
        "dead_counts": "<u2",
    }
    _assert_same_manifest(Manifest.from_bytes(raw), manifest)
    empty = replace(manifest, keys=(), deleted=np.empty(0), deleted_in=np.empty(0, np.int32))
    empty = replace(empty, doc_ids=np.empty(0), doc_stamps=np.empty(0)).with_dead([])
    _assert_same_manifest(Manifest.from_bytes(empty.to_bytes()), empty)


def test_a_format_1_manifest_is_not_read():
    with pytest.raises(ValueError, match="not a BM25 manifest"):
        Manifest.from_bytes(_format_1(_wide_manifest()))


def test_a_damaged_manifest_is_refused_with_a_reason():
    raw = _wide_manifest().to_bytes()
    (length,) = struct.unpack_from("<I", raw, 8)
    header = json.loads(raw[12 : 12 + length])

    def with_header(header: dict) -> bytes:
        head = json.dumps(header, separators=(",", ":")).encode()
        return raw[:8] + struct.pack("<I", len(head)) + head + raw[12 + length :]

    negative = json.loads(json.dumps(header))
    negative["arrays"][0][2] = -1  # a count that would read the rest
    header["arrays"][0][0] = "payload"  # an array the format does not have
    unknown = with_header(header)
    for damaged, reason in (
        (raw[:-1], "truncated"),
        (with_header(negative), "truncated"),
        (raw + b"\x00", "trailing bytes"),
        (b"XXXXXXXX" + raw[8:], "no manifest magic"),
        (unknown, "unexpected array 'payload'"),
        (b"", "not a BM25 manifest"),
    ):
        with pytest.raises(ValueError, match=reason):
            Manifest.from_bytes(damaged)


def test_allowed_ids_restrict_candidates_without_changing_scores():
    view = SegmentedIndex(
        [Segment.build([10, 20], [["pump", "valve"], ["pump"]]), Segment.build([30], [["seal"]])]
    )
    everything = dict(view.search(["pump"], 10))
    assert view.search(["pump"], 10, allowed=np.array([20, 30])) == [(20, everything[20])]
    assert view.search(["pump"], 10, allowed=np.array([30, 20])) == [(20, everything[20])]
    for query in (["pump"], ["pump", "valve"], ["seal", "pump", "pump"]):
        assert view.search(query, 10, allowed=np.array([], dtype=np.int64)) == []  # a filter
        assert view.search(query, 10, allowed=[]) == []  # that matched no chunk


def test_a_common_term_can_outscore_the_rare_terms_documents_and_is_not_pruned():
    # "x": in 40 short documents, many times each; "y": in 3 long documents, once. The best
    # documents for ["x", "y"] hold only "x", so scoring the "y" documents alone is not enough.
    corpus = [["x"] * 20 + [f"u{i}"] for i in range(40)]
    corpus += [["y"] + [f"v{i}"] * 200 for i in range(3)]
    corpus += [[f"w{i}"] for i in range(57)]
    ids = list(range(100))
    view = SegmentedIndex(
        [Segment.build(ids[:50], corpus[:50]), Segment.build(ids[50:], corpus[50:])]
    )
    for query, k in ((["x", "y"], 2), (["y", "x", "x"], 5), (["x", "y"], 50)):
        ours = view.search(query, k)
        theirs = reference_top(ids, reference_scores(corpus, query), k)
        assert [d for d, _ in ours] == [d for d, _ in theirs]
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-9)
    assert view.search(["x", "y"], 2)[0][0] < 40  # an "x"-only document leads


def test_full_size_segments_hold_at_most_their_token_budget():
    assert plan_segments([3, 3, 3, 3], max_tokens=6) == [slice(0, 2), slice(2, 4)]
    assert plan_segments([2, 9, 1], max_tokens=4) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert plan_segments([], max_tokens=4) == [slice(0, 0)]
    with pytest.raises(ValueError):
        plan_segments([1], max_tokens=0)


def test_cached_terms_give_the_same_answers_and_stay_within_their_budget():
    corpus = zipf_corpus(4_000, vocab=500, mean_len=30, seed=2)
    segments = [
        Segment.build(range(i, i + 1_000), corpus[i : i + 1_000]) for i in range(0, 4_000, 1_000)
    ]
    budget = 100_000
    view = SegmentedIndex(segments, layout_cache_bytes=budget)
    queries = [*sample_queries(corpus, 30, seed=2), ["t0"], ["t0", "t1", "t0"]]
    first = [view.search(q, 20) for q in queries]
    assert [view.search(q, 20) for q in queries] == first  # now partly from the cache
    assert 0 < view._postings._terms.nbytes <= budget
    reference = rank_bm25.BM25Okapi(corpus)
    for query, hits in zip(queries, first, strict=True):
        expected = reference.get_scores(query)
        top = sorted(range(4_000), key=lambda i: (-expected[i], i))[:20]
        assert [d for d, _ in hits] == top


def test_contributions_from_pair_codes_are_the_per_posting_ones_to_the_bit(monkeypatch):
    corpus = zipf_corpus(3_000, vocab=300, mean_len=25, seed=5)
    corpus[7] = ["t3"] * 40 + corpus[7]  # a term frequency far above the others
    segments = [
        Segment.build(range(i, i + 1_000), corpus[i : i + 1_000]) for i in range(0, 3_000, 1_000)
    ]
    queries = [*sample_queries(corpus, 20, seed=5), ["t3"], ["t0", "t3", "t0"]]
    coded = SegmentedIndex(segments, deleted=[3, 1_500])
    for query in queries:
        coded.search(query, 10)
    assert all(s.pair_grid is not None for s in segments)
    assert coded._postings.layouts.nbytes > 0
    # Segments without a grid: every contribution computed per posting.
    monkeypatch.setattr("retrieval.bm25.segment.MAX_PAIR_CELLS", 0)
    ungridded = [Segment.build(s.doc_ids, _documents_of(s)) for s in segments]
    per_posting = SegmentedIndex(ungridded, deleted=[3, 1_500])
    assert all(s.pair_grid is None for s in ungridded)
    for query in queries:
        np.testing.assert_array_equal(coded.get_scores(query), per_posting.get_scores(query))
        assert coded.search(query, 10) == per_posting.search(query, 10)
    # A segment whose grid would be too large is computed per posting, beside coded ones.
    monkeypatch.setattr("retrieval.bm25.segment.MAX_PAIR_CELLS", 40 * 30)
    rebuilt = [Segment.build(s.doc_ids, _documents_of(s)) for s in segments]
    assert rebuilt[0].pair_grid is None and rebuilt[1].pair_grid is not None
    with pytest.raises(ValueError, match="no pair grid"):
        rebuilt[0].pair_codes(0)
    mixed = SegmentedIndex(rebuilt, deleted=[3, 1_500])
    reference = rank_bm25.BM25Okapi([d for i, d in enumerate(corpus) if i not in (3, 1_500)])
    for query in queries:
        np.testing.assert_array_equal(mixed.get_scores(query), per_posting.get_scores(query))
        np.testing.assert_allclose(mixed.get_scores(query), reference.get_scores(query), atol=1e-6)


@pytest.mark.parametrize("code_type", [np.uint16, np.int32])  # PairGrid.code_type
def test_the_compiled_loops_weigh_a_posting_as_numpy_gathers_and_multiplies_to_the_bit(code_type):
    """The compiled loops compute a contribution where they read it (``table[offset + code] *
    idf``, then add): the same bits as numpy's gather, multiply, then add, over two holders
    whose runs index the table at different offsets."""
    rng = np.random.default_rng(11)
    table = rng.random(70_000 if code_type is np.int32 else 8_000) * 2.5
    half = table.size // 2
    codes = rng.integers(0, half, 50_000).astype(code_type)
    positions = np.sort(rng.choice(200_000, codes.size, replace=False)).astype(np.int32)
    bounds, offsets = np.array([0, 20_000, codes.size]), np.array([0, half])
    idf = float(np.log1p(rng.random() * 40))
    cells = codes.astype(np.int64)
    cells[20_000:] += half
    weights = table.take(cells)
    weights *= idf
    start = rng.random(200_000)
    buffer, expected = start.copy(), start.copy()
    _compiled.scatter_add(buffer, positions, codes, bounds, offsets, table, idf)
    expected[positions] += weights
    np.testing.assert_array_equal(buffer, expected)
    # Looked up for some candidates by galloping: the same contributions.
    candidates = np.unique(np.concatenate([positions[::7], rng.choice(200_000, 500)]))
    found = np.zeros(200_000)
    _compiled.add_found(found, candidates, positions, codes, bounds, offsets, table, idf)
    wanted = np.zeros(200_000)
    at = np.isin(positions, candidates)
    wanted[positions[at]] = weights[at]
    np.testing.assert_array_equal(found, wanted)


def _documents_of(segment: Segment) -> list[list[str]]:
    """A segment's documents as token lists again (token order lost, which BM25 ignores)."""
    documents: list[list[str]] = [[] for _ in range(len(segment))]
    for term_id, term in enumerate(segment.terms):
        start, end = segment.offsets[term_id], segment.offsets[term_id + 1]
        for doc, tf in zip(segment.post_docs[start:end], segment.post_tf[start:end], strict=True):
            documents[doc].extend([term] * int(tf))
    return documents


def _layout(view: SegmentedIndex, term: str):
    """The layout of `term` in the cache `view` shares with the views that follow it."""
    return view._postings.layouts.get(view._composition.vocab[term])


def test_views_after_a_change_reuse_the_layouts_of_the_segments_they_share():
    corpus = zipf_corpus(2_000, vocab=200, mean_len=20, seed=9)
    segments = [Segment.build(range(1_000), corpus[:1_000])]
    segments.append(Segment.build(range(1_000, 2_000), corpus[1_000:]))
    first = SegmentedIndex(segments)
    first.get_scores(["t0", "t1"])
    t0, t1 = _layout(first, "t0"), _layout(first, "t1")
    assert len(t0.pieces) == 1 and t0.pieces[0].holders == 2
    # A new segment holding t0 only, and a deletion: a new average length and new idfs.
    segments.append(Segment.build([5_000], [["t0", "zz"]]))
    second = SegmentedIndex(segments, deleted=[4], previous=first)
    fresh = SegmentedIndex(segments, deleted=[4])
    for query in (["t0"], ["t1"], ["t0", "t1", "zz"]):
        np.testing.assert_array_equal(second.get_scores(query), fresh.get_scores(query))
        assert second.search(query, 10) == fresh.search(query, 10)
    assert _layout(second, "t1") is t1  # no segment of t1 changed
    grown = _layout(second, "t0")
    # The piece of the segments both views hold is the same object; the new segment's
    # posting is a piece of its own, after it.
    assert len(grown.pieces) == 2 and grown.pieces[0] is t0.pieces[0]
    assert grown.pieces[1].positions.tolist() == [2_000]
    # An older view still serving searches leaves the newer layout in place.
    first._postings._layout(first._composition.vocab["t0"], first._postings._holders("t0"))
    assert _layout(second, "t0") is grown


def test_a_term_keeps_few_pieces_as_segments_arrive_one_by_one():
    """Each change adds a small segment; the pieces a term is read in are joined as they
    grow (``_PIECE_RATIO``, ``_MAX_PIECES``), and every view scores as one composed afresh."""
    corpus = zipf_corpus(3_000, vocab=100, mean_len=20, seed=13)
    segments = [Segment.build(range(2_000), corpus[:2_000])]
    view = SegmentedIndex(segments)
    queries = [["t0"], ["t0", "t5", "t0"], ["t1", "t2", "t40"]]
    deleted: list[int] = []
    for start in range(2_000, 3_000, 20):
        segments.append(Segment.build(range(start, start + 20), corpus[start : start + 20]))
        deleted.append(start - 7)
        view = SegmentedIndex(segments, deleted=deleted, previous=view)
        fresh = SegmentedIndex(segments, deleted=deleted)
        for query in queries:
            assert view.search(query, 10) == fresh.search(query, 10)
    layout = _layout(view, "t0")
    assert len(layout.holders) == 51
    assert 2 <= len(layout.pieces) <= layouts.MAX_PIECES
    sizes = [piece.size for piece in layout.pieces]
    assert all(a > layouts.PIECE_RATIO * b for a, b in itertools.pairwise(sizes))


def test_the_layout_cache_stays_within_its_budget():
    corpus = zipf_corpus(3_000, vocab=400, mean_len=30, seed=4)
    segments = [Segment.build(range(0, 1_500), corpus[:1_500])]
    segments.append(Segment.build(range(1_500, 3_000), corpus[1_500:]))
    budget = 60_000
    view = SegmentedIndex(segments, layout_cache_bytes=budget)
    for query in sample_queries(corpus, 40, seed=4):
        view.search(query, 10)
    assert 0 < view._postings.layouts.nbytes <= budget


def test_segment_payload_refuses_other_formats():
    payload = Segment.build([1], [["a"]]).to_bytes()
    with pytest.raises(ValueError, match="format"):
        Segment.from_bytes(payload[:8] + b"\x09\x00" + payload[10:])
    with pytest.raises(ValueError, match="not a BM25 segment payload"):
        Segment.from_bytes(b"BM25IDX\x00" + payload[8:])  # another magic
    with pytest.raises(ValueError, match="not a BM25 segment payload"):
        Segment.from_bytes(b"BM25")  # shorter than a header


# --------------------------------------------------------------------------- stateful

documents = st.lists(st.sampled_from(TOKENS), max_size=12)


class SegmentedIndexMachine(RuleBasedStateMachine):
    """Adds segments, deletes documents and merges segments in any order; after every step
    every score of the composed view equals rank_bm25's over the live documents."""

    def __init__(self) -> None:
        super().__init__()
        self.segments: list[Segment] = []
        self.corpus: dict[int, list[str]] = {}  # every document ever added, by id
        self.deleted: set[int] = set()
        self.next_id = 1
        self.view: SegmentedIndex | None = None  # the view of the step before

    @rule(docs=st.lists(documents, max_size=6))
    def add_segment(self, docs):
        ids = list(range(self.next_id, self.next_id + len(docs)))
        self.next_id += len(docs)
        self.segments.append(Segment.build(ids, docs))
        self.corpus.update(zip(ids, docs, strict=True))

    @precondition(lambda self: self.corpus)
    @rule(data=st.data())
    def delete(self, data):
        ids = sorted(self.corpus)
        self.deleted |= set(data.draw(st.lists(st.sampled_from(ids), max_size=3)))

    @precondition(lambda self: len(self.segments) >= 2)
    @rule(data=st.data())
    def merge(self, data):
        n = len(self.segments)
        start = data.draw(st.integers(0, n - 2))
        end = data.draw(st.integers(start + 2, n))
        deleted = np.array(sorted(self.deleted))
        merged = Segment.merge(self.segments[start:end], [deleted] * (end - start))
        self.segments[start:end] = [merged]

    @invariant()
    def scores_are_rank_bm25_over_the_live_documents(self):
        view = SegmentedIndex(self.segments, deleted=sorted(self.deleted))
        # The view before may be serving searches while its successor is composed: nothing
        # it answers changes (its vocabulary's ids, its terms, its scores).
        serving = self.view
        if serving is not None:
            said = (len(serving._composition.vocab), set(serving.terms()), serving.doc_ids.tolist())
            scored = [serving.get_scores(query) for query in QUERIES]
        # A view composed on the one before (as each process does after a change) scores the
        # same, whether it could reuse that one's vocabulary (segments only added) or not.
        # It computes every term from layouts and pair codes, as common terms are, shared
        # along this chain of views (adds, deletions and merges in between).
        followed = SegmentedIndex(self.segments, deleted=sorted(self.deleted), previous=self.view)
        # ... and so does one composed from the dead frequencies the view before recorded
        # (as a search process composes a stored manifest's version): with the counts for
        # segments whose deletions did not change since, a count for the others.
        recorded = None
        if self.view is not None:
            segments, dead = self.view.segments, self.view.dead_frequencies()
            known = {id(s): d for s, d in zip(segments, dead, strict=True)}
            before = dict(
                zip(map(id, segments), self.view._composition.segment_deleted, strict=True)
            )
            recorded = [
                known[id(s)]
                if id(s) in known
                and np.array_equal(before[id(s)], followed._composition.segment_deleted[i])
                else None
                for i, s in enumerate(self.segments)
            ]
        from_record = SegmentedIndex(
            self.segments, deleted=sorted(self.deleted), dead_frequencies=recorded
        )
        exact = SegmentedIndex(
            self.segments, deleted=sorted(self.deleted), dead_frequencies=view.dead_frequencies()
        )
        self.view = followed
        if serving is not None:
            assert (
                len(serving._composition.vocab),
                set(serving.terms()),
                serving.doc_ids.tolist(),
            ) == said
            for query, scores in zip(QUERIES, scored, strict=True):
                np.testing.assert_array_equal(serving.get_scores(query), scores)
        for other in (followed, from_record, exact):
            assert other.doc_ids.tolist() == view.doc_ids.tolist()
            for query in QUERIES:
                np.testing.assert_array_equal(other.get_scores(query), view.get_scores(query))
                assert other.search(query, 5) == view.search(query, 5)
            assert set(other.terms()) == set(view.terms())
            for term in TOKENS:
                assert other.document_frequency(term) == view.document_frequency(term)
        live_ids = view.doc_ids.tolist()
        assert sorted(live_ids) == sorted(set(self.corpus) - self.deleted)
        live = [self.corpus[i] for i in live_ids]
        half = sorted(self.corpus)[::2]
        for query in QUERIES:
            scores = view.get_scores(query)
            np.testing.assert_allclose(scores, reference_scores(live, query), rtol=0, atol=1e-6)
            for k in (1, 5):
                for allowed in (None, half):
                    ranked = reference_top(
                        live_ids, scores, k, None if allowed is None else set(allowed)
                    )
                    found = view.search(query, k, None if allowed is None else np.array(allowed))
                    assert found == ranked
        if live and any(live):
            reference = rank_bm25.BM25Okapi(live)
            assert set(view.terms()) == set(reference.idf)  # the floored idfs
            for term in view.terms():
                assert view.idf(term) == pytest.approx(reference.idf[term], abs=1e-9)


SegmentedIndexMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=12, deadline=None
)
test_segmented_index_stays_exact = SegmentedIndexMachine.TestCase


def _several_common_terms():
    """8k documents in 4 segments, 1 in 17 deleted, and queries mixing common and rare terms
    (sampled; pairs of common terms with a rare one; repeated tokens): the view, one segment of
    the live documents, rank_bm25 over them, the live ids, the queries."""
    corpus = zipf_corpus(8_000, vocab=3_000, mean_len=30, seed=11)
    ids = list(range(8_000))
    segments = [
        Segment.build(ids[i : i + 2_000], corpus[i : i + 2_000]) for i in range(0, 8_000, 2_000)
    ]
    deleted = list(range(3, 8_000, 17))
    live = sorted(set(ids) - set(deleted))
    common = ["t0", "t1", "t2", "t3", "t5", "t8"]
    queries = sample_queries(corpus, 60, seed=11)
    queries += [[a, b, q[-1]] for a, b in itertools.pairwise(common) for q in queries[:8]]
    queries += [[a, q[0], a] for a in common[:3] for q in queries[:6]]  # repeated tokens
    view = SegmentedIndex(segments, deleted=deleted)
    documents = [corpus[i] for i in live]
    single = SegmentedIndex([Segment.build(live, documents)])
    return view, single, rank_bm25.BM25Okapi(documents), live, queries


class _Counting:
    """The compiled loops' module, counting the calls of each loop."""

    def __init__(self, compiled):
        self.compiled, self.calls = compiled, collections.Counter()

    def __getattr__(self, name):
        loop = getattr(self.compiled, name)

        def counted(*args):
            self.calls[name] += 1
            return loop(*args)

        return counted


def test_the_compiled_loops_find_the_exact_top_k_whichever_way_they_go(monkeypatch):
    """Against one segment of the live documents (the same sums: ids and scores bit for bit)
    and rank_bm25 (scores within 1e-9), with deletions and `allowed`, top k of 1, 10 and 30;
    each way the loops can go is taken at least once: one term alone, every posting summed (no
    MaxScore split), MaxScore given up after its guess, after theta, or for too many
    candidates, and MaxScore pruned."""
    view, single, reference, live, queries = _several_common_terms()
    queries += [["t0"], ["t0", "t1", "t2", "t3"]]  # one term alone; four common ones
    counting = _Counting(_compiled)
    monkeypatch.setattr(kernels, "get", lambda: counting)
    seen = collections.Counter()
    allowed = np.array(live[::3])
    for query in queries:
        scores = reference.get_scores(query)
        for k in (1, 10, 30):
            for only in (None, allowed):
                expected = single.search(query, k, only)
                counting.calls.clear()
                found = view.search(query, k, only)
                assert found == expected, (query, k)
                # rank_bm25's scores may differ in the last bits (its idfs are its own), so a
                # tie there may break the other way: scores only.
                theirs = reference_top(live, scores, k, None if only is None else set(only))
                assert [s for _, s in found] == pytest.approx([s for _, s in theirs], abs=1e-9)
                calls = counting.calls
                if calls["best_of"] and not calls["add_found"]:
                    seen["one term"] += 1
                elif calls["add_found"]:
                    seen["pruned"] += 1
                elif calls["reaching"]:
                    seen["too many candidates"] += 1
                elif calls["collect_recording"]:
                    seen["theta too low"] += 1
                elif calls["largest"]:
                    seen["guess too low"] += 1
                else:
                    seen["summed"] += 1
    ways = {"one term", "summed", "guess too low", "theta too low", "too many candidates"}
    assert ways | {"pruned"} <= set(seen), seen


@pytest.mark.parametrize("ascending", [True, False])
def test_segment_holds_is_membership_of_its_ids(ascending):
    """``Segment.holds`` (a view's deletions per segment, after every change) answers as
    ``np.isin`` does: by binary search over the ids, which builds and merges store ascending,
    and by ``np.isin`` for a segment whose ids do not ascend."""
    rng = np.random.default_rng(3)
    ids = rng.choice(10_000, 400, replace=False).astype(np.int64)
    segment = Segment.build(ids.tolist(), [["w"]] * ids.size, ids.tolist())
    if not ascending:
        segment = copy.copy(segment)
        segment.doc_ids = segment.doc_ids[::-1].copy()
    asked = np.unique(np.concatenate([rng.choice(ids, 30), rng.choice(12_000, 30)]))
    asked = np.concatenate([[-5], asked, [10**12]])  # below and above every id
    assert segment._ids_ascending is ascending  # both branches
    assert segment.holds(asked).tolist() == np.isin(segment.doc_ids, asked).tolist()
    assert 0 < segment.holds(asked).sum() < len(segment)
    assert not segment.holds(np.empty(0, np.int64)).any()
