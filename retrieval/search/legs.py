"""The legs of a search and the fallback policy between them.

The vector leg embeds the query (cached) and asks ``retrieval.vector.policy.nearest_chunks``;
the keyword leg searches the knowledge base's BM25 index (``store.get(kb, fresh=True)``) and
climbs the retry ladder when the query finds nothing. Both read the filters' allowed chunk ids
at most once per knowledge base. A leg that cannot run says why, and ``FALLBACKS`` says what
the trace notes then; neither failure fails the search. Their reads go to the database the
search was routed to (``retrieval.replica.search_reads``); a database error there while that is
the replica is not a leg's failure but the route's, raised for the service to search the
primary instead.

``Legs.run`` takes a knowledge base's ``Plan`` (immutable) and the leg to run first, and returns
what the legs retrieved (``Retrieved``). The one thing a leg takes from the other is an
argument: the vector leg follows the BM25 view of a keyword leg that ran before it
(``following``: that view's version and documents; ``MatrixCache.get``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from django.db import DatabaseError

from knowledge import selectors
from knowledge.analysis import get_analyzer
from knowledge.embeddings import EmbeddingError, config_for_knowledge_base, get_embedder
from knowledge.models import KnowledgeBase
from retrieval.bm25.segmented import SegmentedIndex
from retrieval.bm25store import BM25Store, bm25_available
from retrieval.core.filter_sql import allowed_chunk_ids
from retrieval.core.stamps import KnownDocuments
from retrieval.relevance import Reach
from retrieval.replica import REPLICA, search_reads
from retrieval.search.errors import KnowledgeBaseNotFound
from retrieval.search.ladder import run_ladder
from retrieval.search.options import Plan
from retrieval.search.types import (
    KeywordSummary,
    Leg,
    SearchFilters,
    SearchMode,
    Trace,
    VectorSummary,
    elapsed_ms,
)
from retrieval.vector.policy import nearest_chunks
from retrieval.vector.query_cache import cached_query_embedding
from tenancy.models import Tenant

logger = logging.getLogger(__name__)


class Outcome(StrEnum):
    """How a leg ended for one knowledge base."""

    NOT_WANTED = "not wanted"
    RAN = "ran"
    FAILED = "failed"
    RAN_INSTEAD = "ran instead of the other"  # the other leg was wanted alone and failed
    FAILED_INSTEAD = "failed instead of the other"


O = Outcome  # noqa: E741 - keeps the table below one row per line

# What the trace notes, by how each leg ended; {vector} and {keyword} say why that leg could
# not run. The legs run in the order the caller gives (a search: the keyword leg first); a leg
# that cannot run is replaced by the other one, alone, when that one was not wanted. Any other
# pair of outcomes notes nothing.
# fmt: off
FALLBACKS: dict[tuple[Outcome, Outcome], tuple[str, ...]] = {
    # (vector, keyword)           notes
    (O.FAILED, O.RAN):            ("{vector} -> keyword only",),
    (O.FAILED, O.FAILED):         ("{vector} -> keyword only", "{keyword}; no leg could run"),
    (O.FAILED, O.RAN_INSTEAD):    ("{vector} -> keyword",),
    (O.FAILED, O.FAILED_INSTEAD): ("{vector} -> keyword", "{keyword}; no leg could run"),
    (O.RAN, O.FAILED):            ("{keyword} -> vector only",),
    (O.RAN_INSTEAD, O.FAILED):    ("{keyword} -> vector",),
    (O.FAILED_INSTEAD, O.FAILED): ("{keyword}; {vector}",),
}
# fmt: on


def run_with_fallbacks(
    wanted: Set[Leg], attempt: Callable[[Leg, bool], str | None], *, first: Leg
) -> list[str]:
    """Run the wanted legs through ``attempt(leg, instead)``, ``first`` first, which returns
    why the leg could not run (None: it ran); ``instead`` is true for a leg run alone in place
    of the other, after it. Returns the fallbacks to note."""
    outcomes = dict.fromkeys(Leg, Outcome.NOT_WANTED)
    reasons: dict[str, str] = {}
    queue = [leg for leg in (first, first.other) if leg in wanted]
    while queue:
        leg = queue.pop(0)
        instead = leg not in wanted
        reason = attempt(leg, instead)
        if reason is None:
            outcomes[leg] = Outcome.RAN_INSTEAD if instead else Outcome.RAN
            continue
        reasons[leg.value] = reason
        outcomes[leg] = Outcome.FAILED_INSTEAD if instead else Outcome.FAILED
        if leg.other not in wanted and outcomes[leg.other] is Outcome.NOT_WANTED:
            queue.append(leg.other)
    notes = FALLBACKS.get((outcomes[Leg.VECTOR], outcomes[Leg.KEYWORD]), ())
    return [note.format(**reasons) for note in notes]


def mode_used(ran: Set[Leg]) -> str:
    if ran == set(Leg):
        return SearchMode.HYBRID.value
    if ran:
        return next(iter(ran)).value
    return "none"


class CannotRun(Exception):
    """A leg could not run for one knowledge base; ``reason`` says why (``FALLBACKS``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class KeywordFound:
    """The keyword leg of one knowledge base: its hits (chunk id, BM25 score) best first, what
    the terms behind them could score (relevance), and the documents of the BM25 view it
    answered from (None when the view has no manifest), which the vector leg follows."""

    hits: list[tuple[int, float]]
    reach: Reach | None
    documents: KnownDocuments | None


@dataclass(frozen=True)
class Retrieved:
    """What one knowledge base's legs retrieved: the legs that ran, the weights they ran with
    (the plan's, or 1 for a leg run alone instead of the other), each one's hits (chunk id,
    score) best first, and what the keyword leg's terms could score."""

    plan: Plan
    ran: frozenset[Leg]
    weights: Mapping[Leg, float]
    hits: Mapping[Leg, list[tuple[int, float]]]
    reach: Reach | None = None


@dataclass
class Legs:
    """The legs of one search, run for each knowledge base's plan. ``store`` is called only
    when a keyword leg runs."""

    tenant: Tenant
    store: Callable[[], BM25Store]
    query: str
    filters: SearchFilters
    trace: Trace

    def run(self, plan: Plan, *, first: Leg) -> Retrieved:
        """The plan's wanted legs, ``first`` first, with their fallbacks (noted in the plan's
        trace). A vector leg after a keyword leg that ran follows its BM25 view."""
        allowed = self._allowed(plan)
        weights = plan.weights
        hits: dict[Leg, list[tuple[int, float]]] = {}
        keyword: KeywordFound | None = None

        def attempt(leg: Leg, instead: bool) -> str | None:
            nonlocal weights, keyword
            if instead:
                weights = {leg: 1.0}
            try:
                if leg is Leg.KEYWORD:
                    keyword = self._keyword(plan, allowed)
                    hits[leg] = keyword.hits
                else:
                    following = keyword.documents if keyword is not None else None
                    hits[leg] = self._vector(plan, allowed, following)
            except CannotRun as exc:
                return exc.reason
            return None

        plan.trace.fallbacks.extend(run_with_fallbacks(plan.wanted, attempt, first=first))
        ran = frozenset(hits)
        plan.trace.retrieval_path = [leg.value for leg in Leg if leg in ran]
        plan.trace.mode_used = mode_used(ran)
        reach = keyword.reach if keyword is not None else None
        return Retrieved(plan, ran, weights, hits, reach)

    def _vector(
        self,
        plan: Plan,
        allowed: Callable[[], np.ndarray | None],
        following: KnownDocuments | None,
    ) -> list[tuple[int, float]]:
        """The vector leg's hits (chunk id, cosine similarity); ``following``: the documents
        of the BM25 view the keyword leg answered from, which the matrix follows."""
        kb = plan.kb
        if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE:
            raise CannotRun("no embedder")
        if not kb.embedding_dimensions:
            raise CannotRun("no vectors yet")
        leg = self.trace.vector
        started = time.perf_counter()
        try:
            embedder = get_embedder(config_for_knowledge_base(kb))
            vector, cache_hit = cached_query_embedding(embedder, self.query)
        except EmbeddingError as exc:  # ProviderUnavailable included
            logger.warning("query embedding failed for knowledge base %s: %s", kb.pk, exc)
            leg.detail["error"] = str(exc)
            raise CannotRun("embedding error") from None
        embed_ms = elapsed_ms(started)
        try:
            hits, how = nearest_chunks(
                kb,
                vector,
                plan.candidates,
                self.filters,
                allowed,
                keyword=following,
            )
        except KnowledgeBase.DoesNotExist:
            raise KnowledgeBaseNotFound(f"knowledge base {kb.pk} not found") from None
        leg.ran = True
        leg.candidates += len(hits)
        leg.ms += elapsed_ms(started)
        leg.detail.update(
            {
                "index": how,
                "model": kb.embedding_model,
                "dimensions": kb.embedding_dimensions,
                "embedding_cache_hit": cache_hit,
                "embedding_ms": embed_ms,
            }
        )
        plan.trace.vector = VectorSummary(len(hits), cache_hit, how["index"])
        return hits

    def _keyword(self, plan: Plan, allowed: Callable[[], np.ndarray | None]) -> KeywordFound:
        kb = plan.kb
        if not bm25_available():
            raise CannotRun("BM25 unavailable")
        started = time.perf_counter()
        try:
            handle = self.store().get(kb, fresh=True)  # kb was read at the start of this search
        except KnowledgeBase.DoesNotExist:
            raise KnowledgeBaseNotFound(f"knowledge base {kb.pk} not found") from None
        except Exception as exc:  # the keyword leg failing must not fail the search...
            if isinstance(exc, DatabaseError) and search_reads() == REPLICA:
                raise  # ...but a failing replica is the route's: the service retries on the primary
            logger.exception("BM25 index unavailable for knowledge base %s", kb.pk)
            raise CannotRun("BM25 unavailable") from None
        analyzer = get_analyzer(kb.user_words)
        tokens = analyzer.tokens(self.query)
        allowed_ids = allowed()
        limit = plan.candidates + len(self.filters.exclude_chunk_ids)
        hits, attempts = run_ladder(
            query=self.query,
            tokens=tokens,
            hits=handle.index.search(tokens, limit, allowed_ids),
            index=handle.index,
            analyzer=analyzer,
            limit=limit,
            allowed=allowed_ids,
            user_words=kb.user_words,
            titles=lambda: (
                selectors.documents(self.tenant, kb)
                .using(search_reads())
                .filter(selectors.SEARCHABLE_DOCUMENT)
                .values_list("pk", "title")
            ),
            first_chunks=lambda ids: self._first_chunks(kb, ids),
        )
        hits = self.filters.without_excluded(hits, plan.candidates)
        documents = None
        if handle.view is not None:
            manifest = handle.view.manifest
            documents = KnownDocuments(
                handle.version, manifest.doc_ids, manifest.doc_stamps, manifest.chunk_count
            )
        self.trace.retry_ladder.extend({"knowledge_base_id": kb.pk, **a} for a in attempts)
        leg = self.trace.keyword
        leg.ran = True
        leg.candidates += len(hits)
        leg.ms += elapsed_ms(started)
        leg.detail.update({"tokens": tokens[:50], "bm25": handle.trace()})
        plan.trace.keyword = KeywordSummary(
            candidates=len(hits),
            tier=str(handle.tier),
            index_version=handle.version,
            ladder=[a["rung"] for a in attempts],
        )
        return KeywordFound(hits, _reach(handle.index, tokens, attempts), documents)

    def _allowed(self, plan: Plan) -> Callable[[], np.ndarray | None]:
        """The ids of the chunks the filters let through (None: no filter), read at most once
        for the plan's knowledge base and shared by both legs."""
        if not self.filters.active:
            return lambda: None
        tenant_id, kb_id, filters = self.tenant.pk, plan.kb.pk, self.filters
        return functools.cache(lambda: allowed_chunk_ids(tenant_id, kb_id, filters))

    def _first_chunks(self, kb: KnowledgeBase, document_ids: list[int]) -> dict[int, int]:
        rows = (
            selectors.searchable_chunks(self.tenant, kb)
            .using(search_reads())
            .filter(document_id__in=document_ids)
            .order_by("document_id", "position")
            .values_list("document_id", "pk")
        )
        first: dict[int, int] = {}
        for document_id, chunk_id in rows:
            first.setdefault(document_id, chunk_id)
        return first


def _reach(index: SegmentedIndex, tokens: list[str], attempts: list[dict]) -> Reach | None:
    """What the terms behind the keyword hits could score: the query's own, or those of the
    ladder's rung that found them. None when the hits are fuzzy title matches (no BM25)."""
    if attempts and attempts[-1]["hits"]:
        if attempts[-1]["rung"] == "fuzzy_title":
            return None
        tokens = attempts[-1]["terms"]
    return Reach.of((index.idf(t) for t in tokens), index.params.k1, len(index))
