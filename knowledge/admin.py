"""Admin registration of the knowledge models (the full curation UI is built on top later)."""

from django.contrib import admin

from knowledge.models import ApiKey, Chunk, Document, KnowledgeBase, Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tenant",
        "prefix",
        "scopes",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant"]
    # The secret exists only at creation; its hash is never shown or edited.
    exclude = ["secret_hash"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "embedding_provider", "index_version", "created_at"]
    list_filter = ["tenant", "embedding_provider"]
    search_fields = ["name"]
    readonly_fields = ["index_version", "created_at", "updated_at"]


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ["title", "knowledge_base", "status", "progress", "chunk_count", "created_at"]
    list_filter = ["status", "knowledge_base__tenant"]
    search_fields = ["title", "original_filename", "sha256"]
    readonly_fields = ["sha256", "size_bytes", "status", "progress", "error", "chunk_count"]


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    list_display = ["document", "position", "page", "embedding_model"]
    list_select_related = ["document"]
    search_fields = ["content"]
    exclude = ["embedding"]
    readonly_fields = ["tokens", "analyzer_version", "embedding_model", "embedding_dimensions"]
