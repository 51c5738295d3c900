from django.contrib import admin

from retrieval.models import BM25Index


@admin.register(BM25Index)
class BM25IndexAdmin(admin.ModelAdmin):
    list_display = [
        "knowledge_base",
        "version",
        "chunk_count",
        "payload_bytes",
        "build_seconds",
        "built_at",
    ]
    exclude = ["payload", "signature"]
    readonly_fields = [
        "knowledge_base",
        "tenant",
        "version",
        "chunk_count",
        "payload_bytes",
        "build_seconds",
    ]

    def has_add_permission(self, request) -> bool:
        return False
