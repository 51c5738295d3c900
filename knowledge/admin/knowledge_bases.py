"""The knowledge-base pages: list, settings page with its overview panels, upload, re-embed.

Writes go through the services: a new knowledge base through ``create_knowledge_base`` (which
records its embedding model), a settings change through ``update_knowledge_base`` (user words
re-analyse, weights set by hand pin the weight mode), deletion through
``delete_knowledge_base`` (files removed after commit), uploads through ``upload_documents``,
re-embedding through ``change_embedding``. ``retrieval.admin`` extends this class with the
BM25 index panel, index actions and hit testing (``knowledge`` never imports ``retrieval``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from knowledge.admin import selectors
from knowledge.admin.forms import KnowledgeBaseAddForm, ReembedForm, UploadForm
from knowledge.admin.widgets import chunk_count, documents_url, progress_bar, status_badge
from knowledge.ingestion.parsing import ACCEPTED_EXTENSIONS
from knowledge.models import Document, KnowledgeBase
from knowledge.services.bulk import retry_failed_documents
from knowledge.services.documents import DuplicateDocument
from knowledge.services.knowledge_bases import (
    SETTINGS_FIELDS,
    change_embedding,
    create_knowledge_base,
    delete_knowledge_base,
    update_knowledge_base,
)
from knowledge.services.uploads import UploadOutcome, upload_documents
from knowledge.web.documents import check_url_document
from tenancy.admin.scoping import TenantScopedAdmin, allowed, tenant_ids
from tenancy.roles import Permission

CHUNKING = ("Chunking and analysis", {"fields": ["chunk_size", "chunk_overlap", "user_words"]})
RETRIEVAL = (
    "Retrieval defaults",
    {
        "fields": [
            "weight_mode",
            ("vector_weight", "keyword_weight"),
            "top_k",
            "candidate_multiplier",
            "score_threshold",
            ("rerank_enabled", "rerank_top_n"),
        ],
        "description": "Every search reads these; a query can override them. Changing a weight "
        "switches the weight mode to fixed unless you change the mode too.",
    },
)


class KnowledgeBaseAdmin(TenantScopedAdmin):
    add_needs = change_needs = delete_needs = Permission.MANAGE_KNOWLEDGE_BASES
    action_needs = {"edit_documents": Permission.WRITE_DOCUMENTS}
    change_form_template = "admin/knowledge/knowledgebase/change_form.html"
    search_fields = ["name", "description"]
    list_filter = [("tenant", admin.RelatedOnlyFieldListFilter)]
    ordering = ["tenant__name", "name"]
    actions = ["retry_failed"]

    def has_edit_documents_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.needs("edit_documents"), obj)

    @admin.action(
        description="Retry failed documents of selected knowledge bases",
        permissions=["edit_documents"],
    )
    def retry_failed(self, request: HttpRequest, queryset) -> None:
        """One UPDATE per knowledge base; their processing is queued by a task."""
        knowledge_bases = self.scope(request, queryset, Permission.WRITE_DOCUMENTS)
        queued = sum(
            retry_failed_documents(tenant=kb.tenant, knowledge_base=kb)
            for kb in knowledge_bases.select_related("tenant")
        )
        self.message_user(request, f"{queued} failed document(s) queued for processing again.")

    # ------------------------------------------------------------------ list

    def get_queryset(self, request: HttpRequest):
        return selectors.with_document_counts(super().get_queryset(request)).select_related(
            "tenant"
        )

    def get_list_display(self, request: HttpRequest):
        columns = ["name", "documents_column", "embedding_column", "index_version", "links"]
        ids = tenant_ids(request)
        if ids is None or len(ids) > 1:
            columns.insert(1, "tenant")
        return columns

    @admin.display(description="Documents", ordering="document_count")
    def documents_column(self, kb: KnowledgeBase) -> str:
        url = documents_url(kb)
        failed = (
            format_html(' <span class="kb-badge kb-failed">{} failed</span>', kb.failed_count)
            if kb.failed_count
            else ""
        )
        return format_html(
            '<a href="{}">{} ready</a> of {}{}', url, kb.ready_count, kb.document_count, failed
        )

    @admin.display(description="Embedding", ordering="embedding_provider")
    def embedding_column(self, kb: KnowledgeBase) -> str:
        if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE:
            return "none (keyword only)"
        return f"{kb.embedding_model or kb.embedding_provider} ({kb.embedding_dimensions or '?'})"

    @admin.display(description="")
    def links(self, kb: KnowledgeBase) -> str:
        return format_html_join(" · ", '<a href="{}">{}</a>', self.quick_links(kb))

    def quick_links(self, kb: KnowledgeBase) -> list[tuple[str, str]]:
        return [
            (reverse("admin:knowledge_knowledgebase_upload", args=[kb.pk]), "Upload"),
            (documents_url(kb), "Documents"),
            (
                reverse("admin:knowledge_websource_changelist")
                + f"?knowledge_base__id__exact={kb.pk}",
                "Web sources",
            ),
        ]

    # ------------------------------------------------------------------ settings page

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = KnowledgeBaseAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj=None):
        if obj is None:
            return [
                (None, {"fields": ["tenant", "name", "description"]}),
                CHUNKING,
                (
                    "Embedding",
                    {
                        "fields": [
                            "embedding",
                            "embedding_model_name",
                            "embedding_dims",
                            "embedding_scripts",
                        ],
                        "description": "Recorded when the knowledge base is created; change it "
                        "later with Re-embed.",
                    },
                ),
                RETRIEVAL,
            ]
        return [
            (None, {"fields": ["tenant", "name", "description"]}),
            CHUNKING,
            (
                "Embedding",
                {
                    "fields": [
                        "embedding_provider",
                        "embedding_model",
                        "embedding_dimensions",
                        "embedding_scripts",
                    ]
                },
            ),
            RETRIEVAL,
        ]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        if obj is None:
            return []
        return ["tenant", "embedding_provider", "embedding_model", "embedding_dimensions"]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        kb = self.get_object(request, unquote(object_id))
        context = {
            "title": str(kb),
            "subtitle": f"Knowledge base of {kb.tenant}",
            **(extra_context or {}),
            **self.panels(request, kb),
        }
        return super().change_view(request, object_id, form_url, extra_context=context)

    def panels(self, request: HttpRequest, kb: KnowledgeBase) -> dict:
        """What the page shows above the settings form (extended by ``retrieval.admin``)."""
        return {
            "overview": selectors.knowledge_base_overview(kb),
            "documents_url": documents_url(kb),
            "quick_links": self.quick_links(kb),
            "can_manage": allowed(request, Permission.MANAGE_KNOWLEDGE_BASES, kb.tenant_id),
            "can_edit_documents": allowed(request, Permission.WRITE_DOCUMENTS, kb.tenant_id),
        }

    def save_model(self, request, obj: KnowledgeBase, form, change: bool) -> None:
        if not change:
            data = form.cleaned_data
            settings = {
                f: data[f]
                for f in SETTINGS_FIELDS
                if f in data and f not in ("name", "description")
            }
            created = create_knowledge_base(
                tenant=data["tenant"],
                name=data["name"],
                description=data.get("description", ""),
                embedding=data.get("embedding_config"),
                user_words=data.get("user_words") or [],
                **settings,
            )
            # the admin goes on with ``obj`` (log entry, redirect): make it the row just created
            obj.pk = created.pk
            obj.refresh_from_db()
            obj._state.adding = False
            return
        changes = {f: form.cleaned_data[f] for f in form.changed_data if f in SETTINGS_FIELDS}
        words = form.cleaned_data["user_words"] if "user_words" in form.changed_data else None
        update_knowledge_base(
            tenant=obj.tenant, knowledge_base=obj, changes=changes, user_words=words
        )
        obj.refresh_from_db()

    def delete_model(self, request, obj: KnowledgeBase) -> None:
        delete_knowledge_base(tenant=obj.tenant, knowledge_base=obj)

    def delete_queryset(self, request, queryset) -> None:
        scoped = self.scope(request, queryset, self.delete_needs)
        for kb in scoped.select_related("tenant"):
            delete_knowledge_base(tenant=kb.tenant, knowledge_base=kb)

    def get_deleted_objects(self, objs, request):
        """A summary instead of Django's list of every document and chunk (thousands); the
        knowledge bases the user may not delete are named as missing permissions."""
        kbs = list(objs)
        denied = {
            f"knowledge bases of {kb.tenant}"
            for kb in kbs
            if not self.has_delete_permission(request, kb)
        }
        counts = selectors.deletion_counts(kbs)
        return [str(kb) for kb in kbs], counts, denied, []

    # ------------------------------------------------------------------ own views

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/upload/",
                view(self.upload_view),
                name="knowledge_knowledgebase_upload",
            ),
            path(
                "<path:object_id>/reembed/",
                view(self.reembed_view),
                name="knowledge_knowledgebase_reembed",
            ),
            *super().get_urls(),
        ]

    def page_context(self, request: HttpRequest, kb: KnowledgeBase, title: str) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": kb,
            "kb": kb,
            "title": title,
            "has_view_permission": True,
            "quick_links": self.quick_links(kb),
        }

    def upload_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Several files at once, all or nothing: each is accepted, a duplicate, skipped (an
        archive entry that is not an upload) or refused with its reason; one refusal and
        nothing is stored."""
        kb = self.scoped_object_or_404(request, object_id, Permission.WRITE_DOCUMENTS)
        form = UploadForm(request.POST or None, request.FILES or None)
        outcomes = None
        if request.method == "POST" and form.is_valid():
            outcomes = upload_documents(
                tenant=kb.tenant,
                knowledge_base=kb,
                files=form.cleaned_data["uploads"],
                urls=[check_url_document(url) for url in form.cleaned_data["urls"]],
                replace=form.cleaned_data["replace"],
            )
        refused = [o for o in outcomes or [] if o.refused]
        if outcomes is not None and not refused:
            form = UploadForm()  # refused: the URLs stay on the form, to be sent again
        context = {
            **self.page_context(request, kb, f"Upload documents to {kb}"),
            "form": form,
            "results": upload_results(outcomes) if outcomes is not None else None,
            "refusal": refusal(len(refused), len(outcomes)) if refused else "",
            "documents_url": documents_url(kb),
            "accepted_types": ACCEPTED_EXTENSIONS,
        }
        return TemplateResponse(request, "admin/knowledge/knowledgebase/upload.html", context)

    def reembed_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Move the knowledge base to another embedding model, in the background."""
        kb = self.scoped_object_or_404(request, object_id, Permission.MANAGE_KNOWLEDGE_BASES)
        initial = {"provider": kb.embedding_provider}
        form = ReembedForm(request.POST or None, initial=initial)
        if request.method == "POST" and form.is_valid():
            target = change_embedding(
                tenant=kb.tenant, knowledge_base=kb, config=form.cleaned_data["config"]
            )
            messages.success(
                request,
                f"Re-embedding with {target['model'] or target['provider']} started in the "
                "background; search keeps the current vectors until every chunk is done.",
            )
            return HttpResponseRedirect(
                reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])
            )
        context = {**self.page_context(request, kb, f"Re-embed {kb}"), "form": form}
        return TemplateResponse(request, "admin/knowledge/knowledgebase/reembed.html", context)


@dataclass(frozen=True)
class UploadResult:
    """One file of an upload as the page shows it."""

    name: str
    kind: str  # accepted | duplicate | skipped | refused (an Outcome)
    document: Document | None = None  # the new document, or the existing one of a duplicate
    reason: str = ""
    status: str = ""
    progress: str = ""
    chunks: str = ""


def refusal(refused: int, files: int) -> str:
    were, them = ("was", "it") if refused == 1 else ("were", "them")
    return (
        f"Nothing was stored: {refused} of the {files} files {were} refused (the reasons are "
        f"below). Remove or fix {them} and upload again."
    )


def upload_results(outcomes: list[UploadOutcome]) -> list[UploadResult]:
    results = []
    for outcome in outcomes:
        if outcome.accepted:
            document = outcome.document
            results.append(
                UploadResult(
                    outcome.name,
                    "accepted",
                    document,
                    status=status_badge(document),
                    progress=progress_bar(document),
                    chunks=chunk_count(document),
                )
            )
        elif isinstance(outcome.error, DuplicateDocument):
            results.append(UploadResult(outcome.name, "duplicate", outcome.error.existing))
        else:
            kind = str(outcome.outcome)
            results.append(UploadResult(outcome.name, kind, reason=str(outcome.error)))
    return results
