from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

from rag_project.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("rag_project.api.urls")),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# JSON in the API's error shape under /api/, Django's pages elsewhere.
handler404 = "rag_project.api.errors.not_found"
handler500 = "rag_project.api.errors.server_error"
