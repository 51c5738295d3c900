"""A query's vector under a model, in Redis for a day; Redis being down only costs the cache."""

from __future__ import annotations

import contextlib
import hashlib

import numpy as np
import redis
from django.conf import settings

from rag_project.redis_clients import shared_client

QUERY_CACHE_TTL_S = 24 * 3600


def _query_key(provider: str, model: str, dimensions: int | None, query: str) -> str:
    digest = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()
    return f"rag:qemb:{provider}:{model}:{dimensions or 0}:{digest}"


def _redis() -> redis.Redis:
    return shared_client(settings.REDIS_URL)


def cached_query_embedding(embedder, query: str) -> tuple[list[float], bool]:
    """(The query's vector, whether it came from the cache)."""
    key = _query_key(embedder.provider, embedder.model, embedder.dimensions, query)
    client = None
    try:
        client = _redis()
        raw = client.get(key)
        if raw:
            return np.frombuffer(raw, dtype=np.float32).astype(np.float64).tolist(), True
    except redis.RedisError:
        client = None
    vector = embedder.embed_query(query)
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.set(key, np.asarray(vector, dtype=np.float32).tobytes(), ex=QUERY_CACHE_TTL_S)
    return vector, False


def remember_query_embedding(embedder, query: str, vector) -> None:
    """Store a query's vector as if ``embedder`` had computed it (benchmarks give their queries
    vectors drawn beside the chunks'). Raises redis.RedisError: the caller relies on it."""
    key = _query_key(embedder.provider, embedder.model, embedder.dimensions, query)
    _redis().set(key, np.asarray(vector, dtype=np.float32).tobytes(), ex=QUERY_CACHE_TTL_S)
