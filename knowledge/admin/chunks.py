"""Chunks: what search actually sees of a document, with everything that ranks it; and curation
by hand (edit the text, extra keywords and questions, disable/enable) through
``knowledge.services.curation``."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponseRedirect
from django.template.defaultfilters import truncatechars
from django.urls import path, reverse
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from knowledge.admin import selectors
from knowledge.models import Chunk
from knowledge.services.curation import ChunkChanges, set_chunks_enabled, update_chunk
from tenancy.admin.scoping import TenantScopedAdmin, allowed
from tenancy.errors import DomainError
from tenancy.models import Tenant
from tenancy.roles import Permission


def lines(text: str) -> list[str]:
    """One entry per line of a textarea (blank lines dropped by the service)."""
    return text.splitlines()


class ChunkAdmin(TenantScopedAdmin):
    change_form_template = "admin/knowledge/chunk/change_form.html"
    list_display = [
        "label",
        "document",
        "state",
        "page",
        "heading",
        "snippet",
        "embedding_model",
    ]
    list_display_links = ["label"]
    list_filter = [("knowledge_base", admin.RelatedOnlyFieldListFilter), "enabled", "origin"]
    list_select_related = ["document"]
    search_fields = ["content"]
    show_full_result_count = False
    actions = ["disable_selected", "enable_selected"]
    action_needs = {"edit_documents": Permission.WRITE_DOCUMENTS}
    fields = ["document", "position", "content", "tokens", "embedding_model"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding")

    @admin.display(description="Chunk", ordering="position")
    def label(self, chunk: Chunk) -> str:
        return f"chunk {chunk.position}"

    @admin.display(description="State", ordering="enabled")
    def state(self, chunk: Chunk) -> str:
        return curation_badges(chunk)

    @admin.display(description="Heading path")
    def heading(self, chunk: Chunk) -> str:
        return " › ".join(chunk.heading_path)

    @admin.display(description="Content")
    def snippet(self, chunk: Chunk) -> str:
        return truncatechars(" ".join(chunk.content.split()), 120)

    # ------------------------------------------------------------------ actions

    def has_edit_documents_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.needs("edit_documents"), obj)

    @admin.action(description="Disable selected chunks", permissions=["edit_documents"])
    def disable_selected(self, request: HttpRequest, queryset) -> None:
        self._set_enabled(request, queryset, False)

    @admin.action(description="Enable selected chunks", permissions=["edit_documents"])
    def enable_selected(self, request: HttpRequest, queryset) -> None:
        self._set_enabled(request, queryset, True)

    def _set_enabled(self, request: HttpRequest, queryset, enabled: bool) -> None:
        scoped = self.scope(request, queryset, Permission.WRITE_DOCUMENTS)
        changed = sum(
            set_chunks_enabled(tenant=tenant, chunk_ids=ids, enabled=enabled)
            for tenant, ids in by_tenant(scoped).items()
        )
        word = "enabled" if enabled else "disabled"
        self.message_user(request, f"{changed} chunk(s) {word}.")

    # ------------------------------------------------------------------ chunk page

    def change_view(self, request, object_id, form_url="", extra_context=None):
        chunk = self.get_object(request, unquote(object_id))
        before, after = selectors.neighbours(chunk)
        context = {
            "title": f"{chunk.document.title}, chunk {chunk.position}",
            "subtitle": None,
            **(extra_context or {}),
            "chunk": chunk,
            "previous_chunk": before,
            "next_chunk": after,
            "file_url": reverse("admin:knowledge_document_file", args=[chunk.document_id]),
            "can_edit_documents": allowed(request, Permission.WRITE_DOCUMENTS, chunk.tenant_id),
            "badges": curation_badges(chunk),
            "keywords_text": "\n".join(chunk.extra_keywords),
            "questions_text": "\n".join(chunk.extra_questions),
        }
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/curate/",
                view(require_POST(self.curate_view)),
                name="knowledge_chunk_curate",
            ),
            *super().get_urls(),
        ]

    def curate_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """The chunk page's form: new text, keywords and questions (one per line), or only
        ``enabled`` (its Disable/Enable button)."""
        chunk = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        post = request.POST
        if "enabled" in post:
            changes = ChunkChanges(enabled=post["enabled"] == "1")
        else:
            changes = ChunkChanges(
                content=post.get("content", ""),
                extra_keywords=lines(post.get("extra_keywords", "")),
                extra_questions=lines(post.get("extra_questions", "")),
            )
        try:
            update_chunk(tenant=chunk.tenant, chunk=chunk, changes=changes, user=request.user)
        except DomainError as exc:
            messages.error(request, f"Nothing was changed: {exc}")
        else:
            messages.success(request, "Saved; the next search sees the change.")
        return HttpResponseRedirect(reverse("admin:knowledge_chunk_change", args=[chunk.pk]))


def by_tenant(queryset) -> dict[Tenant, list[int]]:
    """The ids of a selection, by the tenant they belong to (services take the tenant)."""
    ids: dict[int, list[int]] = {}
    for pk, tenant_id in queryset.order_by().values_list("pk", "tenant_id"):
        ids.setdefault(tenant_id, []).append(pk)
    return {tenant: ids[tenant.pk] for tenant in Tenant.objects.filter(pk__in=list(ids))}


DISABLED = mark_safe('<span class="kb-badge kb-disabled">Disabled</span>')
MANUAL = mark_safe('<span class="kb-badge kb-manual">Added by hand</span>')
EDITED = mark_safe('<span class="kb-badge kb-edited">Edited</span>')


def curation_badges(chunk: Chunk) -> str:
    """Disabled, added by hand, edited: what a person changed about this chunk."""
    badges = []
    if not chunk.enabled:
        badges.append(DISABLED)
    if chunk.origin == Chunk.Origin.MANUAL:
        badges.append(MANUAL)
    elif chunk.edited:
        badges.append(EDITED)
    return format_html_join(" ", "{}", ((badge,) for badge in badges))
