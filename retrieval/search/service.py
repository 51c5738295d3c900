"""RAGService: hybrid search over one or several knowledge bases of a tenant.

The steps of DESIGN.md's "Search, step by step": resolve each knowledge base inside the tenant
(a foreign one is indistinguishable from a missing one), settle the options (knowledge base
defaults overridden by the request), run the legs (vector: an exact scan of the knowledge base's
vectors in memory, or pgvector's HNSW index beyond VECTOR_L1_MAX_BYTES; keyword: BM25Store, with
the retry ladder when it finds nothing), fuse with weighted RRF, optionally rerank the head,
then hydrate the hits from PostgreSQL filtered by tenant, knowledge base and ready documents, so
no cache can ever surface a deleted or foreign chunk. Every decision lands in the trace.

Several knowledge bases are searched with their own legs (they may use different embedding
models and weights); each leg is then ranked globally (by cosine similarity, by BM25 score) and
fused with every chunk keeping its own knowledge base's weights. One knowledge base is the same
computation with a single member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from django.conf import settings

from knowledge import selectors
from knowledge.analysis import get_analyzer
from knowledge.embeddings import EmbeddingError, config_for_knowledge_base, get_embedder
from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval import formatting
from retrieval.bm25store import bm25_available, get_store
from retrieval.fusion import weighted_rrf
from retrieval.search.errors import InvalidSearch, KnowledgeBaseNotFound
from retrieval.search.filters import allowed_chunk_ids
from retrieval.search.ladder import run_ladder
from retrieval.search.types import (
    Hit,
    SearchFilters,
    SearchMode,
    SearchOptions,
    Trace,
    WeightSource,
)
from retrieval.vector.policy import nearest_chunks
from retrieval.vector.query_cache import cached_query_embedding
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

VECTOR, KEYWORD = "vector", "keyword"
HYDRATE_MARGIN = 5


@dataclass
class SearchResult:
    hits: list[Hit]
    trace: Trace

    def to_dict(self) -> dict:
        return {"results": [hit.to_dict() for hit in self.hits], "trace": self.trace.to_dict()}


@dataclass
class _Plan:
    """One knowledge base's settled options and what its legs found."""

    kb: KnowledgeBase
    top_k: int
    candidates: int
    weights: dict[str, float]
    weight_source: str
    rerank: bool
    rerank_top_n: int
    run: set[str] = field(default_factory=set)
    vector_hits: list[tuple[int, float]] = field(default_factory=list)
    keyword_hits: list[tuple[int, float]] = field(default_factory=list)
    trace: dict = field(default_factory=dict)
    allowed: np.ndarray | None = None  # chunk ids passing the filters, once read


