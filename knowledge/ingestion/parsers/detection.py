"""Deciding a file's type from its bytes as well as its name.

The bytes are checked first because names lie (downloads saved as ".txt", PDFs renamed by mail
clients): a PDF, an Office file, an EPUB or an image is parsed as such whatever it is called, and
binary data is refused even when named ".txt", so an image never reaches the text decoder and
comes back as garbage. ZIP-based formats are told apart by their members (word/, xl/, ppt/, the
EPUB mimetype), images by their magic bytes. Among text types the extension decides, since a CSV,
a Markdown file and plain text look alike; the exceptions are a ".txt" (or extension-less) file
that unmistakably starts as an HTML page, and a ".eml" file, which must start with mail headers.
A name promising a binary format whose bytes are something else is refused: the user should see
that the upload is not what they think it is.

OLE2 containers are refused here, with what to do, unless they are named .docx/.xlsx/.pptx:
those are almost always password-protected Office files, and their parser says so.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import zipfile

from .archive import ENCRYPTED_PACKAGE, OLE_MAGIC
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
    ".xlsx": FileType.XLSX,
    ".pptx": FileType.PPTX,
    ".csv": FileType.CSV,
    ".eml": FileType.EML,
    ".epub": FileType.EPUB,
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"), FileType.IMAGE),
}
_PDF_MAGIC = b"%PDF-"
# Readers accept junk before the header; so do we, within this window, for a file named .pdf
# (a text file may well mention "%PDF-" near its start).
_PDF_HEADER_WINDOW = 1024
_ZIP_MAGIC = b"PK\x03\x04"
# (type, a member only that format has, its prefix as it shows in a local file header). An
# EPUB starts with its uncompressed "mimetype" member (the standard says so): its header and
# content are the mark, whatever else is missing.
_ZIP_FORMATS = (
    (FileType.DOCX, "word/document.xml", b"word/"),
    (FileType.XLSX, "xl/workbook.xml", b"xl/"),
    (FileType.PPTX, "ppt/presentation.xml", b"ppt/"),
    (FileType.EPUB, None, b"mimetypeapplication/epub+zip"),
)
_ZIP_NAMES = {
    FileType.DOCX: "a Word document",
    FileType.XLSX: "an Excel workbook",
    FileType.PPTX: "a PowerPoint presentation",
    FileType.EPUB: "an EPUB book",
}
_CONTENTS = {
    FileType.PDF: "PDF data",
    FileType.IMAGE: "a PNG, JPEG, WebP or TIFF image",
    **_ZIP_NAMES,
}
_LEGACY_OFFICE = {
    ".doc": "is a legacy Word file (.doc); save it as .docx",
    ".xls": "is a legacy Excel file (.xls); save it as .xlsx",
    ".ppt": "is a legacy PowerPoint file (.ppt); save it as .pptx",
    ".msg": "is an Outlook message (.msg); save or drag the message out as .eml",
}
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", 0),
    (b"\xff\xd8\xff", 0),  # JPEG
    (b"II*\x00", 0),  # TIFF, little-endian
    (b"MM\x00*", 0),  # TIFF, big-endian
    (b"WEBP", 8),  # after "RIFF" and the size
)
_OTHER_IMAGES = (
    (b"GIF87a", 0, "a GIF image"),
    (b"GIF89a", 0, "a GIF image"),
    (b"ftypheic", 4, "a HEIC photo (export it as JPEG)"),
    (b"ftypheix", 4, "a HEIC photo (export it as JPEG)"),
    (b"ftypmif1", 4, "a HEIF image (export it as JPEG)"),
)
# An e-mail message starts with header fields ("Received: ...", "From: ..."), possibly after
# an mbox "From " line.
_MAIL_HEADER = re.compile(rb"(?:From [^\r\n]*\r?\n)?[!-9;-~]+:")
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
        return _zip_type(head, declared, label)
    if head.startswith(OLE_MAGIC):
        if declared in (FileType.DOCX, FileType.XLSX, FileType.PPTX):
            return declared
        if ENCRYPTED_PACKAGE in head:
            raise _unsupported(
                f"{label} is an encrypted (password-protected) Office file; remove the password "
                "and upload it as .docx, .xlsx or .pptx"
            )
        reason = _LEGACY_OFFICE.get(
            extension, "is a legacy Office file (such as .doc, .xls or .ppt); save it as .docx"
        )
        raise _unsupported(f"{label} {reason}")
    if any(head.startswith(magic, at) for magic, at in _IMAGE_MAGIC):
        return FileType.IMAGE
    for magic, at, kind in _OTHER_IMAGES:
        if head.startswith(magic, at):
            raise _unsupported(f"{label} is {kind}; images are read from .png, .jpg, .webp, .tiff")
    if declared in _CONTENTS:
        contents = _CONTENTS[declared]
        raise _unsupported(f"{label} is named {extension} but does not contain {contents}")
    if _looks_binary(head):
        raise _unsupported(f"{label} looks like binary data, not text")
    if not extension:
        return FileType.HTML if _starts_like_html(head) else FileType.TXT
    if declared is None:
        raise _unsupported(f"{label}: files of type {extension} are not supported")
    if declared is FileType.TXT and _starts_like_html(head):
        return FileType.HTML
    if declared is FileType.EML and not _MAIL_HEADER.match(head.lstrip()):
        raise _unsupported(f"{label} is named .eml but does not start with e-mail headers")
    return declared


def _zip_type(head: bytes, declared: FileType | None, label: str) -> FileType:
    members = _zip_members(head)
    # The declared format first: a Word file may embed a workbook, never the other way round.
    formats = sorted(_ZIP_FORMATS, key=lambda f: f[0] is not declared)
    for file_type, member, prefix in formats:
        if (member in members) if member and members is not None else (prefix in head):
            return file_type
    if declared in _ZIP_NAMES:
        raise _unsupported(f"{label} is a ZIP archive but not {_CONTENTS[declared]}")
    raise _unsupported(f"{label} looks like binary data (a ZIP archive), not a document")


def _zip_members(head: bytes) -> set[str] | None:
    """The member names, or None when only the start of the file is at hand (its central
    directory is at the end) or the archive is damaged: the callers then judge by the names
    in the local headers, and the format's parser reports any damage."""
    try:
        with zipfile.ZipFile(io.BytesIO(head)) as archive:
            return set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None


def _unsupported(reason: str) -> UnsupportedFileType:
    return UnsupportedFileType(f"{reason}. Accepted types: {ACCEPTED_EXTENSIONS}.")


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
