"""RAGService: hybrid search over one or several knowledge bases of a tenant.

One search, step by step: resolve each knowledge base inside the tenant (a foreign one is
indistinguishable from a missing one); settle the options per knowledge base (``options``);
run its legs with their fallbacks (``legs``); fuse every leg across the knowledge bases by
weighted RRF (``candidates``); hydrate the head from PostgreSQL, so no cache can ever surface
a deleted or foreign chunk (``hydration``); optionally rerank that head (``reranking``); cut
by score threshold and top_k. Every decision lands in the trace.

The knowledge bases (with their ``index_version``) are read from the primary; the legs and the
hydration read from a replica when ``DATABASE_REPLICA_URL`` gives one and it holds at least
those versions, else from the primary (``retrieval.replica``; ``trace.database``). A replica
that fails mid-search has the search run again on the primary.

Several knowledge bases are searched with their own legs (they may use different embedding
models and weights); one knowledge base is the same computation with a single member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings
from django.db import DatabaseError

from knowledge import selectors
from knowledge.analysis.scripts import dominant_script, script_units
from knowledge.models import KnowledgeBase
from retrieval import replica
from retrieval.bm25store import BM25Store, get_store
from retrieval.relevance import RelevanceModel, crowd_of, signals
from retrieval.search import formatting
from retrieval.search.candidates import fuse
from retrieval.search.errors import InvalidSearch, KnowledgeBaseNotFound
from retrieval.search.hydration import hydrate
from retrieval.search.legs import Legs, Retrieved, mode_used
from retrieval.search.options import clean_query, plan_for, settle
from retrieval.search.reranking import rerank
from retrieval.search.types import Hit, Leg, SearchOptions, Trace, elapsed_ms
from tenancy import selectors as tenancy_selectors
from tenancy.models import Tenant
from tenancy.roles import Permission, role_permissions

logger = logging.getLogger(__name__)


@dataclass
class SearchResult:
    hits: list[Hit]
    trace: Trace

    def to_dict(self, trace_fields: Sequence[str] | None = None) -> dict:
        """Hits and trace in their JSON shape; ``trace_fields``: only these of the trace."""
        return {
            "results": [hit.to_dict() for hit in self.hits],
            "trace": self.trace.to_dict(trace_fields),
        }


class RAGService:
    """Search for one tenant. ``RAGService(tenant).search("query", kb_id, top_k=5)``.

    The seeds' calling conventions hold positionally: ``search(query, knowledge_base_id,
    user_id, top_k, score_threshold)``, ``search_multiple_knowledge_bases(query,
    knowledge_base_ids, user_id, top_k)`` and ``get_retriever(user_id, knowledge_base_id, k)``.
    A ``user_id`` (given per call, or to the service) limits the search to knowledge bases that
    user may read in the tenant: anyone else gets the not-found of a missing knowledge base."""

    def __init__(
        self, tenant: Tenant, *, store: BM25Store | None = None, user_id: int | None = None
    ) -> None:
        self.tenant = tenant
        self.user_id = user_id
        self._store = store

    @property
    def store(self) -> BM25Store:
        if self._store is None:
            self._store = get_store()
        return self._store

    def search(
        self,
        query: str,
        knowledge_base_id: int,
        user_id: int | None = None,
        top_k: int | None = None,
        score_threshold: float | None = None,
        *,
        options: SearchOptions | None = None,
        **overrides,
    ) -> SearchResult:
        """Search one knowledge base. Keyword overrides are fields of SearchOptions
        (top_k, mode, vector_weight, keyword_weight, score_threshold, rerank, use_rerank,
        filters...)."""
        return self.search_multiple_knowledge_bases(
            query,
            [knowledge_base_id],
            user_id,
            top_k,
            options=options,
            score_threshold=score_threshold,
            **overrides,
        )

    def search_multiple_knowledge_bases(
        self,
        query: str,
        knowledge_base_ids: Iterable[int],
        user_id: int | None = None,
        top_k: int | None = None,
        *,
        options: SearchOptions | None = None,
        **overrides,
    ) -> SearchResult:
        """Search several knowledge bases (see ``search``)."""
        started = time.perf_counter()
        query = clean_query(query)
        options = settle(options or SearchOptions(), {"top_k": top_k, **overrides})
        kbs = self._knowledge_bases(knowledge_base_ids, user_id)
        route = replica.route_for(self.tenant.pk, {kb.pk: kb.index_version for kb in kbs})
        try:
            with replica.reading_from(route):
                return self._answer(query, options, kbs, route, started)
        except DatabaseError:
            if route.alias != replica.REPLICA:
                raise
            logger.warning("the replica failed mid-search; searching the primary", exc_info=True)
            route = replica.Route(fallback="replica failed -> primary")
            return self._answer(query, options, kbs, route, started)

    def _answer(
        self,
        query: str,
        options: SearchOptions,
        kbs: list[KnowledgeBase],
        route: replica.Route,
        started: float,
    ) -> SearchResult:
        """The search itself, its reads on ``route``'s database (already in effect)."""
        trace = Trace(
            mode_requested=str(options.mode),
            k=settings.RAG_RRF_K,
            filters=options.filters.to_dict(),
            database=route.database,
            replica_lag_fallback=route.lag_fallback,
        )
        if route.fallback:
            trace.fallbacks.append(route.fallback)
        units = script_units(query)
        script = dominant_script(units)
        trace.query_script = script.value if script else None
        plans = [plan_for(kb, options, units) for kb in kbs]
        top_k = options.top_k or max(plan.top_k for plan in plans)
        trace.top_k = top_k
        legs = Legs(self.tenant, lambda: self.store, query, options.filters, trace)
        retrieved = []
        for plan in plans:
            # The keyword leg first: the vector leg follows the version of the BM25 view it
            # answered from (older than the knowledge base's while the worker builds the newer).
            retrieved.append(legs.run(plan, first=Leg.KEYWORD))
            prefix = f"knowledge base {plan.kb.pk}: " if len(plans) > 1 else ""
            trace.fallbacks.extend(prefix + f for f in plan.trace.fallbacks)
            trace.warnings.extend(prefix + w for w in plan.trace.warnings)
        fusion_started = time.perf_counter()
        candidates = fuse(retrieved, trace.k)
        trace.fusion_ms = elapsed_ms(fusion_started)
        trace.candidate_count = len(candidates)
        _describe_legs(trace, retrieved)
        # Threshold and top_k cut the fused order from the top, and rerank reorders only its
        # head, so hits past that many can never be returned: they are not hydrated.
        wanted = max(top_k, *(p.rerank_top_n for p in plans if p.rerank), 0)
        hits = hydrate(self.tenant, candidates, [p.kb.pk for p in plans], wanted)
        hits = rerank(query, hits, plans, candidates.rankings, trace)
        _judge(hits, retrieved)
        threshold = options.score_threshold
        if threshold is None and len(plans) == 1:
            threshold = plans[0].kb.score_threshold
        if threshold is not None:  # on relevance: the fused score only orders
            hits = [hit for hit in hits if hit.relevance >= threshold]
        hits = hits[:top_k]
        for plan in plans:
            plan.trace.hits = sum(1 for h in hits if h.knowledge_base_id == plan.kb.pk)
        trace.results = len(hits)
        trace.knowledge_bases = [plan.trace for plan in plans]
        trace.total_ms = elapsed_ms(started)
        return SearchResult(hits, trace)

    # Set by the LangChain adapter when it loads (retrieval.langchain.retriever), so the core
    # does not import its adapter.
    _retriever_factory: ClassVar[Callable[..., Any] | None] = None

    @classmethod
    def register_retriever_factory(cls, factory: Callable[..., Any]) -> None:
        """``factory(service, knowledge_base_id, **options)`` makes ``get_retriever``'s answer."""
        cls._retriever_factory = factory

    def get_retriever(
        self,
        user_id: int | None = None,
        knowledge_base_id: int | None = None,
        k: int | None = None,
        **options,
    ):
        """A LangChain VectorStoreRetriever over one knowledge base: this search with
        ``options`` (see retrieval.langchain.retriever.get_retriever), as ``user_id`` when
        given (checked now: a knowledge base that user may not read is not found)."""
        if knowledge_base_id is None:
            raise TypeError("get_retriever(user_id, knowledge_base_id, k) needs knowledge_base_id")
        if RAGService._retriever_factory is None:
            raise RuntimeError("no retriever adapter is registered (retrieval.langchain)")
        service = self
        if user_id is not None:
            service = RAGService(self.tenant, store=self._store, user_id=user_id)
            service._knowledge_bases([knowledge_base_id])
        if k is not None:
            options["k"] = k
        return RAGService._retriever_factory(service, knowledge_base_id, **options)

    @staticmethod
    def format_for_context(hits: list[Hit], max_chars: int = 6000) -> str:
        """Numbered citations and a sources list for an LLM prompt (see ``formatting``)."""
        return formatting.format_for_context(hits, max_chars)

    @staticmethod
    def format_for_tool_output(hits: list[Hit], max_chunks: int = 5) -> str:
        """A compact answer for an agent's tool call (see ``formatting``)."""
        return formatting.format_for_tool_output(hits, max_chunks)

    def _knowledge_bases(
        self, ids: Iterable[int], user_id: int | None = None
    ) -> list[KnowledgeBase]:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if not wanted:
            raise InvalidSearch("give at least one knowledge base")
        user = self.user_id if user_id is None else user_id
        if user is not None:
            role = tenancy_selectors.role_of(self.tenant, getattr(user, "pk", user))
            if Permission.READ not in role_permissions(role):
                raise KnowledgeBaseNotFound(f"knowledge base {wanted[0]} not found")
        found = selectors.knowledge_bases_by_id(self.tenant, wanted)
        missing = [i for i in wanted if i not in found]
        if missing:
            raise KnowledgeBaseNotFound(f"knowledge base {missing[0]} not found")
        return [found[i] for i in wanted]


