"""Typed vocabulary of search: modes, options, filters, hits and the trace. No Django imports.

Options are frozen dataclasses: a knowledge base's defaults overridden by a request give a new
``SearchOptions``; nothing mutates shared state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"
    AUTO = "auto"  # hybrid when both legs are available, else the one that is


class WeightSource(StrEnum):
    QUERY = "query"  # given with the request
    FIXED = "fixed"  # the knowledge base's pinned weights
    CALIBRATED = "calibrated"  # measured on the knowledge base's own chunks
    DEFAULT = "default"  # calibration asked for but not run yet: the fixed defaults


@dataclass(frozen=True)
class SearchFilters:
    """Scope a search like a session or a project. Metadata values match by equality, or by
    membership when given as a list: ``{"project": "apollo", "lang": ["en", "de"]}``."""

    document_ids: tuple[int, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    max_age_days: float | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    @property
    def active(self) -> bool:
        return bool(
            self.document_ids is not None
            or self.metadata
            or self.max_age_days is not None
            or self.created_after
            or self.created_before
        )


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


@dataclass
class Hit:
    """One retrieved chunk with every signal that ranked it and where it comes from."""

    chunk_id: int
    document_id: int
    knowledge_base_id: int
    document_title: str
    content: str
    score: float  # the fused score (after rerank, the rank order follows rerank_score)
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LegTrace:
    ran: bool = False
    skipped_reason: str | None = None
    candidates: int = 0
    ms: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


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
    rerank: dict[str, Any] = field(default_factory=lambda: {"ran": False, "reason": "disabled"})
    filters: dict[str, Any] = field(default_factory=dict)
    knowledge_bases: list[dict[str, Any]] = field(default_factory=list)
    total_ms: float = 0.0
    results: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
