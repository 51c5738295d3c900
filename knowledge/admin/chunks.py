"""Chunks, read-only: what search actually sees of a document, with everything that ranks it."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.template.defaultfilters import truncatechars
from django.urls import reverse

from knowledge.admin import selectors
from knowledge.models import Chunk
from tenancy.admin.scoping import TenantScopedAdmin


class ChunkAdmin(TenantScopedAdmin):
    change_form_template = "admin/knowledge/chunk/change_form.html"
    list_display = [
        "label",
        "document",
        "page",
        "heading",
        "snippet",
        "embedding_model",
    ]
    list_display_links = ["label"]
    list_filter = [("knowledge_base", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["document"]
    search_fields = ["content"]
    show_full_result_count = False
    fields = ["document", "position", "content", "tokens", "embedding_model"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding")

    @admin.display(description="Chunk", ordering="position")
    def label(self, chunk: Chunk) -> str:
        return f"chunk {chunk.position}"

    @admin.display(description="Heading path")
    def heading(self, chunk: Chunk) -> str:
        return " › ".join(chunk.heading_path)

    @admin.display(description="Content")
    def snippet(self, chunk: Chunk) -> str:
        return truncatechars(" ".join(chunk.content.split()), 120)

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
        }
        return super().change_view(request, object_id, form_url, extra_context=context)
