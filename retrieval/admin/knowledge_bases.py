"""The knowledge-base admin of ``knowledge``, extended with what retrieval knows: the BM25
index panel, the rebuild and calibrate actions, and the hit-testing page."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from knowledge.admin.knowledge_bases import KnowledgeBaseAdmin
from knowledge.analysis import get_analyzer
from knowledge.models import KnowledgeBase
from retrieval.admin import hit_testing
from retrieval.admin.actions import rebuild_index
from retrieval.admin.index_status import index_status
from retrieval.calibration import calibrate
from retrieval.search import InvalidSearch, RAGService
from tenancy.roles import Permission


class RetrievalKnowledgeBaseAdmin(KnowledgeBaseAdmin):
    change_form_template = "admin/retrieval/knowledgebase/change_form.html"

    def quick_links(self, kb: KnowledgeBase) -> list[tuple[str, str]]:
        url = reverse("admin:knowledge_knowledgebase_hit_testing", args=[kb.pk])
        return [*super().quick_links(kb), (url, "Hit testing")]

    def panels(self, request: HttpRequest, kb: KnowledgeBase) -> dict:
        return {**super().panels(request, kb), "index": index_status(kb)}

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/hit-testing/",
                view(self.hit_testing_view),
                name="knowledge_knowledgebase_hit_testing",
            ),
            path(
                "<path:object_id>/rebuild-index/",
                view(require_POST(self.rebuild_index_view)),
                name="knowledge_knowledgebase_rebuild_index",
            ),
            path(
                "<path:object_id>/calibrate/",
                view(require_POST(self.calibrate_view)),
                name="knowledge_knowledgebase_calibrate",
            ),
            *super().get_urls(),
        ]

    def hit_testing_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Run a query the way every client does (RAGService) and show why each hit ranked."""
        kb = self.scoped_object_or_404(request, object_id)
        form = hit_testing.HitTestForm(request.GET if "q" in request.GET else None)
        result = None
        if form.is_bound and form.is_valid():
            try:
                result = RAGService(kb.tenant).search(
                    form.cleaned_data["q"], kb.pk, **form.overrides()
                )
            except InvalidSearch as exc:
                form.add_error(None, str(exc))
            else:
                hit_testing.remember(request.session, kb, form, result)
        context = {
            **self.page_context(request, kb, f"Hit testing: {kb}"),
            "form": form,
            "result": result,
            "hits": hit_testing.present(result, form.cleaned_data["q"], get_analyzer(kb.user_words))
            if result
            else [],
            "trace_json": json.dumps(result.trace.to_dict(), indent=2, ensure_ascii=False)
            if result
            else "",
            "history": hit_testing.history(request.session, kb),
        }
        return TemplateResponse(request, "admin/retrieval/knowledgebase/hit_testing.html", context)

    def rebuild_index_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        kb = self.scoped_object_or_404(request, object_id, Permission.MANAGE_KNOWLEDGE_BASES)
        rebuild_index(kb)
        messages.success(
            request,
            "The BM25 index was dropped and the worker is rebuilding it; reload this page to "
            "see it back. Searches meanwhile build it themselves if they come first.",
        )
        return HttpResponseRedirect(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]))

    def calibrate_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """Runs here, in the request (a search per pseudo-query and leg), so the page that
        comes back shows the new weights."""
        kb = self.scoped_object_or_404(request, object_id, Permission.MANAGE_KNOWLEDGE_BASES)
        result = calibrate(kb.tenant, kb)
        if not result.queries:
            messages.warning(request, "No ready chunks to calibrate on yet.")
        else:
            in_use = (
                "in use now"
                if kb.weight_mode == KnowledgeBase.WeightMode.CALIBRATED
                else "not in use: the weight mode is fixed"
            )
            messages.success(
                request,
                f"Calibrated on {result.queries} pseudo-queries: vector {result.vector_weight:g}"
                f", keyword {result.keyword_weight:g} ({result.rule}); {in_use}.",
            )
        return HttpResponseRedirect(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]))
