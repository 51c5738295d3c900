"""BM25Store: each knowledge base's BM25 index at its current version, cached in three tiers.

See ``docs/bm25-store.md`` for the design; ``store`` for the read path.
"""

from retrieval.bm25store.availability import bm25_available
from retrieval.bm25store.build import current_version
from retrieval.bm25store.handle import IndexHandle, Tier
from retrieval.bm25store.locks import build_time_limit_s
from retrieval.bm25store.store import BM25Store, BM25StoreConfig, get_store, merge_due

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
