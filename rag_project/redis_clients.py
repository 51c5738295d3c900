"""Redis clients shared for the life of a process, one (and its connection pool) per URL.

A new client per request paid a connection set-up every time. redis-py's pools are
thread-safe and start afresh in a forked child (gunicorn workers, Celery's pool)."""

from __future__ import annotations

import redis

_clients: dict[str, redis.Redis] = {}


def shared_client(url: str) -> redis.Redis:
    """The process's client for ``url``: short timeouts, since every caller (the query-embedding
    cache, the rate limiter) carries on without Redis rather than wait for it."""
    client = _clients.get(url)
    if client is None:
        client = _clients.setdefault(
            url, redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        )
    return client
