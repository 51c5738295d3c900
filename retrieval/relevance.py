"""Absolute relevance of a hit: a number in [0, 1] that means the same across queries.

The fused score orders hits but cannot say whether any of them answers the query: it is built
from ranks, and a question the knowledge base cannot answer still has a first hit. Relevance is
estimated from what each hit already carries, without labels:

- ``bm25_fraction``: its BM25 score over what the query's terms could reach at most (each
  known term matched with saturated frequency: ``sum idf(t) * (k1 + 1)``), so 1 when it holds
  every term of the query heavily and ~0 when it holds only common ones;
- ``bm25_evidence``: its BM25 score over the most one term can score in this knowledge base
  (a term found in one chunk, saturated): how many rare terms' worth of evidence it has;
- ``query_known``: the share of the query's idf that the knowledge base knows (a term it has
  never seen counts with the idf of a term in no chunk): a query about something else is
  mostly words the knowledge base lacks;
- ``bm25_lead``: how far its BM25 score stands above the crowd, ``1 - crowd / score`` where
  the crowd is the score at rank ``CROWD_RANK`` of the leg (0 when fewer were found): an
  answer tends to stand out, while a question without one finds many near-equal look-alikes;
- ``cosine``: the vector leg's similarity (the embedding model's own scale), and
  ``cosine_lead``, its margin over the vector leg's crowd the same way.

A logistic model per leg turns that leg's signals into a probability; a hybrid search weighs
the two legs' probabilities by the fusion weights it ran with (a leg that did not find the hit
judges it from zeros, so a hit both legs found ranks above one only one leg found). Weighing
the legs rather than fitting one model over both signals keeps the vector leg's judgement: the
pseudo-queries below are cut from the text, so the keyword signals explain them almost alone
and a joint fit would give the cosine no say, while on people's paraphrased questions it
matters. Each knowledge base fits its own models during calibration
(``retrieval.calibration``) on pseudo-queries cut from its chunks: the chunk a query was cut
from is a positive, chunks of other documents are negatives, and so are the best hits of the
same query with its source document excluded (a question whose answer is not in the knowledge
base) and of queries cut from unrelated text. The regression (classes weighted equally) orders
hits; its intercept is then moved so that ``ANSWERS_KEPT`` (95%) of the answers score at least
0.5: a threshold of 0.5 keeps nearly every answer and drops what looks less like an answer than
almost all answers do. Higher thresholds drop more questions without an answer and lose more
answers (docs/performance.md has the measured curve). Until a knowledge base is calibrated (or
when it is too small to be) a leg is judged by its plain signal: ``bm25_fraction`` or the
cosine.

Pure: numpy only, no Django.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

SIGNALS = (
    "bm25_fraction",
    "bm25_evidence",
    "bm25_lead",
    "query_known",
    "cosine",
    "cosine_lead",
)
KEYWORD_SIGNALS = ("bm25_fraction", "bm25_lead", "query_known")
VECTOR_SIGNALS = ("cosine", "cosine_lead")
# The signals each leg's model uses. ``bm25_evidence`` is reported but not used: it grows with
# the query's length, which differs between pseudo-queries and people's questions.
LEG_SIGNALS: dict[str, tuple[str, ...]] = {"keyword": KEYWORD_SIGNALS, "vector": VECTOR_SIGNALS}
CROWD_RANK = 10
# Relevance 0.5 is where this share of the pseudo-questions' answers lie above (see ``fit``).
ANSWERS_KEPT = 0.95
L2 = 1.0  # ridge penalty on the weights (not the intercept): a few hundred examples per fit


@dataclass(frozen=True)
class Reach:
    """What a keyword query can score in one index: ``best``, the sum over its known terms of
    ``max(idf, 0) * (k1 + 1)``; ``ceiling``, the most one term can score (df = 1); ``known``,
    the share of the query's idf the index knows (an unknown term weighs the idf of df = 0)."""

    best: float
    ceiling: float
    known: float = 1.0

    @classmethod
    def of(cls, idfs: Iterable[float | None], k1: float, documents: int) -> Reach:
        """From the idf of each query token (None: not in the index) and the index's size."""
        values = list(idfs)
        known = sum(max(idf, 0.0) for idf in values if idf is not None)
        unknown = sum(1 for idf in values if idf is None) * math.log((documents + 0.5) / 0.5)
        rare = math.log((documents - 1 + 0.5) / 1.5) if documents > 1 else 0.0
        return cls(
            best=known * (k1 + 1),
            ceiling=max(rare, 1e-9) * (k1 + 1),
            known=known / (known + unknown) if known + unknown > 0 else 0.0,
        )


