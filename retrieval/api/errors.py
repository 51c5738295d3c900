"""RAGService's exceptions as API errors (kept here: ``knowledge`` and the shared plumbing in
``rag_project.api`` must not depend on ``retrieval``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rest_framework.exceptions import NotFound

from rag_project.api.errors import BadRequest
from retrieval.service import InvalidSearch, KnowledgeBaseNotFound


@contextmanager
def search_errors() -> Iterator[None]:
    """InvalidSearch answers 400 ``invalid_search``; KnowledgeBaseNotFound 404 ``not_found``."""
    try:
        yield
    except InvalidSearch as exc:
        raise BadRequest(str(exc), code="invalid_search") from None
    except KnowledgeBaseNotFound:
        raise NotFound("Knowledge base not found.") from None
