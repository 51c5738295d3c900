"""Word (.docx): body paragraphs and tables in reading order, sections per heading.

Paragraphs styled Title or Heading 1-9 build the heading path (Title outermost), which is how
authors structure Word documents. Table rows become one line each, cells joined by " | ", with a
merged cell counted once. Headers, footers, footnotes, comments and text boxes are left out: they
repeat on every page or sit outside the reading order. The title is the core "Title" property,
else the first heading.

A .docx is a ZIP archive: `archive.check_archive` refuses zip bombs, encrypted documents and
legacy .doc files before python-docx reads anything.
"""

from __future__ import annotations

import io
import re

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from .archive import check_archive
from .base import (
    FileType,
    HeadingTrail,
    ParsedDocument,
    ParseError,
    ParseLimits,
    TextAssembler,
    clean_inline,
    damaged,
)

_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)


def parse_docx(data: bytes, limits: ParseLimits) -> ParsedDocument:
    check_archive(data, limits, "Word document", ".docx")
    try:
        return _parse(data, limits)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # python-docx and lxml raise many kinds of errors on bad input
        raise damaged("Word document", exc) from exc


def _parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    document = docx.Document(io.BytesIO(data))
    title = clean_inline(document.core_properties.title)
    assembler = TextAssembler(limits)
    trail = HeadingTrail()
    path: tuple[str, ...] = ()
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            assembler.add(_table_text(block), heading_path=path)
            continue
        level = _heading_level(block)
        heading = clean_inline(block.text) if level is not None else ""
        if level is not None and heading:
            path = trail.enter(level, heading)
            title = title or heading
        assembler.add(block.text, heading_path=path)
    text, sections = assembler.build()
    author = clean_inline(document.core_properties.author)
    return ParsedDocument(
        text=text,
        file_type=FileType.DOCX,
        title=title or None,
        sections=sections,
        metadata={"author": author} if author else {},
    )


def _heading_level(paragraph: Paragraph) -> int | None:
    """0 for Title, 1-9 for Heading 1-9, None for body text."""
    name = paragraph.style.name if paragraph.style is not None else ""
    if name and name.lower() == "title":
        return 0
    match = _HEADING_STYLE.fullmatch(name or "")
    return int(match[1]) if match else None


def _table_text(table: Table) -> str:
    lines = []
    for row in table.rows:
        cells = []
        previous = None
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans.
            if previous is not None and cell._tc is previous._tc:
                continue
            previous = cell
            cells.append(clean_inline(cell.text))
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)
