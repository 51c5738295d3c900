"""What each MCP tool does, in the caller's tenant: the REST API's own selectors, serializers
and search (``retrieval.api.searching.run_search``), so a tool sees exactly what the same key
sees over REST, and a knowledge base or document outside the key's restriction is as missing
as one that does not exist. Synchronous Django code; ``retrieval.mcp.server`` runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from rest_framework.serializers import Serializer

from knowledge import access as knowledge_access
from knowledge.models import Chunk
from retrieval.api.searching import run_search
from retrieval.api.serializers import (
    ContextRequestSerializer,
    MultiContextRequestSerializer,
    MultiSearchRequestSerializer,
    SearchOptionsSerializer,
    present,
)
from retrieval.langchain.documents import own_metadata
from retrieval.mcp import schemas
from retrieval.search import SearchResult
from retrieval.search.formatting import citation, format_for_context
from tenancy.api.access import Access


def list_knowledge_bases(access: Access, arguments: Mapping[str, Any]) -> dict[str, Any]:
    kbs = knowledge_access.knowledge_bases(access.tenant, access.knowledge_base_ids)
    return {
        "knowledge_bases": [
            {
                "id": kb.pk,
                "name": kb.name,
                "description": kb.description,
                "document_count": kb.document_count,
                "ready_document_count": kb.ready_document_count,
                "updated_at": kb.updated_at.isoformat(),
            }
            for kb in kbs
        ]
    }


def _search(
    access: Access,
    arguments: Mapping[str, Any],
    single: type[Serializer],
    multi: type[Serializer],
) -> tuple[SearchResult, dict[str, Any]]:
    """One knowledge base goes the way of ``/knowledge-bases/{id}/search``, several the way of
    ``/search``: the same hits as the REST call an agent would otherwise make."""
    data = {key: value for key, value in arguments.items() if value is not None}
    ids = data.get("knowledge_base_ids") or []
    if len(ids) == 1:
        return run_search(
            access, {k: v for k, v in data.items() if k != "knowledge_base_ids"}, single, ids[0]
        )
    return run_search(access, data, multi)


def search(access: Access, arguments: Mapping[str, Any]) -> dict[str, Any]:
    result, _ = _search(access, arguments, SearchOptionsSerializer, MultiSearchRequestSerializer)
    body = present(result, explain=False)
    for number, (hit, row) in enumerate(zip(result.hits, body["results"], strict=True), 1):
        row["citation"] = citation(number, hit)
    return body


def get_context(access: Access, arguments: Mapping[str, Any]) -> dict[str, Any]:
    result, data = _search(
        access, arguments, ContextRequestSerializer, MultiContextRequestSerializer
    )
    return {
        "context": format_for_context(result.hits, data["max_chars"]),
        "citations": [
            {
                "number": number,
                "citation": citation(number, hit),
                "chunk_id": hit.chunk_id,
                "document_id": hit.document_id,
                "knowledge_base_id": hit.knowledge_base_id,
                "document_title": hit.document_title,
                "page": hit.page,
                "relevance": hit.relevance,
            }
            for number, hit in enumerate(result.hits, 1)
        ],
    }


def get_document(access: Access, arguments: Mapping[str, Any]) -> dict[str, Any]:
    args = schemas.DocumentArguments.model_validate(arguments)
    document = knowledge_access.access_document(
        access.tenant, args.document_id, access.knowledge_base_ids
    )
    chunks = knowledge_access.chunks(access.tenant, document.knowledge_base, document)
    centre = 0
    if args.chunk_id is not None:
        # A chunk of another document (or none at all) is not found, whichever it is.
        centre = chunks.get(pk=args.chunk_id).position
    around = chunks.filter(position__gte=centre - args.window, position__lte=centre + args.window)
    return {
        "document": {
            "id": document.pk,
            "knowledge_base_id": document.knowledge_base_id,
            "title": document.title,
            "original_filename": document.original_filename,
            "file_type": document.file_type,
            "status": document.status,
            "metadata": own_metadata(document.metadata),
            "chunk_count": document.chunk_count,
            "created_at": document.created_at.isoformat(),
        },
        "chunks": [_chunk(chunk) for chunk in around],
    }


def _chunk(chunk: Chunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.pk,
        "position": chunk.position,
        "content": chunk.content,
        "page": chunk.page,
        "heading_path": list(chunk.heading_path),
        "start_char": chunk.start_char,
        "end_char": chunk.end_char,
    }


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[BaseModel] | None
    answer: type[BaseModel]
    run: Callable[[Access, Mapping[str, Any]], dict[str, Any]]


TOOLS = (
    Tool(
        "list_knowledge_bases",
        "List the knowledge bases this API key can search: id, name, description and how many "
        "documents each holds (ready ones are searchable). Call it first, to pick the "
        "knowledge_base_ids of search and get_context.",
        None,
        schemas.KnowledgeBases,
        list_knowledge_bases,
    ),
    Tool(
        "search",
        "Hybrid search (keywords and meaning) over one or several knowledge bases. Returns the "
        "best chunks, each with its text, a citation ([rank] title, file, page), the document "
        "and chunk ids (for get_document), its fused score and its relevance (0-1, null when "
        "unknown), and a trace of how the search ran. Use it to find passages and judge them; "
        "use get_context instead when the text goes straight into a prompt.",
        schemas.SearchArguments,
        schemas.SearchAnswer,
        search,
    ),
    Tool(
        "get_context",
        "The same search, answered as prompt-ready text: numbered chunks [1], [2]... with their "
        "titles and pages, then the list of sources, within max_chars (nothing is cut without "
        "saying so); plus the citations behind each number. Use it to ground an answer and cite "
        "the numbers.",
        schemas.ContextArguments,
        schemas.ContextAnswer,
        get_context,
    ),
    Tool(
        "get_document",
        "A document's metadata (title, file, type, status, its own metadata) and a window of its "
        "chunks in reading order: around chunk_id when given (window chunks before and after), "
        "else its first chunks. Use it to read what surrounds a search hit.",
        schemas.DocumentArguments,
        schemas.DocumentAnswer,
        get_document,
    ),
)
