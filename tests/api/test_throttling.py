"""Rate limits (tenancy.api.throttling): counted in Redis, exact across concurrent callers,
over a sliding window, and telling a refused client how long to wait."""

import pytest
import redis
from django.conf import settings as django_settings

from tenancy.api.throttling import KEY_PREFIX, ApiKeyRateThrottle, api_key_wait
from tenancy.models import ApiKey
from tests.api.conftest import API, bearer, error_of
from tests.conftest import at_once

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rate(settings):
    def set_rate(value: str) -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {"api_key": value, "user": value},
        }

    return set_rate


def test_concurrent_calls_of_one_key_get_exactly_the_limit(tenant, make_key, rate):
    # Read-modify-write of one list per key (DRF's SimpleRateThrottle) lost counts when calls
    # overlapped; each call here is one INCR, so 16 threads of 5 calls get exactly 30 through.
    rate("30/hour")
    key = ApiKey.objects.get(pk=_created_key(tenant, make_key))

    def five_calls() -> int:
        return sum(api_key_wait(key) is None for _ in range(5))

    assert sum(at_once(16, five_calls)) == 30
    assert api_key_wait(key) > 0  # and the next one still waits


def test_a_refused_request_is_not_counted_and_says_when_to_come_back(tenant, make_key, rate):
    rate("3/min")
    client = bearer(make_key(tenant))
    assert [client.get(f"{API}/me").status_code for _ in range(3)] == [200, 200, 200]
    for _ in range(5):  # refusals do not push the window further out
        response = client.get(f"{API}/me")
        assert response.status_code == 429
        assert 0 < error_of(response)["details"]["retry_after_s"] <= 60
    key = ApiKey.objects.filter(tenant=tenant).latest("pk")
    assert _redis().zcard(_name(key)) == 3


def test_the_wait_given_is_when_one_more_request_fits(tenant, make_key, rate):
    rate("4/min")
    key = ApiKey.objects.get(pk=_created_key(tenant, make_key))
    assert [api_key_wait(key) for _ in range(4)] == [None] * 4
    wait = api_key_wait(key)
    assert 0 < wait <= 60

    # Move the recorded calls back in time instead of sleeping: short of the wait, the next
    # call is still refused; past it, it goes through. (5 s either side: a busy machine may
    # take a while between two calls.)
    _age(key, wait - 5)
    assert api_key_wait(key) is not None
    _age(key, 10)
    assert api_key_wait(key) is None


def test_the_window_slides(tenant, make_key, rate):
    rate("4/min")
    key = ApiKey.objects.get(pk=_created_key(tenant, make_key))
    assert [api_key_wait(key) for _ in range(2)] == [None] * 2
    _age(key, 40)  # two calls 40 s ago, then two now: the limit
    assert [api_key_wait(key) for _ in range(2)] == [None] * 2
    assert api_key_wait(key) is not None
    _age(key, 21)  # the first two are 61 s old: out of the window, two fit again
    assert [api_key_wait(key) for _ in range(2)] == [None] * 2
    assert api_key_wait(key) is not None


def test_redis_down_lets_requests_through(tenant, make_key, rate, settings):
    rate("1/min")
    key = ApiKey.objects.get(pk=_created_key(tenant, make_key))
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert [api_key_wait(key) for _ in range(3)] == [None, None, None]


def test_rates_are_read_as_drf_writes_them():
    parse = ApiKeyRateThrottle().parse_rate
    assert parse("600/min") == (600, 60)
    assert parse("5/s") == (5, 1)
    assert parse("100/hour") == (100, 3600)
    assert parse("1000/day") == (1000, 86400)
    for bad in ("many/min", "5/fortnight", "5"):
        with pytest.raises(ValueError, match="invalid throttle rate"):
            parse(bad)


def _created_key(tenant, make_key) -> int:
    make_key(tenant)
    return ApiKey.objects.filter(tenant=tenant).latest("pk").pk


def _name(key: ApiKey) -> str:
    """The Redis key of ``key``'s counted calls."""
    return KEY_PREFIX + ApiKeyRateThrottle.cache_format % {"scope": "api_key", "ident": key.pk}


def _redis() -> redis.Redis:
    return redis.Redis.from_url(django_settings.REDIS_URL)


def _age(key: ApiKey, seconds: float) -> None:
    """Make every recorded call of ``key`` ``seconds`` older."""
    name = _name(key)
    calls = _redis().zrange(name, 0, -1, withscores=True)
    _redis().zadd(name, {member: score - seconds for member, score in calls})
