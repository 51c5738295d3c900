"""Typed vocabulary of search: modes, legs, options, filters, hits and the trace. No Django
imports: the remote LangChain retriever imports this module without Django.

Options are frozen dataclasses: a knowledge base's defaults overridden by a request give a new
``SearchOptions``; nothing mutates shared state. A trace holds JSON values only (leg names as
text), so ``to_dict()`` is what the API answers.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

# Defined below the legs, which read it (retrieval.core); part of this vocabulary all the same.
from retrieval.core.filters import SearchFilters


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"
    AUTO = "auto"  # hybrid when both legs are available, else the one that is


class Leg(StrEnum):
    """The two retrievers a search fuses, in the order traces list them (a search runs the
    keyword leg first: ``RAGService._answer``)."""

    VECTOR = "vector"
    KEYWORD = "keyword"

    @property
    def other(self) -> Leg:
        return Leg.KEYWORD if self is Leg.VECTOR else Leg.VECTOR


class WeightSource(StrEnum):
    QUERY = "query"  # given with the request
    FIXED = "fixed"  # the knowledge base's pinned weights
    CALIBRATED = "calibrated"  # measured on the knowledge base's own chunks
    DEFAULT = "default"  # calibration asked for but not run yet: the fixed defaults


@dataclass(frozen=True)
class SearchOptions:
    """Everything that decides one search. ``None`` means: the knowledge base's default."""

    top_k: int | None = None
    mode: SearchMode = SearchMode.AUTO
    vector_weight: float | None = None
    keyword_weight: float | None = None
    score_threshold: float | None = None
    candidate_multiplier: int | None = None
    rerank: bool | None = None
    rerank_top_n: int | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)
    # The seeds' option, not the cross-encoder (``rerank``): true = fuse both legs over 3x
    # candidates (the default hybrid search), false = vector results only.
    use_rerank: bool | None = None


@dataclass
class Hit:
    """One retrieved chunk with every signal that ranked it and where it comes from."""

    chunk_id: int
    document_id: int
    knowledge_base_id: int
    document_title: str
    content: str
    score: float  # the fused score (after rerank, the rank order follows rerank_score)
    # How likely the hit answers the query, 0-1 (retrieval.relevance); score_threshold cuts it.
    relevance: float | None = None
    vector_similarity: float | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    bm25_rank: int | None = None
    rerank_score: float | None = None
    page: int | None = None
    start_char: int = 0
    end_char: int = 0
    heading_path: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    position: int = 0
    original_filename: str = ""
    # The signals relevance was computed from (calibration fits on them); not part of answers.
    signals: dict[str, float] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        shape = plain(self)
        del shape["signals"]
        return shape


def plain(value: Any) -> Any:
    """``dataclasses.asdict``'s shape without its deep copy of every leaf (a third of the cost
    of turning a search's hits and trace into its answer): dataclasses become dicts, lists,
    tuples and dicts are rebuilt, so the result shares no container with ``value``; anything
    else is returned as it is, which is the same for the immutable values hits and traces hold
    (numbers, text, None, dates)."""
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    if not hasattr(type(value), "__dataclass_fields__"):
        return value
    return {name: plain(getattr(value, name)) for name in _field_names(type(value))}


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()``), as traces record them."""
    return round((time.perf_counter() - started) * 1000, 3)


@dataclass
class LegTrace:
    """One leg across every knowledge base searched."""

    ran: bool = False
    skipped_reason: str | None = None
    candidates: int = 0
    ms: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorSummary:
    """One knowledge base's vector leg: how many candidates, and from where."""

    candidates: int
    embedding_cache_hit: bool
    index: str  # "exact" (the in-memory matrix) or "hnsw"


@dataclass(frozen=True)
class KeywordSummary:
    """One knowledge base's keyword leg: how many candidates, from which index, and the rungs
    of the retry ladder it climbed (none when the query found something as it was)."""

    candidates: int
    tier: str
    index_version: int
    ladder: list[str]


@dataclass
class KnowledgeBaseTrace:
    """How one knowledge base was searched. ``weights`` are its settled weights (before a mode
    or a fallback narrowed them to one leg); a leg's summary is there only if the leg ran."""

    knowledge_base_id: int
    name: str
    weights: dict[str, float]
    weight_source: str
    retrieval_path: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    vector: VectorSummary | None = None
    keyword: KeywordSummary | None = None
    mode_used: str = "none"
    hits: int = 0  # of the results returned
    # What the language rule did (retrieval.search.options.language_rule), if anything.
    language: str | None = None
    warnings: list[str] = field(default_factory=list)
    # Where its hits' relevance came from: "calibrated <legs>" or "default <legs>".
    relevance: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in plain(self).items() if value is not None}


@dataclass(frozen=True)
class RerankTrace:
    """Whether the head of the fused order was reranked (by which reranker, how many hits, how
    long it took), or why not."""

    ran: bool = False
    reason: str = "disabled"
    reranker: str = ""
    head: int = 0
    ms: float = 0.0

    @classmethod
    def skipped(cls, reason: str) -> RerankTrace:
        return cls(ran=False, reason=reason)

    @classmethod
    def done(cls, reranker: str, head: int, ms: float) -> RerankTrace:
        return cls(ran=True, reason="", reranker=reranker, head=head, ms=ms)

    def to_dict(self) -> dict[str, Any]:
        if self.ran:
            return {"ran": True, "reranker": self.reranker, "head": self.head, "ms": self.ms}
        return {"ran": False, "reason": self.reason}


@dataclass
class Trace:
    """How a search was answered: what was asked, what ran, what fell back, and how long."""

    mode_requested: str = SearchMode.AUTO
    mode_used: str = SearchMode.AUTO
    retrieval_path: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    weight_source: str = WeightSource.DEFAULT
    k: int = 60
    top_k: int = 0
    candidate_count: int = 0
    vector: LegTrace = field(default_factory=LegTrace)
    keyword: LegTrace = field(default_factory=LegTrace)
    retry_ladder: list[dict[str, Any]] = field(default_factory=list)
    fusion_ms: float = 0.0
    rerank: RerankTrace = field(default_factory=RerankTrace)
    filters: dict[str, Any] = field(default_factory=dict)
    query_script: str | None = None  # the script writing most of the query
    warnings: list[str] = field(default_factory=list)
    knowledge_bases: list[KnowledgeBaseTrace] = field(default_factory=list)
    # Which database served the legs and the hydration (retrieval.replica), and whether a
    # replica was passed over for being behind the versions the search read from the primary.
    database: str = "primary"
    replica_lag_fallback: bool = False
    total_ms: float = 0.0
    results: int = 0

    def to_dict(self, only: Sequence[str] | None = None) -> dict[str, Any]:
        """The trace's JSON shape; ``only``: just these fields, in this order (an answer's
        summary, which then does not convert the legs' details, the ladder and the knowledge
        bases' traces only to leave them out)."""
        # The two parts with shapes of their own are given them in their places, not
        # converted twice.
        own = {
            "rerank": self.rerank.to_dict,
            "knowledge_bases": lambda: [kb.to_dict() for kb in self.knowledge_bases],
        }
        return {
            name: own[name]() if name in own else plain(getattr(self, name))
            for name in (_field_names(type(self)) if only is None else only)
        }
