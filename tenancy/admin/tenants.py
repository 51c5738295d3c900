"""Tenants (changed by superusers only) and API keys (created and revoked by tenant admins).

A new key's secret is shown once, on the page that answers the form: it is never stored, and
never put in a message cookie.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.template.response import TemplateResponse

from tenancy.admin.scoping import TenantScopedAdmin
from tenancy.models import ApiKey, Membership
from tenancy.roles import Permission
from tenancy.services import create_api_key, revoke_api_key


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class TenantAdmin(TenantScopedAdmin):
    tenant_path = "pk"
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser


class ApiKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices, widget=forms.CheckboxSelectMultiple, initial=["read"]
    )

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes"]


class ApiKeyAdmin(TenantScopedAdmin):
    """API keys of the user's tenants. ``knowledge`` extends it with the restriction of a key to
    some knowledge bases, which this app does not know: ``restricted_fields`` on the add form,
    ``restricted_display`` (a display method's name) on a key's page."""

    # keys are seen and managed by key managers only, as in the REST API
    view_needs = add_needs = Permission.MANAGE_API_KEYS
    action_needs = {"manage": Permission.MANAGE_API_KEYS}
    form = ApiKeyForm
    restricted_fields: list[str] = []
    restricted_display: list[str] = []
    list_display = [
        "name",
        "tenant",
        "prefix",
        "scopes",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = [("tenant", admin.RelatedOnlyFieldListFilter)]
    readonly_fields = ["prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "scopes", *self.restricted_fields]
        return [
            "tenant",
            "name",
            "prefix",
            "scopes",
            *self.restricted_display,
            *self.readonly_fields[1:],
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["tenant", "name", "scopes", *self.restricted_display, *self.readonly_fields]

    def save_model(self, request, obj: ApiKey, form, change: bool) -> None:
        data = form.cleaned_data
        key, secret = create_api_key(
            tenant=data["tenant"],
            name=data["name"],
            scopes=data["scopes"],
            knowledge_bases=data.get("knowledge_bases") or (),
            created_by=request.user,
        )
        # the admin goes on with ``obj`` (log entry, redirect): make it the row just created
        obj.pk = key.pk
        obj.refresh_from_db()
        obj._state.adding = False
        request.new_api_key_secret = secret

    def save_related(self, request, form, formsets, change) -> None:
        """The service set the key's knowledge bases already."""

    def response_add(self, request, obj: ApiKey, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"API key “{obj.name}” created",
            "key": obj,
            "secret": request.new_api_key_secret,
        }
        return TemplateResponse(request, "admin/tenancy/apikey/created.html", context)

    def has_manage_permission(self, request, obj=None) -> bool:
        return self._may(request, self.needs("manage"), obj)

    @admin.action(description="Revoke selected API keys", permissions=["manage"])
    def revoke_selected(self, request, queryset) -> None:
        keys = list(
            self.scope(request, queryset, Permission.MANAGE_API_KEYS).select_related("tenant")
        )
        for key in keys:
            revoke_api_key(tenant=key.tenant, api_key=key)
        self.message_user(request, f"{len(keys)} API key(s) revoked.")
