"""HTML: the text a reader sees, one paragraph per block element, sections per h1-h6 heading.

Scripts, styles, <noscript>, <template> and the <head> are dropped: they are code or metadata,
and would otherwise flood BM25 with identifiers. Whitespace is collapsed as a browser would,
except inside <pre>; <br> keeps its line break; table cells are joined with " | " so a row stays
one line, as for Word tables. The title is <title>, else the first <h1>.

The bytes are decoded like any text file, with the page's own <meta charset> consulted after a
byte-order mark and UTF-8 and before guessing. `add_html` is the same reading for markup found
inside other formats (EPUB chapters, HTML e-mail bodies).
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

from .base import (
    FileType,
    HeadingTrail,
    ParsedDocument,
    ParseLimits,
    TextAssembler,
    clean_inline,
)
from .encoding import decode_text

_DROPPED = ["script", "style", "noscript", "template", "head"]
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = frozenset(
    {
        *_HEADINGS,
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details",
        "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
        "header", "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol", "p", "pre",
        "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
    }
)  # fmt: skip
_CELLS = frozenset({"td", "th"})
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_SPACES = re.compile(r"[ \t]+")
_SPACES_AROUND_BREAKS = re.compile(r" *\n *")


def parse_html(data: bytes, limits: ParseLimits) -> ParsedDocument:
    declared = _META_CHARSET.search(data[:4096])
    # The limit on text applies to what is extracted, not to the markup.
    markup, encoding = decode_text(data, declared[1].decode("ascii") if declared else None)
    assembler = TextAssembler(limits)
    title = add_html(assembler, markup)
    text, sections = assembler.build()
    return ParsedDocument(
        text=text,
        file_type=FileType.HTML,
        title=title or None,
        sections=sections,
        encoding=encoding,
    )


def add_html(assembler: TextAssembler, markup: str, chapter: str | None = None) -> str | None:
    """Add the visible text of `markup` to `assembler`; returns the page's title, if any.

    With a `chapter`, every heading path starts with it, and a first heading repeating it (a
    chapter file's own "<h1>Chapter 1</h1>") is not entered twice.
    """
    soup = BeautifulSoup(markup, "lxml")
    title = clean_inline(soup.title.get_text()) if soup.title else ""
    for tag in soup(_DROPPED):
        tag.decompose()
    first_h1 = soup.find("h1")
    title = title or (clean_inline(first_h1.get_text()) if first_h1 else "")
    _Walker(assembler, chapter).walk(soup)
    return title or None


class _Walker:
    """Turns the tree into lines in one pass over `descendants` (no recursion, any depth)."""

    def __init__(self, assembler: TextAssembler, chapter: str | None) -> None:
        self._assembler = assembler
        self._chapter = (chapter,) if chapter else ()
        self._trail = HeadingTrail()
        self._path: tuple[str, ...] = self._chapter
        self._line: list[str] = []
        self._block: Tag | None = None
        self._cell: Tag | None = None

    def walk(self, soup: BeautifulSoup) -> None:
        for node in soup.descendants:
            if isinstance(node, Tag):
                self._enter(node)
            elif isinstance(node, NavigableString) and not isinstance(node, PreformattedString):
                self._text(node)
        self._flush()

    def _enter(self, tag: Tag) -> None:
        if tag.name == "br":
            self._line.append("\n")
        elif tag.name in _HEADINGS:
            self._flush()
            heading = clean_inline(tag.get_text())
            repeats_chapter = (
                self._chapter
                and not self._trail.path
                and heading.casefold() == self._chapter[0].casefold()
            )
            if heading and not repeats_chapter:
                self._path = self._chapter + self._trail.enter(_HEADINGS[tag.name], heading)

    def _text(self, node: NavigableString) -> None:
        block, cell = _enclosing(node)
        if block is not self._block:
            self._flush()
            self._block = block
        if cell is not self._cell:
            if cell is not None and "".join(self._line).strip():
                self._line.append(" | ")
            self._cell = cell
        in_pre = block is not None and block.name == "pre"
        self._line.append(str(node) if in_pre else _WHITESPACE.sub(" ", node))

    def _flush(self) -> None:
        line = "".join(self._line)
        self._line.clear()
        self._cell = None
        if not (self._block is not None and self._block.name == "pre"):
            line = _SPACES_AROUND_BREAKS.sub("\n", _SPACES.sub(" ", line))
        self._assembler.add(line, heading_path=self._path)


def _enclosing(node: NavigableString) -> tuple[Tag | None, Tag | None]:
    """The nearest block element and table cell around a piece of text."""
    cell = None
    for parent in node.parents:
        if cell is None and parent.name in _CELLS:
            cell = parent
        if parent.name in _BLOCKS:
            return parent, cell
    return None, cell
