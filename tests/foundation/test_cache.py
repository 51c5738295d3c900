"""The Django cache (rag_project/cache.py) unpickles only what it signed: a pickle written to
Redis by anyone else is a miss, and the code it carries never runs."""

import logging
import pickle
import tempfile
from pathlib import Path

import pytest
import redis
from django.core.cache import cache

from rag_project.settings import base


class Exploit:
    """Unpickling this calls ``open(path, "w")``: the file appears if anything unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture
def raw(settings):
    """A plain client of the cache's Redis: what another process writing to it could do."""
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    yield client
    client.close()


@pytest.fixture
def planted():
    """A path that must never be created."""
    path = Path(tempfile.mkdtemp(prefix="rag-cache-")) / "ran"
    yield path
    path.unlink(missing_ok=True)
    path.parent.rmdir()


def test_every_profile_uses_the_signing_backend(settings):
    assert base.CACHES["default"]["BACKEND"] == "rag_project.cache.SignedRedisCache"
    assert settings.CACHES["default"]["BACKEND"] == "rag_project.cache.SignedRedisCache"


def test_values_round_trip_and_integers_stay_plain_for_incr(raw):
    cache.set("signed:value", {"token": "abc", "items": [1, 2.5, None]}, timeout=60)
    assert cache.get("signed:value") == {"token": "abc", "items": [1, 2.5, None]}
    assert cache.get_many(["signed:value", "signed:absent"]) == {
        "signed:value": {"token": "abc", "items": [1, 2.5, None]}
    }
    assert cache.add("signed:count", 1, timeout=60)
    assert cache.incr("signed:count", 4) == 5
    assert raw.get(cache.make_key("signed:count")) == b"5"  # a Redis integer, not a pickle
    assert cache.get("signed:count") == 5
    assert not raw.get(cache.make_key("signed:value")).startswith(b"\x80")  # not a bare pickle


def test_a_pickle_written_into_redis_is_never_unpickled(raw, planted, caplog):
    raw.set(cache.make_key("planted"), pickle.dumps(Exploit(planted)), ex=60)
    with caplog.at_level(logging.WARNING, logger="rag.security"):
        assert cache.get("planted") is None
        assert cache.get("planted", "default") == "default"
        assert cache.get_many(["planted"]) == {}
    assert not planted.exists()
    refused = [r for r in caplog.records if r.name == "rag.security"]
    assert len(refused) == 3 and "planted" in refused[0].getMessage()


def test_a_signed_value_altered_in_redis_is_a_miss(raw, planted):
    cache.set("signed:altered", "harmless", timeout=60)
    stored = raw.get(cache.make_key("signed:altered"))
    # The signature kept, the pickle behind it swapped for one that runs code.
    head = stored[: len(stored) - len(pickle.dumps("harmless", pickle.HIGHEST_PROTOCOL))]
    raw.set(cache.make_key("signed:altered"), head + pickle.dumps(Exploit(planted)), ex=60)
    assert cache.get("signed:altered") is None
    assert not planted.exists()


def test_another_secret_key_signs_in_vain_but_a_fallback_still_reads(settings):
    settings.SECRET_KEY = "another-deployment-secret-key-0123456789-abcdefghijklmnopqrstuvw"
    cache.set("signed:rotated", "kept", timeout=60)
    settings.SECRET_KEY = "the-next-secret-key-of-this-deployment-0123456789-abcdefghijklmn"
    assert cache.get("signed:rotated") is None
    settings.SECRET_KEY_FALLBACKS = [
        "another-deployment-secret-key-0123456789-abcdefghijklmnopqrstuvw"
    ]
    assert cache.get("signed:rotated") == "kept"
