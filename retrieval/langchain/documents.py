"""Search hits as LangChain Documents and back, for the retrievers and the search tool (no
Django imports). The client package's remote retriever (``rag_kb_client.langchain``) follows
the same rule over the REST API, and tests/langchain/test_remote.py holds the two together.

One rule for every retriever, local or remote: a hit becomes a Document whose
``page_content`` is the chunk's text, whose ``id`` is its document's LangChain id, and whose
metadata is the hit as the REST API returns it, without ``content``: its ``rank``, the fused
``score``, its ``relevance`` (0-1) and every leg's signal, chunk, document and knowledge base
ids, title, file name, page, character offsets, heading path, and the document's own metadata
under ``"metadata"``; plus ``"source"`` (the document's own ``source`` if it has one, else its
file name) and ``"trace"`` (how the search was answered; the same object for every document of
one search).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from langchain_core.documents import Document

from retrieval.search.types import Hit

# Where a document added through LangChain keeps the id it was added with (in its metadata).
ID_KEY = "langchain_id"
_HIT_FIELDS = {f.name for f in fields(Hit)} - {"content", "metadata", "signals"}
_REQUIRED_DEFAULTS = {
    "chunk_id": 0,
    "document_id": 0,
    "knowledge_base_id": 0,
    "document_title": "",
    "score": 0.0,
}


def langchain_id(metadata: Mapping[str, Any], document_pk: int) -> str:
    """A document's LangChain id: the id it was added with, else its primary key as text."""
    value = metadata.get(ID_KEY)
    return str(value) if value is not None else str(document_pk)


def own_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A document's metadata as its author gave it (without the id this module keeps there)."""
    return {key: value for key, value in metadata.items() if key != ID_KEY}


def hit_to_document(
    hit: Mapping[str, Any], trace: Mapping[str, Any] | None = None, rank: int | None = None
) -> Document:
    """A hit dict as a Document: one item of the REST API's ``results``, or ``Hit.to_dict()``
    with its 1-based ``rank`` (which the API adds to each hit)."""
    stored = hit.get("metadata") or {}
    metadata = {key: value for key, value in hit.items() if key != "content"}
    if rank is not None:
        metadata["rank"] = rank
    metadata["metadata"] = own_metadata(stored)
    metadata["source"] = (
        stored.get("source") or hit.get("original_filename") or hit.get("document_title") or ""
    )
    if trace is not None:
        metadata["trace"] = trace
    return Document(
        id=langchain_id(stored, hit["document_id"]),
        page_content=hit["content"],
        metadata=metadata,
    )


def document_to_hit(document: Document) -> Hit:
    """Back to a Hit, for ``format_for_tool_output``. Documents from elsewhere (a plain vector
    search) lack most signals; what is missing takes the Hit's defaults."""
    metadata = document.metadata
    known = {name: metadata[name] for name in _HIT_FIELDS if name in metadata}
    title = str(metadata.get("title") or metadata.get("source") or "")
    return Hit(
        **{**_REQUIRED_DEFAULTS, "document_title": title, **known},
        content=document.page_content,
        metadata=dict(metadata.get("metadata") or {}),
    )
