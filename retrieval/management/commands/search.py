"""``python manage.py search --tenant T --kb KB [--kb KB2 ...] [--mode M] [--top-k K] QUERY``

Prints the hits (title, page, scores) and the trace; ``--json`` prints
``{"results": [...], "trace": {...}}``.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from knowledge.models import KnowledgeBase
from retrieval.search import InvalidSearch, KnowledgeBaseNotFound, RAGService
from retrieval.search.types import SearchMode
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Search one or several knowledge bases of a tenant."

    def add_arguments(self, parser) -> None:
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True, help="tenant name")
        parser.add_argument(
            "--kb",
            action="append",
            required=True,
            help="knowledge base name or id (repeat for several)",
        )
        parser.add_argument("--mode", choices=[m.value for m in SearchMode], default="auto")
        parser.add_argument("--top-k", type=int)
        parser.add_argument("--rerank", action="store_true", default=None)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, query, tenant, kb, mode, top_k, rerank, json, **options) -> None:
        tenant_obj = Tenant.objects.filter(name=tenant).first()
        if tenant_obj is None:
            raise CommandError(f"no tenant {tenant!r}")
        kb_ids = [self._kb_id(tenant_obj, name) for name in kb]
        try:
            result = RAGService(tenant_obj).search_multiple_knowledge_bases(
                query, kb_ids, mode=mode, top_k=top_k, rerank=rerank
            )
        except (InvalidSearch, KnowledgeBaseNotFound) as exc:
            raise CommandError(str(exc)) from None
        if json:
            self.stdout.write(_dumps(result.to_dict()))
            return
        if not result.hits:
            self.stdout.write("no results")
        for number, hit in enumerate(result.hits, start=1):
            page = f" p.{hit.page}" if hit.page is not None else ""
            self.stdout.write(
                f"[{number}] {hit.document_title}{page}  score={hit.score:.3f}  "
                f"vector={_fmt(hit.vector_similarity)}#{hit.vector_rank or '-'}  "
                f"bm25={_fmt(hit.bm25_score)}#{hit.bm25_rank or '-'}"
                + (f"  rerank={hit.rerank_score:.3f}" if hit.rerank_score is not None else "")
            )
            self.stdout.write("    " + " ".join(hit.content.split())[:200])
        trace = result.trace
        self.stdout.write(
            f"\nmode {trace.mode_requested} -> {trace.mode_used}; path "
            f"{' > '.join(trace.retrieval_path) or '-'}; weights {trace.weights} "
            f"({trace.weight_source}); {trace.total_ms:.1f} ms"
        )
        for fallback in trace.fallbacks:
            self.stdout.write(f"fallback: {fallback}")
        for attempt in trace.retry_ladder:
            self.stdout.write(f"retry ladder: {attempt['rung']} -> {attempt['hits']} hits")

    def _kb_id(self, tenant: Tenant, name: str) -> int:
        found = KnowledgeBase.objects.filter(tenant=tenant, name=name).first()
        if found is None and name.isdigit():
            found = KnowledgeBase.objects.filter(tenant=tenant, pk=int(name)).first()
        if found is None:
            raise CommandError(f"no knowledge base {name!r} in tenant {tenant.name!r}")
        return found.pk


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)