class RAGService:
    """Search for one tenant. ``RAGService(tenant).search("query", kb_id, top_k=5)``."""

    def __init__(self, tenant: Tenant, *, store=None) -> None:
        self.tenant = tenant
        self._store = store

    @property
    def store(self):
        if self._store is None:
            self._store = get_store()
        return self._store

    # ------------------------------------------------------------------ public API

    def search(
        self,
        query: str,
        knowledge_base_id: int,
        *,
        options: SearchOptions | None = None,
        **overrides,
    ) -> SearchResult:
        """Search one knowledge base. Keyword overrides are fields of SearchOptions
        (top_k, mode, vector_weight, keyword_weight, score_threshold, rerank, filters...)."""
        return self.search_multiple_knowledge_bases(
            query, [knowledge_base_id], options=options, **overrides
        )

    def search_multiple_knowledge_bases(
        self,
        query: str,
        knowledge_base_ids: Iterable[int],
        *,
        options: SearchOptions | None = None,
        **overrides,
    ) -> SearchResult:
        started = time.perf_counter()
        query = _clean_query(query)
        options = _settle(options or SearchOptions(), overrides)
        kbs = self._knowledge_bases(knowledge_base_ids)
        trace = Trace(mode_requested=str(options.mode), k=settings.RAG_RRF_K)
        trace.filters = _describe_filters(options.filters)
        plans = [self._plan(kb, options) for kb in kbs]
        top_k = options.top_k or max(plan.top_k for plan in plans)
        trace.top_k = top_k
        for plan in plans:
            self._run_legs(query, plan, options, trace)
            prefix = f"knowledge base {plan.kb.pk}: " if len(plans) > 1 else ""
            trace.fallbacks.extend(prefix + f for f in plan.trace["fallbacks"])
        # Threshold and top_k cut the fused order from the top, and rerank reorders only its
        # head, so hits past that many can never be returned: they are not hydrated.
        wanted = max(top_k, *(p.rerank_top_n for p in plans if p.rerank), 0)
        hits = self._fuse_and_hydrate(plans, trace, wanted)
        hits = self._maybe_rerank(query, hits, plans, trace)
        threshold = options.score_threshold
        if threshold is None and len(plans) == 1:
            threshold = plans[0].kb.score_threshold
        if threshold is not None:
            hits = [hit for hit in hits if hit.score >= threshold]
        hits = hits[:top_k]
        for plan in plans:
            plan.trace["hits"] = sum(1 for h in hits if h.knowledge_base_id == plan.kb.pk)
        trace.results = len(hits)
        trace.knowledge_bases = [plan.trace for plan in plans]
        trace.total_ms = _ms(started)
        return SearchResult(hits, trace)

    # Set by the LangChain adapter when it loads (retrieval.langchain.retriever), so the core
    # does not import its adapter.
    _retriever_factory: ClassVar[Callable[..., Any] | None] = None

    @classmethod
    def register_retriever_factory(cls, factory: Callable[..., Any]) -> None:
        """``factory(service, knowledge_base_id, **options)`` makes ``get_retriever``'s answer."""
        cls._retriever_factory = factory

    def get_retriever(self, knowledge_base_id: int, **options):
        """A LangChain VectorStoreRetriever over one knowledge base: this search with
        ``options`` (see retrieval.langchain.retriever.get_retriever)."""
        if RAGService._retriever_factory is None:
            raise RuntimeError("no retriever adapter is registered (retrieval.langchain)")
        return RAGService._retriever_factory(self, knowledge_base_id, **options)

    @staticmethod
    def format_for_context(hits: list[Hit], max_chars: int = 6000) -> str:
        """Numbered citations and a sources list for an LLM prompt (see retrieval.formatting)."""
        return formatting.format_for_context(hits, max_chars)

    @staticmethod
    def format_for_tool_output(hits: list[Hit], max_chunks: int = 5) -> str:
        """A compact answer for an agent's tool call (see retrieval.formatting)."""
        return formatting.format_for_tool_output(hits, max_chunks)

    # ------------------------------------------------------------------ planning

    def _knowledge_bases(self, ids: Iterable[int]) -> list[KnowledgeBase]:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if not wanted:
            raise InvalidSearch("give at least one knowledge base")
        found = {kb.pk: kb for kb in selectors.knowledge_bases(self.tenant).filter(pk__in=wanted)}
        missing = [i for i in wanted if i not in found]
        if missing:
            raise KnowledgeBaseNotFound(f"knowledge base {missing[0]} not found")
        return [found[i] for i in wanted]

    def _plan(self, kb: KnowledgeBase, options: SearchOptions) -> _Plan:
        top_k = options.top_k or kb.top_k
        weights, source = _weights(kb, options)
        plan = _Plan(
            kb=kb,
            top_k=top_k,
            candidates=top_k * (options.candidate_multiplier or kb.candidate_multiplier),
            weights=weights,
            weight_source=source,
            rerank=kb.rerank_enabled if options.rerank is None else options.rerank,
            rerank_top_n=options.rerank_top_n or kb.rerank_top_n,
        )
        plan.trace = {
            "knowledge_base_id": kb.pk,
            "name": kb.name,
            "weights": dict(weights),
            "weight_source": source,
            "retrieval_path": [],
            "fallbacks": [],
        }
        return plan

    # ------------------------------------------------------------------ legs

    def _run_legs(self, query: str, plan: _Plan, options: SearchOptions, trace: Trace) -> None:
        mode = options.mode
        wanted = {
            SearchMode.VECTOR: {VECTOR},
            SearchMode.KEYWORD: {KEYWORD},
        }.get(mode, {leg for leg, weight in plan.weights.items() if weight > 0})
        if mode in (SearchMode.VECTOR, SearchMode.KEYWORD):
            leg = next(iter(wanted))
            plan.weights = {leg: 1.0}
        fallbacks = plan.trace["fallbacks"]
        vector_reason = None
        if VECTOR in wanted:
            vector_reason = self._vector_leg(query, plan, options.filters, trace)
            if vector_reason is not None:
                if KEYWORD in wanted:
                    fallbacks.append(f"{vector_reason} -> keyword only")
                else:
                    fallbacks.append(f"{vector_reason} -> keyword")
                    wanted.add(KEYWORD)
                    plan.weights = {KEYWORD: 1.0}
        if KEYWORD in wanted:
            reason = self._keyword_leg(query, plan, options.filters, trace)
            if reason is not None:
                if VECTOR in plan.run:
                    fallbacks.append(f"{reason} -> vector only")
                elif VECTOR in wanted or vector_reason is not None:
                    fallbacks.append(f"{reason}; no leg could run")
                else:
                    plan.weights = {VECTOR: 1.0}
                    failed = self._vector_leg(query, plan, options.filters, trace)
                    fallbacks.append(
                        f"{reason} -> vector" if failed is None else f"{reason}; {failed}"
                    )
        plan.trace["retrieval_path"] = [leg for leg in (VECTOR, KEYWORD) if leg in plan.run]
        plan.trace["mode_used"] = _mode_used(plan.run)

    def _vector_leg(
        self, query: str, plan: _Plan, filters: SearchFilters, trace: Trace
    ) -> str | None:
        """Run the vector leg; returns why it could not run, or None."""
        kb = plan.kb
        if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE:
            return "no embedder"
        if not kb.embedding_dimensions:
            return "no vectors yet"
        started = time.perf_counter()
        try:
            embedder = get_embedder(config_for_knowledge_base(kb))
            vector, cache_hit = cached_query_embedding(embedder, query)
        except EmbeddingError as exc:  # ProviderUnavailable included
            logger.warning("query embedding failed for knowledge base %s: %s", kb.pk, exc)
            trace.vector.detail["error"] = str(exc)
            return "embedding error"
        embed_ms = _ms(started)
        try:
            hits, how = nearest_chunks(
                kb, vector, plan.candidates, filters, lambda: self._allowed(plan, filters)
            )
        except KnowledgeBase.DoesNotExist:
            raise KnowledgeBaseNotFound(f"knowledge base {kb.pk} not found") from None
        trace.vector.detail["index"] = how
        plan.vector_hits = hits
        plan.run.add(VECTOR)
        leg = trace.vector
        leg.ran = True
        leg.candidates += len(hits)
        leg.ms += _ms(started)
        leg.detail.update(
            {
                "model": kb.embedding_model,
                "dimensions": kb.embedding_dimensions,
                "embedding_cache_hit": cache_hit,
                "embedding_ms": embed_ms,
            }
        )
        plan.trace["vector"] = {
            "candidates": len(hits),
            "embedding_cache_hit": cache_hit,
            "index": how["index"],
        }
        return None

    def _keyword_leg(
        self, query: str, plan: _Plan, filters: SearchFilters, trace: Trace
    ) -> str | None:
        kb = plan.kb
        if not bm25_available():
            return "BM25 unavailable"
        started = time.perf_counter()
        try:
            handle = self.store.get(kb, fresh=True)  # kb was read at the start of this search
        except KnowledgeBase.DoesNotExist:
            raise KnowledgeBaseNotFound(f"knowledge base {kb.pk} not found") from None
        except Exception:  # the keyword leg failing must not fail the search
            logger.exception("BM25 index unavailable for knowledge base %s", kb.pk)
            return "BM25 unavailable"
        analyzer = get_analyzer(kb.user_words)
        tokens = analyzer.tokens(query)
        allowed = self._allowed(plan, filters)
        hits = handle.index.search(tokens, plan.candidates, allowed)
        attempts: list[dict] = []
        if not hits:
            hits, attempts = run_ladder(
                query=query,
                tokens=tokens,
                index=handle.index,
                limit=plan.candidates,
                allowed=allowed,
                user_words=kb.user_words,
                titles=lambda: (
                    selectors.documents(self.tenant, kb)
                    .filter(status=Document.Status.READY)
                    .values_list("pk", "title")
                ),
                first_chunks=lambda ids: self._first_chunks(kb, ids),
            )
            trace.retry_ladder.extend({"knowledge_base_id": kb.pk, **a} for a in attempts)
        plan.keyword_hits = hits
        plan.run.add(KEYWORD)
        leg = trace.keyword
        leg.ran = True
        leg.candidates += len(hits)
        leg.ms += _ms(started)
        leg.detail.update({"tokens": tokens[:50], "bm25": handle.trace()})
        plan.trace["keyword"] = {
            "candidates": len(hits),
            "tier": str(handle.tier),
            "index_version": handle.version,
            "ladder": [a["rung"] for a in attempts],
        }
        return None

    def _allowed(self, plan: _Plan, filters: SearchFilters) -> np.ndarray | None:
        """Ids of the chunks the filters let through (None: no filter), read once per plan
        and shared by both legs."""
        if not filters.active:
            return None
        if plan.allowed is None:
            plan.allowed = allowed_chunk_ids(self.tenant.pk, plan.kb.pk, filters)
        return plan.allowed

    def _first_chunks(self, kb: KnowledgeBase, document_ids: list[int]) -> dict[int, int]:
        rows = (
            selectors.chunks(self.tenant, kb)
            .filter(document_id__in=document_ids)
            .order_by("document_id", "position")
            .values_list("document_id", "pk")
        )
        first: dict[int, int] = {}
        for document_id, chunk_id in rows:
            first.setdefault(document_id, chunk_id)
        return first

    # ------------------------------------------------------------------ fusion, hydration

    def _fuse_and_hydrate(self, plans: list[_Plan], trace: Trace, wanted: int) -> list[Hit]:
        """The first ``wanted`` fused candidates that hydrate (fewer if the legs found fewer)."""
        started = time.perf_counter()
        owner: dict[int, _Plan] = {}
        vector: list[tuple[float, int]] = []
        keyword: list[tuple[float, int]] = []
        for plan in plans:
            for chunk_id, similarity in plan.vector_hits:
                vector.append((similarity, chunk_id))
                owner[chunk_id] = plan
            for chunk_id, score in plan.keyword_hits:
                keyword.append((score, chunk_id))
                owner[chunk_id] = plan
        vector.sort(key=lambda pair: (-pair[0], pair[1]))
        keyword.sort(key=lambda pair: (-pair[0], pair[1]))
        rankings = {VECTOR: [c for _, c in vector], KEYWORD: [c for _, c in keyword]}
        weights = {leg: [owner[c].weights.get(leg, 0.0) for c in rankings[leg]] for leg in rankings}
        k = trace.k
        fused = weighted_rrf(rankings, weights, k=k)
        trace.fusion_ms = _ms(started)
        trace.candidate_count = len(fused)
        ran = {leg for plan in plans for leg in plan.run}
        trace.retrieval_path = [leg for leg in (VECTOR, KEYWORD) if leg in ran]
        if len(ran) == 2:
            trace.retrieval_path.append("fusion")
        trace.mode_used = _mode_used(ran)
        trace.weights = _merged_weights(plans)
        trace.weight_source = plans[0].weight_source if len(plans) == 1 else "per knowledge base"
        # The best a chunk can score: first in every leg that ran for its knowledge base.
        best = (
            max(
                (sum(w for leg, w in p.weights.items() if leg in p.run) / (k + 1) for p in plans),
                default=0.0,
            )
            or 1.0
        )
        similarity = dict((c, s) for s, c in vector)
        bm25 = dict((c, s) for s, c in keyword)
        kb_ids = [p.kb.pk for p in plans]
        items = fused.top()
        hits: list[Hit] = []
        start = 0
        while len(hits) < wanted and start < len(items):
            # A margin for rows that no longer hydrate; another round only if more vanished.
            batch = items[start : start + wanted - len(hits) + HYDRATE_MARGIN]
            start += len(batch)
            rows = self._hydrate([item.id for item in batch], kb_ids)
            hits.extend(
                self._hit(item, rows[item.id], best, similarity, bm25)
                for item in batch
                if item.id in rows  # else deleted, reprocessing, or not this tenant's
            )
        return hits[:wanted]

    @staticmethod
    def _hit(item, row: Chunk, best: float, similarity: dict, bm25: dict) -> Hit:
        return Hit(
            chunk_id=item.id,
            document_id=row.document_id,
            knowledge_base_id=row.knowledge_base_id,
            document_title=row.document.title,
            original_filename=row.document.original_filename,
            content=row.content,
            score=round(item.score / best, 6),
            vector_similarity=similarity.get(item.id),
            vector_rank=item.ranks.get(VECTOR),
            bm25_score=bm25.get(item.id),
            bm25_rank=item.ranks.get(KEYWORD),
            page=row.page,
            start_char=row.start_char,
            end_char=row.end_char,
            heading_path=list(row.heading_path),
            metadata=row.metadata,
            position=row.position,
        )

    def _hydrate(self, chunk_ids: list[int], kb_ids: list[int]) -> dict[int, Chunk]:
        if not chunk_ids:
            return {}
        rows = (
            Chunk.objects.filter(
                pk__in=chunk_ids,
                tenant=self.tenant,
                knowledge_base_id__in=kb_ids,
                document__tenant=self.tenant,
                document__status=Document.Status.READY,
            )
            .select_related("document")
            .only(
                "pk",
                "document_id",
                "knowledge_base_id",
                "content",
                "page",
                "start_char",
                "end_char",
                "heading_path",
                "metadata",
                "position",
                "document__title",
                "document__original_filename",
            )
        )
        return {row.pk: row for row in rows}

    # ------------------------------------------------------------------ rerank

    def _maybe_rerank(
        self, query: str, hits: list[Hit], plans: list[_Plan], trace: Trace
    ) -> list[Hit]:
        if not any(plan.rerank for plan in plans):
            trace.rerank = {"ran": False, "reason": "disabled"}
            return hits
        if not hits:
            trace.rerank = {"ran": False, "reason": "no results"}
            return hits
        if _unanimous(plans):
            trace.rerank = {"ran": False, "reason": "unanimity"}
            return hits
        from retrieval.rerank import RerankError, get_reranker

        try:
            reranker = get_reranker()
        except RerankError as exc:
            trace.rerank = {"ran": False, "reason": f"reranker unavailable: {exc}"}
            return hits
        if reranker is None:
            trace.rerank = {"ran": False, "reason": "no reranker configured"}
            return hits
        top_n = max(plan.rerank_top_n for plan in plans)
        head, tail = hits[:top_n], hits[top_n:]
        started = time.perf_counter()
        try:
            scores = reranker.rerank(query, [hit.content for hit in head])
        except RerankError as exc:
            trace.rerank = {"ran": False, "reason": f"rerank failed: {exc}"}
            trace.fallbacks.append("rerank error -> fused order")
            return hits
        for hit, score in zip(head, scores, strict=True):
            hit.rerank_score = float(score)
        head = sorted(head, key=lambda hit: -hit.rerank_score)  # stable: ties keep fused order
        trace.rerank = {
            "ran": True,
            "reranker": reranker.name,
            "head": len(head),
            "ms": _ms(started),
        }
        trace.retrieval_path.append("rerank")
        return head + tail


