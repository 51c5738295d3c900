"""PowerPoint (.pptx): per slide its title, body text, tables and speaker notes.

Each slide is one section whose page is the slide number and whose heading path is the slide's
title, so a chunk cites "slide 7, Quarterly results". Shapes are read top to bottom, then left
to right (the order a reader's eye takes; the file's order is the drawing order), group shapes
included. Table rows become one line each, cells joined by " | " as in Word tables, a merged
cell counted once. Speaker notes follow the slide's text after "Notes:": presenters often put
there what the slide only hints at. Pictures, charts and media carry no text python-pptx can
read and are left out; so are the slide master's and layouts' placeholder prompts.

The title is the core "Title" property, else the first slide's title. Bounds: the ZIP guard of
`archive` and ParseLimits.max_pages slides.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

from pptx import Presentation
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.slide import Slide

from .archive import check_archive
from .base import (
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    TextAssembler,
    clean_inline,
    damaged,
)


def parse_pptx(data: bytes, limits: ParseLimits) -> ParsedDocument:
    check_archive(data, limits, "PowerPoint presentation", ".pptx")
    try:
        return _parse(data, limits)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # python-pptx and lxml raise many kinds of errors on bad input
        raise damaged("PowerPoint presentation", exc) from exc


def _parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    presentation = Presentation(io.BytesIO(data))
    slides = presentation.slides
    if len(slides) > limits.max_pages:
        raise ParseError(
            f"The presentation has {len(slides)} slides, more than the limit of "
            f"{limits.max_pages}; split it into smaller files"
        )
    assembler = TextAssembler(limits)
    title = clean_inline(presentation.core_properties.title)
    for number, slide in enumerate(slides, start=1):
        title_shape = slide.shapes.title
        slide_title = clean_inline(title_shape.text_frame.text) if title_shape is not None else ""
        title = title or slide_title
        path = (slide_title,) if slide_title else ()
        if slide_title:
            assembler.add(slide_title, page=number, heading_path=path)
        for shape in _reading_order(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            assembler.add(_shape_text(shape), page=number, heading_path=path)
        notes = _notes(slide)
        if notes:
            assembler.add(f"Notes: {notes}", page=number, heading_path=path)
    text, sections = assembler.build()
    return ParsedDocument(
        text=text,
        file_type=FileType.PPTX,
        title=title or None,
        sections=sections,
        metadata={"slide_count": len(slides)},
    )


def _reading_order(shapes: Iterable[BaseShape]) -> Iterator[BaseShape]:
    """Shapes top to bottom, then left to right; a group's shapes in place of the group."""
    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        if isinstance(shape, GroupShape):
            yield from _reading_order(shape.shapes)
        else:
            yield shape


def _shape_text(shape: BaseShape) -> str:
    if shape.has_text_frame:
        return shape.text_frame.text
    if shape.has_table:
        lines = []
        for row in shape.table.rows:
            cells = [clean_inline(cell.text) for cell in row.cells if not cell.is_spanned]
            if any(cells):
                lines.append(" | ".join(cells))
        return "\n".join(lines)
    return ""


def _notes(slide: Slide) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return frame.text.strip() if frame is not None else ""
