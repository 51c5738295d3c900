"""Persistent state of retrieval: the L3 tier of the BM25 index cache.

A knowledge base's BM25 index is a list of immutable segments plus deleted chunk ids
(``retrieval.bm25.SegmentedIndex``). L3 keeps each segment as a row of ``bm25_indexes`` and the
list itself, the manifest of one ``index_version``, as the knowledge base's row of
``bm25_manifests``. Both are caches derived from the chunks' stored tokens: emptying them costs
one rebuild, never data.
"""

from django.db import models

from knowledge.models import KnowledgeBase
from tenancy.models import Tenant


class BM25Segment(models.Model):
    """One immutable segment of a knowledge base's BM25 index (L3 of BM25Store).

    ``payload`` is a zlib-compressed pickle; ``signature`` is its HMAC-SHA256 under a key derived
    from SECRET_KEY, bound to the knowledge base and the segment's key, checked before the
    payload is ever unpickled. A segment never changes once written: a change to the knowledge
    base adds a segment, a merge writes a new one and the manifest stops naming the old ones,
    which are then deleted."""

    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="bm25_segments"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=32)
    payload = models.BinaryField()
    signature = models.CharField(max_length=64)
    chunk_count = models.PositiveIntegerField(default=0)
    postings = models.PositiveBigIntegerField(default=0)
    payload_bytes = models.PositiveBigIntegerField(default=0)
    build_seconds = models.FloatField(default=0.0)
    built_at = models.DateTimeField(auto_now_add=True)
    # When a merge's manifest stopped naming it; deleted a grace period later (a builder that
    # started from the older manifest may still name it), unless a manifest names it again.
    dropped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "bm25_indexes"
        verbose_name = "BM25 segment"
        verbose_name_plural = "BM25 segments"
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "key"], name="bm25_segment_key")
        ]

    def __str__(self) -> str:
        return f"BM25 segment {self.key} of KB {self.knowledge_base_id}"


class BM25Manifest(models.Model):
    """The newest complete segment list of a knowledge base (L3 of BM25Store), one row per KB.

    ``payload`` (signed like a segment, bound to the version; numpy arrays, never a pickle)
    names the segments, the deleted chunk ids and the state of every searchable document it
    reflects (for the next delta). ``version`` is the KB's ``index_version`` it reflects: a
    manifest older than the KB is the base of a delta, never served as current."""

    knowledge_base = models.OneToOneField(
        KnowledgeBase, on_delete=models.CASCADE, primary_key=True, related_name="bm25_manifest"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.BigIntegerField()
    payload = models.BinaryField()
    signature = models.CharField(max_length=64)
    segment_count = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)  # live chunks
    deleted_count = models.PositiveIntegerField(default=0)
    merges = models.PositiveIntegerField(default=0)  # merges since the last full build
    build_seconds = models.FloatField(default=0.0)  # the last full build
    built_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "bm25_manifests"
        verbose_name = "BM25 index"
        verbose_name_plural = "BM25 indexes"

    def __str__(self) -> str:
        return f"BM25 index of KB {self.knowledge_base_id} v{self.version}"
