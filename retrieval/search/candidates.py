"""Every knowledge base's legs as one fused order of candidates.

Each leg is ranked across the knowledge bases searched (by cosine similarity, by BM25 score;
ties by chunk id) and fused by weighted RRF (``retrieval.fusion``), every chunk weighted by its
own knowledge base. One knowledge base is the same computation with a single member.

Cosine similarities of two embedding models are not on one scale (one model's 0.5 may be
another's 0.8), so when the knowledge bases searched embed with different models (or
dimensions), the vector candidates of each model are ranked among themselves and each such
ranking enters the fusion as a list of its own; a hit's ``vector_rank`` is then its rank among
its model's candidates. With one model there is a single vector ranking across the knowledge
bases searched.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from retrieval.fusion import Fused, FusionResult, weighted_rrf
from retrieval.search.legs import Retrieved
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


def fuse(retrieved: list[Retrieved], k: int) -> Candidates:
    owner: dict[int, Retrieved] = {}
    ranked: dict[Leg, list[tuple[float, int]]] = {leg: [] for leg in Leg}
    for found in retrieved:
        for leg, hits in found.hits.items():
            for chunk_id, score in hits:
                ranked[leg].append((score, chunk_id))
                owner[chunk_id] = found
    for pairs in ranked.values():
        pairs.sort(key=lambda pair: (-pair[0], pair[1]))
    by_model: dict[tuple[str, int | None], list[int]] = defaultdict(list)
    for _, chunk_id in ranked[Leg.VECTOR]:
        kb = owner[chunk_id].plan.kb
        by_model[(kb.embedding_model, kb.embedding_dimensions)].append(chunk_id)
    lists: dict[str, list[int]] = {Leg.KEYWORD.value: [c for _, c in ranked[Leg.KEYWORD]]}
    if len(by_model) <= 1:
        lists[Leg.VECTOR.value] = [c for _, c in ranked[Leg.VECTOR]]
    else:
        lists |= {f"{Leg.VECTOR.value}#{i}": ids for i, ids in enumerate(by_model.values())}
    weights = {
        name: [owner[chunk_id].weights.get(_leg_of(name), 0.0) for chunk_id in ids]
        for name, ids in lists.items()
    }
    best = max(
        (sum(w for leg, w in r.weights.items() if leg in r.ran) / (k + 1) for r in retrieved),
        default=0.0,
    )
    return Candidates(
        fused=_one_vector_rank(weighted_rrf(lists, weights, k=k)),
        rankings={
            Leg.KEYWORD: lists[Leg.KEYWORD.value],
            Leg.VECTOR: _interleaved(list(by_model.values())),
        },
        scores={leg: {c: s for s, c in pairs} for leg, pairs in ranked.items()},
        best=best or 1.0,
    )


def _leg_of(name: str) -> Leg:
    return Leg(name.split("#", 1)[0])


def _one_vector_rank(fused: FusionResult) -> FusionResult:
    """Per-model vector ranks under the one key ``vector`` (each chunk is in one model's list)."""
    parts = [ranks for name, ranks in fused.ranks.items() if name.startswith("vector#")]
    if not parts:
        return fused
    ranks = {name: r for name, r in fused.ranks.items() if not name.startswith("vector#")}
    ranks[Leg.VECTOR.value] = np.sum(parts, axis=0)
    return FusionResult(fused.ids, fused.scores, ranks)


def _interleaved(rankings: list[list[int]]) -> list[int]:
    """Several rankings as one: every first, then every second... (for the rerank's agreement
    check, which reads the head of the vector ranking)."""
    longest = max(map(len, rankings), default=0)
    return [ids[i] for i in range(longest) for ids in rankings if i < len(ids)]
