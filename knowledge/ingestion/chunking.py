"""Cutting a parsed document into overlapping chunks, the unit that is embedded and searched.

Chunks are cut inside sections, never across them: consecutive sections with the same page and
heading path are taken together, then split with langchain's RecursiveCharacterTextSplitter,
which tries paragraph breaks first, then line breaks, then Chinese and English sentence ends,
clause marks, spaces, and as a last resort single characters. Separators stay at the end of the
piece they close ("end" mode), so "。" and "." remain with their sentence instead of opening the
next chunk. Each chunk is stripped of surrounding whitespace, and its `start`/`end` are exact
offsets into `ParsedDocument.text`: `doc.text[chunk.start:chunk.end] == chunk.content`, so a hit
can be highlighted in the original, and its page and heading path are exactly those of its text.

Why 800 characters with 120 of overlap by default (knowledge bases set their own): a chunk
should be about one thing, so that BM25 and vector scores point at the passage that answers,
yet hold enough context to be understood alone when handed to an LLM. 800 characters are a few
paragraphs of English (about 200 tokens) or a long paragraph of Chinese (about 500-800 tokens,
within the 8k-token input of OpenAI or bge-m3 embeddings; a knowledge base of Chinese text on a
512-token model should use about 500). The 15% overlap repeats the end of one chunk at the start
of the next, so a sentence cut at a boundary is still whole in one of them. Sizes are counted in
characters, not tokens, so chunks do not change when the embedding model does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from langchain_text_splitters import RecursiveCharacterTextSplitter

from .parsing import ParsedDocument

SEPARATORS = [
    "\n\n",
    "\n",
    "。",
    "！",
    "？",
    "；",
    ". ",
    "! ",
    "? ",
    "; ",
    "，",
    ", ",
    " ",
    "",
]


@dataclass(frozen=True)
class ChunkingConfig:
    """Chunk size and overlap in characters."""

    chunk_size: int = 800
    chunk_overlap: int = 120

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError(
                f"chunk_overlap must be at least 0 and less than chunk_size ({self.chunk_size}), "
                f"got {self.chunk_overlap}"
            )


@dataclass(frozen=True)
class TextChunk:
    """`content == doc.text[start:end]`; `position` is the chunk's index in document order."""

    content: str
    start: int
    end: int
    page: int | None
    heading_path: tuple[str, ...]
    position: int


def chunk_document(doc: ParsedDocument, config: ChunkingConfig) -> list[TextChunk]:
    """The chunks of `doc` in document order, none spanning two pages or two heading paths."""
    splitter = _OffsetSplitter(
        separators=SEPARATORS,
        keep_separator="end",
        chunk_size=config.chunk_size,
        chunk_overlap=config.chunk_overlap,
    )
    chunks: list[TextChunk] = []
    for start, end, page, heading_path in _regions(doc):
        for piece in splitter.split_pieces(doc.text[start:end]):
            chunks.append(
                TextChunk(
                    content=str(piece),
                    start=start + piece.start,
                    end=start + piece.start + len(piece),
                    page=page,
                    heading_path=heading_path,
                    position=len(chunks),
                )
            )
    return chunks


def _regions(doc: ParsedDocument) -> Iterator[tuple[int, int, int | None, tuple[str, ...]]]:
    """(start, end, page, heading path) of each run of sections sharing page and heading path.

    A document without sections (built by hand rather than by the parser) is one region.
    """
    if not doc.sections:
        yield 0, len(doc.text), None, ()
        return
    first = last = doc.sections[0]
    for section in doc.sections[1:]:
        if (section.page, section.heading_path) == (last.page, last.heading_path):
            last = section
            continue
        yield first.start, last.end, first.page, first.heading_path
        first = last = section
    yield first.start, last.end, first.page, first.heading_path


class _Piece(str):
    """A piece of the text being split that remembers where it starts in that text."""

    start: int

    def __new__(cls, value: str, start: int) -> _Piece:
        piece = super().__new__(cls, value)
        piece.start = start
        return piece


class _OffsetSplitter(RecursiveCharacterTextSplitter):
    """RecursiveCharacterTextSplitter whose chunks know their offsets.

    langchain's own start index (add_start_index) searches for each chunk's text, which finds an
    earlier copy when the text repeats itself (short pieces like "，" or a repeated heading), and
    then offsets, coverage and page attribution are wrong. Here the splits carry their offsets
    from the start: `_split_text` mirrors langchain's recursion (first separator present, split
    keeping it at the end, recurse into splits still too long) on `_Piece`s, langchain's own
    `_merge_splits` packs them with the overlap, and `_join_docs` keeps the offset when it joins
    and strips. Runs with no separator at all are cut into fixed windows directly, which is what
    merging them character by character amounts to, without its cost (a Python step per
    character).
    """

    def split_pieces(self, text: str) -> list[_Piece]:
        return self._split_text(_Piece(text, 0), self._separators)

    def _split_text(self, text: _Piece, separators: list[str]) -> list[_Piece]:
        for i, separator in enumerate(separators):
            if separator and separator in text:
                remaining = separators[i + 1 :]
                break
        else:
            return self._windows(text)
        chunks: list[_Piece] = []
        small: list[_Piece] = []
        for split in _split_keeping_end(text, separator):
            if len(split) < self._chunk_size:
                small.append(split)
                continue
            if small:
                chunks.extend(self._merge_splits(small, ""))
                small = []
            chunks.extend(self._split_text(split, remaining))
        if small:
            chunks.extend(self._merge_splits(small, ""))
        return chunks

    def _windows(self, text: _Piece) -> list[_Piece]:
        windows = []
        step = self._chunk_size - self._chunk_overlap
        for offset in range(0, len(text), step):
            window = self._join_docs(
                [_Piece(text[offset : offset + self._chunk_size], text.start + offset)], ""
            )
            if window is not None:
                windows.append(window)
            if offset + self._chunk_size >= len(text):
                break
        return windows

    def _join_docs(self, docs: list[_Piece], separator: str) -> _Piece | None:
        joined = separator.join(docs)  # separator is always "": pieces keep their own
        stripped = joined.lstrip()
        leading = len(joined) - len(stripped)
        stripped = stripped.rstrip()
        return _Piece(stripped, docs[0].start + leading) if stripped else None


def _split_keeping_end(text: _Piece, separator: str) -> list[_Piece]:
    """text.split(separator) with each separator kept at the end of the part it closes."""
    pieces = []
    offset = text.start
    parts = text.split(separator)
    for i, part in enumerate(parts):
        if i < len(parts) - 1:
            part += separator
        if part:
            pieces.append(_Piece(part, offset))
            offset += len(part)
    return pieces
