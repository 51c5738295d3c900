"""Excel (.xlsx): every worksheet, each row a labelled line or a Q&A pair (see `tables`).

Each sheet is one section whose page is the sheet's number (1-based, in workbook order) and
whose heading path is the sheet name, a caption if the sheet has one, and the header row, so
every chunk of a sheet says which sheet and which columns it comes from. openpyxl reads in
read-only mode (rows are streamed, never all held as cell objects) with the values Excel last
calculated for formulas.

The header is the first non-empty row, unless that row holds a single value above a wider row
(a caption such as "Price list 2024", usually merged across the table), which then joins the
heading path. Merged cells are read as what the reader sees: every cell a merge covers takes the
merge's value, in the header (a "Price" merged over two columns labels both) and in the data (a
category merged down several rows labels each). A merge across columns in the header row
announces a second header row beneath it ("Price" over "EUR" and "USD"); the labels then join
both rows: "Price / EUR". Read-only mode does not expose merges (they follow the cell data in
the sheet's XML), so they are read from the sheet's part first, with a streaming parser.

Bounds: the ZIP guard of `archive`, and ParseLimits.max_sheet_cells cells read in the workbook.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time

from lxml import etree
from openpyxl import load_workbook
from openpyxl.utils.cell import get_column_letter, range_boundaries

from .archive import open_archive
from .base import (
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    ParseOptions,
    TextAssembler,
    clean_inline,
    damaged,
)
from .tables import TableWriter

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_RELATIONSHIPS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_REL_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_XML = etree.XMLParser(resolve_entities=False, no_network=True)


@dataclass(frozen=True)
class _Merge:
    min_col: int
    min_row: int
    max_col: int
    max_row: int


def parse_xlsx(data: bytes, limits: ParseLimits, options: ParseOptions) -> ParsedDocument:
    with open_archive(data, limits, "Excel workbook", ".xlsx") as archive:
        try:
            merges = _merges_by_sheet(archive)
            return _parse(data, limits, options, merges)
        except (ParseError, MemoryError):
            raise
        except Exception as exc:  # openpyxl and lxml raise many kinds of errors on bad input
            raise damaged("Excel workbook", exc) from exc


def _parse(
    data: bytes, limits: ParseLimits, options: ParseOptions, merges: dict[str, list[_Merge]]
) -> ParsedDocument:
    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        assembler = TextAssembler(limits)
        budget = _CellBudget(limits.max_sheet_cells)
        sheets, rows, pairs, skipped = [], 0, 0, 0
        for number, sheet in enumerate(workbook.worksheets, start=1):
            sheet.reset_dimensions()  # the stored dimension may be wrong; read what is there
            table = _add_sheet(
                assembler,
                sheet.title,
                number,
                _rows(sheet.iter_rows(values_only=True), merges.get(sheet.title, []), budget),
                merges.get(sheet.title, []),
                options,
            )
            sheets.append(sheet.title)
            if table is not None:
                rows += table.rows if table.qa is None else 0
                pairs += table.rows if table.qa is not None else 0
                skipped += table.skipped
        title = clean_inline(workbook.properties.title) or None
    finally:
        workbook.close()
    text, sections = assembler.build()
    metadata: dict[str, object] = {"sheets": sheets, "row_count": rows}
    if pairs:
        metadata["qa_pairs"] = pairs
        metadata["qa_skipped_rows"] = skipped
    return ParsedDocument(
        text=text, file_type=FileType.XLSX, title=title, sections=sections, metadata=metadata
    )


def _add_sheet(
    assembler: TextAssembler,
    name: str,
    number: int,
    rows: Iterator[tuple[int, list[str]]],
    merges: list[_Merge],
    options: ParseOptions,
) -> TableWriter | None:
    """Adds one sheet; returns its writer (None for a sheet without any value)."""
    first = next(rows, None)
    if first is None:
        return None
    second = next(rows, None)
    context = [clean_inline(name) or f"Sheet {number}"]
    header_at, header = first
    if second is not None and len(_values(header)) == 1 and len(_values(second[1])) > 1:
        context.append(next(v for v in header if v))  # a caption above the table
        header_at, header = second
        second = next(rows, None)
    header_rows = [header]
    if second is not None and _has_sub_header(merges, header_at, second[1]):
        header_rows.append(second[1])
        second = next(rows, None)
    labels = _labels(header_rows)
    table = TableWriter(
        assembler,
        labels,
        options,
        page=number,
        heading_path=(*context, " | ".join(labels)),
    )
    if second is not None:
        table.add(second[1])
    for _, cells in rows:
        table.add(cells)
    return table


def _values(cells: Sequence[str]) -> set[str]:
    return {c for c in cells if c}


def _has_sub_header(merges: list[_Merge], row: int, below: list[str]) -> bool:
    """Whether `below` labels the columns a merge in header row `row` spans: there is such a
    merge, every column under it is filled, and nothing in the row is a number (data is)."""
    spans = [m for m in merges if m.min_row == row and m.max_col > m.min_col]
    return (
        bool(spans)
        and all(
            column <= len(below) and below[column - 1]
            for m in spans
            for column in range(m.min_col, m.max_col + 1)
        )
        and not any(_is_number(c) for c in below if c)
    )


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _labels(header_rows: list[list[str]]) -> list[str]:
    width = max(len(r) for r in header_rows)
    labels = []
    for column in range(width):
        parts: list[str] = []
        for row in header_rows:
            value = clean_inline(row[column]) if column < len(row) else ""
            if value and value not in parts:
                parts.append(value)
        labels.append(" / ".join(parts) or get_column_letter(column + 1))
    return labels


class _CellBudget:
    def __init__(self, limit: int) -> None:
        self._left = limit
        self._limit = limit

    def spend(self, cells: int) -> None:
        self._left -= cells
        if self._left < 0:
            raise ParseError(
                f"The workbook has more than {self._limit} cells (rows times columns in use); "
                "split it into smaller files"
            )


def _rows(
    values: Iterator[tuple], merges: list[_Merge], budget: _CellBudget
) -> Iterator[tuple[int, list[str]]]:
    """(row number, cell texts) of the non-empty rows, merged cells filled in."""
    by_first_row = sorted(merges, key=lambda m: m.min_row)
    pending = 0  # index of the next merge not yet started
    active: list[tuple[_Merge, str]] = []  # merges covering the current row, with their value
    for number, row in enumerate(values, start=1):
        budget.spend(len(row))
        cells = [_text(v) for v in row]
        active = [(m, value) for m, value in active if m.max_row >= number]
        while pending < len(by_first_row) and by_first_row[pending].min_row <= number:
            merge = by_first_row[pending]
            pending += 1
            if merge.min_row == number and merge.max_row >= number:
                anchor = merge.min_col - 1
                active.append((merge, cells[anchor] if anchor < len(cells) else ""))
        for merge, value in active:
            if not value:
                continue
            # Fill only up to the row's own width or the merge's end, whichever is further:
            # a merge across the whole sheet must not make every row 16,384 cells long.
            end = min(merge.max_col, max(len(cells), merge.min_col))
            cells.extend([""] * (end - len(cells)))
            for column in range(merge.min_col - 1, end):
                cells[column] = value
        if any(cells):
            yield number, cells


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return f"{value:.15g}"  # 0.1 + 0.2 shows as 0.3, as Excel shows it
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(" ")
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)


def _merges_by_sheet(archive: zipfile.ZipFile) -> dict[str, list[_Merge]]:
    """Merged ranges of each sheet, by sheet name, read from the workbook's parts."""
    rels = etree.fromstring(archive.read("xl/_rels/workbook.xml.rels"), _XML)
    targets = {r.get("Id"): r.get("Target", "") for r in rels.iter(_RELATIONSHIPS)}
    workbook = etree.fromstring(archive.read("xl/workbook.xml"), _XML)
    merges = {}
    for sheet in workbook.iter(f"{_MAIN}sheet"):
        target = targets.get(sheet.get(_REL_ID), "")
        part = target.lstrip("/") if target.startswith("/") else posixpath.join("xl", target)
        part = posixpath.normpath(part)
        if part in archive.NameToInfo:
            merges[sheet.get("name", "")] = _sheet_merges(archive, part)
    return merges


def _sheet_merges(archive: zipfile.ZipFile, part: str) -> list[_Merge]:
    merges = []
    with archive.open(part) as stream:
        for _, element in etree.iterparse(stream, events=("end",), resolve_entities=False):
            if element.tag == f"{_MAIN}mergeCell":
                ref = element.get("ref", "")
                if ":" in ref:
                    min_col, min_row, max_col, max_row = range_boundaries(ref)
                    merges.append(_Merge(min_col, min_row, max_col, max_row))
            # Free what was read: the rows before the merges can be many.
            element.clear()
            while element.getprevious() is not None:
                del element.getparent()[0]
    return merges
