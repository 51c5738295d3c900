"""The safe fetcher against a real local HTTP server: what it refuses by default, what the
allow-list opens, and its caps. 127.0.0.1 is reachable only through the allow-list."""

from __future__ import annotations

import pytest

from knowledge.web.addresses import AddressRefused, AllowList, HostNotFound
from knowledge.web.fetch import (
    FetchPolicy,
    FetchTimedOut,
    FetchTooLarge,
    HttpStatusError,
    UrlInvalid,
    fetch,
)
from tests.web_site import Page, Site

LOCAL = AllowList.parse(["127.0.0.1"])
NOTHING = AllowList()


def policy(allowed: AllowList = NOTHING, **overrides) -> FetchPolicy:
    values = {"max_bytes": 100_000, "timeout_s": 30.0, "max_redirects": 3, "user_agent": "t"}
    return FetchPolicy(allowed=allowed, **{**values, **overrides})


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} must be judged without DNS")


@pytest.fixture
def site():
    with Site() as running:
        running.html("/", "Home", "Welcome to the help centre.")
        yield running


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.5.4", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("[::1]", "loopback"),
        ("[fe80::1]", "link-local"),
        ("[fd00::1]", "private"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("[::ffff:169.254.169.254]", "link-local"),
        ("[64:ff9b::a00:1]", "private"),
        ("2130706433", "loopback"),  # 127.0.0.1 in decimal
        ("0177.0.0.1", "loopback"),  # octal
        ("0x7f.1", "loopback"),  # hex, shortened
        ("0xa9fea9fe", "link-local"),  # 169.254.169.254 in hex
    ],
)
def test_addresses_that_are_not_public_are_refused_by_default(host, kind):
    with pytest.raises(AddressRefused) as refused:
        fetch(f"http://{host}/latest/meta-data/", policy(), resolver=no_dns)
    assert f"a {kind} address" in str(refused.value)
    assert "RAG_WEB_ALLOWED_HOSTS" in str(refused.value)


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "db.localhost", "printer.local"])
def test_local_names_are_refused_without_asking_dns(host):
    with pytest.raises(AddressRefused, match="local name"):
        fetch(f"http://{host}/", policy(), resolver=no_dns)


def test_a_name_resolving_to_a_private_address_is_refused():
    with pytest.raises(AddressRefused, match=r"intranet\.example\.com \(10\.0\.0\.5\)"):
        fetch("http://intranet.example.com/", policy(), resolver=lambda h, p: ["10.0.0.5"])


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused():
    with pytest.raises(AddressRefused, match="loopback"):
        fetch("http://mixed.example.com/", policy(), resolver=lambda h, p: ["93.184.215.14", "::1"])


def test_a_name_that_does_not_resolve_says_so():
    def nothing(host, port):
        raise OSError("Name or service not known")

    with pytest.raises(HostNotFound, match="could not be resolved"):
        fetch("http://nowhere.invalid/", policy(), resolver=nothing)


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/x", "data:text/plain,hi", "gopher://example.com/"],
)
def test_only_http_and_https_are_fetched(url):
    with pytest.raises(UrlInvalid, match="only http and https"):
        fetch(url, policy(), resolver=no_dns)


def test_the_allow_list_opens_an_address_and_the_content_comes_back(site):
    fetched = fetch(site.url("/"), policy(LOCAL))
    assert fetched.status == 200 and b"Welcome to the help centre." in fetched.content
    assert fetched.content_type.startswith("text/html")
    assert fetched.etag == site.pages["/"].etag


def test_the_connection_goes_to_the_checked_address_with_the_original_host(site):
    # The name resolves once, through the resolver, to the allow-listed address; the server
    # sees the name in Host. No second lookup happens (DNS rebinding).
    lookups = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    fetched = fetch(f"http://docs.example.test:{site.port}/", policy(LOCAL), resolver=resolver)
    assert b"Welcome" in fetched.content
    assert lookups == ["docs.example.test"]
    assert site.fetched("/")[-1]["headers"]["Host"] == f"docs.example.test:{site.port}"


def test_a_redirect_to_a_refused_address_is_refused(site):
    site.pages["/go"] = Page(status=302, location="http://169.254.169.254/latest/meta-data/")
    with pytest.raises(AddressRefused, match=r"169\.254\.169\.254 is a link-local address"):
        fetch(site.url("/go"), policy(LOCAL))


def test_redirects_are_followed_within_the_cap(site):
    site.pages["/a"] = Page(status=301, location="/b")
    site.pages["/b"] = Page(status=302, location=site.url("/"))
    assert fetch(site.url("/a"), policy(LOCAL)).url == site.url("/")
    site.pages["/loop"] = Page(status=302, location="/loop")
    with pytest.raises(Exception, match="redirected more than 3 times"):
        fetch(site.url("/loop"), policy(LOCAL))
    assert len(site.fetched("/loop")) == 4


@pytest.mark.parametrize("chunked", [False, True])
def test_a_page_over_the_byte_cap_is_refused(site, chunked):
    site.pages["/big"] = Page(body=b"x" * 50_000, content_type="text/plain", chunked=chunked)
    with pytest.raises(FetchTooLarge, match="larger than the limit of 10,000 bytes"):
        fetch(site.url("/big"), policy(LOCAL, max_bytes=10_000))


def test_a_server_that_does_not_answer_times_out(site):
    site.pages["/slow"] = Page(body=b"late", held=True)
    with pytest.raises(FetchTimedOut, match="did not answer in time"):
        fetch(site.url("/slow"), policy(LOCAL, timeout_s=0.5))


def test_an_error_status_is_reported_with_its_number(site):
    with pytest.raises(HttpStatusError, match="answered HTTP 404 Not Found"):
        fetch(site.url("/missing"), policy(LOCAL))


def test_a_conditional_request_gets_not_modified(site):
    first = fetch(site.url("/"), policy(LOCAL))
    again = fetch(site.url("/"), policy(LOCAL), etag=first.etag)
    assert again.not_modified and again.content == b""
    assert site.fetched("/")[-1]["headers"]["If-None-Match"] == first.etag
