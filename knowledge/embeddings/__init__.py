"""Embedding providers behind one interface (see :mod:`knowledge.embeddings.base`).

``openai`` (any OpenAI-compatible ``/v1/embeddings``), ``local`` (sentence-transformers from a
local path or an installed model package), ``hash`` (deterministic, not semantic: tests and
development only), ``langchain`` (a LangChain Embeddings registered by ``retrieval.langchain`` in
the process using it) and ``none`` (keyword-only). Nothing here downloads a model at run time.
"""

from .base import Embedder, EmbeddingConfig, EmbeddingError, ProviderUnavailable
from .registry import config_for_knowledge_base, default_config, get_embedder, register_embedder

__all__ = [
    "Embedder",
    "EmbeddingConfig",
    "EmbeddingError",
    "ProviderUnavailable",
    "config_for_knowledge_base",
    "default_config",
    "get_embedder",
    "register_embedder",
]
