"""LangChain integration, on langchain-core only.

In the process that holds the database:

- ``KnowledgeBaseVectorStore`` (``vectorstore``): one knowledge base as a LangChain VectorStore;
- ``KnowledgeBaseRetriever`` and ``get_retriever`` (``retriever``): hybrid search as retrievers;
- ``ProviderEmbeddings``, ``LangChainEmbedder``, ``register_langchain_embeddings``
  (``embeddings``): our embedding providers and LangChain's, each usable as the other;
- ``create_search_tool`` (``tools``): a search tool for agents over the retrievers.

An agent in another process uses the client package instead (``clients/python``:
``rag_kb_client.langchain.RemoteKnowledgeBaseRetriever`` and ``create_search_tool``), which
needs neither Django nor this server. Names are imported on first use.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "KnowledgeBaseVectorStore": "vectorstore",
    "KnowledgeBaseVectorStoreRetriever": "vectorstore",
    "TextNotAdded": "texts",
    "KnowledgeBaseRetriever": "retriever",
    "get_retriever": "retriever",
    "LangChainEmbedder": "embeddings",
    "ProviderEmbeddings": "embeddings",
    "register_langchain_embeddings": "embeddings",
    "create_search_tool": "tools",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
