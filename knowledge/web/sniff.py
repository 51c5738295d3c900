"""What a fetched page is: its type from its bytes (``detect_file_type``, as for uploads), the
server's Content-Type and the URL's extension only hints, and a file name for it.

A server may call a PDF ``text/html`` or a page ``application/octet-stream``; the bytes decide.
The hint matters only where bytes cannot: text without a mark (Markdown or CSV served as such)
and a URL whose extension (``.php``, ``.aspx``, none) says nothing.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlsplit

from knowledge.ingestion.parsing import FileType, UnsupportedFileType, detect_file_type

_HINTS = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "text/csv": ".csv",
    "application/pdf": ".pdf",
    "message/rfc822": ".eml",
    "application/epub+zip": ".epub",
}
_KNOWN = {f".{t}" for t in FileType} | {".htm", ".markdown", ".jpg", ".jpeg", ".png", ".webp"}
_HEAD = 8192


def file_name(url: str, content_type: str = "") -> str:
    """A file name for the page: the URL's last path segment (``index`` for a folder), with
    the extension the Content-Type suggests when the URL's says nothing known."""
    parts = urlsplit(url)
    segment = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1]) if parts.path.strip("/") else ""
    base = segment or "index"
    stem, extension = posixpath.splitext(base)
    if extension.lower() in _KNOWN:
        return base[:200]
    hint = _HINTS.get(content_type.split(";", 1)[0].strip().lower(), "")
    stem = (stem if extension and not stem.startswith(".") else base) or "page"
    return f"{stem[:190]}{hint}"


def sniff(url: str, content: bytes, content_type: str = "") -> tuple[str, FileType]:
    """The page's file name and type. A name from a wrong hint ("a.pdf" for HTML) gives way to
    the bytes alone; UnsupportedFileType when neither makes it a type we read."""
    name = file_name(url, content_type)
    head = content[:_HEAD]
    bare, extension = posixpath.splitext(name)
    try:
        kind = detect_file_type(name, head)
    except UnsupportedFileType as refused:
        try:
            kind = detect_file_type(bare or "page", head)
        except UnsupportedFileType:
            raise refused from None
        extension = ""
    named_as_kind = extension.lower() in (f".{kind}", ".htm", ".markdown")
    if kind is not FileType.IMAGE and not named_as_kind:
        name = f"{bare or 'page'}.{kind}"
    return name, kind
