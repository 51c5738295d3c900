"""Choosing and building the deployment's reranker from settings (``RERANK_*``).

Rerankers are cached per configuration, so the local model loads once per process and the HTTP
client's connection pool is reused across searches.
"""

from __future__ import annotations

from django.conf import settings

from knowledge.embeddings.model_cache import ModelCache

from .base import PROVIDERS, RerankConfig, Reranker, RerankError
from .http import HttpReranker
from .local import LocalReranker


def rerank_config_from_settings() -> RerankConfig:
    return RerankConfig(
        provider=settings.RERANK_PROVIDER.strip().lower(),
        api_style=settings.RERANK_API_STYLE.strip().lower(),
        base_url=settings.RERANK_BASE_URL,
        api_key=settings.RERANK_API_KEY,
        model=settings.RERANK_MODEL,
        timeout_s=settings.RERANK_TIMEOUT_S,
        max_retries=settings.RERANK_MAX_RETRIES,
    )


def get_reranker(config: RerankConfig | None = None) -> Reranker | None:
    """The reranker for ``config`` (default: the settings), or None when the provider is
    ``none``. Raises RerankError for a configuration that cannot work."""
    config = config or rerank_config_from_settings()
    if config.provider not in PROVIDERS:
        raise RerankError(
            f"unknown RERANK_PROVIDER {config.provider!r}; choose one of {', '.join(PROVIDERS)}"
        )
    if config.provider == "none":
        return None
    return _rerankers.get(config)


def _build(config: RerankConfig) -> Reranker:
    if config.provider == "local":
        return LocalReranker(config.model)
    return HttpReranker(config)


_rerankers: ModelCache[RerankConfig, Reranker] = ModelCache(_build)
