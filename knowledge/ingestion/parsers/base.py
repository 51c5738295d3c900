"""Types shared by the format parsers, and the helpers that keep their output consistent.

Every parser returns a `ParsedDocument` whose `sections` are ordered, non-overlapping spans of
`text`, each starting and ending on a non-whitespace character, that together hold every
non-whitespace character of `text`. A section carries what is true for all of its span (PDF page,
heading path), so the chunker can cut inside sections and give each chunk exact metadata.

Extracted text is cleaned the same way for every format: line breaks become "\\n" and control
characters other than "\\n" and "\\t" are dropped. PostgreSQL refuses NUL in text columns and
stray controls (form feeds from PDFs, escape codes) only add noise to BM25 tokens and embeddings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tenancy.errors import DomainError, ErrorKind

ACCEPTED_EXTENSIONS = (
    ".txt, .md, .html, .pdf, .docx, .xlsx, .pptx, .csv, .eml, .epub, .png, .jpg, .webp, .tiff"
)


class FileType(StrEnum):
    TXT = "txt"
    MD = "md"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"
    XLSX = "xlsx"
    PPTX = "pptx"
    CSV = "csv"
    EML = "eml"
    EPUB = "epub"
    IMAGE = "image"  # .png, .jpg, .webp, .tiff: its text is recognised (OCR)


@dataclass(frozen=True)
class ParseLimits:
    """Bounds that keep one upload from exhausting a worker's memory or time."""

    max_file_bytes: int = 50 * 1024 * 1024
    max_text_chars: int = 20_000_000
    # Every ZIP-based format (.docx, .xlsx, .pptx, .epub): the total unpacked size.
    max_unzipped_bytes: int = 200 * 1024 * 1024
    # PDF pages, slides, TIFF frames.
    max_pages: int = 5000
    # Cells of a workbook read, counted up to each row's last cell: a sheet with one value in
    # column XFD costs 16,384 cells a row, so rows alone would not bound the time.
    max_sheet_cells: int = 10_000_000
    # Pages or images whose text is recognised (OCR) in one document: a few seconds each.
    max_ocr_pages: int = 100
    # Pixels of one image or one rendered page, checked before it is decoded.
    max_image_pixels: int = 64_000_000
    # Attachments of one e-mail message that become documents of their own.
    max_attachments: int = 50
    # Files an uploaded .zip archive may hold (each becomes a document of its own).
    max_archive_members: int = 1000


@dataclass(frozen=True)
class ParseOptions:
    """Choices the uploader makes about how a file is read (the upload's options).

    qa_pairs: a table (.csv, .xlsx) is read as question/answer pairs when True, as rows when
    False, and when None (the default) as pairs if it has a question and an answer column.
    qa_question_column / qa_answer_column: the header names of those columns, when the
    detected names (question/q/问题..., answer/a/答案...) are not the ones used.
    """

    qa_pairs: bool | None = None
    qa_question_column: str = ""
    qa_answer_column: str = ""


class ParseError(DomainError, ValueError):
    """The file cannot be turned into text; the message is for the person who uploaded it.

    The two subclasses below are the failures an API reports with their own status codes; catching
    ParseError alone catches every failure of parsing.
    """

    code = "unreadable_file"
    kind = ErrorKind.INVALID


class UnsupportedFileType(ParseError):
    """The content is not one of the accepted types, whatever the file name claims (HTTP 415)."""

    code = "unsupported_file_type"
    kind = ErrorKind.UNSUPPORTED


class FileTooLarge(ParseError):
    """The upload is bigger than `ParseLimits.max_file_bytes` (HTTP 413)."""

    code = "file_too_large"
    kind = ErrorKind.TOO_LARGE


@dataclass(frozen=True)
class Section:
    """A span `text == document.text[start:end]` sharing one page and one heading path."""

    text: str
    start: int
    end: int
    page: int | None = None
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attachment:
    """A file inside a document (an e-mail's attachment), to be ingested on its own."""

    name: str
    data: bytes


@dataclass(frozen=True)
class ParsedDocument:
    text: str
    file_type: FileType
    title: str | None
    sections: tuple[Section, ...]
    encoding: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()


# str.splitlines() boundaries other than "\n" itself become "\n"; after that every remaining C0
# and C1 control except "\t" and "\n" goes, and so do lone surrogates, which no UTF-8 column
# takes, and U+FFFD, which marks text already lost (pypdf emits it for glyphs it cannot map).
_LINE_BREAKS = re.compile(r"\r\n?|[\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_UNWANTED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")


def clean_text(text: str) -> str:
    return _UNWANTED.sub("", _LINE_BREAKS.sub("\n", text))


def clean_inline(text: str | None) -> str:
    """One-line form of a title or heading: cleaned, whitespace runs collapsed."""
    return " ".join(clean_text(text or "").split())


def damaged(what: str, exc: Exception) -> ParseError:
    """The error for a file its reader gave up on, with the reason cut to a readable size."""
    return ParseError(f"The {what} is damaged and could not be read: {str(exc)[:200]}")


def check_text_length(length: int, limits: ParseLimits) -> None:
    if length > limits.max_text_chars:
        raise ParseError(
            f"The extracted text exceeds the limit of {limits.max_text_chars} characters; "
            "split the file into smaller ones"
        )


def trimmed_section(
    text: str,
    start: int,
    end: int,
    page: int | None = None,
    heading_path: tuple[str, ...] = (),
) -> Section | None:
    """The section for text[start:end] without its outer whitespace, or None if nothing is left."""
    piece = text[start:end]
    stripped = piece.lstrip()
    if not stripped:
        return None
    start += len(piece) - len(stripped)
    stripped = stripped.rstrip()
    return Section(stripped, start, start + len(stripped), page, heading_path)


class HeadingTrail:
    """The headings in force at a point of a document, outermost first.

    A heading closes every open heading of the same or a deeper level, so "# A", "### B", "## C"
    gives ("A",), ("A", "B"), ("A", "C"); skipped levels are simply absent from the path.
    """

    def __init__(self) -> None:
        self._open: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> tuple[str, ...]:
        while self._open and self._open[-1][0] >= level:
            self._open.pop()
        self._open.append((level, title))
        return self.path

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self._open)


@dataclass
class _Span:
    start: int
    end: int
    page: int | None
    heading_path: tuple[str, ...]


class TextAssembler:
    """Joins extracted blocks (pages, paragraphs, rows) into one text and records its sections.

    Consecutive blocks with the same page and heading path share one section. The length limit is
    checked as blocks arrive, so a huge PDF is abandoned as soon as it crosses the limit.
    """

    def __init__(self, limits: ParseLimits) -> None:
        self._limits = limits
        self._parts: list[str] = []
        self._length = 0
        self._spans: list[_Span] = []

    def add(
        self,
        text: str,
        *,
        page: int | None = None,
        heading_path: tuple[str, ...] = (),
        separator: str = "\n\n",
    ) -> None:
        block = clean_text(text).strip()
        if not block:
            return
        if self._parts:
            self._parts.append(separator)
            self._length += len(separator)
        start = self._length
        self._parts.append(block)
        self._length += len(block)
        check_text_length(self._length, self._limits)
        last = self._spans[-1] if self._spans else None
        if last and (last.page, last.heading_path) == (page, heading_path):
            last.end = self._length
        else:
            self._spans.append(_Span(start, self._length, page, heading_path))

    def build(self) -> tuple[str, tuple[Section, ...]]:
        text = "".join(self._parts)
        sections = tuple(
            Section(text[s.start : s.end], s.start, s.end, s.page, s.heading_path)
            for s in self._spans
        )
        return text, sections
