"""Which addresses a fetch may connect to: public ones, and those the allow-list names.

A URL chosen by a tenant must not reach the deployment's own network (the cloud metadata
service at 169.254.169.254, databases on 10.x, admin ports on localhost): every address a host
resolves to must be public, or in ``RAG_WEB_ALLOWED_HOSTS``. Hosts written as numbers in the
forms C's ``inet_aton`` accepts (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) are the addresses
they spell, as every HTTP client would connect to them; IPv4 addresses inside IPv6 (mapped,
NAT64, 6to4) are judged as the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from knowledge.ingestion.parsing import ParseError
from tenancy.errors import ErrorKind

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses to connect to, as strings (socket.getaddrinfo by default).
Resolver = Callable[[str, int], list[str]]

_INET_ATON = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.I)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAMES = ("localhost", ".localhost", ".local", ".internal")


class AddressRefused(ParseError):
    """The URL leads to an address that is not public and not allow-listed."""

    code = "url_refused"
    kind = ErrorKind.INVALID


class HostNotFound(ParseError):
    """The host name does not resolve."""

    code = "host_not_found"
    kind = ErrorKind.INVALID


@dataclass(frozen=True)
class AllowList:
    """Hosts (by name, exactly) and networks that may be fetched although not public: the
    parsed ``RAG_WEB_ALLOWED_HOSTS``."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        hosts, networks = set(), []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def names(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def holds(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


def ip_literal(host: str) -> IPAddress | None:
    """The address a host written as an address spells, or None for a name."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    if _INET_ATON.fullmatch(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            raise AddressRefused(f"{host} is not a valid address") from None
    return None


def _embedded_ipv4(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour:
            return address.sixtofour
    return address


def why_not_public(address: IPAddress) -> str | None:
    """What kind of non-public address this is, or None for a public one."""
    inner = _embedded_ipv4(address)
    checks = (
        ("unspecified", inner.is_unspecified),
        ("loopback", inner.is_loopback),
        ("link-local", inner.is_link_local),
        ("multicast", inner.is_multicast),
        ("shared (CGNAT)", inner in _CGNAT if inner.version == 4 else False),
        ("private", inner.is_private),
        ("reserved", inner.is_reserved or not inner.is_global),
    )
    return next((kind for kind, hit in checks if hit), None)


def check_address(host: str, address: IPAddress, allowed: AllowList) -> None:
    """Raise AddressRefused unless ``address`` (of ``host``) may be connected to."""
    if allowed.names(host) or allowed.holds(address):
        return
    kind = why_not_public(address)
    if kind is not None:
        shown = host if str(address) == host.strip("[]") else f"{host} ({address})"
        raise AddressRefused(
            f"{shown} is a {kind} address; fetching it is refused. An administrator can allow "
            "it with the RAG_WEB_ALLOWED_HOSTS setting.",
            address=str(address),
        )


def check_host(host: str, allowed: AllowList) -> IPAddress | None:
    """What can be judged without DNS: an address literal (returned, once checked) and names
    that are local by definition (``localhost``, ``*.local``, ``*.internal``)."""
    address = ip_literal(host)
    if address is not None:
        check_address(host, address, allowed)
        return address
    name = host.lower().rstrip(".")
    if not allowed.names(name) and any(
        name == suffix.lstrip(".") or name.endswith(suffix) for suffix in _LOCAL_NAMES
    ):
        raise AddressRefused(
            f"{host} is a local name; fetching it is refused. An administrator can allow it "
            "with the RAG_WEB_ALLOWED_HOSTS setting."
        )
    return None


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolve_checked(host: str, port: int, allowed: AllowList, resolver: Resolver) -> IPAddress:
    """The address to connect to: every address the host resolves to must pass (a name that
    resolves to a public and a private address is refused), and the caller connects to the
    one returned, never resolving again (DNS rebinding)."""
    literal = check_host(host, allowed)
    if literal is not None:
        return literal
    try:
        found = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolver(host, port)]
    except (OSError, UnicodeError) as exc:
        raise HostNotFound(f"{host} could not be resolved ({exc})") from None
    if not found:
        raise HostNotFound(f"{host} could not be resolved")
    for address in found:
        check_address(host, address, allowed)
    return found[0]
