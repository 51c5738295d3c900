"""Choosing and building embedders.

The deployment default (``EMBEDDING_PROVIDER``) is ``auto``: ``local`` when the local model
loads, otherwise ``none`` (keyword-only search), logged once. A knowledge base records its
provider, model and dimension when it is created and keeps them; :func:`get_embedder` builds the
embedder for such a recorded configuration (cached per process).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from django.conf import settings

from .base import Embedder, EmbeddingConfig, EmbeddingError, ProviderUnavailable
from .hashing import HashEmbedder
from .local import LocalEmbedder
from .model_cache import ModelCache
from .openai import OpenAIEmbedder

logger = logging.getLogger(__name__)

PROVIDERS = ("openai", "local", "hash", "none")
# Not configured but handed over at run time (retrieval.langchain wraps a LangChain Embeddings),
# by (model, dimensions): such an embedder exists only in the process that registered it;
# anywhere else its knowledge base's embedder is ProviderUnavailable.
RUNTIME_PROVIDER = "langchain"
_registered: dict[tuple[str, int | None], Embedder] = {}
_lock = threading.Lock()
_auto_choice: EmbeddingConfig | None = None


def settings_config() -> EmbeddingConfig:
    """The deployment's embedding settings, before ``auto`` is resolved."""
    return EmbeddingConfig(
        provider=settings.EMBEDDING_PROVIDER,
        model=settings.EMBEDDING_MODEL,
        dimensions=settings.EMBEDDING_DIMENSIONS,
        base_url=settings.EMBEDDING_BASE_URL,
        api_key=settings.EMBEDDING_API_KEY,
        timeout_s=settings.EMBEDDING_TIMEOUT_S,
        batch_size=settings.EMBEDDING_BATCH_SIZE,
        max_retries=settings.EMBEDDING_MAX_RETRIES,
    )


def default_config() -> EmbeddingConfig:
    """The configuration a new knowledge base records: provider, model and dimension resolved."""
    global _auto_choice
    config = settings_config()
    if config.provider != "auto":
        return resolved(config)
    if _auto_choice is None:
        try:
            _auto_choice = resolved(replace(config, provider="local"))
        except ProviderUnavailable as exc:
            logger.warning(
                "no local embedding model (%s); new knowledge bases are keyword-only", exc
            )
            _auto_choice = EmbeddingConfig(provider="none")
    return _auto_choice


def resolved(config: EmbeddingConfig) -> EmbeddingConfig:
    """Fill in model and dimension by building the embedder (for openai without a dimension
    setting, the dimension stays unknown until the first answer)."""
    if config.provider not in (*PROVIDERS, RUNTIME_PROVIDER):
        raise EmbeddingError(
            f"unknown embedding provider {config.provider!r}; choose one of {', '.join(PROVIDERS)}"
        )
    if config.provider == "none":
        return EmbeddingConfig(provider="none")
    embedder = get_embedder(config)
    return replace(config, model=embedder.model, dimensions=embedder.dimensions or None)


def register_embedder(embedder: Embedder) -> EmbeddingConfig:
    """Make an embedder object the run-time provider of its model and dimension in this
    process; returns the configuration a knowledge base records to use it."""
    with _lock:
        _registered[(embedder.model, embedder.dimensions)] = embedder
    _embedders.forget(lambda config: config.provider == RUNTIME_PROVIDER)
    return EmbeddingConfig(
        provider=RUNTIME_PROVIDER, model=embedder.model, dimensions=embedder.dimensions
    )


def get_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The embedder for a configuration, or None for ``none``. Raises ProviderUnavailable."""
    if config.provider == "none":
        return None
    return _embedders.get(config)


def _build(config: EmbeddingConfig) -> Embedder:
    if config.provider == "hash":
        return HashEmbedder(config.dimensions)
    if config.provider == "local":
        return LocalEmbedder(config.model, batch_size=config.batch_size)
    if config.provider == "openai":
        return OpenAIEmbedder(config)
    if config.provider == RUNTIME_PROVIDER:
        embedder = _registered.get((config.model, config.dimensions))
        if embedder is None:
            raise ProviderUnavailable(
                f"the LangChain embeddings {config.model!r} are not registered in this process; "
                "they exist only where retrieval.langchain was given them"
            )
        return embedder
    raise EmbeddingError(f"unknown embedding provider {config.provider!r}")


def config_for_knowledge_base(kb) -> EmbeddingConfig:
    """The recorded configuration of a knowledge base, with the deployment's connection
    settings (URL, key, timeouts) for the openai provider."""
    return with_model(kb.embedding_provider, kb.embedding_model, kb.embedding_dimensions)


def with_model(provider: str, model: str, dimensions: int | None) -> EmbeddingConfig:
    """A provider, model and dimension with the deployment's connection settings."""
    return replace(settings_config(), provider=provider, model=model, dimensions=dimensions)


_embedders: ModelCache[EmbeddingConfig, Embedder] = ModelCache(_build)
