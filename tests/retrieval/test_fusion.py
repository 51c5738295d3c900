"""Weighted RRF: hand-computed numbers, weight-0 legs, deterministic ties, and agreement with
the textbook implementation on random inputs."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.fusion import naive_weighted_rrf
from retrieval.fusion import weighted_rrf


def test_hand_computed_scores_and_ranks():
    fused = weighted_rrf({"vector": [7, 3, 9], "keyword": [3, 5]}, {"vector": 0.6, "keyword": 0.4})
    top = fused.top()
    expected = {
        3: 0.6 / 62 + 0.4 / 61,
        7: 0.6 / 61,
        9: 0.6 / 63,
        5: 0.4 / 62,
    }
    assert [f.id for f in top] == [3, 7, 9, 5]
    for item in top:
        assert item.score == pytest.approx(expected[item.id], abs=1e-15)
    assert top[0].ranks == {"vector": 2, "keyword": 1}
    assert top[3].ranks == {"keyword": 2}


def test_a_leg_of_weight_zero_adds_no_documents():
    fused = weighted_rrf({"vector": [1, 2], "keyword": [3, 4]}, {"vector": 1.0, "keyword": 0.0})
    assert [f.id for f in fused.top()] == [1, 2]


def test_ties_break_by_ascending_id():
    fused = weighted_rrf({"a": [20, 10], "b": [10, 20]}, {"a": 1.0, "b": 1.0})
    assert [f.id for f in fused.top()] == [10, 20]


def test_per_item_weights_let_each_knowledge_base_keep_its_own():
    fused = weighted_rrf({"vector": [1, 2]}, {"vector": [0.1, 1.0]})
    assert [f.id for f in fused.top()] == [2, 1]


def test_k_changes_the_curve():
    flat = weighted_rrf({"a": [1, 2]}, {"a": 1.0}, k=1000).top()
    steep = weighted_rrf({"a": [1, 2]}, {"a": 1.0}, k=0).top()
    assert flat[0].score / flat[1].score < steep[0].score / steep[1].score
    with pytest.raises(ValueError):
        weighted_rrf({"a": [1]}, {"a": 1.0}, k=-1)


def test_empty_inputs():
    assert len(weighted_rrf({"vector": [], "keyword": []}, {"vector": 1, "keyword": 1})) == 0


rankings = st.lists(st.integers(0, 60), unique=True, max_size=40)


@given(rankings, rankings, st.floats(0, 2), st.floats(0, 2))
def test_agrees_with_the_textbook_implementation(a, b, wa, wb):
    weights = {"a": wa, "b": wb}
    fused = weighted_rrf({"a": a, "b": b}, weights)
    reference = [
        (item, score)
        for item, score in naive_weighted_rrf(
            {leg: ids for leg, ids in {"a": a, "b": b}.items() if weights[leg] > 0}, weights
        )
    ]
    assert [int(i) for i in fused.ids] == [item for item, _ in reference]
    assert list(fused.scores) == pytest.approx([s for _, s in reference], abs=1e-12)
