"""Plain text: the decoded text as it is, one section, no title (the caller uses the file name)."""

from __future__ import annotations

from .base import (
    FileType,
    ParsedDocument,
    ParseLimits,
    check_text_length,
    clean_text,
    trimmed_section,
)
from .encoding import decode_text


def read_text(data: bytes, limits: ParseLimits) -> tuple[str, str]:
    """Decoded and cleaned text of a text file, with the encoding used."""
    text, encoding = decode_text(data)
    text = clean_text(text)
    check_text_length(len(text), limits)
    return text, encoding


def parse_txt(data: bytes, limits: ParseLimits) -> ParsedDocument:
    text, encoding = read_text(data, limits)
    section = trimmed_section(text, 0, len(text))
    return ParsedDocument(
        text=text,
        file_type=FileType.TXT,
        title=None,
        sections=(section,) if section else (),
        encoding=encoding,
    )
