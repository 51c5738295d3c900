"""What the sync and the async client share: URLs, request bodies, and the retry policy.

Retried, ``max_retries`` times with exponential backoff (0.5 s, 1 s, 2 s... at most 30 s) or
after the ``Retry-After`` the API sent: 429, 502, 503 and 504, and a request that never reached
the API (connection refused, connect timeout). Every call of this client only reads, so
repeating one changes nothing stored; a search is a POST (its options do not fit a query
string) but is as safe to repeat as a GET. A *read* timeout is retried for GETs only: a search
that timed out may still be running, and sending it again would double the work of a server
that is already slow to answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import httpx

from rag_kb_client import errors

API_PREFIX = "/api/v1"
RETRYABLE = {429, 502, 503, 504}
MAX_BACKOFF_S = 30.0
_ERRORS: dict[int, tuple[type[errors.ApiError], str]] = {
    400: (errors.InvalidRequest, "the request was refused"),
    401: (
        errors.AuthenticationFailed,
        "the API key was refused; check it and that it is not revoked",
    ),
    403: (errors.PermissionDenied, "this API key may not do this"),
    404: (errors.NotFound, "not found for this API key"),
    429: (errors.RateLimited, "too many requests; slow down"),
}


def root_url(base_url: str) -> str:
    """The API's root, whether ``base_url`` names the site or its ``/api/v1``."""
    return base_url.rstrip("/").removesuffix(API_PREFIX) + API_PREFIX


def headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def search_request(
    query: str,
    knowledge_base_ids: list[int],
    options: Mapping[str, Any],
    endpoint: str = "search",
) -> tuple[str, dict[str, Any]]:
    """The path and body of a search (``endpoint="context"``: of a context request): one
    knowledge base at ``/knowledge-bases/{id}/search``, several at ``/search``. Options that are
    None are left out (the knowledge base's defaults apply)."""
    body: dict[str, Any] = {"query": query}
    for name, value in options.items():
        if value is not None:
            body[name] = str(value) if name == "mode" else value
    if body.get("filters") is not None:
        body["filters"] = json_filters(body["filters"])
    if not knowledge_base_ids:
        raise ValueError("give knowledge_base_id or knowledge_base_ids")
    if len(knowledge_base_ids) == 1:
        return f"/knowledge-bases/{knowledge_base_ids[0]}/{endpoint}", body
    body["knowledge_base_ids"] = list(knowledge_base_ids)
    return f"/{endpoint}", body


def knowledge_base_ids(one: int | None, several: list[int] | None) -> list[int]:
    if (one is None) == (several is None):
        raise ValueError("give knowledge_base_id or knowledge_base_ids, one of them")
    return [one] if one is not None else list(several or [])


def json_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    values = dict(filters)
    for name, value in values.items():
        if isinstance(value, datetime | date):
            values[name] = value.isoformat()
        elif isinstance(value, tuple):
            values[name] = list(value)
    return values


def unexpected(response: httpx.Response, where: str, exc: Exception) -> errors.ServerError:
    return errors.ServerError(
        f"the search API answered {response.status_code} with an unexpected body "
        f"({type(exc).__name__}) from {where}",
        status=response.status_code,
    )


def status_error(response: httpx.Response, where: str) -> errors.ApiError:
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
    cls, fallback = _ERRORS.get(status, (errors.ServerError, "the search API failed"))
    if status not in _ERRORS and status < 500:
        cls = errors.ApiError
    text = f"{message or fallback} (HTTP {status}{f' {code}' if code else ''}, {where})"
    return cls(text, status=status, code=code, details=details, retry_after=_retry_after(response))


def transport_error(
    exc: httpx.TransportError, method: str, url: str, timeout: float
) -> errors.ServiceUnavailable:
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return errors.ServiceUnavailable(
            f"the search API did not answer within {timeout:g} s ({method} {url})", code="timeout"
        )
    return errors.ServiceUnavailable(
        f"could not reach the search API at {url}: {exc}", code="connect"
    )


def should_retry(error: errors.ApiError, attempt: int, max_retries: int, method: str) -> bool:
    if attempt >= max_retries:
        return False
    if isinstance(error, errors.ServiceUnavailable):
        return error.code == "connect" or method == "GET"
    return error.status in RETRYABLE


def delay(error: errors.ApiError, attempt: int) -> float:
    if error.retry_after is not None:
        return min(error.retry_after, MAX_BACKOFF_S)
    return min(0.5 * 2**attempt, MAX_BACKOFF_S)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
