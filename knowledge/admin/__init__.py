"""The curation admin: knowledge bases, uploads, documents, chunks, tenant-scoped.

Every ModelAdmin here is a ``TenantScopedAdmin`` (``tenancy.admin.scoping``): staff see and
change only their tenants' objects, superusers everything. The API-key admin of ``tenancy`` is
extended here with the restriction of a key to some knowledge bases; ``retrieval.admin``
extends the knowledge-base admin with the BM25 index panel, index actions and hit testing.
"""

from django.contrib import admin

from knowledge.admin.api_keys import RestrictedApiKeyAdmin
from knowledge.admin.chunks import ChunkAdmin
from knowledge.admin.documents import DocumentAdmin
from knowledge.admin.knowledge_bases import KnowledgeBaseAdmin
from knowledge.admin.web_sources import WebSourceAdmin
from knowledge.models import Chunk, Document, KnowledgeBase, WebSource
from tenancy.models import ApiKey

admin.site.site_header = "Knowledge base administration"
admin.site.site_title = "Knowledge base admin"
admin.site.index_title = "Knowledge bases, documents and retrieval"

if admin.site.is_registered(ApiKey):
    admin.site.unregister(ApiKey)
admin.site.register(ApiKey, RestrictedApiKeyAdmin)
admin.site.register(KnowledgeBase, KnowledgeBaseAdmin)
admin.site.register(Document, DocumentAdmin)
admin.site.register(Chunk, ChunkAdmin)
admin.site.register(WebSource, WebSourceAdmin)

__all__ = ["ChunkAdmin", "DocumentAdmin", "KnowledgeBaseAdmin", "WebSourceAdmin"]
