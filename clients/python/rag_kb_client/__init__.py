"""Client of the RAG knowledge-base API, without the server: ``Client`` / ``AsyncClient`` (REST,
typed results, retries), ``format_context`` (hits as prompt text), the exceptions of
``errors``, and with the ``[langchain]`` extra ``rag_kb_client.langchain``
(``RemoteKnowledgeBaseRetriever``, ``create_search_tool``)."""

from rag_kb_client.client import AsyncClient, Client
from rag_kb_client.context import citation, format_context
from rag_kb_client.errors import (
    ApiError,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    ServiceUnavailable,
)
from rag_kb_client.types import Context, Hit, KnowledgeBase, SearchMode, SearchResult

__all__ = [
    "ApiError",
    "AsyncClient",
    "AuthenticationFailed",
    "Client",
    "Context",
    "Hit",
    "InvalidRequest",
    "KnowledgeBase",
    "NotFound",
    "PermissionDenied",
    "RateLimited",
    "SearchMode",
    "SearchResult",
    "ServerError",
    "ServiceUnavailable",
    "citation",
    "format_context",
]
