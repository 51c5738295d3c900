"""The Django cache: Redis, with every pickled value signed.

Django's Redis backend pickles every value but a plain integer and unpickles whatever it reads
back, so anything that can write to that Redis (a neighbour on a shared server, a leaked
password) could make every web and worker process run code of its choosing. Here each pickle is
stored behind an HMAC-SHA256 of its bytes, under a key derived from ``SECRET_KEY`` with a salt
of its own (``SECRET_KEY_FALLBACKS`` are accepted too, so rotating the key does not turn every
cached value into a warning), and a value is unpickled only after its signature checked out. A
value that does not check out is never unpickled: the read is a miss, as if the key were absent,
and ``rag.security`` logs it. Integers stay plain Redis integers as Django stores them, so
``incr`` stays atomic; reading one is ``int()`` of its bytes, which runs nothing.

Being the backend, it covers every user of ``django.core.cache`` at once, whatever it stores
(the web-sync lock, the task folds of ``rag_project.celery.enqueue``). The other readers of
Redis store no pickle: the rate limits are sorted sets, the query-embedding cache raw float32
bytes, the BM25 tiers payloads signed by ``retrieval.bm25store.payload``, Celery's messages JSON.
``CACHES`` names this backend (``rag_project.cache.SignedRedisCache``) in every profile.
"""

from __future__ import annotations

import hmac
import logging
import pickle

from django.conf import settings
from django.core.cache.backends.redis import RedisCache, RedisCacheClient, RedisSerializer
from django.utils.crypto import salted_hmac

security_logger = logging.getLogger("rag.security")

_SALT = "rag_project.cache"
# A signed value: this marker, the 32-byte HMAC of the pickle, the pickle.
_MARKER = b"rag-signed-1:"
_MAC_BYTES = 32


class UnsignedValue(Exception):
    """A cached value that is neither a plain integer nor a pickle signed by us."""


def _mac(data: bytes, secret: str | None = None) -> bytes:
    return salted_hmac(_SALT, data, secret, algorithm="sha256").digest()


class SignedPickleSerializer(RedisSerializer):
    """Django's serializer (integers plain, everything else pickled), each pickle signed."""

    def dumps(self, obj):
        if type(obj) is int:  # as Django's: incr and decr work on the stored number
            return obj
        data = pickle.dumps(obj, self.protocol)
        return _MARKER + _mac(data) + data

    def loads(self, data):
        try:
            return int(data)
        except ValueError:
            pass
        if not data.startswith(_MARKER):
            raise UnsignedValue("not a signed value")
        start = len(_MARKER) + _MAC_BYTES
        mac, body = data[len(_MARKER) : start], data[start:]
        for secret in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
            if hmac.compare_digest(mac, _mac(body, secret)):
                return pickle.loads(body)  # noqa: S301 -- HMAC-verified
        raise UnsignedValue("the signature does not match")


class SignedRedisCacheClient(RedisCacheClient):
    """Reads a value that fails its check as a miss (logged), never unpickling it."""

    def get(self, key, default):
        value = self.get_client(key).get(key)
        if value is None:
            return default
        try:
            return self._serializer.loads(value)
        except UnsignedValue as exc:
            _refused(key, exc)
            return default

    def get_many(self, keys):
        found = {}
        keys = list(keys)
        for key, value in zip(keys, self.get_client(None).mget(keys), strict=True):
            if value is None:
                continue
            try:
                found[key] = self._serializer.loads(value)
            except UnsignedValue as exc:
                _refused(key, exc)
        return found


def _refused(key, exc: UnsignedValue) -> None:
    name = key.decode(errors="replace") if isinstance(key, bytes) else key
    security_logger.warning("cache value %s refused (%s): not unpickled, read as a miss", name, exc)


class SignedRedisCache(RedisCache):
    """Django's ``RedisCache`` with ``SignedPickleSerializer`` (whatever ``OPTIONS`` says: an
    unsigned serializer would undo the point) and a client that reads a refused value as a
    miss."""

    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = SignedRedisCacheClient
        self._options = {**self._options, "serializer": SignedPickleSerializer}
