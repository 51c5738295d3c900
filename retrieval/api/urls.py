from django.urls import path

from retrieval.api import dify, views

urlpatterns = [
    path(
        "knowledge-bases/<id:pk>/search",
        views.KnowledgeBaseSearchView.as_view(),
        name="knowledge-base-search",
    ),
    path(
        "knowledge-bases/<id:pk>/context",
        views.KnowledgeBaseContextView.as_view(),
        name="knowledge-base-context",
    ),
    path("search", views.SearchView.as_view(), name="search"),
    path("context", views.ContextView.as_view(), name="context"),
    path("dify/retrieval", dify.DifyRetrievalView.as_view(), name="dify-retrieval"),
]
