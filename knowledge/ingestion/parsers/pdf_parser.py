"""PDF: the text of each page (pypdf), one section per page, so every chunk cites its page.

Refused with a message the user can act on: encrypted files (even those that open with an empty
password: their owner restricted copying, and the text may be unreadable without the key), files
pypdf cannot read at all, files over the page limit, and files without any text layer (scans;
OCR is not supported). A page whose own content is broken is skipped and listed in
metadata["unreadable_pages"] rather than losing the whole document to one bad page. The title
comes from the document information dictionary.
"""

from __future__ import annotations

import io

from pypdf import PdfReader

from .base import (
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    TextAssembler,
    clean_inline,
    damaged,
)


def parse_pdf(data: bytes, limits: ParseLimits) -> ParsedDocument:
    try:
        return _parse(data, limits)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # pypdf raises anything from PdfReadError to KeyError on bad input
        raise damaged("PDF", exc) from exc


def _parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise ParseError("The PDF is encrypted; upload an unencrypted copy")
    page_count = len(reader.pages)
    if page_count > limits.max_pdf_pages:
        raise ParseError(
            f"The PDF has {page_count} pages, more than the limit of {limits.max_pdf_pages}; "
            "split it into smaller files"
        )
    assembler = TextAssembler(limits)
    unreadable = []
    for number, page in enumerate(reader.pages, start=1):
        try:
            page_text = page.extract_text()
        except MemoryError:
            raise
        except Exception:
            unreadable.append(number)
            continue
        assembler.add(page_text, page=number)
    text, sections = assembler.build()
    if not text:
        if unreadable:
            raise ParseError("The PDF is damaged and could not be read: no page could be read")
        raise ParseError(
            "No text could be extracted from the PDF; it may be a scan (OCR is not supported)"
        )
    title, author = _document_info(reader)
    metadata: dict[str, object] = {"page_count": page_count}
    if author:
        metadata["author"] = author
    if unreadable:
        metadata["unreadable_pages"] = unreadable
    return ParsedDocument(
        text=text,
        file_type=FileType.PDF,
        title=title,
        sections=sections,
        metadata=metadata,
    )


def _document_info(reader: PdfReader) -> tuple[str | None, str | None]:
    """Title and author, or None each; a broken information dictionary costs only these."""
    try:
        info = reader.metadata
        if info is None:
            return None, None
        return clean_inline(info.title) or None, clean_inline(info.author) or None
    except MemoryError:
        raise
    except Exception:
        return None, None
