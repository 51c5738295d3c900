from django.apps import AppConfig
from django.urls import register_converter

from tenancy.api.converters import IdConverter


class TenancyConfig(AppConfig):
    """Tenants, memberships, API keys, authentication, throttling and the role table."""

    name = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        # The ``<id:pk>`` converter of every app's API URLs. Registered here, before any URLconf
        # is loaded, so the root URLconf (rag_project) names apps by dotted strings only and
        # never imports tenancy.
        register_converter(IdConverter, "id")
