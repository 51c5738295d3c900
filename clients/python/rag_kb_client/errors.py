"""Every way a call can fail, as one family of exceptions carrying what the API said.

``ApiError`` is the base: ``status`` (the HTTP status, None when no answer came), ``code`` and
``details`` (the API's error body: ``{"error": {"code", "message", "details"}}``), and
``retry_after`` (seconds, when the API said). The message is the API's own, followed by the
status, code and request, so it can be shown as is.
"""

from __future__ import annotations

from typing import Any


class ApiError(RuntimeError):
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


class AuthenticationFailed(ApiError):
    """401: the API key is missing, wrong or revoked."""


class PermissionDenied(ApiError):
    """403: the key may not do this (it lacks the scope)."""


class NotFound(ApiError, LookupError):
    """404: no such knowledge base (or document) for this key: missing, another tenant's, or
    outside the key's restriction, which the API does not tell apart."""


class InvalidRequest(ApiError, ValueError):
    """400: the API refused the query or an option; the message says which."""


class RateLimited(ApiError):
    """429 after the retries; ``retry_after`` says when to try again, when the API said."""


class ServerError(ApiError):
    """5xx after the retries, or an answer that is not the API's."""


class ServiceUnavailable(ApiError):
    """No answer: timed out or could not connect, after the retries. ``code`` is ``timeout``
    or ``connect``."""


# The names of the server's former ``retrieval.langchain.remote`` module.
RemoteSearchError = ApiError
KnowledgeBaseNotFound = NotFound
InvalidSearch = InvalidRequest
