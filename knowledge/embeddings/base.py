"""The embedding provider interface and its typed configuration. No Django imports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tenancy.errors import DomainError, ErrorKind


class EmbeddingError(DomainError, RuntimeError):
    """The provider failed in a way a person can act on; the message says how."""

    code = "invalid"
    kind = ErrorKind.INVALID


class ProviderUnavailable(EmbeddingError):
    """The provider cannot be used on this machine (package or model missing)."""


@dataclass(frozen=True)
class EmbeddingConfig:
    """Which provider and model; ``dimensions`` is the vector length it produces."""

    provider: str
    model: str = ""
    dimensions: int | None = None
    # openai
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    timeout_s: float = 30.0
    batch_size: int = 64
    max_retries: int = 4
    backoff_s: float = 0.5


class Embedder(Protocol):
    provider: str
    model: str
    dimensions: int

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...
