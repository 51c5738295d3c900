"""Turning an uploaded file into text with structure: the first step of ingestion.

`parse_document(name, data)` checks the size, decides the type from the bytes and the name
(`detect_file_type`), and hands the bytes to the parser of that type. What each keeps, and why:

- txt: the decoded text as it is.
- md: the source as it is (markup included); sections and heading paths from "#" headings
  outside fenced code.
- html: the visible text, a paragraph per block element; sections from h1-h6; scripts, styles
  and the <head> dropped.
- pdf: each page's text, a section per page so chunks can cite page numbers; pages without a
  text layer (scans) are read by OCR.
- docx: paragraphs and tables in reading order; sections from Title / Heading 1-9 styles.
- xlsx: every sheet (page = sheet number), rows as labelled lines under the sheet name and header.
- pptx: per slide (page = slide number) its title, text, tables and speaker notes.
- csv: one "column: value; ..." line per row, so every chunk of a table is self-describing.
  A .csv or .xlsx with question and answer columns is read as Q&A pairs instead (`tables`).
- eml: subject as title, a From/To/Date block and the body; attachments returned to be ingested
  as documents of their own.
- epub: the chapters in reading order, each a heading.
- png, jpg, webp, tiff: the text recognised by OCR (`parsers.ocr`).

Text files are decoded by evidence (byte-order mark, valid UTF-8, the page's meta charset, then
charset-normalizer with GB18030 for the GB family) and refused rather than returned garbled.
Every text is cleaned the same way: "\\n" line breaks, no control characters but "\\n" and "\\t".

Failures are ParseErrors (ValueErrors) whose message is meant for the person who uploaded the
file. Two subclasses get their own HTTP status at the API: UnsupportedFileType (415; not an
accepted type, and the message names the accepted ones; legacy .doc/.xls/.ppt files among them,
with what to save them as) and FileTooLarge (413). A plain ParseError is an accepted type that
cannot be read: encrypted, damaged, empty, a zip bomb, a scan without an OCR engine, ...
"""

from __future__ import annotations

from collections.abc import Callable

from .parsers.base import (
    ACCEPTED_EXTENSIONS,
    Attachment,
    FileTooLarge,
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    ParseOptions,
    Section,
    UnsupportedFileType,
)
from .parsers.csv_parser import parse_csv
from .parsers.detection import detect_file_type
from .parsers.docx_parser import parse_docx
from .parsers.eml_parser import parse_eml
from .parsers.epub_parser import parse_epub
from .parsers.html_parser import parse_html
from .parsers.image_parser import parse_image
from .parsers.markdown_parser import parse_markdown
from .parsers.ocr import Ocr, OcrEngine, OcrUnavailable, TextBox
from .parsers.pdf_parser import parse_pdf
from .parsers.pptx_parser import parse_pptx
from .parsers.text_parser import parse_txt
from .parsers.xlsx_parser import parse_xlsx

__all__ = [
    "ACCEPTED_EXTENSIONS",
    "DEFAULT_LIMITS",
    "DEFAULT_OPTIONS",
    "Attachment",
    "FileTooLarge",
    "FileType",
    "Ocr",
    "OcrEngine",
    "OcrUnavailable",
    "ParseError",
    "ParseLimits",
    "ParseOptions",
    "ParsedDocument",
    "Section",
    "TextBox",
    "UnsupportedFileType",
    "detect_file_type",
    "parse_document",
]

DEFAULT_LIMITS = ParseLimits()
DEFAULT_OPTIONS = ParseOptions()

_PARSERS: dict[FileType, Callable[[bytes, ParseLimits], ParsedDocument]] = {
    FileType.TXT: parse_txt,
    FileType.MD: parse_markdown,
    FileType.HTML: parse_html,
    FileType.DOCX: parse_docx,
    FileType.PPTX: parse_pptx,
    FileType.EML: parse_eml,
    FileType.EPUB: parse_epub,
}
# Tables take the uploader's options (Q&A pairs); pictures of text take an OCR engine.
_TABLE_PARSERS: dict[FileType, Callable[[bytes, ParseLimits, ParseOptions], ParsedDocument]] = {
    FileType.CSV: parse_csv,
    FileType.XLSX: parse_xlsx,
}
_PICTURE_PARSERS: dict[FileType, Callable[[bytes, ParseLimits, Ocr], ParsedDocument]] = {
    FileType.PDF: parse_pdf,
    FileType.IMAGE: parse_image,
}


def parse_document(
    name: str,
    data: bytes,
    limits: ParseLimits = DEFAULT_LIMITS,
    options: ParseOptions = DEFAULT_OPTIONS,
    ocr: Ocr | None = None,
) -> ParsedDocument:
    """Parse an upload called `name` (only its extension matters) into a ParsedDocument.

    `ocr` recognises the text of scanned pages and images; by default the bundled engine,
    loaded on first need. Raises FileTooLarge, UnsupportedFileType or ParseError (OcrUnavailable
    among them), each with a message for the user.
    """
    if len(data) > limits.max_file_bytes:
        raise FileTooLarge(
            f"The file is {len(data)} bytes, more than the limit of {limits.max_file_bytes} bytes"
        )
    if not data:
        raise ParseError("The file is empty")
    file_type = detect_file_type(name, data)
    if file_type in _TABLE_PARSERS:
        document = _TABLE_PARSERS[file_type](data, limits, options)
    elif file_type in _PICTURE_PARSERS:
        document = _PICTURE_PARSERS[file_type](data, limits, ocr or Ocr())
    else:
        document = _PARSERS[file_type](data, limits)
    if not document.text.strip():
        raise ParseError("The file contains no text")
    return document
