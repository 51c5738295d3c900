"""``/api/v1/``: the endpoints of knowledge and retrieval, ``me`` and the OpenAPI schema."""

from django.urls import include, path, re_path, register_converter
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView

from rag_project.api.converters import IdConverter
from rag_project.api.errors import not_found
from rag_project.api.views import MeView

register_converter(IdConverter, "id")

urlpatterns = [
    path("me", MeView.as_view(), name="me"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("knowledge.api.urls")),
    path("", include("retrieval.api.urls")),
    # Anything else under /api/v1/ answers 404 in the error shape, with DEBUG on as well.
    re_path(r"", csrf_exempt(not_found)),
]
