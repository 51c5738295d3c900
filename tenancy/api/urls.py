from django.urls import path

from tenancy.api import api_keys, views

urlpatterns = [
    path("me", views.MeView.as_view(), name="me"),
    path("api-keys", api_keys.ApiKeyListView.as_view(), name="api-key-list"),
    path("api-keys/<id:pk>", api_keys.ApiKeyDetailView.as_view(), name="api-key-detail"),
    path("api-keys/<id:pk>/revoke", api_keys.ApiKeyRevokeView.as_view(), name="api-key-revoke"),
]
