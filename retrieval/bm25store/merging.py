"""Which segments of a knowledge base's index a merge folds, tiered as search engines do.

Segments are grouped by live chunks in powers of ten; a tier holding ``MERGE_FACTOR`` segments
or more is folded into one (O(log n) segments, each chunk rewritten O(log n) times). A segment
whose deletions reach ``MAX_DELETED_FRACTION`` of it is rewritten to drop them. A fold never
makes a segment past ``MAX_SEGMENT_TOKENS``.
"""

from __future__ import annotations

import math

from retrieval.bm25.segment import MAX_SEGMENT_TOKENS
from retrieval.bm25store.handle import View

MERGE_FACTOR = 10
MAX_DELETED_FRACTION = 0.2


def plan_merge(view: View) -> list[int] | None:
    """Positions (in the manifest's keys) of the segments to fold into one, or None."""
    manifest = view.manifest
    deletions = manifest.deletions()
    segments = [view.segments[key] for key in manifest.keys]
    tiers: dict[int, list[int]] = {}
    heavy = []
    for position, (segment, deleted) in enumerate(zip(segments, deletions, strict=True)):
        live = len(segment) - deleted.size
        if len(segment) and deleted.size >= MAX_DELETED_FRACTION * len(segment):
            heavy.append(position)
        tiers.setdefault(int(math.log10(max(live, 1))), []).append(position)
    picked = set(heavy)
    for members in tiers.values():
        if len(members) >= MERGE_FACTOR:
            picked.update(members)
    if not picked:
        return None
    plan, tokens = [], 0
    for position in sorted(picked, key=lambda p: int(segments[p].lengths.sum())):
        size = int(segments[position].lengths.sum())
        if plan and tokens + size > MAX_SEGMENT_TOKENS:
            continue
        plan.append(position)
        tokens += size
    if len(plan) == 1 and plan[0] not in heavy:
        return None  # folding one segment with nothing to drop changes nothing
    return sorted(plan)
