"""Markdown: the source text kept as it is, with one section per ATX heading ("#" to "######").

The markup stays because it is what the author wrote and what a reader of a chunk recognises;
headings become each section's heading path, so a chunk knows it sits under "Install > Linux".
A "#" line inside a fenced code block (``` or ~~~) is code, a shell comment say, not a heading.
Setext headings (a line underlined with === or ---) are rare in practice and are left as text.
The title is the first level-1 heading.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .base import FileType, HeadingTrail, ParsedDocument, ParseLimits, clean_inline, trimmed_section
from .text_parser import read_text

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_ATX_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")


def parse_markdown(data: bytes, limits: ParseLimits) -> ParsedDocument:
    text, encoding = read_text(data, limits)
    trail = HeadingTrail()
    title = None
    sections = []
    start, path = 0, ()
    for offset, level, heading in _atx_headings(text):
        sections.append(trimmed_section(text, start, offset, heading_path=path))
        start, path = offset, trail.enter(level, heading)
        if title is None and level == 1:
            title = heading
    sections.append(trimmed_section(text, start, len(text), heading_path=path))
    return ParsedDocument(
        text=text,
        file_type=FileType.MD,
        title=title,
        sections=tuple(s for s in sections if s is not None),
        encoding=encoding,
    )


def _atx_headings(text: str) -> Iterator[tuple[int, int, str]]:
    """(offset of the heading line, level, heading text) outside fenced code blocks."""
    fence: tuple[str, int] | None = None
    offset = 0
    for line in text.split("\n"):
        fence_match = _FENCE.fullmatch(line)
        if fence is not None:
            if (
                fence_match
                and fence_match[1][0] == fence[0]
                and len(fence_match[1]) >= fence[1]
                and not fence_match[2].strip()
            ):
                fence = None
        elif fence_match and not (fence_match[1][0] == "`" and "`" in fence_match[2]):
            fence = (fence_match[1][0], len(fence_match[1]))
        elif heading_match := _ATX_HEADING.fullmatch(line):
            heading = clean_inline(_CLOSING_HASHES.sub("", heading_match[2] or ""))
            if heading:
                yield offset, len(heading_match[1]), heading
        offset += len(line) + 1
