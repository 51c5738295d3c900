"""Rate limits per API key (and per signed-in user), counted in Redis, so every web process
shares the count. Rates are ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` (``api_key`` and
``user``, from ``API_THROTTLE_RATE`` and ``API_USER_THROTTLE_RATE``), as ``"N/period"``.

Failed authentications are limited per client address (``RAG_AUTH_FAILURE_RATE``; the address
is ``client_address``'s): past the limit, an address's attempts with a key that fails answer 429
instead of 401, so guessing key secrets costs the guesser the window. A valid key is refused
from such an address as well, unless it already authenticated from there (within
``ADMITTED_FOR_S``): otherwise its 200 against everybody else's 429 would tell the guesser which
guess was right, and the limit would stop nothing. So one client behind an office's NAT that
retries a revoked key, or a guesser there, cannot lock out the office's clients already at work;
only keys new to that address wait for the window. (Every attempt counted per address instead,
valid keys included, would let whoever shares the address lock out all of it.)

The rates, scopes and cache keys are DRF's ``SimpleRateThrottle``'s; its counting is not.
That keeps each client's request times as one list in the cache, read, trimmed, appended to
and written back whole on every request. Two processes doing that at once both write their own
copy, so one request is lost from the count and a client spread over several workers gets past
its limit. The list also holds one entry per request in the window, so at a generous rate (the
benchmarks run at 1,000,000/min) each request would unpickle and pickle thousands of floats.

Here each client's requests in the last period are a Redis sorted set of their times, trimmed,
added to and counted by one Lua script (``_COUNT``): atomic across processes, one round trip
per request, and the work (O(log n)) is Redis's, not a pickled list's. The window slides
exactly, as DRF's does. A refused request is taken out again by the same script, which also
reads when the oldest request leaves the window, so a client that waits ``Retry-After`` gets
through, and is never told to wait longer than the period. One script rather than a MULTI/EXEC
pipeline of the same commands: redis-py builds and parses a pipeline in Python, and taking a
refusal out again would need a second round trip.
"""

from __future__ import annotations

import ipaddress
import logging
import time
import uuid
from dataclasses import dataclass

import redis
from django.conf import settings
from redis.commands.core import Script
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from rag_project.redis_clients import shared_client
from tenancy.models import ApiKey

logger = logging.getLogger(__name__)
_redis_down = False
KEY_PREFIX = "rag:"  # before DRF's cache key (``throttle_<scope>_<ident>``)

