"""BM25Store: each knowledge base's BM25 index, cached in three tiers and never stale.

See ``docs/bm25-store.md`` for the design; ``store`` for the read path.
"""

from retrieval.bm25store.availability import bm25_available
from retrieval.bm25store.handle import IndexHandle, Tier
from retrieval.bm25store.store import (
    BM25Store,
    BM25StoreConfig,
    build_time_limit_s,
    current_version,
    get_store,
    merge_due,
)

__all__ = [
    "BM25Store",
    "BM25StoreConfig",
    "IndexHandle",
    "Tier",
    "bm25_available",
    "build_time_limit_s",
    "current_version",
    "get_store",
    "merge_due",
]
