"""Hit testing: the search form, how a hit is shown, and the last queries of a user per
knowledge base (kept in the session, so they can be run again after a settings change)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from knowledge.analysis import Analyzer
from knowledge.models import KnowledgeBase
from retrieval.admin.highlight import Segment, highlight
from retrieval.search import SearchResult
from retrieval.search.types import Hit, SearchMode

HISTORY_SIZE = 10
RERANK = {"on": True, "off": False}


class HitTestForm(forms.Form):
    """Blank fields mean the knowledge base's own settings, as they are when the query runs."""

    q = forms.CharField(label="Query", max_length=4000, strip=True)
    mode = forms.ChoiceField(
        choices=[(m.value, m.value) for m in SearchMode], initial=SearchMode.AUTO, required=False
    )
    vector_weight = forms.FloatField(required=False, min_value=0)
    keyword_weight = forms.FloatField(required=False, min_value=0)
    top_k = forms.IntegerField(required=False, min_value=1)
    score_threshold = forms.FloatField(required=False, min_value=0, max_value=1)
    rerank = forms.ChoiceField(
        choices=[("", "default"), ("on", "on"), ("off", "off")], required=False
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["q"].max_length = settings.RAG_MAX_QUERY_CHARS
        self.fields["top_k"].max_value = settings.RAG_MAX_TOP_K

    def overrides(self) -> dict:
        """Keyword overrides for ``RAGService.search`` (only what was given)."""
        data = self.cleaned_data
        given = {
            "mode": data.get("mode") or None,
            "vector_weight": data.get("vector_weight"),
            "keyword_weight": data.get("keyword_weight"),
            "top_k": data.get("top_k"),
            "score_threshold": data.get("score_threshold"),
            "rerank": RERANK.get(data.get("rerank") or ""),
        }
        return {name: value for name, value in given.items() if value is not None}

    def params(self) -> dict[str, str]:
        """The non-blank fields as query-string parameters (to run it again later)."""
        return {
            name: str(value)
            for name, value in self.cleaned_data.items()
            if value not in (None, "") and not (name == "mode" and value == SearchMode.AUTO)
        }


@dataclass(frozen=True)
class HitView:
    rank: int
    hit: Hit
    segments: list[Segment]
    chunk_url: str
    document_url: str


def present(result: SearchResult, query: str, analyzer: Analyzer) -> list[HitView]:
    return [
        HitView(
            rank=rank,
            hit=hit,
            segments=highlight(hit.content, query, analyzer),
            chunk_url=reverse("admin:knowledge_chunk_change", args=[hit.chunk_id]),
            document_url=reverse("admin:knowledge_document_change", args=[hit.document_id]),
        )
        for rank, hit in enumerate(result.hits, start=1)
    ]


def _key(kb: KnowledgeBase) -> str:
    return f"rag.hit_testing.{kb.pk}"


def history(session, kb: KnowledgeBase) -> list[dict]:
    """The user's last queries on this knowledge base, newest first, each with its ``url``."""
    base = reverse("admin:knowledge_knowledgebase_hit_testing", args=[kb.pk])
    return [
        {**entry, "url": f"{base}?{urlencode(entry['params'])}"}
        for entry in session.get(_key(kb), [])
    ]


def remember(session, kb: KnowledgeBase, form: HitTestForm, result: SearchResult) -> None:
    """Put this query first in the history (once: the same query with the same options moves
    up), with what it found, so a later run can be compared with it."""
    params = form.params()
    top = result.hits[0] if result.hits else None
    entry = {
        "params": params,
        "options": ", ".join(f"{k}={v}" for k, v in params.items() if k != "q"),
        "results": len(result.hits),
        "top": f"{top.document_title}, chunk {top.position} ({top.score:.3f})" if top else "",
        "ran_at": timezone.now().isoformat(timespec="seconds"),
    }
    entries = [e for e in session.get(_key(kb), []) if e["params"] != params]
    session[_key(kb)] = [entry, *entries][:HISTORY_SIZE]
