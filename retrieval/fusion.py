"""Weighted Reciprocal Rank Fusion, a pure function.

``score(d) = sum over legs of w_leg / (k + rank_leg(d))`` with 1-based ranks; a leg that did not
return ``d`` adds 0, and a leg of weight 0 adds no documents at all (the caller does not even run
it). Ties break by ascending chunk id, so the same inputs always give the same order.

Vectorised with numpy rather than a dict and a sort, since every search fuses every candidate
of both legs (``manage.py bench fusion``; the figures are in docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_K = 60


@dataclass(frozen=True)
class Fused:
    id: int
    score: float
    ranks: dict[str, int]


@dataclass(frozen=True)
class FusionResult:
    """All fused ids, best first; ``ranks[leg][i]`` is the 1-based rank of ``ids[i]`` in that
    leg, 0 where the leg missed it."""

    ids: np.ndarray
    scores: np.ndarray
    ranks: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.ids.size)

    def top(self, n: int | None = None) -> list[Fused]:
        end = len(self) if n is None else min(n, len(self))
        legs = list(self.ranks.items())
        return [
            Fused(
                int(self.ids[i]),
                float(self.scores[i]),
                {leg: int(r[i]) for leg, r in legs if r[i]},
            )
            for i in range(end)
        ]


def weighted_rrf(
    rankings: Mapping[str, Sequence[int]],
    weights: Mapping[str, float | Sequence[float]],
    k: int = DEFAULT_K,
) -> FusionResult:
    """Fuse ranked id lists (best first, no duplicates within a list) by weighted RRF.

    A leg's weight is one number, or one per id of its ranking: searching several knowledge
    bases ranks each leg globally while every chunk keeps its own knowledge base's weight.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    legs = []
    for leg, ids in rankings.items():
        weight = np.asarray(weights.get(leg, 0.0), dtype=np.float64)
        if len(ids) and np.any(weight > 0.0):
            legs.append((leg, weight, np.asarray(ids, dtype=np.int64)))
    if not legs:
        empty = np.empty(0, dtype=np.int64)
        return FusionResult(empty, np.empty(0), {leg: empty for leg in rankings})
    all_ids = np.concatenate([ids for _, _, ids in legs])
    contributions = np.concatenate(
        [
            np.clip(weight, 0.0, None) / (k + np.arange(1, ids.size + 1, dtype=np.float64))
            for _, weight, ids in legs
        ]
    )
    unique, inverse = np.unique(all_ids, return_inverse=True)
    scores = np.bincount(inverse, weights=contributions, minlength=unique.size)
    order = np.lexsort((unique, -scores))
    ranks: dict[str, np.ndarray] = {}
    offset = 0
    for leg, _, ids in legs:
        leg_ranks = np.zeros(unique.size, dtype=np.int64)
        leg_ranks[inverse[offset : offset + ids.size]] = np.arange(1, ids.size + 1)
        ranks[leg] = leg_ranks[order]
        offset += ids.size
    for leg in rankings:
        ranks.setdefault(leg, np.zeros(unique.size, dtype=np.int64))
    return FusionResult(unique[order], scores[order], ranks)
