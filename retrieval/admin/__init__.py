"""Retrieval in the admin: the BM25 index rows, and the knowledge-base admin of ``knowledge``
replaced by its extension (index panel, rebuild and calibrate actions, hit testing)."""

from django.contrib import admin

from knowledge.models import KnowledgeBase
from retrieval.admin.knowledge_bases import RetrievalKnowledgeBaseAdmin
from retrieval.models import BM25Index
from tenancy.admin.scoping import TenantScopedAdmin

if admin.site.is_registered(KnowledgeBase):
    admin.site.unregister(KnowledgeBase)
admin.site.register(KnowledgeBase, RetrievalKnowledgeBaseAdmin)


@admin.register(BM25Index)
class BM25IndexAdmin(TenantScopedAdmin):
    """Read-only: rows are written by BM25Store; rebuild from the knowledge-base page."""

    list_display = [
        "knowledge_base",
        "version",
        "chunk_count",
        "payload_bytes",
        "build_seconds",
        "built_at",
    ]
    list_select_related = ["knowledge_base"]
    fields = list_display
    readonly_fields = list_display

    def get_queryset(self, request):
        return super().get_queryset(request).defer("payload")
