"""Failed authentications are limited per client address (tenancy.api.throttling), counted in
the real Redis: past RAG_AUTH_FAILURE_RATE an address's attempts answer 429 instead of 401 on
the REST API, Dify's endpoint and /mcp alike, and only keys already at work from that address
still get through, so a right guess looks exactly like a wrong one."""

import pytest
import redis
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from tenancy.api import throttling
from tenancy.api.throttling import KEY_PREFIX, client_address
from tests.conftest import API, bearer, error_of

pytestmark = pytest.mark.django_db(transaction=True)

WRONG = "rag_12345678_TotallyMadeUpSecretThatIsWrong"
DIFY = f"{API}/dify/retrieval"
MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture(autouse=True)
def limit(settings):
    """3 failures a minute per address; no count or admission left from another test."""
    settings.RAG_AUTH_FAILURE_RATE = "3/min"
    settings.RAG_NUM_PROXIES = 0
    _forget(_redis())
    yield
    # The suite's own Redis: a test may have pointed REDIS_URL at a dead one meanwhile.
    _forget(redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"]))


def _forget(client: redis.Redis) -> None:
    for name in client.scan_iter(f"{KEY_PREFIX}auth-*"):
        client.delete(name)
    throttling._admitted.clear()


def _redis() -> redis.Redis:
    return redis.Redis.from_url(django_settings.REDIS_URL)


def me(raw_key: str, address: str = "203.0.113.7", **meta):
    return bearer(raw_key).get(f"{API}/me", REMOTE_ADDR=address, **meta)


def _age_failures(address: str, seconds: float) -> None:
    """Make every failure counted against ``address`` ``seconds`` older, instead of sleeping."""
    name = f"{KEY_PREFIX}auth-failures:{{{address}}}"
    failures = _redis().zrange(name, 0, -1, withscores=True)
    _redis().zadd(name, {member: score - seconds for member, score in failures})


def test_past_the_limit_an_address_gets_429_with_when_to_come_back():
    assert [me(WRONG).status_code for _ in range(3)] == [401, 401, 401]
    for raw in (WRONG, "rag_87654321_AnotherGuess", "not-even-a-key"):
        response = me(raw)
        assert response.status_code == 429
        error = error_of(response)
        assert error["code"] == "throttled"
        assert error["message"].startswith(
            "Too many attempts with an invalid API key from this address."
        )
        assert 0 < error["details"]["retry_after_s"] <= 60
        assert response["Retry-After"] == str(error["details"]["retry_after_s"])
    # A malformed header is an attempt too; another address is not affected.
    malformed = APIClient().get(
        f"{API}/me", HTTP_AUTHORIZATION="Bearer two parts", REMOTE_ADDR="203.0.113.7"
    )
    assert malformed.status_code == 429
    assert me(WRONG, "198.51.100.20").status_code == 401


def test_a_right_guess_looks_like_a_wrong_one_but_a_key_at_work_keeps_working(tenant, make_key):
    at_work, new = make_key(tenant), make_key(tenant)
    assert me(at_work).status_code == 200
    assert [me(WRONG).status_code for _ in range(4)] == [401, 401, 401, 429]

    assert me(at_work).status_code == 200  # a client of that office, already authenticated
    throttling._admitted.clear()  # and in another web process, which asks Redis
    assert me(at_work).status_code == 200
    guessed = me(new)  # a key never used from here: as refused as the wrong ones
    assert guessed.status_code == 429
    assert error_of(guessed)["code"] == error_of(me(WRONG))["code"] == "throttled"
    assert error_of(guessed)["message"] == error_of(me(WRONG))["message"]

    _age_failures("203.0.113.7", 61)  # the window has passed
    assert me(new).status_code == 200
    assert me(WRONG).status_code == 401


def test_refused_attempts_do_not_count_and_the_window_slides():
    assert [me(WRONG).status_code for _ in range(3)] == [401, 401, 401]
    assert [me(WRONG).status_code for _ in range(10)] == [429] * 10
    assert _redis().zcard(f"{KEY_PREFIX}auth-failures:{{203.0.113.7}}") == 3
    wait = error_of(me(WRONG))["details"]["retry_after_s"]
    _age_failures("203.0.113.7", 60 - wait - 5)  # not yet
    assert me(WRONG).status_code == 429
    _age_failures("203.0.113.7", wait + 6)
    assert me(WRONG).status_code == 401


def test_dify_and_mcp_count_on_the_same_address_and_answer_in_their_shapes(tenant, make_key):
    client = bearer(WRONG)
    address = {"REMOTE_ADDR": "203.0.113.9"}
    dify_body = {"knowledge_id": "1", "query": "pump", "retrieval_setting": {"top_k": 1}}
    failed = client.post(DIFY, dify_body, format="json", **address)
    assert failed.status_code == 403 and failed.json()["error_code"] == 1002
    mcp = client.post("/mcp", MCP_LIST, format="json", **address)
    assert mcp.status_code == 401
    assert me(WRONG, "203.0.113.9").status_code == 401  # the third failure

    refused = client.post(DIFY, dify_body, format="json", **address)
    assert refused.status_code == 429 and refused.json()["error_code"] == 3003
    assert 0 < int(refused["Retry-After"]) <= 60
    mcp = client.post("/mcp", MCP_LIST, format="json", **address)
    assert mcp.status_code == 429 and 0 < int(mcp["Retry-After"]) <= 60
    assert error_of(mcp)["code"] == "throttled"
    # A key new to the address waits on /mcp as well.
    fresh = make_key(tenant, scopes=("read",))
    assert bearer(fresh).post("/mcp", MCP_LIST, format="json", **address).status_code == 429


def test_x_forwarded_for_counts_only_behind_the_configured_proxies(settings):
    # No proxy configured: a client writing its own X-Forwarded-For changes nothing.
    for n in range(5):
        response = me(WRONG, "203.0.113.7", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
        assert response.status_code == (401 if n < 3 else 429)

    # One proxy (at 10.0.0.1): the address it appended is the client's, whatever came before.
    settings.RAG_NUM_PROXIES = 1
    behind = {"HTTP_X_FORWARDED_FOR": "192.0.2.99, 198.51.100.1"}
    assert [me(WRONG, "10.0.0.1", **behind).status_code for _ in range(4)] == [401] * 3 + [429]
    spoofed = {"HTTP_X_FORWARDED_FOR": "192.0.2.1, 198.51.100.1"}
    assert me(WRONG, "10.0.0.1", **spoofed).status_code == 429
    neighbour = {"HTTP_X_FORWARDED_FOR": "198.51.100.2"}
    assert me(WRONG, "10.0.0.1", **neighbour).status_code == 401


class _Request:
    def __init__(self, **meta: str) -> None:
        self.META = meta


def test_an_ipv6_client_counts_by_its_64_block(settings):
    settings.RAG_NUM_PROXIES = 0
    assert client_address(_Request(REMOTE_ADDR="2001:db8:1:2:aaaa::1")) == "2001:db8:1:2::/64"
    assert client_address(_Request(REMOTE_ADDR="2001:db8:1:2:bbbb::9")) == "2001:db8:1:2::/64"
    assert client_address(_Request(REMOTE_ADDR="::ffff:203.0.113.7")) == "203.0.113.7"
    assert client_address(_Request(REMOTE_ADDR="")) == "unknown"


def test_with_redis_down_a_wrong_key_is_still_a_401_and_a_right_one_works(
    settings, tenant, make_key
):
    raw = make_key(tenant)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert [me(WRONG).status_code for _ in range(5)] == [401] * 5
    assert me(raw).status_code == 200


def test_the_limit_can_be_turned_off(settings):
    settings.RAG_AUTH_FAILURE_RATE = ""
    assert {me(WRONG).status_code for _ in range(6)} == {401}
