"""BM25 keyword scoring: rank_bm25-exact scores on segmented inverted indexes (no Django)."""

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
