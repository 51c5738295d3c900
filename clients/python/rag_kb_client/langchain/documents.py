"""Hits as LangChain Documents and back, by the rule of the server's own retrievers
(``retrieval.langchain.documents``), so a remote search gives the documents a local one gives:
``page_content`` is the chunk's text, ``id`` its document's LangChain id, and the metadata the
hit as the API returned it without ``content``, with the document's own metadata under
``"metadata"``, a ``"source"`` and the search's ``"trace"``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document

from rag_kb_client.types import Hit

# Where a document added through LangChain keeps the id it was added with (in its metadata).
ID_KEY = "langchain_id"


def hit_to_document(hit: Hit, trace: Mapping[str, Any] | None = None) -> Document:
    fields = hit.model_dump(exclude_unset=True)  # exactly what the API sent
    stored = fields.get("metadata") or {}
    metadata = {key: value for key, value in fields.items() if key != "content"}
    metadata["metadata"] = {key: value for key, value in stored.items() if key != ID_KEY}
    metadata["source"] = stored.get("source") or hit.original_filename or hit.document_title
    if trace is not None:
        metadata["trace"] = trace
    document_id = stored.get(ID_KEY)
    return Document(
        id=str(document_id) if document_id is not None else str(hit.document_id),
        page_content=hit.content,
        metadata=metadata,
    )


def document_to_hit(document: Document) -> Hit:
    """Back to a Hit, for the search tool's text. Documents from elsewhere (a plain vector
    search) lack most signals; what is missing takes the Hit's defaults."""
    metadata = dict(document.metadata)
    known = {name: metadata[name] for name in Hit.model_fields if name in metadata}
    known.setdefault("document_title", str(metadata.get("title") or metadata.get("source") or ""))
    return Hit.model_validate(
        {
            "chunk_id": 0,
            "document_id": 0,
            "knowledge_base_id": 0,
            "score": 0.0,
            **known,
            "content": document.page_content,
            "metadata": dict(metadata.get("metadata") or {}),
        }
    )
