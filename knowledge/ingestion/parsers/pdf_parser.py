"""PDF: the text of each page (pypdf), one section per page, so every chunk cites its page.

A page without a text layer (a scan, or text drawn as outlines) is rendered at 200 dpi with
pdfium (pypdfium2) and its text recognised (see `ocr`); blank pages are skipped, and the pages
read by OCR are listed in metadata["ocr_pages"]. A document with more such pages than
ParseLimits.max_ocr_pages is refused before any is read, since each takes seconds.

Refused with a message the user can act on: encrypted files (even those that open with an empty
password: their owner restricted copying, and the text may be unreadable without the key), files
pypdf cannot read at all, files over the page limit, and files in which no text is found. A page
whose own content is broken is skipped and listed in metadata["unreadable_pages"] rather than
losing the whole document to one bad page. The title comes from the document information
dictionary.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import pypdfium2
from PIL import Image
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
from .ocr import Ocr, recognize

_OCR_DPI = 200
_POINTS_PER_INCH = 72


def parse_pdf(data: bytes, limits: ParseLimits, ocr: Ocr) -> ParsedDocument:
    try:
        return _parse(data, limits, ocr)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # pypdf raises anything from PdfReadError to KeyError on bad input
        raise damaged("PDF", exc) from exc


def _parse(data: bytes, limits: ParseLimits, ocr: Ocr) -> ParsedDocument:
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise ParseError("The PDF is encrypted; upload an unencrypted copy")
    page_count = len(reader.pages)
    if page_count > limits.max_pages:
        raise ParseError(
            f"The PDF has {page_count} pages, more than the limit of {limits.max_pages}; "
            "split it into smaller files"
        )
    texts: dict[int, str] = {}
    unreadable = []
    for number, page in enumerate(reader.pages, start=1):
        try:
            texts[number] = page.extract_text()
        except MemoryError:
            raise
        except Exception:
            unreadable.append(number)
    scanned = [number for number, text in texts.items() if not text.strip()]
    if len(scanned) > limits.max_ocr_pages:
        raise ParseError(
            f"The PDF has {len(scanned)} pages without a text layer, more than the limit of "
            f"{limits.max_ocr_pages} for text recognition (OCR); split it into smaller files"
        )
    if scanned:
        rendered = _rendered(data, scanned, limits, unreadable)
        for number, text in zip(scanned, recognize(ocr, rendered, len(scanned)), strict=False):
            texts[number] = text
    assembler = TextAssembler(limits)
    for number in sorted(texts):
        assembler.add(texts[number], page=number)
    text, sections = assembler.build()
    if not text:
        if unreadable and not texts:
            raise ParseError("The PDF is damaged and could not be read: no page could be read")
        raise ParseError("No text could be extracted from the PDF, nor recognised in its pages")
    title, author = _document_info(reader)
    metadata: dict[str, object] = {"page_count": page_count}
    if author:
        metadata["author"] = author
    ocr_pages = [n for n in scanned if texts.get(n, "").strip()]
    if ocr_pages:
        metadata["ocr_pages"] = ocr_pages
    if unreadable:
        metadata["unreadable_pages"] = sorted(unreadable)
    return ParsedDocument(
        text=text,
        file_type=FileType.PDF,
        title=title,
        sections=sections,
        metadata=metadata,
    )


def _rendered(
    data: bytes, numbers: list[int], limits: ParseLimits, unreadable: list[int]
) -> Iterator[Image.Image]:
    """Each page of `numbers` as an image, 200 dpi or less to stay within max_image_pixels;
    a page pdfium cannot render is a blank image, and listed in `unreadable`."""
    document = pypdfium2.PdfDocument(data)
    try:
        for number in numbers:
            page = document[number - 1]
            try:
                width, height = page.get_size()
                scale = min(
                    _OCR_DPI / _POINTS_PER_INCH,
                    math.sqrt(limits.max_image_pixels / max(1.0, width * height)),
                )
                yield page.render(scale=scale, grayscale=True).to_pil()
            except pypdfium2.PdfiumError:
                unreadable.append(number)
                yield Image.new("L", (1, 1), "white")
            finally:
                page.close()
    finally:
        document.close()


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
