"""The retry ladder's fuzzy-title rung (retrieval.search.ladder.fuzzy_titles): the same answers
as the Jaccard similarity of trigram sets computed title by title, whatever the titles."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.search.ladder import _TitleGrams, fuzzy_titles, jaccard, trigrams

WORDS = ["pump", "Pümpe", "PUMP", "传感器", "温度", "valve", "Schrödinger", "TH-01", "a", " ", ""]
text = st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join)


def one_by_one(query, titles, minimum):
    wanted = trigrams(query)
    scored = [(doc_id, jaccard(wanted, trigrams(title))) for doc_id, title in titles]
    return sorted(
        [(doc_id, score) for doc_id, score in scored if score >= minimum],
        key=lambda pair: (-pair[1], pair[0]),
    )


@settings(max_examples=300, deadline=None)
@given(
    query=text,
    titles=st.dictionaries(st.integers(1, 40), text, max_size=25),
    renamed=st.dictionaries(st.integers(1, 40), text, max_size=5),
    minimum=st.sampled_from([0.3, 0.0, 0.6, 1.0]),
)
def test_every_title_at_once_scores_as_one_by_one(query, titles, renamed, minimum):
    rows = list(titles.items())
    assert fuzzy_titles(query, rows, minimum) == one_by_one(query, rows, minimum)
    # Titles changed since (the per-process trigram ids are kept by document): still equal.
    rows = list((titles | renamed).items())
    assert fuzzy_titles(query, rows, minimum) == one_by_one(query, rows, minimum)


def test_the_kept_trigrams_start_afresh_past_their_limit():
    grams = _TitleGrams(limit=10)
    ids, owners, sizes, known = grams.of([(1, "pump seal"), (2, "valve")], trigrams("pump"))
    assert ids.size == sizes.sum()
    assert sizes.tolist() == [len(trigrams("pump seal")), len(trigrams("valve"))]
    assert owners.tolist() == [0] * sizes[0] + [1] * sizes[1]
    assert set(known.tolist()) < set(ids.tolist()) and known.size == len(trigrams("pump"))
    assert len(grams._vocab) > 10
    *_, known = grams.of([(3, "gear")], trigrams("pump"))
    assert set(grams._titles) == {3}  # the earlier titles' entries were dropped
    assert known.size == 0
