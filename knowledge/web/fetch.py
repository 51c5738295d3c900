"""Fetch one URL safely: http(s) only, every hop's address checked, connected to the address
that was checked, bounded in bytes, time and redirects.

The caller passes the policy (``FetchPolicy``, from settings in ``policy_from_settings``) and
may pass a resolver (tests resolve names without DNS). Redirects are followed here, one hop at
a time, so each new host is resolved and checked like the first. The request goes to the
checked address with the original host in ``Host`` and in TLS (SNI and certificate check), so
a second DNS answer can never redirect the connection (DNS rebinding). Proxies from the
environment are not used: they would connect to names we did not check.

Every failure is a ``FetchError`` (a ``ParseError``) whose message says what to do about it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from knowledge.ingestion.parsing import FileTooLarge, ParseError
from knowledge.web.addresses import (
    AllowList,
    Resolver,
    check_host,
    resolve_checked,
    system_resolver,
)
from tenancy.errors import ErrorKind

_REDIRECTS = (301, 302, 303, 307, 308)
_SCHEMES = ("http", "https")


class FetchError(ParseError):
    """The URL could not be fetched; the message says why, for the person who gave it."""

    code = "fetch_failed"
    kind = ErrorKind.INVALID


class UrlInvalid(FetchError):
    code = "url_invalid"


class FetchTooLarge(FileTooLarge, FetchError):
    code = "page_too_large"


class FetchTimedOut(FetchError):
    code = "fetch_timed_out"


class HttpStatusError(FetchError):
    """The server answered with an error status (404, 500...)."""

    code = "http_error"

    def __init__(self, url: str, status: int) -> None:
        phrase = httpx.codes.get_reason_phrase(status)
        super().__init__(f"{url} answered HTTP {status} {phrase}".rstrip(), status=status)
        self.status = status


@dataclass(frozen=True)
class FetchPolicy:
    allowed: AllowList
    max_bytes: int
    timeout_s: float
    max_redirects: int
    user_agent: str


@dataclass(frozen=True)
class Fetched:
    url: str  # the final URL, after redirects
    status: int  # 200, or 304 when the validators sent still hold
    content: bytes
    content_type: str  # the server's header: a hint, never trusted (see ``sniff``)
    etag: str = ""
    last_modified: str = ""

    @property
    def not_modified(self) -> bool:
        return self.status == 304


def check_url(raw: str, allowed: AllowList) -> httpx.URL:
    """The URL, if it is an absolute http(s) URL whose host is not refused by what can be
    judged without DNS (``addresses.check_host``); UrlInvalid or AddressRefused otherwise.
    Used before anything is stored, and again for every hop of a fetch."""
    raw = raw.strip()
    try:
        parts = urlsplit(raw)
        host = parts.hostname
    except ValueError as exc:
        raise UrlInvalid(f"{raw!r} is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in _SCHEMES:
        shown = f"{parts.scheme}:" if parts.scheme else "a URL without a scheme"
        raise UrlInvalid(f"{raw!r}: only http and https URLs can be fetched, not {shown}")
    if not host:
        raise UrlInvalid(f"{raw!r} has no host")
    if parts.username is not None:
        raise UrlInvalid(f"{raw!r}: URLs with a user name or password are not fetched")
    check_host(host, allowed)
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError) as exc:
        raise UrlInvalid(f"{raw!r} is not a valid URL ({exc})") from None
    return url.copy_with(fragment=None)


def fetch(
    raw_url: str,
    policy: FetchPolicy,
    *,
    etag: str = "",
    last_modified: str = "",
    resolver: Resolver = system_resolver,
    deadline: float | None = None,
) -> Fetched:
    """GET the URL within the policy (and before ``deadline``, a ``time.monotonic()`` value).
    ``etag``/``last_modified`` make the request conditional; a 304 comes back with no content."""
    limit = time.monotonic() + policy.timeout_s
    deadline = min(deadline, limit) if deadline is not None else limit
    url = check_url(raw_url, policy.allowed)
    with httpx.Client(trust_env=False, follow_redirects=False, verify=True) as client:
        for _hop in range(policy.max_redirects + 1):
            response = _request(client, url, policy, etag, last_modified, resolver, deadline)
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    url = check_url(urljoin(str(url), response.headers["location"]), policy.allowed)
                    continue
                return _read(url, response, policy, deadline)
            finally:
                response.close()
    raise FetchError(f"{raw_url} redirected more than {policy.max_redirects} times")


def _remaining(deadline: float, url: httpx.URL) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchTimedOut(f"{url} did not answer in time")
    return left


def _request(client, url, policy, etag, last_modified, resolver, deadline) -> httpx.Response:
    port = url.port or (443 if url.scheme == "https" else 80)
    address = resolve_checked(url.host, port, policy.allowed, resolver)
    headers = {
        "Host": url.netloc.decode("ascii"),
        "User-Agent": policy.user_agent,
        "Accept": "text/html,application/xhtml+xml,application/pdf;q=0.9,*/*;q=0.8",
    }
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    request = client.build_request(
        "GET",
        url.copy_with(host=str(address)),
        headers=headers,
        extensions=extensions,
        timeout=httpx.Timeout(_remaining(deadline, url)),
    )
    try:
        return client.send(request, stream=True)
    except httpx.TimeoutException:
        raise FetchTimedOut(f"{url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"{url} could not be fetched: {exc or type(exc).__name__}") from None


def _read(url: httpx.URL, response: httpx.Response, policy: FetchPolicy, deadline: float):
    if response.status_code == 304:
        content = b""
    elif response.status_code != 200:
        raise HttpStatusError(str(url), response.status_code)
    else:
        content = _bounded_body(url, response, policy.max_bytes, deadline)
    return Fetched(
        url=str(url),
        status=response.status_code,
        content=content,
        content_type=response.headers.get("content-type", ""),
        etag=response.headers.get("etag", ""),
        last_modified=response.headers.get("last-modified", ""),
    )


def _bounded_body(url: httpx.URL, response: httpx.Response, cap: int, deadline: float) -> bytes:
    """The (decoded) body, read until ``cap`` bytes: a page over it fails without being kept,
    whatever its Content-Length said. No block is read after the deadline, and each wait for
    one is bounded by the time that was left when the request was sent, so a body that
    trickles ends within twice the time limit at worst."""
    too_large = FetchTooLarge(f"{url} is larger than the limit of {cap:,} bytes")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    body = bytearray()
    try:
        for block in response.iter_bytes():
            body += block
            if len(body) > cap:
                raise too_large
            _remaining(deadline, url)
    except httpx.TimeoutException:
        raise FetchTimedOut(f"{url} did not send its content in time") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"{url} broke off while sending its content: {exc}") from None
    return bytes(body)
