"""LangChain integration, on langchain-core only.

In the process that holds the database:

- ``KnowledgeBaseVectorStore`` (``vectorstore``): one knowledge base as a LangChain VectorStore;
- ``KnowledgeBaseRetriever`` and ``get_retriever`` (``retriever``): hybrid search as retrievers;
- ``ProviderEmbeddings``, ``LangChainEmbedder``, ``register_langchain_embeddings``
  (``embeddings``): our embedding providers and LangChain's, each usable as the other.

Anywhere, without Django (an agent's process):

- ``RemoteKnowledgeBaseRetriever`` (``remote``): the same hybrid search over the REST API;
- ``create_search_tool`` (``tools``): a search tool for agents over either retriever.

Names are imported on first use, so ``from retrieval.langchain import
RemoteKnowledgeBaseRetriever`` does not load Django.
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
    "RemoteKnowledgeBaseRetriever": "remote",
    "RemoteSearchError": "remote",
    "create_search_tool": "tools",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
