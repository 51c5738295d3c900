"""Images (.png, .jpg, .webp, .tiff): the text recognised in them (see `ocr`).

A photographed notice or a scanned page saved as an image. Pillow decodes it; the EXIF
orientation a phone records is applied first, so a photo taken sideways is read upright. Each
frame of a multi-page TIFF (faxes, scanner output) is a page; a single image has no page number.

Refused with a reason: images over ParseLimits.max_image_pixels (checked from the header, before
anything is decoded: a small PNG can declare gigapixels), TIFFs with more frames than
ParseLimits.max_ocr_pages, damaged files, and images in which no text is recognised.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from PIL import Image, ImageOps

from .base import FileType, ParsedDocument, ParseError, ParseLimits, TextAssembler, damaged
from .ocr import Ocr, recognize


def parse_image(data: bytes, limits: ParseLimits, ocr: Ocr) -> ParsedDocument:
    try:
        return _parse(data, limits, ocr)
    except (ParseError, MemoryError):
        raise
    except Image.DecompressionBombError as exc:
        raise ParseError(f"The image is too large to be read: {exc}") from exc
    except Exception as exc:  # Pillow raises OSError, ValueError, SyntaxError... on bad input
        raise damaged("image", exc) from exc


def _parse(data: bytes, limits: ParseLimits, ocr: Ocr) -> ParsedDocument:
    image = Image.open(io.BytesIO(data))
    frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
    if frames > limits.max_ocr_pages:
        raise ParseError(
            f"The image has {frames} pages, more than the limit of {limits.max_ocr_pages} for "
            "text recognition (OCR); split it into smaller files"
        )
    assembler = TextAssembler(limits)
    for number, text in enumerate(recognize(ocr, _frames(image, frames, limits), frames), 1):
        assembler.add(text, page=number if frames > 1 else None)
    text, sections = assembler.build()
    if not text:
        raise ParseError("No text was recognised in the image")
    return ParsedDocument(
        text=text,
        file_type=FileType.IMAGE,
        title=None,
        sections=sections,
        metadata={"image_format": image.format, "ocr_pages": frames},
    )


def _frames(image: Image.Image, count: int, limits: ParseLimits) -> Iterator[Image.Image]:
    for index in range(count):
        image.seek(index)
        width, height = image.size
        if width * height > limits.max_image_pixels:
            raise ParseError(
                f"The image is {width}x{height} pixels, more than the limit of "
                f"{limits.max_image_pixels:,} pixels; scale it down"
            )
        yield ImageOps.exif_transpose(image)
