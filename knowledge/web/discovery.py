"""Finding a site's pages: sitemaps (``urlset`` and ``sitemapindex``, gzipped or not), the
``Sitemap:`` lines and rules of robots.txt (``urllib.robotparser``), links of HTML pages, and
the canonical form of a URL that keys a page. Pure: bytes in, URLs out.

XML is parsed by lxml with entities and network access off, so a sitemap cannot read local
files or expand into gigabytes (billion laughs); a gzipped sitemap is inflated up to a cap.
"""

from __future__ import annotations

import posixpath
import zlib
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import lxml.etree
import lxml.html

_SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
_GZIP_MAGIC = b"\x1f\x8b"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical(url: str) -> str:
    """The key of a page: scheme and host lower-cased, default port and fragment dropped, an
    empty path as "/", dot segments resolved; the query kept (it may select the content)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    path = parts.path or "/"
    normal = posixpath.normpath(path)
    if path.endswith("/") and normal != "/":
        normal += "/"
    return urlunsplit((scheme, netloc, normal.replace("//", "/"), parts.query, ""))


@dataclass(frozen=True)
class Scope:
    """Which URLs belong to a source: the start URL's host and port (http or https), under an
    include prefix when there are any, under no exclude prefix. Prefixes are paths ("/help/")
    or whole URLs."""

    start_url: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def _path(self, prefix: str) -> str:
        return urlsplit(prefix).path or "/" if "://" in prefix else prefix

    def holds(self, url: str) -> bool:
        parts, start = urlsplit(url), urlsplit(self.start_url)
        if parts.scheme not in ("http", "https") or parts.netloc.lower() != start.netloc.lower():
            return False
        path = parts.path or "/"
        if self.include and not any(path.startswith(self._path(p)) for p in self.include):
            return False
        return not any(path.startswith(self._path(p)) for p in self.exclude)


def html_links(base_url: str, content: bytes) -> list[str]:
    """The targets of a page's ``<a href>`` links, absolute (``<base href>`` honoured), in
    order, without fragments, ``nofollow`` links left out."""
    try:
        tree = lxml.html.document_fromstring(content)
    except (lxml.etree.ParserError, ValueError):
        return []
    base = next(iter(tree.xpath("//base/@href")), base_url)
    base = urljoin(base_url, str(base))
    links = []
    for anchor in tree.xpath("//a[@href]"):
        if "nofollow" in (anchor.get("rel") or "").lower().split():
            continue
        href = anchor.get("href", "").strip()
        if not href or href.startswith(("#", "mailto:", "javascript:", "tel:")):
            continue
        links.append(urljoin(base, href).split("#", 1)[0])
    return list(dict.fromkeys(links))


@dataclass(frozen=True)
class Sitemap:
    pages: list[str]
    sitemaps: list[str]  # nested sitemaps of a sitemap index


def parse_sitemap(content: bytes, max_bytes: int) -> Sitemap:
    """The page URLs of a ``urlset`` or the sitemap URLs of a ``sitemapindex``. Anything else
    (an HTML error page, broken XML) is an empty sitemap."""
    if content.startswith(_GZIP_MAGIC):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            content = inflater.decompress(content, max_bytes)
        except zlib.error:
            return Sitemap([], [])
    parser = lxml.etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        root = lxml.etree.fromstring(content, parser)
    except lxml.etree.XMLSyntaxError:
        return Sitemap([], [])
    if root is None:
        return Sitemap([], [])
    tag = lxml.etree.QName(root).localname
    locs = [
        loc.text.strip()
        for loc in root.iter(f"{_SITEMAP_NS}loc", "loc")
        if loc.text and loc.text.strip()
    ]
    if tag == "sitemapindex":
        return Sitemap([], locs)
    if tag == "urlset":
        return Sitemap(locs, [])
    return Sitemap([], [])


def robots(content: bytes | None) -> RobotFileParser:
    """The rules of a robots.txt (None: there is none, everything is allowed)."""
    parser = RobotFileParser()
    text = content.decode("utf-8", errors="replace") if content else ""
    parser.parse(text.splitlines())
    return parser
