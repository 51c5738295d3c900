"""The rerank provider interface and its typed configuration. No Django imports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

PROVIDERS = ("none", "http", "local")
API_STYLES = ("cohere", "jina", "tei")


class RerankError(RuntimeError):
    """The reranker failed in a way a person can act on; the message says how. The search
    service keeps the fused order when it sees one."""


@dataclass(frozen=True)
class RerankConfig:
    """Which reranker, and how to reach it. ``model`` is the API's model name for ``http`` and
    a local directory for ``local``; ``batch_size`` None means the API style's own limit."""

    provider: str = "none"
    api_style: str = "cohere"
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    model: str = ""
    timeout_s: float = 10.0
    max_retries: int = 2
    backoff_s: float = 0.5
    batch_size: int | None = None


class Reranker(Protocol):
    """Scores ``(query, document)`` pairs; higher is more relevant."""

    name: str  # provider and model, shown in the search trace

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in the order of ``documents``. Raises RerankError."""
        ...
