"""L2: Redis, shared by every process: a knowledge base's manifest and its segments, with a TTL.

The manifest is one hash per knowledge base (``rag:bm25:m:<kb>``: ``v`` version, ``e`` the
KB's epoch, ``s`` signature, ``p`` payload), read and written by Lua scripts: a read for
"version >= n" never transfers an older one, a slow writer never replaces a newer one. Each
segment is a hash of its own (``rag:bm25:s:<kb>:<key>``: ``e``, ``s``, ``p``).

When Redis cannot be reached every call answers "nothing here" (logged when the outage starts
and ends), and Redis is not tried for ``RETRY_AFTER_S`` after a failure.
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from redis.lock import Lock

from retrieval.bm25store.payload import SignedPayload, manifest_label, segment_label
from retrieval.core.identity import Identity

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0
_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)
_KEY = "rag:bm25:m:{}"
_SEGMENT_KEY = "rag:bm25:s:{}:{}"
_LOCK_KEY = "rag:bm25:build-lock:{}:{}:{}"

# -> {} nothing (an entry of another epoch ARGV[2] is deleted), {'stale'} older than ARGV[1],
# {'malformed'}, or {v, s, p}.
_READ = """
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return {} end
if t ~= 'hash' then return {'malformed'} end
if redis.call('HGET', KEYS[1], 'e') ~= ARGV[2] then
  redis.call('DEL', KEYS[1])
  return {}
end
local v = tonumber(redis.call('HGET', KEYS[1], 'v'))
if not v then return {'malformed'} end
if v < tonumber(ARGV[1]) then return {'stale'} end
return redis.call('HMGET', KEYS[1], 'v', 's', 'p')
"""
# Write unless a newer version of the same KB is there already; 1 if written.
_WRITE = """
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'e') == ARGV[2] then
  local n = tonumber(redis.call('HGET', KEYS[1], 'v'))
  if n and n > tonumber(ARGV[1]) then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'e', ARGV[2], 's', ARGV[3], 'p', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""
