"""The MCP tools' arguments and answers as pydantic models: their JSON schemas are the tools'
``inputSchema`` and ``outputSchema``, so an agent host knows each field before it calls.

Arguments are checked twice on purpose: against the schema by the MCP server (types), then by
the REST API's serializers (ranges and the rest), so a tool refuses exactly what the REST API
refuses, with the same message. Answers allow extra fields: a hit gains whatever the REST API's
hit gains.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from retrieval.search.types import SearchMode

Mode = Literal[tuple(mode.value for mode in SearchMode)]  # type: ignore[valid-type]


class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_ids: list[int] | None = Field(None, description="Only chunks of these documents.")
    metadata: dict[str, Any] | None = Field(
        None,
        description='Document metadata to match, e.g. {"project": "apollo", "lang": ["en", '
        '"de"]} (equality, or any of a list; every key must match).',
    )
    max_age_days: float | None = Field(None, description="Only documents of the last N days.")
    created_after: datetime | None = None
    created_before: datetime | None = None
    exclude_chunk_ids: list[int] | None = Field(
        None, description="Never return these chunks (the ones already seen)."
    )


class SearchArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="A question or keywords, in the documents' language.")
    knowledge_base_ids: list[int] = Field(
        min_length=1,
        max_length=20,
        description="The knowledge bases to search (ids from list_knowledge_bases); several "
        "are fused into one ranking.",
    )
    top_k: int | None = Field(None, description="How many hits; default: the knowledge base's.")
    mode: Mode = Field(  # type: ignore[valid-type]
        SearchMode.AUTO.value,
        description="auto (hybrid when both legs can run), hybrid, vector or keyword.",
    )
    score_threshold: float | None = Field(
        None, description="Drop hits whose fused score (0-1) is below it."
    )
    filters: Filters | None = None
    rerank: bool | None = Field(
        None, description="Rerank the head with the cross-encoder; default: the KB's setting."
    )


class ContextArguments(SearchArguments):
    max_chars: int = Field(6000, description="Budget of the context text (200-200000).")


class DocumentArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_id: int = Field(description="A hit's document_id.")
    chunk_id: int | None = Field(
        None, description="A hit's chunk_id: the chunks around it are returned."
    )
    window: int = Field(2, ge=0, le=20, description="Chunks before and after (0-20).")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class KnowledgeBaseInfo(Open):
    id: int
    name: str
    description: str
    document_count: int
    ready_document_count: int
    updated_at: str


class KnowledgeBases(Open):
    knowledge_bases: list[KnowledgeBaseInfo]


class HitInfo(Open):
    rank: int = Field(description="1-based; the number to cite, as [rank].")
    citation: str = Field(description="[rank] Title (file, page): the source to quote.")
    chunk_id: int
    document_id: int
    knowledge_base_id: int
    document_title: str
    original_filename: str
    page: int | None
    heading_path: list[str]
    content: str
    score: float = Field(description="Fused rank score, 0-1 (1 = first in every leg).")
    relevance: float | None = Field(
        description="How relevant the hit is, 0-1, comparable across queries; null when "
        "the server cannot tell."
    )


class SearchAnswer(Open):
    results: list[HitInfo]
    trace: dict[str, Any] = Field(description="How the search was answered (modes, fallbacks).")


class Citation(Open):
    number: int
    citation: str
    chunk_id: int
    document_id: int
    knowledge_base_id: int
    document_title: str
    page: int | None
    relevance: float | None


class ContextAnswer(Open):
    context: str = Field(description="Numbered chunks [1], [2]... then the sources.")
    citations: list[Citation]


class DocumentInfo(Open):
    id: int
    knowledge_base_id: int
    title: str
    original_filename: str
    file_type: str
    status: str
    metadata: dict[str, Any]
    chunk_count: int
    created_at: str


class ChunkInfo(Open):
    chunk_id: int
    position: int
    content: str
    page: int | None
    heading_path: list[str]
    start_char: int
    end_char: int


class DocumentAnswer(Open):
    document: DocumentInfo
    chunks: list[ChunkInfo] = Field(description="In reading order, the asked chunk among them.")
