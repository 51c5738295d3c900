from django.urls import path

from knowledge.api import bulk, chunks, documents, knowledge_bases, web_sources

urlpatterns = [
    path(
        "knowledge-bases",
        knowledge_bases.KnowledgeBaseListView.as_view(),
        name="knowledge-base-list",
    ),
    path(
        "knowledge-bases/<id:pk>",
        knowledge_bases.KnowledgeBaseDetailView.as_view(),
        name="knowledge-base-detail",
    ),
    path(
        "knowledge-bases/<id:pk>/documents",
        documents.DocumentListView.as_view(),
        name="document-list",
    ),
    path(
        "knowledge-bases/<id:pk>/documents/retry-failed",
        bulk.RetryFailedView.as_view(),
        name="document-retry-failed",
    ),
    path(
        "knowledge-bases/<id:pk>/documents/delete",
        bulk.BulkDeleteView.as_view(),
        name="document-bulk-delete",
    ),
    path(
        "knowledge-bases/<id:pk>/chunks",
        chunks.KnowledgeBaseChunksView.as_view(),
        name="knowledge-base-chunks",
    ),
    path("documents/<id:pk>", documents.DocumentDetailView.as_view(), name="document-detail"),
    path(
        "documents/<id:pk>/reprocess",
        documents.DocumentReprocessView.as_view(),
        name="document-reprocess",
    ),
    path("documents/<id:pk>/chunks", chunks.DocumentChunksView.as_view(), name="document-chunks"),
    path("chunks/<id:pk>", chunks.ChunkDetailView.as_view(), name="chunk-detail"),
    path(
        "knowledge-bases/<id:pk>/web-sources",
        web_sources.WebSourceListView.as_view(),
        name="web-source-list",
    ),
    path(
        "web-sources/<id:pk>", web_sources.WebSourceDetailView.as_view(), name="web-source-detail"
    ),
    path(
        "web-sources/<id:pk>/sync", web_sources.WebSourceSyncView.as_view(), name="web-source-sync"
    ),
]