# Delete only the entry that failed its check, not one a writer put there since.
_DROP = """
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HGET', KEYS[1], 's') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Malformed(Exception):
    """The key holds something that is not an entry of ours."""


class RedisTier:
    def __init__(self, url: str, ttl_s: int, lock_timeout_s: int) -> None:
        self.ttl_ms = ttl_s * 1000
        self.lock_timeout_s = lock_timeout_s
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=10.0)
        self._read = self.client.register_script(_READ)
        self._write = self.client.register_script(_WRITE)
        self._drop = self.client.register_script(_DROP)
        self._down_until = 0.0
        self._outage = False
        self._state_lock = threading.Lock()

    @property
    def available(self) -> bool:
        """False during an outage's back-off window (Redis is not tried then)."""
        return time.monotonic() >= self._down_until

    def get(self, identity: Identity, min_version: int) -> tuple[int, SignedPayload] | None:
        """The manifest (version, payload) if it holds at least ``min_version``. Raises
        Malformed for a foreign value."""
        reply = self._call(
            self._read,
            keys=[_KEY.format(identity.knowledge_base_id)],
            args=[min_version, identity.epoch],
        )
        if not reply or reply == [b"stale"]:
            return None
        if len(reply) != 3 or None in reply:
            raise Malformed
        try:
            version = int(reply[0])
        except ValueError:
            raise Malformed from None
        return version, SignedPayload(
            manifest_label(version), reply[1].decode("ascii", "replace"), reply[2]
        )

    def version(self, identity: Identity) -> int | None:
        """The stored version only (for polling while another process builds)."""
        head = self.signature(identity)
        return head[0] if head else None

    def signature(self, identity: Identity) -> tuple[int, str] | None:
        """The stored manifest's version and signature, without its payload."""
        reply = self._call(
            self.client.hmget, _KEY.format(identity.knowledge_base_id), "v", "e", "s"
        )
        if not reply or reply[1] != str(identity.epoch).encode() or reply[2] is None:
            return None
        try:
            return int(reply[0]), reply[2].decode("ascii", "replace")
        except (TypeError, ValueError):
            return None

    def put(self, identity: Identity, version: int, payload: SignedPayload) -> bool:
        """Store the manifest of ``version`` unless a newer one is there."""
        result = self._call(
            self._write,
            keys=[_KEY.format(identity.knowledge_base_id)],
            args=[version, identity.epoch, payload.signature, payload.data, self.ttl_ms],
        )
        return bool(result)

    def get_segments(self, identity: Identity, keys: list[str]) -> dict[str, SignedPayload]:
        """The payloads of those segments held for this KB (not another KB's leftovers)."""

        def read() -> list:
            with self.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(_SEGMENT_KEY.format(identity.knowledge_base_id, key), "e", "s", "p")
                return pipe.execute()

        epoch = str(identity.epoch).encode()
        return {
            key: SignedPayload(segment_label(key), reply[1].decode("ascii", "replace"), reply[2])
            for key, reply in zip(keys, self._call(read) or [], strict=False)
            if None not in reply and reply[0] == epoch
        }

    def put_segment(self, identity: Identity, key: str, payload: SignedPayload) -> None:
        name = _SEGMENT_KEY.format(identity.knowledge_base_id, key)

        def write() -> None:
            with self.client.pipeline() as pipe:
                pipe.hset(
                    name, mapping={"e": identity.epoch, "s": payload.signature, "p": payload.data}
                )
                pipe.pexpire(name, self.ttl_ms)
                pipe.execute()

        self._call(write)

    def drop(self, knowledge_base_id: int, signature: str | None, key: str | None = None) -> None:
        """Drop the segment ``key``, else the manifest if it still has ``signature``; with
        neither, the KB's every entry."""
        if key is not None:
            self._call(self.client.delete, _SEGMENT_KEY.format(knowledge_base_id, key))
        elif signature is None:
            self.delete(knowledge_base_id)
        else:
            self._call(self._drop, keys=[_KEY.format(knowledge_base_id)], args=[signature])

    def delete(self, knowledge_base_id: int) -> None:
        """The manifest and every segment of the knowledge base."""

        def delete_all() -> None:
            names = list(self.client.scan_iter(_SEGMENT_KEY.format(knowledge_base_id, "*")))
            self.client.delete(_KEY.format(knowledge_base_id), *names)

        self._call(delete_all)

    def lock(self, identity: Identity, version: int) -> Lock | None:
        """The build lock of (kb, version), tried once: a Lock to release, or None if another
        process holds it. Raises redis.RedisError when Redis is down."""
        if not self.available:
            raise redis.ConnectionError("Redis is in its outage back-off window")
        lock = self.client.lock(
            _LOCK_KEY.format(identity.knowledge_base_id, identity.epoch, version),
            timeout=self.lock_timeout_s,
            blocking=False,
            thread_local=False,
        )
        try:
            acquired = lock.acquire()
        except _UNREACHABLE as exc:
            self._failed(exc)
            raise
        self._recovered()
        return lock if acquired else None

    def _call(self, function, *args, **kwargs):
        """One Redis call's result; None on any Redis error (L2 is only a cache)."""
        if not self.available:
            return None
        try:
            result = function(*args, **kwargs)
        except _UNREACHABLE as exc:
            self._failed(exc)
            return None
        except redis.RedisError as exc:  # e.g. a wrong-type key, or out of memory on a write
            logger.warning("BM25 store: Redis refused a command (%s); skipping L2", exc)
            return None
        self._recovered()
        return result

    def _failed(self, exc: Exception) -> None:
        with self._state_lock:
            self._down_until = time.monotonic() + RETRY_AFTER_S
            if self._outage:
                return
            self._outage = True
        logger.warning(
            "Redis is unreachable (%s): BM25 store skips its L2 cache and takes build locks in "
            "PostgreSQL until it answers again",
            exc,
        )

    def _recovered(self) -> None:
        if not self._outage:
            return
        with self._state_lock:
            if not self._outage:
                return
            self._outage = False
        logger.warning("Redis answers again: BM25 store uses its L2 cache again")
