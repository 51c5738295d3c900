"""CSV: one line per row, each cell labelled with its column, "name: Alice; city: Paris".

A chunk of a table is useless to retrieval if it holds bare values whose column names stayed in
the first chunk; labelling every cell makes each row self-describing, so any chunk can be found
by a question about a column and read on its own. Empty cells are left out. The first row is
taken as the header (csv.Sniffer's header guess is unreliable, and headerless exports are rare);
the delimiter is sniffed among , ; tab and |, falling back to a comma. The rows form one section,
so the chunker packs whole rows up to the chunk size.
"""

from __future__ import annotations

import csv
import io

from .base import FileType, ParsedDocument, ParseError, ParseLimits, TextAssembler, clean_inline
from .text_parser import read_text

_SNIFF_CHARS = 16_384


def parse_csv(data: bytes, limits: ParseLimits) -> ParsedDocument:
    text, encoding = read_text(data, limits)
    dialect = _dialect(text)
    assembler = TextAssembler(limits)
    columns: list[str] = []
    row_count = 0
    try:
        for cells in csv.reader(io.StringIO(text), dialect):
            if not columns:
                columns = [clean_inline(c) or f"column {i}" for i, c in enumerate(cells, 1)]
                continue
            line = "; ".join(
                f"{columns[i] if i < len(columns) else f'column {i + 1}'}: {value}"
                for i, value in enumerate(clean_inline(c) for c in cells)
                if value
            )
            if line:
                assembler.add(line, separator="\n")
                row_count += 1
    except csv.Error as exc:
        raise ParseError(f"The CSV file could not be read: {exc}") from exc
    if not row_count:
        raise ParseError("The CSV file has no rows below its header")
    body, sections = assembler.build()
    return ParsedDocument(
        text=body,
        file_type=FileType.CSV,
        title=None,
        sections=sections,
        encoding=encoding,
        metadata={"delimiter": dialect.delimiter, "columns": columns, "row_count": row_count},
    )


def _dialect(text: str) -> type[csv.Dialect]:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:
        return csv.excel
