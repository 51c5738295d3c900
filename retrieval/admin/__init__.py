"""Retrieval in the admin: the BM25 manifest and segment rows, and the knowledge-base admin
of ``knowledge`` replaced by its extension (index panel, rebuild and calibrate actions, hit
testing)."""

from django.contrib import admin

from knowledge.models import KnowledgeBase
from retrieval.admin.knowledge_bases import RetrievalKnowledgeBaseAdmin
from retrieval.models import BM25Manifest, BM25Segment
from tenancy.admin.scoping import TenantScopedAdmin

if admin.site.is_registered(KnowledgeBase):
    admin.site.unregister(KnowledgeBase)
admin.site.register(KnowledgeBase, RetrievalKnowledgeBaseAdmin)


@admin.register(BM25Manifest)
class BM25ManifestAdmin(TenantScopedAdmin):
    """Read-only: a knowledge base's stored segment list, written by BM25Store; rebuild from
    the knowledge-base page."""

    list_display = [
        "knowledge_base",
        "version",
        "segment_count",
        "chunk_count",
        "deleted_count",
        "merges",
        "build_seconds",
        "built_at",
    ]
    list_select_related = ["knowledge_base"]
    fields = list_display
    readonly_fields = list_display

    def get_queryset(self, request):
        return super().get_queryset(request).defer("payload")


@admin.register(BM25Segment)
class BM25SegmentAdmin(TenantScopedAdmin):
    """Read-only: one row per stored segment (``dropped_at``: folded by a merge, deleted after
    the grace period)."""

    list_display = [
        "knowledge_base",
        "key",
        "chunk_count",
        "postings",
        "payload_bytes",
        "build_seconds",
        "built_at",
        "dropped_at",
    ]
    list_select_related = ["knowledge_base"]
    fields = list_display
    readonly_fields = list_display

    def get_queryset(self, request):
        return super().get_queryset(request).defer("payload")
