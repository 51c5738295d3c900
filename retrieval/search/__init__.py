"""Search: ``RAGService`` and its steps.

- ``service``: ``RAGService`` and the orchestration of one search, step by step;
- ``options``: settling a request against each knowledge base's defaults, and its weights;
- ``legs``: the vector and keyword legs and the fallback policy between them (a table);
- ``ladder``: the keyword leg's retry ladder;
- ``candidates``: every knowledge base's legs fused into one order (``retrieval.fusion``);
- ``hydration``: fused candidates to hits, from PostgreSQL, tenant-filtered;
- ``reranking``: the rerank step over the head of the hits;
- ``formatting``: hits as text for language models (numbered citations, a tool's answer);
- ``errors``: what a search raises (``InvalidSearch``, ``KnowledgeBaseNotFound``);
- ``types``: the typed vocabulary (modes, legs, options, filters, hits, traces; no Django).

The search filters and their SQL, which both legs read, are a layer below
(``retrieval.core.filters``, ``retrieval.core.filter_sql``).

``from retrieval.search import RAGService`` loads the service on first use, so importing the
types (as the remote LangChain classes do) does not load Django's models.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "RAGService": "service",
    "SearchResult": "service",
    "InvalidSearch": "errors",
    "KnowledgeBaseNotFound": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
