"""The site: health, admin, and the REST API under ``/api/v1/`` (tenancy's ``me`` and API keys,
knowledge's knowledge bases, documents and chunks, retrieval's search, context and Dify), and
retrieval's MCP server at ``/mcp``.

Apps are named by dotted strings only: ``rag_project`` sits below every app and imports none of
them (tests/foundation/test_layering.py). Tenancy registers the ``id`` path converter the apps'
URLs use in its ``AppConfig.ready``."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from rag_project.health import healthz

api_v1 = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("tenancy.api.urls")),
    path("", include("knowledge.api.urls")),
    path("", include("retrieval.api.urls")),
    # Last: anything else under /api/v1/ answers 404 in the error shape, with DEBUG on as well.
    path("", include("tenancy.api.fallback_urls")),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("", include("retrieval.mcp.urls")),  # /mcp: the MCP server over streamable HTTP
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# JSON in the API's error shape under /api/, Django's pages elsewhere.
handler404 = "tenancy.api.errors.not_found"
handler500 = "tenancy.api.errors.server_error"
