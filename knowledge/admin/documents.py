"""The documents pages: a list that follows processing by itself, the document page with its
chunks in order, the original file, and reprocess/delete through the services.

Documents are never edited here (a title or file change means processing again): the page is a
view, and every write is ``reprocess_document`` or ``delete_document`` (which bumps the index
version and removes the stored file after commit), "delete selected" included; and curation:
disable/enable documents, add a chunk by hand (``knowledge.services.curation``). Reprocessing a
document whose chunks carry hand edits shows how many it would discard and asks first.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import FileResponse, Http404, HttpRequest, HttpResponseRedirect, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime
from django.views.decorators.http import require_POST

from knowledge import selectors as knowledge_selectors
from knowledge.admin import selectors
from knowledge.admin.chunks import by_tenant, lines
from knowledge.admin.widgets import (
    chunk_count,
    disabled_badge,
    documents_url,
    progress_bar,
    queue_place,
    status_badge,
)
from knowledge.models import Document, KnowledgeBase
from knowledge.services.bulk import request_deletion
from knowledge.services.curation import add_chunk, set_documents_enabled
from knowledge.services.documents import delete_document, reprocess_document
from tenancy.admin.scoping import TenantScopedAdmin, allowed
from tenancy.errors import DomainError
from tenancy.roles import Permission

MAX_STATUS_IDS = 500


class DocumentAdmin(TenantScopedAdmin):
    delete_needs = Permission.WRITE_DOCUMENTS
    action_needs = {"edit_documents": Permission.WRITE_DOCUMENTS}
    change_list_template = "admin/knowledge/document/change_list.html"
    change_form_template = "admin/knowledge/document/change_form.html"
    list_filter = [
        ("knowledge_base", admin.RelatedOnlyFieldListFilter),
        "status",
        "enabled",
        "file_type",
    ]
    search_fields = ["title", "original_filename"]
    list_select_related = ["knowledge_base"]
    list_per_page = 50
    actions = ["reprocess_selected", "disable_selected", "enable_selected"]
    fieldsets = [
        (None, {"fields": ["title", "knowledge_base", "original_file", "metadata"]}),
        (
            "Processing",
            {
                "fields": [
                    "status_column",
                    "progress_column",
                    "chunks_column",
                    "attempts",
                    "processed_at",
                ]
            },
        ),
        (
            "File",
            {
                "fields": ["file_type", "size", "sha256", "created_at", "updated_at"],
                "classes": ["collapse"],
            },
        ),
    ]
    readonly_fields = [
        "title",
        "knowledge_base",
        "original_file",
        "metadata",
        "status_column",
        "progress_column",
        "chunks_column",
        "attempts",
        "processed_at",
        "file_type",
        "size",
        "sha256",
        "created_at",
        "updated_at",
    ]

    # ------------------------------------------------------------------ list

    def get_list_display(self, request: HttpRequest):
        columns = [
            "title",
            "processing_column",
            "chunks_column",
            "file_column",
            "created",
        ]
        if "knowledge_base__id__exact" not in request.GET and self.spans_knowledge_bases(request):
            columns.insert(1, "knowledge_base")
        return columns

    @admin.display(description="Status", ordering="status")
    def processing_column(self, document: Document) -> str:
        return format_html(
            '<div class="kb-processing">{}{}{}{}</div>',
            status_badge(document),
            disabled_badge(document),
            queue_place(document),
            progress_bar(document),
        )

    @admin.display(description="Status", ordering="status")
    def status_column(self, document: Document) -> str:
        return format_html(
            "{} {} {}", status_badge(document), disabled_badge(document), queue_place(document)
        )

    @admin.display(description="Progress", ordering="progress")
    def progress_column(self, document: Document) -> str:
        return progress_bar(document)

    @admin.display(description="Chunks", ordering="chunk_count")
    def chunks_column(self, document: Document) -> str:
        return chunk_count(document)

    @admin.display(description="File", ordering="size_bytes")
    def file_column(self, document: Document) -> str:
        return f"{document.file_type} · {filesizeformat(document.size_bytes)}"

    @admin.display(description="Uploaded", ordering="created_at")
    def created(self, document: Document) -> str:
        return date_format(localtime(document.created_at), "Y-m-d H:i")

    @admin.display(description="Size", ordering="size_bytes")
    def size(self, document: Document) -> str:
        return filesizeformat(document.size_bytes)

    @admin.display(description="Original file")
    def original_file(self, document: Document) -> str:
        url = reverse("admin:knowledge_document_file", args=[document.pk])
        return format_html('<a href="{}" download>{}</a>', url, document.original_filename)

    def spans_knowledge_bases(self, request: HttpRequest) -> bool:
        """Whether the user's documents come from more than one knowledge base."""
        return self.choices_for(KnowledgeBase, request)[:2].count() > 1

    def changelist_view(self, request, extra_context=None):
        context = {**(extra_context or {}), **self.changelist_tools(request)}
        return super().changelist_view(request, extra_context=context)

    def changelist_tools(self, request: HttpRequest) -> dict:
        """The knowledge base the list is filtered to, for its Upload and settings links."""
        kb_id = request.GET.get("knowledge_base__id__exact", "")
        if not kb_id.isdigit():
            return {"title": "Documents"}
        kb = self.choices_for(KnowledgeBase, request).filter(pk=int(kb_id)).first()
        if kb is None:
            return {}
        return {
            "kb": kb,
            "title": f"Documents of {kb}",
            "can_upload": allowed(request, Permission.WRITE_DOCUMENTS, kb.tenant_id),
        }

    # ------------------------------------------------------------------ actions

    def has_edit_documents_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.needs("edit_documents"), obj)

    @admin.action(description="Reprocess selected documents", permissions=["edit_documents"])
    def reprocess_selected(self, request: HttpRequest, queryset) -> None:
        """Documents with hand edits are left out: each asks on its own page first."""
        documents = list(
            self.scope(request, queryset, Permission.WRITE_DOCUMENTS).select_related("tenant")
        )
        queued, asking = 0, []
        for document in documents:
            if knowledge_selectors.hand_edits(document):
                asking.append(document.title)
            else:
                reprocess_document(tenant=document.tenant, document=document)
                queued += 1
        self.message_user(request, f"{queued} document(s) queued for processing again.")
        if asking:
            self.message_user(
                request,
                f"{len(asking)} document(s) not reprocessed because their chunks carry hand "
                f"edits that reprocessing would discard ({', '.join(asking[:5])}); reprocess "
                "each from its page to confirm.",
                messages.WARNING,
            )

    @admin.action(description="Disable selected documents", permissions=["edit_documents"])
    def disable_selected(self, request: HttpRequest, queryset) -> None:
        self._set_enabled(request, queryset, False)

    @admin.action(description="Enable selected documents", permissions=["edit_documents"])
    def enable_selected(self, request: HttpRequest, queryset) -> None:
        self._set_enabled(request, queryset, True)

    def _set_enabled(self, request: HttpRequest, queryset, enabled: bool) -> None:
        scoped = self.scope(request, queryset, Permission.WRITE_DOCUMENTS)
        changed = sum(
            set_documents_enabled(tenant=tenant, document_ids=ids, enabled=enabled)
            for tenant, ids in by_tenant(scoped).items()
        )
        word = "enabled" if enabled else "disabled (kept, never searched)"
        self.message_user(request, f"{changed} document(s) {word}.")

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        delete_document(tenant=obj.tenant, document=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        """One UPDATE per knowledge base takes them out of search and the list; a task deletes
        the rows and files in batches, so thousands never time out the request."""
        scoped = self.scope(request, queryset, Permission.WRITE_DOCUMENTS).order_by()
        by_kb: dict[int, list[int]] = {}
        for pk, kb_id in scoped.values_list("pk", "knowledge_base_id"):
            by_kb.setdefault(kb_id, []).append(pk)
        for kb in KnowledgeBase.objects.filter(pk__in=list(by_kb)).select_related("tenant"):
            request_deletion(tenant=kb.tenant, knowledge_base=kb, document_ids=by_kb[kb.pk])

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).filter(delete_requested_at__isnull=True)

    def get_deleted_objects(self, objs, request):
        """A summary instead of Django's list of every chunk of every document."""
        documents = list(objs)
        denied = [d for d in documents if not self.has_delete_permission(request, d)]
        perms_needed = {f"documents of {d.tenant}" for d in denied}
        return [str(d) for d in documents], selectors.deletion_counts(documents), perms_needed, []

    # ------------------------------------------------------------------ document page

    def change_view(self, request, object_id, form_url="", extra_context=None):
        document = self.get_object(request, unquote(object_id))
        context = {
            "title": document.title,
            "subtitle": f"Document of {document.knowledge_base}",
            **(extra_context or {}),
            "chunks": selectors.chunk_page(document, request.GET.get("page")),
            "documents_url": documents_url(document.knowledge_base),
            "can_edit_documents": allowed(request, Permission.WRITE_DOCUMENTS, document.tenant_id),
        }
        return super().change_view(request, object_id, form_url, extra_context=context)

    # ------------------------------------------------------------------ own views

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("status/", view(self.status_view), name="knowledge_document_status"),
            path("<path:object_id>/file/", view(self.file_view), name="knowledge_document_file"),
            path(
                "<path:object_id>/reprocess/",
                view(require_POST(self.reprocess_view)),
                name="knowledge_document_reprocess",
            ),
            path(
                "<path:object_id>/enabled/",
                view(require_POST(self.enabled_view)),
                name="knowledge_document_enabled",
            ),
            path(
                "<path:object_id>/add-chunk/",
                view(require_POST(self.add_chunk_view)),
                name="knowledge_document_add_chunk",
            ),
            *super().get_urls(),
        ]

    def status_view(self, request: HttpRequest) -> JsonResponse:
        """``?ids=1,2,3`` -> status, progress, error and chunk count of those documents (the
        user's only; others are absent), polled by status.js while any is processing."""
        raw = request.GET.get("ids", "").split(",")
        ids = [int(i) for i in raw if i.strip().isdigit()][:MAX_STATUS_IDS]
        statuses = selectors.document_statuses(self.get_queryset(request), ids)
        return JsonResponse({"documents": statuses})

    def file_view(self, request: HttpRequest, object_id: str) -> FileResponse:
        """The original upload, always as a download (an HTML upload is never rendered here)."""
        document = self.scoped_object_or_404(request, object_id)
        try:
            stream = document.file.open("rb")
        except (FileNotFoundError, ValueError):
            raise Http404("The stored file is missing.") from None
        return FileResponse(stream, as_attachment=True, filename=document.original_filename)

    def reprocess_view(self, request: HttpRequest, object_id: str):
        """Reprocess; when parsed chunks carry hand edits, a page saying how many would be
        discarded asks first (its button posts ``discard_hand_edits``)."""
        document = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        edits = knowledge_selectors.hand_edits(document)
        if edits and request.POST.get("discard_hand_edits") != "1":
            context = {
                **self.admin_site.each_context(request),
                "title": f"Reprocess “{document}”?",
                "opts": self.opts,
                "original": document,
                "hand_edits": edits,
            }
            return TemplateResponse(
                request, "admin/knowledge/document/reprocess_confirm.html", context
            )
        reprocess_document(tenant=document.tenant, document=document, discard_hand_edits=True)
        messages.success(request, f"“{document}” is queued for processing again.")
        return self._to_page(document)

    def enabled_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        document = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        enabled = request.POST.get("enabled") == "1"
        set_documents_enabled(tenant=document.tenant, document_ids=[document.pk], enabled=enabled)
        state = "enabled" if enabled else "disabled: it is kept, and never returned by search"
        messages.success(request, f"“{document}” is {state}.")
        return self._to_page(document)

    def add_chunk_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        document = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        try:
            chunk = add_chunk(
                tenant=document.tenant,
                document=document,
                content=request.POST.get("content", ""),
                extra_keywords=lines(request.POST.get("extra_keywords", "")),
                extra_questions=lines(request.POST.get("extra_questions", "")),
                user=request.user,
            )
        except DomainError as exc:
            messages.error(request, f"No chunk was added: {exc}")
            return self._to_page(document)
        messages.success(request, f"Chunk {chunk.position} added; the next search finds it.")
        return HttpResponseRedirect(reverse("admin:knowledge_chunk_change", args=[chunk.pk]))

    def _to_page(self, document: Document) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))
