"""Deciding a file's type from its bytes as well as its name.

The bytes are checked first because names lie (downloads saved as ".txt", PDFs renamed by mail
clients): a PDF or Word document is parsed as such whatever it is called, and binary data is
refused even when named ".txt", so an image never reaches the text decoder and comes back as
garbage. Among text types the extension decides, since a CSV, a Markdown file and plain text
look alike; the one exception is a ".txt" (or extension-less) file that unmistakably starts as an
HTML page. A name promising a PDF or Word document whose bytes are something else is refused:
the user should see that the upload is not what they think it is.
"""

from __future__ import annotations

import codecs
import io
import os
import zipfile

from .base import ACCEPTED_EXTENSIONS, FileType, UnsupportedFileType
from .encoding import starts_with_byte_order_mark

_EXTENSIONS = {
    ".txt": FileType.TXT,
    ".md": FileType.MD,
    ".markdown": FileType.MD,
    ".html": FileType.HTML,
    ".htm": FileType.HTML,
    ".pdf": FileType.PDF,
    ".docx": FileType.DOCX,
    ".csv": FileType.CSV,
}
_PDF_MAGIC = b"%PDF-"
# Readers accept junk before the header; so do we, within this window, for a file named .pdf
# (a text file may well mention "%PDF-" near its start).
_PDF_HEADER_WINDOW = 1024
_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Word 97-2003 .doc, .xls, .ppt
_WORD_PART = "word/document.xml"
_SNIFF_BYTES = 8000  # as git decides text vs binary
# Controls that text files do not contain; tab, line and page breaks and ESC (ANSI colours) do.
_CONTROL_BYTES = bytes(b for b in [*range(0x20), 0x7F] if b not in b"\t\n\v\f\r\x1b")
_MAX_CONTROL_RATIO = 0.02
_HTML_SNIFF_MARKS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def detect_file_type(name: str, head: bytes) -> FileType:
    """The type to parse `head` as, where head is the whole file or at least its first 8 KB.

    Raises UnsupportedFileType with a message naming the accepted types.
    """
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    label = f'"{base}"' if base else "The file"
    extension = os.path.splitext(base)[1].lower().rstrip(".")
    declared = _EXTENSIONS.get(extension)

    pdf_header_at = head.find(_PDF_MAGIC, 0, _PDF_HEADER_WINDOW)
    if pdf_header_at == 0 or (pdf_header_at > 0 and declared is FileType.PDF):
        return FileType.PDF
    if head.startswith(_ZIP_MAGIC):
        if _is_word_archive(head):
            return FileType.DOCX
        if declared is FileType.DOCX:
            raise _unsupported(
                f"{label} is a ZIP archive but not a Word document ({_WORD_PART} is missing)"
            )
        raise _unsupported(f"{label} looks like binary data (a ZIP archive), not a document")
    if head.startswith(_OLE_MAGIC):
        raise _unsupported(f"{label} is a legacy Office file (such as .doc); save it as .docx")
    if declared is FileType.PDF:
        raise _unsupported(f"{label} is named .pdf but does not contain PDF data")
    if declared is FileType.DOCX:
        raise _unsupported(f"{label} is named .docx but does not contain a Word document")
    if _looks_binary(head):
        raise _unsupported(f"{label} looks like binary data, not text")
    if not extension:
        return FileType.HTML if _starts_like_html(head) else FileType.TXT
    if declared is None:
        raise _unsupported(f"{label}: files of type {extension} are not supported")
    if declared is FileType.TXT and _starts_like_html(head):
        return FileType.HTML
    return declared


def _unsupported(reason: str) -> UnsupportedFileType:
    return UnsupportedFileType(f"{reason}. Accepted types: {ACCEPTED_EXTENSIONS}.")


def _is_word_archive(head: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(head)) as archive:
            return _WORD_PART in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        # Only the start of the file (its central directory is at the end), or a damaged archive:
        # judge by the member names in the local headers; the Word parser reports any damage.
        return b"word/" in head


def _looks_binary(head: bytes) -> bool:
    sample = head[:_SNIFF_BYTES]
    if starts_with_byte_order_mark(sample):
        return False  # UTF-16/32 text is full of NUL bytes
    if b"\x00" in sample:
        return True
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls > len(sample) * _MAX_CONTROL_RATIO


def _starts_like_html(head: bytes) -> bool:
    sample, codec = head[:1024], "utf-8"
    for mark, marked_codec in _HTML_SNIFF_MARKS:
        if sample.startswith(mark):
            sample, codec = sample[len(mark) :], marked_codec
            break
    start = sample.decode(codec, errors="ignore").lstrip().lower()
    return start.startswith(("<!doctype html", "<html"))
