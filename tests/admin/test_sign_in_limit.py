"""The admin's sign-in is limited per address like API keys (tenancy.admin.login): past
RAG_AUTH_FAILURE_RATE failed sign-ins, an address's sign-ins are refused whatever the password,
but for people who signed in from it before; other addresses are not affected."""

import pytest
from django.contrib.auth import SESSION_KEY
from django.test import Client
from django.urls import reverse

from tests.admin.conftest import PASSWORD, staff
from tests.api.test_auth_failures import WRONG, _forget, _redis, me

pytestmark = pytest.mark.django_db(transaction=True)
HERE, ELSEWHERE = "203.0.113.9", "198.51.100.30"


@pytest.fixture(autouse=True)
def limit(settings):
    settings.RAG_AUTH_FAILURE_RATE = "3/min"
    settings.RAG_NUM_PROXIES = 0
    _forget(_redis())
    yield
    _forget(_redis())


def sign_in(username: str, password: str, address: str = HERE) -> tuple[bool, str]:
    client = Client(REMOTE_ADDR=address)
    url = reverse("admin:login")
    response = client.post(url, {"username": username, "password": password})
    return SESSION_KEY in client.session, response.content.decode()


@pytest.fixture
def person(db):
    user = staff(None)
    user.set_password(PASSWORD)
    user.save()
    return user


def test_past_the_limit_a_right_password_is_refused_like_a_wrong_one(person):
    for _ in range(3):
        signed, page = sign_in(person.username, "wrong password")
        assert not signed and "Please enter the correct username and password" in page
    for password in ("wrong again", PASSWORD):
        signed, page = sign_in(person.username, password)
        assert not signed
        assert "Too many failed sign-ins from this address" in page
    # another address is not affected
    assert sign_in(person.username, PASSWORD, ELSEWHERE)[0]


def test_a_person_who_signed_in_from_the_address_before_still_can(person):
    other = staff(None)
    other.set_password(PASSWORD)
    other.save()
    assert sign_in(person.username, PASSWORD)[0]
    for _ in range(4):
        assert not sign_in(other.username, "wrong password")[0]
    assert sign_in(person.username, PASSWORD)[0]
    signed, page = sign_in(other.username, PASSWORD)
    assert not signed and "Too many failed sign-ins" in page


def test_the_failures_count_with_failed_api_keys(person):
    for _ in range(3):
        assert me(WRONG, HERE).status_code == 401
    signed, page = sign_in(person.username, PASSWORD)
    assert not signed and "Too many failed sign-ins" in page