def _judge(hits: list[Hit], retrieved: list[Retrieved]) -> None:
    """Each hit's relevance (retrieval.relevance): its knowledge base's per-leg models over the
    legs that ran there, weighed by the weights they ran with; the trace says which."""
    judges = {}
    for found in retrieved:
        plan = found.plan
        model = RelevanceModel.from_dict((plan.kb.calibration or {}).get("relevance"))
        weights = {leg.value: found.weights.get(leg, 0.0) for leg in found.ran}
        if weights:
            fitted = all(leg in model.models for leg in weights)
            legs = mode_used(found.ran)
            plan.trace.relevance = f"{'calibrated' if fitted else 'default'} {legs}"
        crowd = tuple(crowd_of(found.hits.get(leg, ())) for leg in (Leg.KEYWORD, Leg.VECTOR))
        judges[plan.kb.pk] = (found, model, weights, crowd)
    for hit in hits:
        found, model, weights, crowd = judges[hit.knowledge_base_id]
        hit.signals = signals(
            bm25_score=hit.bm25_score,
            cosine=hit.vector_similarity,
            reach=found.reach,
            crowd=crowd,
        )
        hit.relevance = round(model.relevance(weights, hit.signals), 4)


def _describe_legs(trace: Trace, retrieved: list[Retrieved]) -> None:
    """What ran across the knowledge bases, and with which weights (keyed by knowledge base
    when there are several)."""
    ran = {leg for found in retrieved for leg in found.ran}
    trace.retrieval_path = [leg.value for leg in Leg if leg in ran]
    if len(ran) == len(Leg):
        trace.retrieval_path.append("fusion")
    trace.mode_used = mode_used(ran)
    if len(retrieved) == 1:
        trace.weights = {leg.value: w for leg, w in retrieved[0].weights.items()}
        trace.weight_source = retrieved[0].plan.weight_source
    else:
        trace.weights = {
            f"{found.plan.kb.pk}:{leg.value}": w
            for found in retrieved
            for leg, w in found.weights.items()
        }
        trace.weight_source = "per knowledge base"
