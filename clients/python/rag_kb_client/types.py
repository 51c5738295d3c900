"""Typed results, as pydantic models of the REST API's JSON. Fields the API adds later are
kept (``extra="allow"``) and reachable as attributes, so an older client reads a newer server."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SearchMode(StrEnum):
    AUTO = "auto"  # hybrid when both legs can run, else the one that can
    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"


class _ApiModel(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Hit(_ApiModel):
    """One retrieved chunk with every signal that ranked it and where it comes from."""

    rank: int = 0
    chunk_id: int
    document_id: int
    knowledge_base_id: int
    document_title: str = ""
    original_filename: str = ""
    content: str
    score: float = Field(description="Fused rank score, 0-1 (1 = first in every leg).")
    relevance: float | None = Field(
        None, description="How relevant, 0-1, comparable across queries; None: not known."
    )
    vector_similarity: float | None = None
    vector_rank: int | None = None
    bm25_score: float | None = None
    bm25_rank: int | None = None
    rerank_score: float | None = None
    page: int | None = None
    start_char: int = 0
    end_char: int = 0
    heading_path: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    position: int = 0


class SearchResult(_ApiModel):
    results: list[Hit]
    trace: dict[str, Any] = Field(default_factory=dict)

    @property
    def hits(self) -> list[Hit]:
        return self.results


class Context(SearchResult):
    """``context``: the hits as prompt text, numbered as ``results``."""

    context: str


class KnowledgeBase(_ApiModel):
    id: int
    name: str
    description: str = ""
    document_count: int = 0
    ready_document_count: int = 0
    top_k: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
