"""A real web site for web-import tests: an HTTP server on 127.0.0.1 serving pages the test
sets, with ETag/Last-Modified validators (answering 304 to a conditional request that still
holds), redirects, and answers held until the test lets go (a client times out waiting for
them, however slow the machine). It records every request (path and headers).

127.0.0.1 is refused by the fetcher unless allow-listed: tests that fetch from it set
``RAG_WEB_ALLOWED_HOSTS`` (``allow_local`` below).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import CEILING_S


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that gave up (timed out) resets the connection: expected here."""


@dataclass
class Page:
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    location: str = ""
    held: bool = False
    validators: bool = True  # send ETag and Last-Modified
    chunked: bool = False  # no Content-Length: the body is sent as it comes
    version: int = 1

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.body).hexdigest()[:16] + '"'

    @property
    def last_modified(self) -> str:
        return formatdate(1_700_000_000 + self.version * 60, usegmt=True)


@dataclass
class Site:
    pages: dict[str, Page] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with site._lock:
                    site.requests.append({"path": self.path, "headers": dict(self.headers)})
                    page = site.pages.get(self.path.split("#", 1)[0])
                if page is None:
                    page = Page(body=b"not found", content_type="text/plain", status=404)
                if page.held:
                    site._released.wait(CEILING_S)
                headers = {"Content-Type": page.content_type}
                if page.location:
                    headers["Location"] = page.location
                if page.validators and page.status == 200:
                    headers["ETag"] = page.etag
                    headers["Last-Modified"] = page.last_modified
                    if self.headers.get("If-None-Match") == page.etag:
                        self._send(304, headers, b"", False)
                        return
                self._send(page.status, headers, page.body, page.chunked)

            def _send(self, status: int, headers: dict, body: bytes, chunked: bool) -> None:
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    if chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for start in range(0, len(body), 4096):
                            part = body[start : start + 4096]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                    pass

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def html(self, path: str, title: str, text: str, links: tuple[str, ...] = ()) -> Page:
        anchors = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
        body = (
            f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{text}</p><ul>{anchors}</ul></body></html>"
        ).encode()
        self.pages[path] = Page(body=body)
        return self.pages[path]

    def change(self, path: str, body: bytes) -> None:
        page = self.pages[path]
        page.body, page.version = body, page.version + 1

    def fetched(self, path: str) -> list[dict]:
        """The requests for ``path`` so far."""
        with self._lock:
            return [r for r in self.requests if r["path"] == path]

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> Site:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()


def sitemap(urls: list[str]) -> bytes:
    entries = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    ).encode()


def help_centre(site: Site, pages: int, pdfs: tuple[int, ...] = ()) -> list[str]:
    """A help centre of ``pages`` pages under /help/ listed in /sitemap.xml (named by
    robots.txt), each linking to its neighbours; the pages numbered in ``pdfs`` are PDFs.
    Returns the paths."""
    from tests.builders import build_pdf

    paths = []
    for i in range(pages):
        if i in pdfs:
            path = f"/help/manual-{i}.pdf"
            site.pages[path] = Page(
                body=build_pdf([[f"Manual {i}", f"Valve torque setting {i} newton metres."]]),
                content_type="application/pdf",
            )
        else:
            path = f"/help/article-{i}"
            links = (f"/help/article-{(i + 1) % pages}", f"/help/article-{(i + 7) % pages}")
            site.html(path, f"Article {i}", f"How to configure feature {i}: step {i * 3}.", links)
        paths.append(path)
    site.pages["/sitemap.xml"] = Page(
        body=sitemap([site.url(p) for p in paths]), content_type="application/xml"
    )
    site.pages["/robots.txt"] = Page(
        body=f"User-agent: *\nDisallow: /private/\nSitemap: {site.url('/sitemap.xml')}\n".encode(),
        content_type="text/plain",
    )
    return paths
