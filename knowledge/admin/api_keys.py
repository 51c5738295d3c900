"""The API-key admin of ``tenancy``, with what only ``knowledge`` knows: a key's restriction to
some of its tenant's knowledge bases."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from knowledge.models import KnowledgeBase
from tenancy.admin.tenants import ApiKeyAdmin, ApiKeyForm
from tenancy.models import ApiKey


class RestrictedApiKeyForm(ApiKeyForm):
    knowledge_bases = forms.ModelMultipleChoiceField(
        queryset=KnowledgeBase.objects.none(),
        required=False,
        help_text="None chosen: every knowledge base of the tenant.",
    )

    def clean(self):
        data = super().clean()
        tenant, kbs = data.get("tenant"), data.get("knowledge_bases") or []
        if tenant and any(kb.tenant_id != tenant.pk for kb in kbs):
            self.add_error("knowledge_bases", "Choose knowledge bases of the key's tenant only.")
        return data


class RestrictedApiKeyAdmin(ApiKeyAdmin):
    form = RestrictedApiKeyForm
    restricted_fields = ["knowledge_bases"]
    restricted_display = ["restricted_to"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        if "knowledge_bases" in form.base_fields:
            form.base_fields["knowledge_bases"].queryset = self.choices_for(KnowledgeBase, request)
        return form

    @admin.display(description="Knowledge bases")
    def restricted_to(self, key: ApiKey) -> str:
        names = [kb.name for kb in key.knowledge_bases.all()]
        if names:
            return ", ".join(names)
        # restricted with every knowledge base of its restriction deleted: it may use none
        return "None left (restricted)" if key.restricted else "All of the tenant's"
