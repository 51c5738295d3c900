"""Tenants (with their members) and API keys in the admin, the tenant scoping every model
admin of the project builds on (``scoping``), and the sign-in limited per address (``login``)."""

from django.contrib import admin

from tenancy.admin.login import ThrottledAuthenticationForm
from tenancy.admin.tenants import ApiKeyAdmin, TenantAdmin
from tenancy.models import ApiKey, Tenant

admin.site.register(Tenant, TenantAdmin)
admin.site.register(ApiKey, ApiKeyAdmin)
admin.site.login_form = ThrottledAuthenticationForm
