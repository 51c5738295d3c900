"""Rate limits per API key (and per signed-in user), counted in the default cache (Redis), so
every web process shares the count. Rates are ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``
(``api_key`` and ``user``, from ``API_THROTTLE_RATE`` and ``API_USER_THROTTLE_RATE``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from tenancy.models import ApiKey

logger = logging.getLogger(__name__)
_redis_down = False


class _SettingsRateThrottle(SimpleRateThrottle):
    def get_rate(self) -> str | None:
        # Read at request time (DRF binds the rates at import), so a changed setting applies.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view) -> bool:
        # With Redis down, searches keep answering from PostgreSQL; so must the rate limiter:
        # it lets the request through rather than failing it with a 500, and says so once per
        # outage, not once per request.
        global _redis_down
        try:
            allowed = super().allow_request(request, view)
        except redis.RedisError as exc:
            if not _redis_down:
                logger.warning("rate limits not applied while Redis is unavailable (%s)", exc)
                _redis_down = True
            return True
        if _redis_down:
            logger.warning("Redis is back: rate limits apply again")
            _redis_down = False
        return allowed


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
