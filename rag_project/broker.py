"""A guard for a worker crash when the Redis broker goes away (celery/kombu 5.7).

On a lost broker connection the worker's consumer first ``collect()``s the connection (which
detaches its transport: ``transport.client = None``) and then ``close()``s it; closing the
default channel restores unacknowledged messages, which needs a new Redis connection pool,
whose parameters are read from ``transport.client``: ``AttributeError`` instead of a connection
error, which ``ignore_errors`` does not swallow, and the worker dies with "Unrecoverable error"
instead of reconnecting when Redis returns (found by tests/reliability/faults). Raising the
transport's own connection error there lets the consumer carry on and reconnect; the messages
it could not restore come back after the broker's visibility timeout, as after any crash.
"""

from __future__ import annotations

import redis
from kombu.transport import redis as kombu_redis

_original_connparams = kombu_redis.Channel._connparams


def _connparams(self, asynchronous: bool = False) -> dict:
    if self.connection.client is None:
        raise redis.exceptions.ConnectionError("the broker connection is already closed")
    return _original_connparams(self, asynchronous=asynchronous)


def install() -> None:
    kombu_redis.Channel._connparams = _connparams
