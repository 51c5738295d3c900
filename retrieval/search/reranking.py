"""The rerank step: the head of the fused hits rescored by the configured reranker
(``retrieval.rerank``), the tail kept in fused order. Skipped when no knowledge base asks for
it, when there is nothing to rerank, or when both legs agree at the top; a reranker that fails
leaves the fused order. The trace says which and why.
"""

from __future__ import annotations

import time

from retrieval.rerank import RerankError, get_reranker
from retrieval.search.options import Plan
from retrieval.search.types import Hit, Leg, RerankTrace, Trace, elapsed_ms

# Both legs' top 3 agreeing in 2 places: reranking would change little.
UNANIMITY_DEPTH = 3
UNANIMITY_MATCHES = 2


def rerank(
    query: str, hits: list[Hit], plans: list[Plan], rankings: dict[Leg, list[int]], trace: Trace
) -> list[Hit]:
    if not any(plan.rerank for plan in plans):
        trace.rerank = RerankTrace.skipped("disabled")
        return hits
    if not hits:
        trace.rerank = RerankTrace.skipped("no results")
        return hits
    if unanimous(rankings):
        trace.rerank = RerankTrace.skipped("unanimity")
        return hits
    try:
        reranker = get_reranker()
    except RerankError as exc:
        trace.rerank = RerankTrace.skipped(f"reranker unavailable: {exc}")
        return hits
    if reranker is None:
        trace.rerank = RerankTrace.skipped("no reranker configured")
        return hits
    top_n = max(plan.rerank_top_n for plan in plans)
    head, tail = hits[:top_n], hits[top_n:]
    started = time.perf_counter()
    try:
        scores = reranker.rerank(query, [hit.content for hit in head])
    except RerankError as exc:
        trace.rerank = RerankTrace.skipped(f"rerank failed: {exc}")
        trace.fallbacks.append("rerank error -> fused order")
        return hits
    for hit, score in zip(head, scores, strict=True):
        hit.rerank_score = float(score)
    head = sorted(head, key=lambda hit: -hit.rerank_score)  # stable: ties keep fused order
    trace.rerank = RerankTrace.done(reranker.name, len(head), elapsed_ms(started))
    trace.retrieval_path.append("rerank")
    return head + tail


def unanimous(rankings: dict[Leg, list[int]]) -> bool:
    """The legs put the same chunks at the same places at the top."""
    vector = rankings[Leg.VECTOR][:UNANIMITY_DEPTH]
    keyword = rankings[Leg.KEYWORD][:UNANIMITY_DEPTH]
    return sum(a == b for a, b in zip(vector, keyword, strict=False)) >= UNANIMITY_MATCHES
