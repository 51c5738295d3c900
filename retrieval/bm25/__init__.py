"""BM25 keyword scoring: rank_bm25-exact scores on compact inverted indexes (no Django).

``BM25Index`` is one self-contained index; ``Segment`` an immutable block of a segmented index
and ``SegmentedIndex`` the exact view over a list of segments minus deletions.
"""

from retrieval.bm25.index import FORMAT_VERSION, BM25Index, BM25Params
from retrieval.bm25.segment import (
    MAX_SEGMENT_TOKENS,
    SEGMENT_FORMAT_VERSION,
    Segment,
    plan_segments,
)
from retrieval.bm25.segmented import SegmentedIndex

__all__ = [
    "FORMAT_VERSION",
    "MAX_SEGMENT_TOKENS",
    "SEGMENT_FORMAT_VERSION",
    "BM25Index",
    "BM25Params",
    "Segment",
    "SegmentedIndex",
    "plan_segments",
]
