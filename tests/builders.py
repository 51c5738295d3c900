"""Builders of real files (PDF, docx) for tests; nothing binary is committed."""

from __future__ import annotations

import io
import zipfile

import docx


def build_pdf(pages: list[list[str] | bytes], title: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica text line per string, a correct xref table.

    A page given as bytes is used as its content stream object as it is.
    """
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for lines in pages:
        if isinstance(lines, bytes):
            objects.append(lines)
        else:
            ops = [b"BT /F1 12 Tf 72 720 Td 14 TL"]
            for line in lines:
                escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
                ops.append(b"(" + escaped.encode("latin-1") + b") Tj T*")
            ops.append(b"ET")
            stream = b"\n".join(ops)
            objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        len(kids),
    )
    trailer = b"<< /Size %d /Root 1 0 R" % (len(objects) + 1 + bool(title))
    if title:
        objects.append(b"<< /Title (%s) >>" % title.encode("latin-1"))
        trailer += b" /Info %d 0 R" % len(objects)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def build_docx(*, core_title: str = "Quarterly report") -> bytes:
    document = docx.Document()
    document.core_properties.title = core_title
    document.add_heading("Report 2024", level=0)  # the Title style
    document.add_paragraph("Opening words before any heading.")
    document.add_heading("Sales", level=1)
    document.add_paragraph("Sales grew in every region.")
    document.add_heading("Europe", level=2)
    document.add_paragraph("Europe led the growth.")
    table = document.add_table(rows=3, cols=3)
    values = [("Region", "Q1", "Q2"), ("France", "10", "12"), ("Spain", "", "")]
    for row, cells in zip(table.rows, values, strict=True):
        for cell, value in zip(row.cells, cells, strict=True):
            cell.text = value
    table.cell(2, 1).merge(table.cell(2, 2)).text = "merged"
    document.add_heading("Costs", level=1)
    document.add_paragraph("Costs stayed flat.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def rewrite_zip(data: bytes, replace: dict[str, bytes | None]) -> bytes:
    """A copy of a zip with some members replaced (bytes) or removed (None)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename not in replace:
                target.writestr(info, source.read(info))
            elif replace[info.filename] is not None:
                target.writestr(info.filename, replace[info.filename])
    return out.getvalue()