# --------------------------------------------------------------------------- helpers


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _clean_query(query: str) -> str:
    if not isinstance(query, str):
        raise InvalidSearch("query must be text")
    cleaned = query.replace("\x00", " ").strip()
    if not cleaned:
        raise InvalidSearch("query is empty")
    limit = settings.RAG_MAX_QUERY_CHARS
    if len(cleaned) > limit:
        raise InvalidSearch(f"query is longer than {limit} characters")
    return cleaned


def _settle(options: SearchOptions, overrides: dict) -> SearchOptions:
    unknown = set(overrides) - set(SearchOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown search options: {', '.join(sorted(unknown))}")
    if isinstance(overrides.get("filters"), dict):
        overrides["filters"] = SearchFilters(**overrides["filters"])
    if overrides.get("mode") is not None:
        try:
            overrides["mode"] = SearchMode(overrides["mode"])
        except ValueError:
            modes = ", ".join(m.value for m in SearchMode)
            raise InvalidSearch(f"mode must be one of {modes}") from None
    options = replace(options, **{k: v for k, v in overrides.items() if v is not None})
    if options.top_k is not None and not 1 <= options.top_k <= settings.RAG_MAX_TOP_K:
        raise InvalidSearch(f"top_k must be between 1 and {settings.RAG_MAX_TOP_K}")
    for name in ("vector_weight", "keyword_weight"):
        value = getattr(options, name)
        if value is not None and value < 0:
            raise InvalidSearch(f"{name} must be >= 0")
    if options.vector_weight == 0 and options.keyword_weight == 0:
        raise InvalidSearch("vector_weight and keyword_weight cannot both be 0")
    return options


def _weights(kb: KnowledgeBase, options: SearchOptions) -> tuple[dict[str, float], str]:
    if (
        kb.weight_mode == KnowledgeBase.WeightMode.CALIBRATED
        and kb.calibrated_vector_weight is not None
    ):
        base = {VECTOR: kb.calibrated_vector_weight, KEYWORD: kb.calibrated_keyword_weight}
        source = WeightSource.CALIBRATED
    elif kb.weight_mode == KnowledgeBase.WeightMode.FIXED:
        base = {VECTOR: kb.vector_weight, KEYWORD: kb.keyword_weight}
        source = WeightSource.FIXED
    else:  # calibration asked for but not run yet
        base = {VECTOR: kb.vector_weight, KEYWORD: kb.keyword_weight}
        source = WeightSource.DEFAULT
    if options.vector_weight is not None or options.keyword_weight is not None:
        if options.vector_weight is not None:
            base[VECTOR] = options.vector_weight
        if options.keyword_weight is not None:
            base[KEYWORD] = options.keyword_weight
        source = WeightSource.QUERY
    return {leg: float(w) for leg, w in base.items()}, str(source)


def _mode_used(ran: set[str]) -> str:
    if ran == {VECTOR, KEYWORD}:
        return SearchMode.HYBRID.value
    if ran:
        return next(iter(ran))
    return "none"


def _merged_weights(plans: list[_Plan]) -> dict[str, float]:
    if len(plans) == 1:
        return dict(plans[0].weights)
    return {f"{p.kb.pk}:{leg}": w for p in plans for leg, w in p.weights.items()}


def _unanimous(plans: list[_Plan]) -> bool:
    """Both legs' top 3 agree in at least 2 places: reranking would not change much."""
    vector = sorted(((s, c) for p in plans for c, s in p.vector_hits), key=lambda x: (-x[0], x[1]))[
        :3
    ]
    keyword = sorted(
        ((s, c) for p in plans for c, s in p.keyword_hits), key=lambda x: (-x[0], x[1])
    )[:3]
    if len(vector) < 2 or len(keyword) < 2:
        return False
    return sum(a[1] == b[1] for a, b in zip(vector, keyword, strict=False)) >= 2


def _describe_filters(filters: SearchFilters) -> dict:
    if not filters.active:
        return {}
    described = {}
    if filters.document_ids is not None:
        described["document_ids"] = list(filters.document_ids)
    if filters.metadata:
        described["metadata"] = filters.metadata
    if filters.max_age_days is not None:
        described["max_age_days"] = filters.max_age_days
    if filters.created_after:
        described["created_after"] = filters.created_after.isoformat()
    if filters.created_before:
        described["created_before"] = filters.created_before.isoformat()
    return described
