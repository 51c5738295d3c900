"""Tenants (with their members) and API keys in the admin, and the tenant scoping every model
admin of the project builds on (``scoping``)."""

from django.contrib import admin

from tenancy.admin.tenants import ApiKeyAdmin, TenantAdmin
from tenancy.models import ApiKey, Tenant

admin.site.register(Tenant, TenantAdmin)
admin.site.register(ApiKey, ApiKeyAdmin)