def signals(
    *,
    bm25_score: float | None,
    cosine: float | None,
    reach: Reach | None,
    crowd: tuple[float, float] = (0.0, 0.0),
) -> dict[str, float]:
    """A hit's signals; a leg that did not find the hit gives 0 for its signals. ``crowd``:
    the (BM25, cosine) scores at ``CROWD_RANK`` of each leg (see ``crowd_of``)."""
    fraction = evidence = lead = cosine_lead = 0.0
    if bm25_score is not None and bm25_score > 0:
        lead = min(max(1.0 - crowd[0] / bm25_score, 0.0), 1.0)
    if cosine is not None:
        cosine_lead = max(float(cosine) - crowd[1], 0.0)
    known = reach.known if reach is not None else 0.0
    if bm25_score is not None and reach is not None and reach.best > 0:
        fraction = min(max(bm25_score / reach.best, 0.0), 1.0)
        evidence = max(bm25_score, 0.0) / reach.ceiling
    return {
        "bm25_fraction": fraction,
        "bm25_evidence": evidence,
        "bm25_lead": lead,
        "query_known": known,
        "cosine": 0.0 if cosine is None else float(cosine),
        "cosine_lead": cosine_lead,
    }


def crowd_of(found: Sequence[tuple[int, float]]) -> float:
    """The score at ``CROWD_RANK`` of a leg's candidates, best first (the last one when fewer
    were fetched, 0 when none)."""
    if not found:
        return 0.0
    return float(found[min(CROWD_RANK, len(found)) - 1][1])


@dataclass(frozen=True)
class Logistic:
    """``sigmoid(intercept + sum(weights[name] * signal[name]))``."""

    intercept: float
    weights: dict[str, float]

    def predict(self, values: Mapping[str, float]) -> float:
        z = self.intercept + sum(w * values[name] for name, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(min(z, 60.0), -60.0)))

    def to_dict(self) -> dict:
        return {"intercept": round(self.intercept, 6), "weights": dict(self.weights)}

    @classmethod
    def from_dict(cls, value: Mapping) -> Logistic:
        return cls(float(value["intercept"]), {k: float(w) for k, w in value["weights"].items()})


@dataclass(frozen=True)
class RelevanceModel:
    """One logistic model per leg (``"keyword"``, ``"vector"``); a leg without one is judged
    by ``default_relevance``."""

    models: dict[str, Logistic] = field(default_factory=dict)

    def leg(self, leg: str, values: Mapping[str, float]) -> float:
        """The relevance ``leg``'s signals in ``values`` give."""
        model = self.models.get(leg)
        return model.predict(values) if model is not None else default_relevance(leg, values)

    def relevance(self, weights: Mapping[str, float], values: Mapping[str, float]) -> float:
        """The legs' relevances weighed by ``weights`` (leg -> fusion weight, legs that ran)."""
        total = sum(w for w in weights.values() if w > 0)
        if total <= 0:
            return 0.0
        return sum(w * self.leg(leg, values) for leg, w in weights.items() if w > 0) / total

    def to_dict(self) -> dict:
        return {legs: model.to_dict() for legs, model in self.models.items()}

    @classmethod
    def from_dict(cls, value: Mapping | None) -> RelevanceModel:
        """From a calibration's stored ``relevance``; anything unreadable counts as absent."""
        models = {}
        for legs, stored in (value or {}).items():
            try:
                if legs in LEG_SIGNALS:
                    models[legs] = Logistic.from_dict(stored)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return cls(models)


DEFAULT = RelevanceModel()


def default_relevance(leg: str, values: Mapping[str, float]) -> float:
    """Uncalibrated: ``bm25_fraction`` for the keyword leg, the cosine (at least 0) for the
    vector leg."""
    if leg == "keyword":
        return values["bm25_fraction"]
    return min(max(values["cosine"], 0.0), 1.0)


def fit(legs: str, examples: Sequence[tuple[Mapping[str, float], bool, float]]) -> Logistic | None:
    """A ridge logistic regression (Newton's method) of the label on ``legs``' signals, each
    example (signals, label, weight) counting by its weight, the two classes' weights scaled to
    equal totals; then anchored: the intercept moves so that ``ANSWERS_KEPT`` of the positives
    (by weight) score at least 0.5. The regression orders hits; the anchor says where a
    threshold of 0.5 cuts: below nearly every answer, because dropping an answer from an LLM's
    context costs more than keeping a look-alike, and people's questions match their answers
    less well than pseudo-questions do. None without an example of each class."""
    names = LEG_SIGNALS[legs]
    labels = np.array([bool(label) for _, label, _ in examples], dtype=float)
    weight = np.array([w for _, _, w in examples], dtype=float)
    positives = weight[labels == 1].sum()
    negatives = weight[labels == 0].sum()
    if positives <= 0 or negatives <= 0:
        return None
    x = np.array([[1.0, *(values[name] for name in names)] for values, _, _ in examples])
    weight = weight * np.where(labels == 1, 0.5 / positives, 0.5 / negatives) * labels.size
    penalty = np.full(x.shape[1], L2)
    penalty[0] = 0.0
    beta = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -60, 60)))
        gradient = x.T @ (weight * (p - labels)) + penalty * beta
        hessian = (x * (weight * p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        hessian[0, 0] += 1e-9
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    z = x[labels == 1] @ beta
    order = np.argsort(z)
    below = np.cumsum(weight[labels == 1][order]) / weight[labels == 1].sum()
    beta[0] -= z[order][np.searchsorted(below, 1 - ANSWERS_KEPT)]
    return Logistic(
        float(beta[0]), {name: round(float(b), 6) for name, b in zip(names, beta[1:], strict=True)}
    )
