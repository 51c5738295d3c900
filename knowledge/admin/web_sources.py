"""The web sources page: add a site to a knowledge base, change its limits, sync it now, and
follow each sync's progress (pages found, fetched, new, changed, failed, removed). Every write
goes through ``knowledge.web.sources``; the start and sitemap URLs are checked as the API
checks them, and a refusal shows on the form."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from knowledge.ingestion.parsing import ParseError
from knowledge.web.documents import canonical_url
from knowledge.web.models import WebSource
from knowledge.web.sources import (
    EDITABLE_FIELDS,
    create_web_source,
    delete_web_source,
    request_sync,
    update_web_source,
)
from tenancy.admin.scoping import TenantScopedAdmin
from tenancy.roles import Permission

_PROGRESS = ("found", "fetched", "new", "changed", "unchanged", "failed", "duplicates", "removed")


class WebSourceForm(forms.ModelForm):
    start_url = forms.URLField(max_length=2000, assume_scheme="https")
    sitemap_url = forms.URLField(max_length=2000, assume_scheme="https", required=False)

    class Meta:
        model = WebSource
        fields = ["knowledge_base", *EDITABLE_FIELDS]

    def clean(self):
        data = super().clean()
        for name in ("start_url", "sitemap_url"):
            if data.get(name):
                try:
                    data[name] = canonical_url(data[name])
                except ParseError as exc:
                    self.add_error(name, str(exc))
        return data


class WebSourceAdmin(TenantScopedAdmin):
    form = WebSourceForm
    add_needs = change_needs = delete_needs = Permission.WRITE_DOCUMENTS
    action_needs = {"sync": Permission.WRITE_DOCUMENTS}
    list_display = ["__str__", "knowledge_base", "status_column", "progress_column", "last_sync"]
    list_filter = [("knowledge_base", admin.RelatedOnlyFieldListFilter), "sync_status"]
    search_fields = ["name", "start_url"]
    list_select_related = ["knowledge_base"]
    actions = ["sync_now"]
    readonly_fields = [
        "status_column",
        "progress_column",
        "sync_count",
        "last_sync_started_at",
        "last_sync_finished_at",
        "error",
        "failed_pages",
    ]

    def get_fieldsets(self, request: HttpRequest, obj=None):
        what = ["name", "start_url", "sitemap_url"]
        # Everything else the service lets a person edit: one list (EDITABLE_FIELDS) for both.
        limits = [name for name in EDITABLE_FIELDS if name not in what]
        fieldsets = [
            (None, {"fields": ["knowledge_base", *what]}),
            ("Scope and limits", {"fields": limits}),
        ]
        if obj is not None:
            fieldsets.append(("Sync", {"fields": self.readonly_fields}))
        return fieldsets

    @admin.display(description="Sync", ordering="sync_status")
    def status_column(self, source: WebSource) -> str:
        return format_html(
            '<span class="kb-badge kb-sync-{}">{}</span>',
            source.sync_status,
            source.get_sync_status_display(),
        )

    @admin.display(description="Progress")
    def progress_column(self, source: WebSource) -> str:
        progress = source.progress or {}
        if not progress:
            return "—"
        counts = format_html_join(
            " · ", "{} {}", ((progress.get(k, 0), k) for k in _PROGRESS if k in progress)
        )
        if progress.get("stopped"):
            return format_html("{} · <em>stopped: {}</em>", counts, progress["stopped"])
        return counts

    @admin.display(description="Last sync", ordering="last_sync_started_at")
    def last_sync(self, source: WebSource) -> str:
        return source.last_sync_started_at or "never"

    @admin.display(description="Pages that failed")
    def failed_pages(self, source: WebSource) -> str:
        failed = source.pages.exclude(error="").order_by("url")[:50]
        if not failed:
            return "—"
        return format_html(
            "<ul>{}</ul>",
            format_html_join("", "<li>{}: {}</li>", ((p.url, p.error) for p in failed)),
        )

    # ------------------------------------------------------------------ writes

    def save_model(self, request: HttpRequest, obj: WebSource, form, change: bool) -> None:
        fields = {name: form.cleaned_data[name] for name in EDITABLE_FIELDS}
        if change:
            update_web_source(tenant=obj.tenant, source=obj, **fields)
        else:
            kb = form.cleaned_data["knowledge_base"]
            obj.pk = create_web_source(tenant=kb.tenant, knowledge_base=kb, **fields).pk

    def delete_model(self, request: HttpRequest, obj: WebSource) -> None:
        delete_web_source(tenant=obj.tenant, source=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for source in self.scope(request, queryset, Permission.WRITE_DOCUMENTS):
            delete_web_source(tenant=source.tenant, source=source)

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # The knowledge base of a source is fixed: its pages are documents of that one.
        return [*self.readonly_fields, "knowledge_base"] if obj else self.readonly_fields

    def has_sync_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.needs("sync"), obj)

    @admin.action(description="Sync selected web sources now", permissions=["sync"])
    def sync_now(self, request: HttpRequest, queryset) -> None:
        sources = list(self.scope(request, queryset, Permission.WRITE_DOCUMENTS))
        for source in sources:
            request_sync(tenant=source.tenant, source=source)
        self.message_user(request, f"{len(sources)} web source(s) queued for a sync.")
