"""EPUB (2 and 3): the chapters in reading order, each chapter a heading.

An EPUB is a ZIP of XHTML files: META-INF/container.xml names the package document (OPF), whose
spine lists the chapter files in reading order. Each chapter is read as an HTML page is (blocks,
h1-h6 headings) with its table-of-contents label (EPUB 3 navigation document, else the EPUB 2
NCX) as the first element of every heading path, so a chunk says which chapter it is from; a
chapter's own first heading repeating that label is not repeated. The navigation document itself
is not text of the book and is skipped. The title is the package's dc:title.

Read with zipfile, lxml and BeautifulSoup rather than ebooklib: the archive has to pass the ZIP
guard of `archive` before anything reads it, the reading needs only the spine and the TOC, and
ebooklib is AGPL-licensed, which a server product embedding it would have to honour.

Books whose chapters are encrypted (DRM, listed in META-INF/encryption.xml) are refused with a
reason; font obfuscation, which encrypts only fonts, is not DRM and does not matter here.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from urllib.parse import unquote

from lxml import etree

from .archive import open_archive
from .base import (
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    TextAssembler,
    clean_inline,
    damaged,
)
from .encoding import decode_text
from .html_parser import add_html

_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_XHTML = "{http://www.w3.org/1999/xhtml}"
_ENCRYPTION = "{http://www.w3.org/2001/04/xmlenc#}"
_HTML_TYPES = frozenset({"application/xhtml+xml", "text/html"})
_XML_ENCODING = re.compile(rb"""<\?xml[^>]*encoding=["']([\w.:-]+)""")
_XML = etree.XMLParser(resolve_entities=False, no_network=True, recover=True)


def parse_epub(data: bytes, limits: ParseLimits) -> ParsedDocument:
    with open_archive(data, limits, "EPUB book", ".epub") as archive:
        try:
            return _parse(archive, limits)
        except (ParseError, MemoryError):
            raise
        except Exception as exc:  # missing parts, broken XML, bad references
            raise damaged("EPUB book", exc) from exc


def _parse(archive: zipfile.ZipFile, limits: ParseLimits) -> ParsedDocument:
    package_path = _package_path(archive)
    package = _xml(archive, package_path)
    base = posixpath.dirname(package_path)
    manifest = {
        item.get("id"): (
            _resolve(base, item.get("href", "")),
            item.get("media-type", ""),
            item.get("properties", "").split(),
        )
        for item in package.iter(f"{_OPF}item")
    }
    spine = package.find(f"{_OPF}spine")
    if spine is None:
        raise ParseError("The EPUB book has no spine (reading order); it may be damaged")
    labels = _toc_labels(archive, manifest, spine.get("toc"))
    encrypted = _encrypted(archive)
    assembler = TextAssembler(limits)
    chapters = 0
    for itemref in spine.iter(f"{_OPF}itemref"):
        path, media_type, properties = manifest.get(itemref.get("idref"), ("", "", []))
        if media_type not in _HTML_TYPES or "nav" in properties or path not in archive.NameToInfo:
            continue
        if path in encrypted:
            raise ParseError(
                "The EPUB book is protected by DRM (its chapters are encrypted); upload a "
                "DRM-free copy"
            )
        raw = archive.read(path)
        declared = _XML_ENCODING.search(raw[:200])
        markup, _ = decode_text(raw, declared[1].decode("ascii") if declared else None)
        add_html(assembler, markup, chapter=labels.get(path))
        chapters += 1
    text, sections = assembler.build()
    title_element = package.find(f".//{_DC}title")
    creator = package.find(f".//{_DC}creator")
    metadata: dict[str, object] = {"chapter_count": chapters}
    if creator is not None and clean_inline(creator.text):
        metadata["author"] = clean_inline(creator.text)
    return ParsedDocument(
        text=text,
        file_type=FileType.EPUB,
        title=clean_inline(title_element.text) if title_element is not None else None,
        sections=sections,
        metadata=metadata,
    )


def _xml(archive: zipfile.ZipFile, path: str) -> etree._Element:
    return etree.fromstring(archive.read(path), _XML)


def _resolve(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))


def _package_path(archive: zipfile.ZipFile) -> str:
    container = _xml(archive, "META-INF/container.xml")
    rootfile = container.find(f".//{_CONTAINER}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise ParseError("The EPUB book names no package document; it may be damaged")
    return rootfile.get("full-path")


def _toc_labels(
    archive: zipfile.ZipFile,
    manifest: dict[str, tuple[str, str, list[str]]],
    ncx_id: str | None,
) -> dict[str, str]:
    """Chapter file -> its first label in the table of contents."""
    labels: dict[str, str] = {}
    nav = next((path for path, _, props in manifest.values() if "nav" in props), None)
    if nav and nav in archive.NameToInfo:
        base = posixpath.dirname(nav)
        for link in _xml(archive, nav).iter(f"{_XHTML}a"):
            label = clean_inline("".join(link.itertext()))
            if label and link.get("href"):
                labels.setdefault(_resolve(base, link.get("href")), label)
    ncx = manifest.get(ncx_id or "", ("", "", []))[0]
    if not labels and ncx and ncx in archive.NameToInfo:
        base = posixpath.dirname(ncx)
        for point in _xml(archive, ncx).iter(f"{_NCX}navPoint"):
            text = point.find(f"{_NCX}navLabel/{_NCX}text")
            content = point.find(f"{_NCX}content")
            label = clean_inline(text.text) if text is not None else ""
            if label and content is not None and content.get("src"):
                labels.setdefault(_resolve(base, content.get("src")), label)
    return labels


def _encrypted(archive: zipfile.ZipFile) -> set[str]:
    if "META-INF/encryption.xml" not in archive.NameToInfo:
        return set()
    return {
        _resolve("", reference.get("URI", ""))
        for reference in _xml(archive, "META-INF/encryption.xml").iter(
            f"{_ENCRYPTION}CipherReference"
        )
    }
