"""Builders of real files for tests, each made by the library that makes such files in real
life (python-docx, openpyxl, python-pptx, ebooklib, Python's email package, Pillow,
msoffcrypto-tool); nothing binary is committed."""

from __future__ import annotations

import io
import zipfile
from datetime import date
from email import message_from_bytes, policy
from email.message import EmailMessage

import docx
import openpyxl
import pptx
from ebooklib import epub
from msoffcrypto.format.ooxml import OOXMLFile
from pptx.util import Inches

from bench.scans import page_lines, render_scan, scanned_pdf


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


def build_xlsx() -> bytes:
    """A price list as teams keep one: a caption merged across the table, a merged "Price"
    over EUR and USD columns, "Product" merged down two header rows, a category merged down
    two data rows; and a second sheet with a plain table."""
    workbook = openpyxl.Workbook()
    workbook.properties.title = "Price list"
    prices = workbook.active
    prices.title = "Pumps"
    prices["A1"] = "Price list 2024"
    prices.merge_cells("A1:D1")
    prices["A2"], prices["B2"], prices["D2"] = "Product", "Price", "Stock"
    prices["B3"], prices["C3"] = "EUR", "USD"
    for merged in ("A2:A3", "B2:C2", "D2:D3"):
        prices.merge_cells(merged)
    prices.append(["P-100 centrifugal pump", 1250.5, 1350, 4])
    prices.append(["Mechanical seal kit", 89.9, 97, date(2024, 3, 1)])
    prices.append(["Valve V-7", 12, 13, 40])
    prices.append([None, 14, 15, 8])
    prices.merge_cells("A6:A7")  # "Valve V-7" labels both rows
    suppliers = workbook.create_sheet("Suppliers")
    suppliers.append(["Supplier", "City", "Contact"])
    suppliers.append(["Hydro AG", "Basel", "orders@hydro.example"])
    suppliers.append(["水泵制造有限公司", "上海", "sales@pump.example"])
    return _saved(workbook)


def build_qa_xlsx(header: tuple[str, str] = ("问题", "答案")) -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "FAQ"
    sheet.append([*header, "Category"])
    for question, answer, category in QA_PAIRS:
        sheet.append([question, answer, category])
    return _saved(workbook)


QA_PAIRS = [
    ("如何重置密码？", "打开设置，选择账户安全，然后点击重置密码，新密码会发送到邮箱。", "账户"),
    (
        "How do I get a refund?",
        "Refunds are paid to the original card within 14 days of the return.",
        "Billing",
    ),
    ("发票什么时候开具？", "订单完成后三个工作日内开具电子发票。", ""),
]


def _saved(workbook) -> bytes:
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def build_pptx() -> bytes:
    """Three slides: a title slide; bullets with speaker notes; a table in a group's company."""
    presentation = pptx.Presentation()
    presentation.core_properties.title = "Pump training"
    title_slide = presentation.slides.add_slide(presentation.slide_layouts[0])
    title_slide.shapes.title.text = "Pump maintenance training"
    title_slide.placeholders[1].text = "Plant operations, spring 2024"
    bullets = presentation.slides.add_slide(presentation.slide_layouts[1])
    bullets.shapes.title.text = "Seal replacement"
    body = bullets.placeholders[1].text_frame
    body.text = "Drain the pump casing first"
    body.add_paragraph().text = "Replace the mechanical seal every twelve months"
    bullets.notes_slide.notes_text_frame.text = "Mention the torque of 25 Nm for the gland bolts."
    table_slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    table_slide.shapes.title.text = "Inspection intervals"
    shape = table_slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2))
    for row, cells in enumerate([("Part", "Interval"), ("Bearings", "monthly"), ("Seal", "")]):
        for column, value in enumerate(cells):
            shape.table.cell(row, column).text = value
    shape.table.cell(2, 0).merge(shape.table.cell(2, 1))
    shape.table.cell(2, 0).text = "Seal: yearly, or when it drips"
    group = table_slide.shapes.add_group_shape()
    box = group.shapes.add_textbox(Inches(1), Inches(5), Inches(4), Inches(1))
    box.text_frame.text = "Log every inspection in the maintenance book."
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def build_eml(
    *,
    subject: str = "Pump P-100: seal replacement report",
    body: str = "Hello team,\n\nthe seal of pump P-100 was replaced on Monday.\n\nRegards, Li",
    body_subtype: str = "plain",
    html: str | None = None,
    attachments: list[tuple[str, bytes, str]] = (),
    charset: str = "utf-8",
) -> bytes:
    """A message made by Python's email package; attachments are (file name, bytes, MIME
    type)."""
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = "Li Wei <li.wei@plant.example>"
    message["To"] = "Maintenance <maintenance@plant.example>, ops@plant.example"
    message["Date"] = "Mon, 04 Mar 2024 09:30:00 +0800"
    message.set_content(body, subtype=body_subtype, charset=charset)
    if html is not None:
        message.add_alternative(html, subtype="html")
    for name, data, mime_type in attachments:
        if mime_type == "message/rfc822":  # a forwarded message, attached as mail clients do
            message.add_attachment(message_from_bytes(data, policy=policy.default))
            continue
        maintype, subtype = mime_type.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return message.as_bytes()


