"""The fallback policy between the legs: which leg runs instead of which, and the trace's
``fallbacks`` notes, row by row of ``retrieval.search.legs.FALLBACKS``; then the same rows
through RAGService with a knowledge base without an embedder and BM25 made unavailable."""

import sys

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.bm25store import availability
from retrieval.search import RAGService
from retrieval.search.legs import FALLBACKS, Outcome, run_with_fallbacks
from retrieval.search.options import wanted_legs
from retrieval.search.types import Leg, SearchMode
from tests.factories import add_document

V, K = Leg.VECTOR, Leg.KEYWORD


def run(
    wanted: set[Leg], failing: dict[Leg, str], first: Leg = K
) -> tuple[list[str], list[tuple[Leg, bool]]]:
    """The notes, and every attempt as (leg, run instead of the other); ``first`` as a search
    runs them (RAGService._answer)."""
    attempts: list[tuple[Leg, bool]] = []

    def attempt(leg: Leg, instead: bool) -> str | None:
        attempts.append((leg, instead))
        return failing.get(leg)

    return run_with_fallbacks(wanted, attempt, first=first), attempts


# A row of FALLBACKS: (wanted legs, why each failing leg fails, notes, attempts in the order
# made: the keyword leg first when both are wanted, since the vector leg follows its view).
ROWS = {
    (Outcome.FAILED, Outcome.RAN): (
        {V, K},
        {V: "no embedder"},
        ["no embedder -> keyword only"],
        [(K, False), (V, False)],
    ),
    (Outcome.FAILED, Outcome.FAILED): (
        {V, K},
        {V: "embedding error", K: "BM25 unavailable"},
        ["embedding error -> keyword only", "BM25 unavailable; no leg could run"],
        [(K, False), (V, False)],
    ),
    (Outcome.FAILED, Outcome.RAN_INSTEAD): (
        {V},
        {V: "no embedder"},
        ["no embedder -> keyword"],
        [(V, False), (K, True)],
    ),
    (Outcome.FAILED, Outcome.FAILED_INSTEAD): (
        {V},
        {V: "no vectors yet", K: "BM25 unavailable"},
        ["no vectors yet -> keyword", "BM25 unavailable; no leg could run"],
        [(V, False), (K, True)],
    ),
    (Outcome.RAN, Outcome.FAILED): (
        {V, K},
        {K: "BM25 unavailable"},
        ["BM25 unavailable -> vector only"],
        [(K, False), (V, False)],
    ),
    (Outcome.RAN_INSTEAD, Outcome.FAILED): (
        {K},
        {K: "BM25 unavailable"},
        ["BM25 unavailable -> vector"],
        [(K, False), (V, True)],
    ),
    (Outcome.FAILED_INSTEAD, Outcome.FAILED): (
        {K},
        {K: "BM25 unavailable", V: "no embedder"},
        ["BM25 unavailable; no embedder"],
        [(K, False), (V, True)],
    ),
}


@pytest.mark.parametrize(
    ("wanted", "failing", "notes", "attempts"),
    list(ROWS.values()),
    ids=[" / ".join(row) for row in ROWS],
)
def test_each_row_of_the_table(wanted, failing, notes, attempts):
    assert run(wanted, failing) == (notes, attempts)


def test_every_row_of_the_table_is_tested():
    assert set(FALLBACKS) == set(ROWS)


@pytest.mark.parametrize(
    ("wanted", "attempts"),
    [
        ({V, K}, [(K, False), (V, False)]),
        ({V}, [(V, False)]),
        ({K}, [(K, False)]),
        (set(), []),
    ],
)
def test_legs_that_run_note_nothing_and_nothing_runs_instead(wanted, attempts):
    assert run(wanted, {}) == ([], attempts)


def test_the_caller_orders_the_legs_and_the_notes_do_not_depend_on_the_order():
    assert run({V, K}, {}, first=V) == ([], [(V, False), (K, False)])
    for wanted, failing, notes, _ in ROWS.values():
        assert run(wanted, failing, first=V)[0] == notes


