"""What a search raises for its caller to act on (mapped to HTTP by ``tenancy.api.errors``)."""

from __future__ import annotations

from tenancy.errors import DomainError, ErrorKind


class KnowledgeBaseNotFound(DomainError, LookupError):
    """No such knowledge base in this tenant (another tenant's looks exactly the same)."""

    code = "not_found"
    kind = ErrorKind.NOT_FOUND


class InvalidSearch(DomainError, ValueError):
    """The request cannot be searched as asked; the message says why (HTTP 400)."""

    code = "invalid_search"
    kind = ErrorKind.INVALID
