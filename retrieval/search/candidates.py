"""Every plan's legs as one fused order of candidates.

Each leg is ranked across the knowledge bases searched (by cosine similarity, by BM25 score;
ties by chunk id) and fused by weighted RRF (``retrieval.fusion``), every chunk weighted by its
own knowledge base. One knowledge base is the same computation with a single member.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.fusion import Fused, FusionResult, weighted_rrf
from retrieval.search.options import Plan
from retrieval.search.types import Leg


@dataclass(frozen=True)
class Candidates:
    fused: FusionResult
    rankings: dict[Leg, list[int]]  # each leg's chunk ids, best first
    scores: dict[Leg, dict[int, float]]  # each leg's similarity or BM25 score by chunk id
    best: float  # the fused score of a chunk first in every leg that ran for its knowledge base

    def __len__(self) -> int:
        return len(self.fused)

    def head(self, start: int, stop: int) -> list[Fused]:
        """Fused candidates ``start`` to ``stop`` (best first); only these are built."""
        return self.fused.top(stop)[start:]


def fuse(plans: list[Plan], k: int) -> Candidates:
    owner: dict[int, Plan] = {}
    ranked: dict[Leg, list[tuple[float, int]]] = {leg: [] for leg in Leg}
    for plan in plans:
        for leg, hits in plan.found.items():
            for chunk_id, score in hits:
                ranked[leg].append((score, chunk_id))
                owner[chunk_id] = plan
    for pairs in ranked.values():
        pairs.sort(key=lambda pair: (-pair[0], pair[1]))
    rankings = {leg: [chunk_id for _, chunk_id in pairs] for leg, pairs in ranked.items()}
    weights = {
        leg: [owner[chunk_id].weights.get(leg, 0.0) for chunk_id in ids]
        for leg, ids in rankings.items()
    }
    best = max(
        (sum(w for leg, w in p.weights.items() if leg in p.run) / (k + 1) for p in plans),
        default=0.0,
    )
    return Candidates(
        fused=weighted_rrf(rankings, weights, k=k),
        rankings=rankings,
        scores={leg: {c: s for s, c in pairs} for leg, pairs in ranked.items()},
        best=best or 1.0,
    )
