"""The errors every app raises for a caller to act on, and the tenant guard.

A domain error has a stable ``code`` (for programs) and a ``kind`` that decides how it is
answered; ``tenancy.api.errors`` maps kinds to HTTP statuses in one place, so no view builds an
error response itself. ``knowledge`` and ``retrieval`` derive their exceptions from
``DomainError``. No Django imports: pure modules (parsing) raise these too.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorKind(StrEnum):
    NOT_FOUND = "not_found"  # 404: missing, another tenant's, or not allowed to this caller
    INVALID = "invalid"  # 400: the request cannot be done as asked
    CONFLICT = "conflict"  # 409: it clashes with what is stored
    TOO_LARGE = "too_large"  # 413
    UNSUPPORTED = "unsupported"  # 415
    UNAVAILABLE = "unavailable"  # 503: a service it needs is down; retry later


class DomainError(Exception):
    """An error a caller can act on. ``code`` is stable; the message is for people."""

    code: str = "error"
    kind: ErrorKind = ErrorKind.INVALID

    def __init__(self, message: str = "", *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details = details


class NotYours(DomainError):
    """An object of another tenant reached a service of this one. Answered exactly like a
    missing object (404), so it reveals nothing about the other tenant."""

    code = "not_found"
    kind = ErrorKind.NOT_FOUND


def ensure_tenant(obj: Any, tenant: Any, what: str = "object") -> None:
    """Raise NotYours unless ``obj`` (anything with ``tenant_id``) belongs to ``tenant``.

    The guard of every write service. A real check, not an ``assert``: ``python -O`` removes
    asserts, and a guard that disappears in production is no guard."""
    tenant_id = getattr(tenant, "pk", tenant)
    if tenant_id is None or getattr(obj, "tenant_id", None) != tenant_id:
        # Worded like the 404 of a missing row ("Document not found."): indistinguishable.
        raise NotYours(f"{what} not found.")
