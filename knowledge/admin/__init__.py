"""The curation admin: knowledge bases, uploads, documents, chunks, API keys, tenant-scoped.

Every ModelAdmin here is a ``TenantScopedAdmin`` (``scoping``): staff see and change only their
tenants' objects, superusers everything. ``retrieval.admin`` extends the knowledge-base admin
with the BM25 index panel, index actions and hit testing.
"""

from django.contrib import admin

from knowledge.admin.chunks import ChunkAdmin
from knowledge.admin.documents import DocumentAdmin
from knowledge.admin.knowledge_bases import KnowledgeBaseAdmin
from knowledge.admin.tenants import ApiKeyAdmin, TenantAdmin
from knowledge.models import ApiKey, Chunk, Document, KnowledgeBase, Tenant

admin.site.site_header = "Knowledge base administration"
admin.site.site_title = "Knowledge base admin"
admin.site.index_title = "Knowledge bases, documents and retrieval"

admin.site.register(Tenant, TenantAdmin)
admin.site.register(ApiKey, ApiKeyAdmin)
admin.site.register(KnowledgeBase, KnowledgeBaseAdmin)
admin.site.register(Document, DocumentAdmin)
admin.site.register(Chunk, ChunkAdmin)

__all__ = ["ChunkAdmin", "DocumentAdmin", "KnowledgeBaseAdmin"]
