"""Where a knowledge base's BM25 index stands in each tier of BM25Store, for the admin page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum

from knowledge.models import KnowledgeBase
from retrieval.bm25store import bm25_available, get_store
from retrieval.core.identity import identity_of
from retrieval.models import BM25Manifest, BM25Segment


@dataclass(frozen=True)
class IndexStatus:
    version: int  # the knowledge base's index_version: what a search asks for
    available: bool  # rank_bm25 and jieba importable
    # L3: the bm25_manifests row and the bm25_indexes segment rows it names
    l3_version: int | None = None
    chunk_count: int = 0
    payload_bytes: int = 0
    build_seconds: float = 0.0  # the last full build
    built_at: datetime | None = None  # the stored manifest (a build, a delta or a merge)
    segment_count: int = 0
    deleted_count: int = 0
    merges: int = 0
    # L2: Redis (None when absent; redis_up False while Redis cannot be reached)
    l2_version: int | None = None
    redis_up: bool = True
    # L1: this web process's memory
    l1_version: int | None = None

    @property
    def current(self) -> bool:
        """The stored index is the knowledge base's current version: no search builds it."""
        return self.l3_version is not None and self.l3_version >= self.version

    @property
    def state(self) -> str:
        if not self.available:
            return "unavailable"
        if self.l3_version is None:
            return "not built"
        return "current" if self.current else "outdated"


def index_status(knowledge_base: KnowledgeBase) -> IndexStatus:
    """Reads every tier without loading or building anything. Asking L1 counts as a use of
    its entry (it moves to the front of the LRU), which is harmless."""
    store = get_store()
    identity = identity_of(knowledge_base)
    version = (
        KnowledgeBase.objects.filter(pk=knowledge_base.pk)
        .values_list("index_version", flat=True)
        .first()
    ) or knowledge_base.index_version
    row = (
        BM25Manifest.objects.filter(knowledge_base=knowledge_base)
        .defer("payload", "signature")
        .first()
    )
    stored_bytes = (
        BM25Segment.objects.filter(
            knowledge_base=knowledge_base, dropped_at__isnull=True
        ).aggregate(n=Sum("payload_bytes"))["n"]
        or 0
    )
    in_memory = store.l1.get(identity, 0)
    l2_version = store.l2.version(identity)
    return IndexStatus(
        version=version,
        available=bm25_available(),
        l3_version=row.version if row else None,
        chunk_count=row.chunk_count if row else 0,
        payload_bytes=stored_bytes if row else 0,
        build_seconds=row.build_seconds if row else 0.0,
        built_at=row.built_at if row else None,
        segment_count=row.segment_count if row else 0,
        deleted_count=row.deleted_count if row else 0,
        merges=row.merges if row else 0,
        l2_version=l2_version,
        redis_up=store.l2.available,
        l1_version=in_memory.version if in_memory else None,
    )