def build_epub(chapters: list[tuple[str, str]] | None = None) -> bytes:
    """An EPUB 3 book made by ebooklib (chapters are (title, XHTML body)), with both an EPUB 3
    navigation document and an EPUB 2 NCX, as ebooklib writes them."""
    chapters = chapters or [
        ("Chapter 1: The pump", "<h1>Chapter 1: The pump</h1><p>A centrifugal pump moves water "
         "with an impeller.</p><h2>Parts</h2><p>The casing holds the mechanical seal.</p>"),
        ("第二章 维护", "<p>每年更换一次机械密封。</p><p>轴承每月检查一次。</p>"),
    ]  # fmt: skip
    book = epub.EpubBook()
    book.set_identifier("pump-handbook")
    book.set_title("Pump handbook")
    book.set_language("en")
    book.add_author("Plant operations")
    items = []
    for number, (title, body) in enumerate(chapters, 1):
        item = epub.EpubHtml(title=title, file_name=f"chapter_{number}.xhtml", lang="en")
        item.content = f"<html><body>{body}</body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book)
    return buffer.getvalue()


def encrypted_office(data: bytes, password: str = "secret") -> bytes:
    """`data` (a .docx, .xlsx or .pptx) encrypted as Office does it (msoffcrypto-tool)."""
    out = io.BytesIO()
    OOXMLFile(io.BytesIO(data)).encrypt(password, out)
    return out.getvalue()


def zip_bomb(data: bytes, part: str = "padding.bin", bomb_bytes: int = 40 * 1024 * 1024) -> bytes:
    """A copy of a ZIP-based file with one more member: `bomb_bytes` of zeros deflated to KB."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb,
    ):
        for item in source.infolist():
            bomb.writestr(item, source.read(item.filename))
        with bomb.open(part, "w", force_zip64=True) as member:
            zeros = bytes(1024 * 1024)
            for _ in range(bomb_bytes // len(zeros)):
                member.write(zeros)
    return out.getvalue()


def build_scan(language: str = "en", seed: int = 1, lines: int = 4, **render) -> bytes:
    """A PNG of a strip of a scanned page (200 dpi, noise, a slight turn); see scan_text."""
    image = render_scan(page_lines(language, seed, lines), seed=seed, strip=True, **render)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def scan_text(language: str = "en", seed: int = 1, lines: int = 4) -> str:
    return "\n".join(page_lines(language, seed, lines))


def build_scanned_pdf(pages: list[tuple[str, int]], lines: int = 4) -> bytes:
    """A PDF of scanned strips only, one per (language, seed): no text layer at all."""
    return scanned_pdf(
        [render_scan(page_lines(lang, seed, lines), seed=seed, strip=True) for lang, seed in pages]
    )
