"""CSV: one line per row, each cell labelled with its column, or Q&A pairs (see `tables`).

The first row is taken as the header (csv.Sniffer's header guess is unreliable, and headerless
exports are rare); the delimiter is sniffed among , ; tab and |, falling back to a comma. The
rows form one section, so the chunker packs whole rows up to the chunk size.
"""

from __future__ import annotations

import csv
import io

from .base import FileType, ParsedDocument, ParseError, ParseLimits, ParseOptions, TextAssembler
from .tables import TableWriter, column_labels
from .text_parser import read_text

_SNIFF_CHARS = 16_384


def parse_csv(data: bytes, limits: ParseLimits, options: ParseOptions) -> ParsedDocument:
    text, encoding = read_text(data, limits)
    dialect = _dialect(text)
    assembler = TextAssembler(limits)
    table: TableWriter | None = None
    try:
        for cells in csv.reader(io.StringIO(text), dialect):
            if table is None:
                table = TableWriter(assembler, column_labels(cells), options)
            else:
                table.add(cells)
    except csv.Error as exc:
        raise ParseError(f"The CSV file could not be read: {exc}") from exc
    if table is None or not table.rows:
        raise ParseError("The CSV file has no rows below its header")
    body, sections = assembler.build()
    metadata: dict[str, object] = {
        "delimiter": dialect.delimiter,
        "columns": table.labels,
        "row_count": table.rows,
    }
    if table.qa:
        metadata["qa_pairs"] = table.rows
        metadata["qa_skipped_rows"] = table.skipped
    return ParsedDocument(
        text=body,
        file_type=FileType.CSV,
        title=None,
        sections=sections,
        encoding=encoding,
        metadata=metadata,
    )


def _dialect(text: str) -> type[csv.Dialect]:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:
        return csv.excel
