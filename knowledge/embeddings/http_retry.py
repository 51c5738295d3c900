"""Bounded retries with exponential backoff for POSTs to HTTP APIs we do not own (embedding
and rerank providers): timeouts, unreachable hosts and retryable statuses are tried again,
honouring a numeric ``Retry-After``, up to a fixed number of attempts. No Django imports."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx

logger = logging.getLogger(__name__)


def retryable_status(status: int) -> bool:
    """Throttling, timeouts and server errors: worth another attempt."""
    return status in (408, 409, 425, 429) or status >= 500


class RetriesExhausted(Exception):
    """Every attempt failed; ``problem`` says how the last one did ("answered 503", ...)."""

    def __init__(self, problem: str, attempts: int) -> None:
        super().__init__(f"{problem}, {attempts} attempts")
        self.problem = problem
        self.attempts = attempts


def post_with_retries(
    client: httpx.Client,
    path: str,
    payload: object,
    *,
    attempts: int,
    backoff_s: float,
    max_delay_s: float,
    timeout_s: float,
    what: str,
    retryable: Callable[[int], bool] = retryable_status,
) -> httpx.Response:
    """POST ``payload`` until an answer that is not retryable, which is returned whatever its
    status (the caller reads success and refusals), or raise RetriesExhausted."""
    problem = ""
    for attempt in range(attempts):
        delay = min(backoff_s * (2**attempt), max_delay_s)
        try:
            response = client.post(path, json=payload)
        except httpx.TimeoutException:
            problem = f"timed out after {timeout_s:g} s"
        except httpx.TransportError as exc:
            problem = f"could not be reached ({exc})"
        else:
            if not retryable(response.status_code):
                return response
            problem = f"answered {response.status_code}"
            retry_after = _retry_after(response)
            if retry_after is not None:
                delay = min(retry_after, max_delay_s)
        if attempt + 1 < attempts:
            logger.warning("%s %s; retry %d in %.1fs", what, problem, attempt + 1, delay)
            time.sleep(delay)
    raise RetriesExhausted(problem, attempts)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: our own backoff instead
