from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """Tenants, memberships, API keys, authentication, throttling and the role table."""

    name = "tenancy"
    verbose_name = "Tenancy"
