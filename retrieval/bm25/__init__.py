"""BM25 keyword scoring: rank_bm25-exact scores on compact inverted indexes (no Django).

``Segment`` is an immutable block of a segmented index and ``SegmentedIndex`` the exact view over
a list of segments minus deletions.
"""

from retrieval.bm25.segment import (
    MAX_SEGMENT_TOKENS,
    SEGMENT_FORMAT_VERSION,
    Segment,
    plan_segments,
)
from retrieval.bm25.segmented import SegmentedIndex
from retrieval.bm25.vocabulary import BM25Params

__all__ = [
    "MAX_SEGMENT_TOKENS",
    "SEGMENT_FORMAT_VERSION",
    "BM25Params",
    "Segment",
    "SegmentedIndex",
    "plan_segments",
]
