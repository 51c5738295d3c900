"""Persistent state of retrieval: the L3 tier of the BM25 index cache."""

from django.db import models

from knowledge.models import KnowledgeBase
from tenancy.models import Tenant


class BM25Index(models.Model):
    """The last built BM25 index of a knowledge base (L3 of BM25Store), one row per KB.

    ``payload`` is a zlib-compressed pickle; ``signature`` is its HMAC-SHA256 under a key derived
    from SECRET_KEY, checked before the payload is ever unpickled. ``version`` is the KB's
    ``index_version`` the index was built from: a row older than the KB is never served.
    """

    knowledge_base = models.OneToOneField(
        KnowledgeBase, on_delete=models.CASCADE, primary_key=True, related_name="bm25_index"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.BigIntegerField()
    payload = models.BinaryField()
    signature = models.CharField(max_length=64)
    chunk_count = models.PositiveIntegerField(default=0)
    payload_bytes = models.PositiveBigIntegerField(default=0)
    build_seconds = models.FloatField(default=0.0)
    built_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "bm25_indexes"
        verbose_name = "BM25 index"
        verbose_name_plural = "BM25 indexes"

    def __str__(self) -> str:
        return f"BM25 index of KB {self.knowledge_base_id} v{self.version}"