@pytest.mark.parametrize(
    ("mode", "weights", "wanted"),
    [
        (SearchMode.VECTOR, {V: 0.0, K: 1.0}, {V}),
        (SearchMode.KEYWORD, {V: 1.0, K: 0.0}, {K}),
        (SearchMode.HYBRID, {V: 0.6, K: 0.4}, {V, K}),
        (SearchMode.AUTO, {V: 0.0, K: 0.4}, {K}),
        (SearchMode.AUTO, {V: 0.6, K: 0.0}, {V}),
    ],
)
def test_the_mode_or_else_the_weights_decide_the_wanted_legs(mode, weights, wanted):
    assert wanted_legs(mode, weights) == wanted


# --------------------------------------------------------------------------- through RAGService


@pytest.fixture
def plain(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Plain", embedding=EmbeddingConfig(provider="none")
    )
    add_document(kb, "pumps.md", "# Pumps\n\nThe P-100 pump.")
    return kb


@pytest.fixture
def no_bm25(monkeypatch):
    monkeypatch.setitem(sys.modules, "rank_bm25", None)  # as if not installed
    monkeypatch.setattr(availability, "_available", None)


@pytest.mark.django_db
def test_keyword_failing_after_the_vector_leg_ran_leaves_vector_only(manuals, no_bm25):
    trace = RAGService(manuals.tenant).search("pump seal", manuals.pk).trace
    assert trace.fallbacks == ["BM25 unavailable -> vector only"]
    assert trace.retrieval_path == ["vector"] and trace.mode_used == "vector"
    assert trace.weights == {"vector": 0.6, "keyword": 0.4}  # as settled: keyword never ran


@pytest.mark.django_db
def test_keyword_failing_alone_runs_the_vector_leg_instead(manuals, no_bm25):
    result = RAGService(manuals.tenant).search("pump seal", manuals.pk, vector_weight=0)
    assert result.trace.fallbacks == ["BM25 unavailable -> vector"]
    assert result.trace.weights == {"vector": 1.0} and result.hits
    assert result.trace.knowledge_bases[0].weights == {"vector": 0.0, "keyword": 0.4}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mode", "fallbacks", "weights"),
    [
        (
            "auto",
            ["no embedder -> keyword only", "BM25 unavailable; no leg could run"],
            {"vector": 0.6, "keyword": 0.4},
        ),
        (
            "vector",
            ["no embedder -> keyword", "BM25 unavailable; no leg could run"],
            {"keyword": 1.0},
        ),
        ("keyword", ["BM25 unavailable; no embedder"], {"vector": 1.0}),
    ],
)
def test_when_no_leg_can_run_the_search_answers_nothing_and_says_why(
    plain, no_bm25, mode, fallbacks, weights
):
    result = RAGService(plain.tenant).search("pump", plain.pk, mode=mode)
    assert result.hits == []
    assert result.trace.fallbacks == fallbacks and result.trace.weights == weights
    assert result.trace.retrieval_path == [] and result.trace.mode_used == "none"
    assert result.trace.to_dict()["knowledge_bases"][0]["mode_used"] == "none"


@pytest.mark.django_db
def test_each_knowledge_base_falls_back_on_its_own(manuals, plain, no_bm25):
    result = RAGService(manuals.tenant).search_multiple_knowledge_bases(
        "pump", [manuals.pk, plain.pk]
    )
    assert result.trace.fallbacks == [
        f"knowledge base {manuals.pk}: BM25 unavailable -> vector only",
        f"knowledge base {plain.pk}: no embedder -> keyword only",
        f"knowledge base {plain.pk}: BM25 unavailable; no leg could run",
    ]
    per_kb = {kb.knowledge_base_id: kb for kb in result.trace.knowledge_bases}
    assert per_kb[manuals.pk].fallbacks == ["BM25 unavailable -> vector only"]
    assert per_kb[plain.pk].retrieval_path == [] and per_kb[plain.pk].hits == 0
    assert {hit.knowledge_base_id for hit in result.hits} == {manuals.pk}