# KEYS[1]: the client's sorted set. ARGV: now, the window's start, this request's member, the
# limit, the key's time to live (s). Returns {count} when allowed; else {count, the score of
# the oldest request that has to leave the window before one more fits} with this one taken out.
_COUNT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
local count = redis.call('ZCARD', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
local limit = tonumber(ARGV[4])
if count <= limit then
    return {count}
end
redis.call('ZREM', KEYS[1], ARGV[3])
local oldest = redis.call('ZRANGE', KEYS[1], count - 1 - limit, count - 1 - limit, 'WITHSCORES')
return {count, oldest[2] or false}
"""
# KEYS[1]: an address's failed authentications; KEYS[2]: the mark of one key admitted from it.
# ARGV: the window's start, the limit, the mark's time to live (s). Returns {1} (the key may go
# ahead, its mark set afresh) when the address is under the limit or the key is marked; else
# {0, the score of the oldest failure that has to leave the window before the address is under}.
_ADMIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[2])
if count < limit or redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('SET', KEYS[2], 1, 'EX', ARGV[3])
    return {1}
end
local oldest = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return {0, oldest[2] or false}
"""
_scripts: dict[tuple[str, str], Script] = {}  # by Redis URL and script


class _SettingsRateThrottle(SimpleRateThrottle):
    """DRF's rate notation, scopes and cache keys; the counting (``allow_request``, ``wait``)
    is this module's."""

    def __init__(self) -> None:
        super().__init__()
        self.retry_after: float | None = None

    def get_rate(self) -> str | None:
        # Read at request time (DRF binds the rates at import), so a changed setting applies.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def parse_rate(self, rate):
        try:
            return super().parse_rate(rate)
        except (KeyError, ValueError, IndexError):
            raise ValueError(
                f"invalid throttle rate {rate!r}: expected 'N/s', 'N/min', 'N/hour' or 'N/day'"
            ) from None

    def allow_request(self, request, view) -> bool:
        key = self.get_cache_key(request, view) if self.rate is not None else None
        if key is None:
            return True
        # With Redis down, searches keep answering from PostgreSQL; so must the rate limiter:
        # it lets the request through rather than failing it with a 500, and says so once per
        # outage, not once per request.
        global _redis_down
        try:
            allowed = self._count(KEY_PREFIX + key, self.num_requests, self.duration)
        except redis.RedisError as exc:
            if not _redis_down:
                logger.warning("rate limits not applied while Redis is unavailable (%s)", exc)
                _redis_down = True
            return True
        if _redis_down:
            logger.warning("Redis is back: rate limits apply again")
            _redis_down = False
        return allowed

    def _count(self, key: str, limit: int, duration: int) -> bool:
        now = time.time()
        member = f"{now:.6f}:{uuid.uuid4().hex[:12]}"  # unique: two calls may share a time
        answer = _script(_COUNT)(
            keys=[key], args=[f"{now:.6f}", f"{now - duration:.6f}", member, limit, duration + 1]
        )
        if len(answer) == 1:
            return True
        # Refused: it does not count. One more fits once the oldest (count - limit) of the
        # others have left the window.
        oldest = answer[1]
        leaves = float(oldest) + duration if oldest else now
        self.retry_after = max(leaves - now, 0.001)
        return False

    def wait(self) -> float | None:
        return self.retry_after


def _script(source: str) -> Script:
    url = settings.REDIS_URL
    script = _scripts.get((url, source))
    if script is None:
        script = _scripts.setdefault((url, source), shared_client(url).register_script(source))
    return script


class ApiKeyRateThrottle(_SettingsRateThrottle):
    """Limits each API key, whichever process or address it calls from."""

    scope = "api_key"

    def get_cache_key(self, request, view) -> str | None:
        if not isinstance(request.auth, ApiKey):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class SessionUserRateThrottle(_SettingsRateThrottle):
    """Limits each signed-in user (session authentication)."""

    scope = "user"

    def get_cache_key(self, request, view) -> str | None:
        if isinstance(request.auth, ApiKey) or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


@dataclass(frozen=True)
class _KeyCall:
    """What ApiKeyRateThrottle reads of a request: the key that made it."""

    auth: ApiKey


def api_key_wait(key: ApiKey) -> float | None:
    """Count one call of ``key`` outside a REST request (an MCP tool call) on the REST API's own
    per-key counter: None when it may go ahead, else the seconds to wait (DRF's ``Throttled``)."""
    throttle = ApiKeyRateThrottle()
    if throttle.allow_request(_KeyCall(key), None):
        return None
    return throttle.wait()


# ------------------------------------------------------------------ failed authentications

# How long a key that authenticated from an address stays admitted from it while the address is
# over its failure limit (renewed by each use, at most once a minute per process).
ADMITTED_FOR_S = 24 * 3600
_ADMITTED_RECHECK_S = 60.0
_ADMITTED_MEMORY = 10_000  # (address, key) pairs a process remembers before starting afresh
# (address, who: a key's id, or "user-" and a user's id): when this process last marked it
_admitted: dict[tuple[str, str], float] = {}


class TooManyFailedAuthentications(exceptions.Throttled):
    default_detail = "Too many attempts with an invalid API key from this address."


def client_address(request) -> str:
    """Who a failed authentication is counted against: ``REMOTE_ADDR``, or with
    ``RAG_NUM_PROXIES`` (the reverse proxies in front of the server, each appending the address
    it was called from to ``X-Forwarded-For``) the address the outermost of them saw; addresses
    a client wrote into the header itself are never taken. An IPv6 address counts by its /64,
    the block one subscriber holds."""
    address = request.META.get("REMOTE_ADDR", "")
    proxies = settings.RAG_NUM_PROXIES
    if proxies > 0:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            address = hops[-min(proxies, len(hops))]
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address.strip() or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FailedAuthenticationThrottle(_SettingsRateThrottle):
    """Counts failed authentications per client address, at ``RAG_AUTH_FAILURE_RATE``."""

    scope = "auth_failure"

    def get_rate(self) -> str | None:
        return settings.RAG_AUTH_FAILURE_RATE or None

    def get_cache_key(self, request, view) -> str | None:
        return _failures_key(client_address(request))


def _failures_key(address: str) -> str:
    # The address in braces: a Redis Cluster keeps both keys of _ADMIT in one slot.
    return f"auth-failures:{{{address}}}"


def count_failed_authentication(request) -> None:
    """Count a failed authentication of ``request``'s address; raise
    ``TooManyFailedAuthentications`` (429, with when to come back) when that makes the address
    go over its limit: the attempt is then refused, not counted. Without Redis nothing is
    counted (the caller answers 401, as it would have)."""
    throttle = FailedAuthenticationThrottle()
    if not throttle.allow_request(request, None):
        raise TooManyFailedAuthentications(throttle.wait())


def admit_api_key(request, key: ApiKey) -> None:
    """Let ``key``, which authenticated, go ahead from ``request``'s address, or raise
    ``TooManyFailedAuthentications`` when the address is over its failure limit and the key has
    not authenticated from it within ``ADMITTED_FOR_S`` (see the module docstring). One Redis
    round trip per address and key at most once a minute per process; none without Redis."""
    _admit(request, str(key.pk))


def admit_user(request, user) -> None:
    """The same for a person who signed in with their password (the admin's sign-in)."""
    _admit(request, f"user-{user.pk}")


def _admit(request, who: str) -> None:
    global _redis_down
    if not settings.RAG_AUTH_FAILURE_RATE:
        return
    address = client_address(request)
    now = time.monotonic()
    marked = _admitted.get((address, who))
    if marked is not None and now - marked < _ADMITTED_RECHECK_S:
        return
    throttle = FailedAuthenticationThrottle()
    wall = time.time()
    try:
        answer = _script(_ADMIT)(
            keys=[
                KEY_PREFIX + _failures_key(address),
                f"{KEY_PREFIX}auth-admitted:{{{address}}}:{who}",
            ],
            args=[f"{wall - throttle.duration:.6f}", throttle.num_requests, ADMITTED_FOR_S],
        )
    except redis.RedisError as exc:
        if not _redis_down:
            logger.warning("rate limits not applied while Redis is unavailable (%s)", exc)
            _redis_down = True
        return
    if answer[0] == 1:
        if len(_admitted) >= _ADMITTED_MEMORY:
            _admitted.clear()
        _admitted[(address, who)] = now
        return
    leaves = float(answer[1]) + throttle.duration if answer[1] else wall
    raise TooManyFailedAuthentications(max(leaves - wall, 0.001))
