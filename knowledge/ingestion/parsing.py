"""Turning an uploaded file into text with structure: the first step of ingestion.

`parse_document(name, data)` checks the size, decides the type from the bytes and the name
(`detect_file_type`), and hands the bytes to the parser of that type. What each keeps, and why:

- txt: the decoded text as it is.
- md: the source as it is (markup included); sections and heading paths from "#" headings
  outside fenced code.
- html: the visible text, a paragraph per block element; sections from h1-h6; scripts, styles
  and the <head> dropped.
- pdf: each page's text, a section per page so chunks can cite page numbers.
- docx: paragraphs and tables in reading order; sections from Title / Heading 1-9 styles.
- csv: one "column: value; ..." line per row, so every chunk of a table is self-describing.

Text files are decoded by evidence (byte-order mark, valid UTF-8, the page's meta charset, then
charset-normalizer with GB18030 for the GB family) and refused rather than returned garbled.
Every text is cleaned the same way: "\\n" line breaks, no control characters but "\\n" and "\\t".

Failures are ParseErrors (ValueErrors) whose message is meant for the person who uploaded the
file. Two subclasses get their own HTTP status at the API: UnsupportedFileType (415; not an
accepted type, and the message names the accepted ones) and FileTooLarge (413). A plain
ParseError is an accepted type that cannot be read: encrypted, damaged, empty, ...
"""

from __future__ import annotations

from collections.abc import Callable

from .parsers.base import (
    ACCEPTED_EXTENSIONS,
    FileTooLarge,
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    Section,
    UnsupportedFileType,
)
from .parsers.csv_parser import parse_csv
from .parsers.detection import detect_file_type
from .parsers.docx_parser import parse_docx
from .parsers.html_parser import parse_html
from .parsers.markdown_parser import parse_markdown
from .parsers.pdf_parser import parse_pdf
from .parsers.text_parser import parse_txt

__all__ = [
    "ACCEPTED_EXTENSIONS",
    "DEFAULT_LIMITS",
    "FileTooLarge",
    "FileType",
    "ParseError",
    "ParseLimits",
    "ParsedDocument",
    "Section",
    "UnsupportedFileType",
    "detect_file_type",
    "parse_document",
]

DEFAULT_LIMITS = ParseLimits()

_PARSERS: dict[FileType, Callable[[bytes, ParseLimits], ParsedDocument]] = {
    FileType.TXT: parse_txt,
    FileType.MD: parse_markdown,
    FileType.HTML: parse_html,
    FileType.PDF: parse_pdf,
    FileType.DOCX: parse_docx,
    FileType.CSV: parse_csv,
}


def parse_document(name: str, data: bytes, limits: ParseLimits = DEFAULT_LIMITS) -> ParsedDocument:
    """Parse an upload called `name` (only its extension matters) into a ParsedDocument.

    Raises FileTooLarge, UnsupportedFileType or ParseError, each with a message for the user.
    """
    if len(data) > limits.max_file_bytes:
        raise FileTooLarge(
            f"The file is {len(data)} bytes, more than the limit of {limits.max_file_bytes} bytes"
        )
    if not data:
        raise ParseError("The file is empty")
    document = _PARSERS[detect_file_type(name, data)](data, limits)
    if not document.text.strip():
        raise ParseError("The file contains no text")
    return document
