"""The documents pages: a list that follows processing by itself, the document page with its
chunks in order, the original file, and reprocess/delete through the services.

Documents are never edited here (a title or file change means processing again): the page is a
view, and every write is ``reprocess_document`` or ``delete_document`` (which bumps the index
version and removes the stored file after commit), "delete selected" included.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import FileResponse, Http404, HttpRequest, HttpResponseRedirect, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime
from django.views.decorators.http import require_POST

from knowledge.admin import selectors
from knowledge.admin.widgets import chunk_count, documents_url, progress_bar, status_badge
from knowledge.models import Document, KnowledgeBase
from knowledge.services.documents import delete_document, reprocess_document
from tenancy.admin.scoping import TenantScopedAdmin, allowed
from tenancy.roles import Permission

MAX_STATUS_IDS = 500


class DocumentAdmin(TenantScopedAdmin):
    delete_needs = Permission.WRITE_DOCUMENTS
    change_list_template = "admin/knowledge/document/change_list.html"
    change_form_template = "admin/knowledge/document/change_form.html"
    list_filter = [("knowledge_base", admin.RelatedOnlyFieldListFilter), "status", "file_type"]
    search_fields = ["title", "original_filename"]
    list_select_related = ["knowledge_base"]
    list_per_page = 50
    actions = ["reprocess_selected"]
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
            '<div class="kb-processing">{}{}</div>', status_badge(document), progress_bar(document)
        )

    @admin.display(description="Status", ordering="status")
    def status_column(self, document: Document) -> str:
        return status_badge(document)

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
        return self._may(request, Permission.WRITE_DOCUMENTS, obj)

    @admin.action(description="Reprocess selected documents", permissions=["edit_documents"])
    def reprocess_selected(self, request: HttpRequest, queryset) -> None:
        documents = list(
            self.scope(request, queryset, Permission.WRITE_DOCUMENTS).select_related("tenant")
        )
        for document in documents:
            reprocess_document(tenant=document.tenant, document=document)
        self.message_user(request, f"{len(documents)} document(s) queued for processing again.")

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        delete_document(tenant=obj.tenant, document=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for document in self.scope(request, queryset, Permission.WRITE_DOCUMENTS).select_related(
            "tenant"
        ):
            delete_document(tenant=document.tenant, document=document)

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

    def reprocess_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        document = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        reprocess_document(tenant=document.tenant, document=document)
        messages.success(request, f"“{document}” is queued for processing again.")
        return HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))
