"""RemoteKnowledgeBaseRetriever: the hybrid retriever for agents in another process, over the
REST API. No Django imports: agent processes need only this package, langchain-core and httpx.

It calls ``POST {base_url}/api/v1/knowledge-bases/{id}/search`` (one knowledge base) or
``POST {base_url}/api/v1/search`` (several) with ``Authorization: Bearer <api key>``, and maps
each hit exactly as the local retriever does (see ``retrieval.langchain.documents``).

Failures are exceptions that say what to do, all ``RemoteSearchError``: ``AuthenticationFailed``
(401), ``PermissionDenied`` (403), ``KnowledgeBaseNotFound`` (404: missing, or another
tenant's), ``InvalidSearch`` (400), ``RateLimited`` (429), ``ServerError`` (5xx) and
``ServiceUnavailable`` (timeout, connection refused). 429, 502, 503, 504 and connection
failures are retried ``max_retries`` times with exponential backoff, honouring ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import date, datetime
from typing import Any

import httpx
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from pydantic import Field, SecretStr

from retrieval.langchain.documents import hit_to_document
from retrieval.langchain.options import BaseKnowledgeBaseRetriever

API_PREFIX = "/api/v1"
RETRYABLE = {429, 502, 503, 504}
MAX_BACKOFF_S = 30.0


class RemoteSearchError(RuntimeError):
    """The search API did not answer with results. ``status`` is the HTTP status (None when
    no answer came), ``code`` and ``details`` what the API said."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "",
        details: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.details = status, code, details
        self.retry_after = retry_after


class AuthenticationFailed(RemoteSearchError):
    """401: the API key is missing, wrong or revoked."""


class PermissionDenied(RemoteSearchError):
    """403: the key may not search there (scope or knowledge base restriction)."""


class KnowledgeBaseNotFound(RemoteSearchError, LookupError):
    """404: no such knowledge base for this key's tenant."""


class InvalidSearch(RemoteSearchError, ValueError):
    """400: the API refused the query or an option; the message says which."""


class RateLimited(RemoteSearchError):
    """429 after the retries; ``retry_after`` says when to try again, when the API said."""


class ServerError(RemoteSearchError):
    """5xx after the retries."""


class ServiceUnavailable(RemoteSearchError):
    """No answer: timed out or could not connect, after the retries."""


_ERRORS = {
    400: (InvalidSearch, "the search was refused"),
    401: (AuthenticationFailed, "the API key was refused; check it and that it is not revoked"),
    403: (PermissionDenied, "this API key may not search here"),
    404: (KnowledgeBaseNotFound, "knowledge base not found for this API key"),
    429: (RateLimited, "too many searches; slow down"),
}


class RemoteKnowledgeBaseRetriever(BaseKnowledgeBaseRetriever):
    """``RemoteKnowledgeBaseRetriever(base_url="https://rag.example.com", api_key="rag_...",
    knowledge_base_id=3, k=5)``; every search option of the local retriever, on the retriever
    or per call."""

    base_url: str
    api_key: SecretStr
    timeout: float = Field(default=30.0, gt=0)
    """Seconds for connecting, and for each read of the answer."""
    max_retries: int = Field(default=2, ge=0)
    explain: bool = True
    """Ask for the trace (``metadata["trace"]``)."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        url, payload = self._request(query, overrides)
        with httpx.Client(timeout=self.timeout, headers=self._headers()) as client:
            for attempt in range(self.max_retries + 1):
                try:
                    response = client.post(url, json=payload)
                except httpx.TransportError as exc:
                    error = _transport_error(exc, url, self.timeout)
                else:
                    if response.status_code == 200:
                        return _documents(response, url)
                    error = _status_error(response, url)
                if not self._retry(error, attempt):
                    raise error
                time.sleep(_delay(error, attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        url, payload = self._request(query, overrides)
        async with httpx.AsyncClient(timeout=self.timeout, headers=self._headers()) as client:
            for attempt in range(self.max_retries + 1):
                try:
                    response = await client.post(url, json=payload)
                except httpx.TransportError as exc:
                    error = _transport_error(exc, url, self.timeout)
                else:
                    if response.status_code == 200:
                        return _documents(response, url)
                    error = _status_error(response, url)
                if not self._retry(error, attempt):
                    raise error
                await asyncio.sleep(_delay(error, attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.api_key.get_secret_value()}",
            "Accept": "application/json",
        }

    def _request(self, query: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        options = self.search_options(overrides)
        payload: dict[str, Any] = {"query": query, **options, "explain": self.explain}
        if "filters" in payload:
            payload["filters"] = _json_filters(payload["filters"])
        if "mode" in payload:
            payload["mode"] = str(payload["mode"])
        root = self.base_url.rstrip("/").removesuffix(API_PREFIX)
        if len(self.knowledge_base_ids) == 1:
            return (
                f"{root}{API_PREFIX}/knowledge-bases/{self.knowledge_base_ids[0]}/search",
                payload,
            )
        payload["knowledge_base_ids"] = list(self.knowledge_base_ids)
        return f"{root}{API_PREFIX}/search", payload

    def _retry(self, error: RemoteSearchError, attempt: int) -> bool:
        retryable = error.status in RETRYABLE or (
            isinstance(error, ServiceUnavailable) and error.code == "connect"
        )
        return retryable and attempt < self.max_retries


def _json_filters(filters: Any) -> dict[str, Any]:
    values = dict(filters)
    for name, value in values.items():
        if isinstance(value, datetime | date):
            values[name] = value.isoformat()
        elif isinstance(value, tuple):
            values[name] = list(value)
    return values


def _documents(response: httpx.Response, url: str) -> list[Document]:
    try:
        body = response.json()
        trace = body.get("trace")
        return [hit_to_document(hit, trace) for hit in body["results"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ServerError(
            f"the search API answered 200 with an unexpected body ({type(exc).__name__}) "
            f"from POST {url}",
            status=response.status_code,
        ) from exc


def _status_error(response: httpx.Response, url: str) -> RemoteSearchError:
    code, message, details = "", "", None
    try:
        error = response.json()["error"]
        code, message, details = (
            error.get("code", ""),
            error.get("message", ""),
            error.get("details"),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        message = response.text[:300]
    status = response.status_code
    cls, fallback = _ERRORS.get(status, (ServerError, "the search API failed"))
    if status not in _ERRORS and status < 500:
        cls = RemoteSearchError
    text = f"{message or fallback} (HTTP {status}{f' {code}' if code else ''}, POST {url})"
    return cls(text, status=status, code=code, details=details, retry_after=_retry_after(response))


def _transport_error(exc: httpx.TransportError, url: str, timeout: float) -> ServiceUnavailable:
    if isinstance(exc, httpx.TimeoutException):
        return ServiceUnavailable(
            f"the search API did not answer within {timeout:g} s (POST {url})", code="timeout"
        )
    return ServiceUnavailable(f"could not reach the search API at {url}: {exc}", code="connect")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def _delay(error: RemoteSearchError, attempt: int) -> float:
    if error.retry_after is not None:
        return min(error.retry_after, MAX_BACKOFF_S)
    return min(0.5 * 2**attempt, MAX_BACKOFF_S)
