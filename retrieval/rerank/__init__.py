"""Rerank providers behind one interface (see :mod:`retrieval.rerank.base`).

``http`` (a rerank API in the Cohere, Jina or TEI style), ``local`` (a sentence-transformers
cross-encoder from a local directory) and ``none`` (no rerank). Nothing here downloads a model.
"""

from .base import API_STYLES, PROVIDERS, RerankConfig, Reranker, RerankError
from .registry import get_reranker, rerank_config_from_settings

__all__ = [
    "API_STYLES",
    "PROVIDERS",
    "RerankConfig",
    "RerankError",
    "Reranker",
    "get_reranker",
    "rerank_config_from_settings",
]
