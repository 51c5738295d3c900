"""The site: health, admin, and the REST API under ``/api/v1/`` (tenancy's ``me`` and API keys,
knowledge's knowledge bases, documents and chunks, retrieval's search, context and Dify)."""

from django.contrib import admin
from django.urls import include, path, re_path, register_converter
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from rag_project.health import healthz
from tenancy.api.converters import IdConverter
from tenancy.api.errors import not_found

register_converter(IdConverter, "id")

api_v1 = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("tenancy.api.urls")),
    path("", include("knowledge.api.urls")),
    path("", include("retrieval.api.urls")),
    # Anything else under /api/v1/ answers 404 in the error shape, with DEBUG on as well.
    re_path(r"", csrf_exempt(not_found)),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# JSON in the API's error shape under /api/, Django's pages elsewhere.
handler404 = "tenancy.api.errors.not_found"
handler500 = "tenancy.api.errors.server_error"
