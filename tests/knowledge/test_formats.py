"""Office and publishing formats teams keep their knowledge in: .xlsx, .pptx, .eml, .epub, Q&A
tables, and the legacy and encrypted Office files that are refused. Pure parsing, no database;
every file is made by the library that makes such files (tests/builders.py)."""

from __future__ import annotations

import email
import email.policy
import io
import zipfile

import openpyxl
import pytest

from knowledge.ingestion.chunking import ChunkingConfig, chunk_document
from knowledge.ingestion.parsing import (
    FileType,
    ParseError,
    ParseLimits,
    ParseOptions,
    UnsupportedFileType,
    detect_file_type,
    parse_document,
)
from tests.builders import (
    QA_PAIRS,
    build_docx,
    build_eml,
    build_epub,
    build_pdf,
    build_pptx,
    build_qa_xlsx,
    build_xlsx,
    encrypted_office,
    rewrite_zip,
    zip_bomb,
)
from tests.knowledge.test_parsing import assert_sections_consistent

# --- XLSX ------------------------------------------------------------------------------------


def test_xlsx_every_sheet_rows_labelled_with_merged_headers():
    doc = parse_document("prices.xlsx", build_xlsx())

    assert doc.file_type is FileType.XLSX
    assert doc.title == "Price list"
    assert doc.text.split("\n") == [
        "Product: P-100 centrifugal pump; Price / EUR: 1250.5; Price / USD: 1350; Stock: 4",
        "Product: Mechanical seal kit; Price / EUR: 89.9; Price / USD: 97; Stock: 2024-03-01",
        "Product: Valve V-7; Price / EUR: 12; Price / USD: 13; Stock: 40",
        "Product: Valve V-7; Price / EUR: 14; Price / USD: 15; Stock: 8",  # merged down
        "Supplier: Hydro AG; City: Basel; Contact: orders@hydro.example",
        "Supplier: 水泵制造有限公司; City: 上海; Contact: sales@pump.example",
    ]
    assert [(s.page, s.heading_path) for s in doc.sections] == [
        (1, ("Pumps", "Price list 2024", "Product | Price / EUR | Price / USD | Stock")),
        (2, ("Suppliers", "Supplier | City | Contact")),
    ]
    assert doc.metadata == {"sheets": ["Pumps", "Suppliers"], "row_count": 6}
    assert_sections_consistent(doc)


def test_xlsx_chunks_never_split_a_row_and_carry_sheet_and_header():
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Parts"
    sheet.append(["Part number", "Description", "Price"])
    for i in range(300):
        sheet.append([f"PN-{i:04d}", f"Spare part number {i} for the cooling circuit", i * 1.5])
    buffer = io.BytesIO()
    workbook.save(buffer)
    doc = parse_document("parts.xlsx", buffer.getvalue())
    rows = set(doc.text.split("\n"))

    chunks = chunk_document(doc, ChunkingConfig(chunk_size=500, chunk_overlap=80))

    assert len(chunks) > 20
    for chunk in chunks:
        assert set(chunk.content.split("\n")) <= rows  # whole rows only
        assert chunk.page == 1
        assert chunk.heading_path == ("Parts", "Part number | Description | Price")


def test_xlsx_values_are_shown_as_excel_shows_them():
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["a", "b", "c", "d"])
    sheet.append([0.1 + 0.2, True, "=1+1", "  spaced\nout  "])
    buffer = io.BytesIO()
    workbook.save(buffer)
    # A formula saved by openpyxl has no cached value (Excel computes it on save): left out.
    assert parse_document("v.xlsx", buffer.getvalue()).text == "a: 0.3; b: TRUE; d: spaced out"


def test_xlsx_over_the_cell_limit_is_refused():
    with pytest.raises(ParseError, match="more than 10 cells"):
        parse_document("prices.xlsx", build_xlsx(), ParseLimits(max_sheet_cells=10))


def test_xlsx_without_any_value_has_no_text():
    buffer = io.BytesIO()
    openpyxl.Workbook().save(buffer)
    with pytest.raises(ParseError, match="no text"):
        parse_document("empty.xlsx", buffer.getvalue())


# --- Q&A pairs -------------------------------------------------------------------------------


def test_qa_xlsx_is_one_section_per_pair_question_as_heading():
    doc = parse_document("faq.xlsx", build_qa_xlsx())

    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (
            ("如何重置密码？",),
            "打开设置，选择账户安全，然后点击重置密码，新密码会发送到邮箱。\nCategory: 账户",
        ),
        (
            ("How do I get a refund?",),
            "Refunds are paid to the original card within 14 days of the return.\n"
            "Category: Billing",
        ),
        (("发票什么时候开具？",), "订单完成后三个工作日内开具电子发票。"),
    ]
    assert doc.metadata["qa_pairs"] == 3
    chunks = chunk_document(doc, ChunkingConfig(chunk_size=800, chunk_overlap=100))
    assert [c.heading_path[0] for c in chunks] == [q for q, _, _ in QA_PAIRS]


@pytest.mark.parametrize(
    "header",
    ["Question,Answer", "q,a", "问题,答案", "问：,答：", "FAQ,回答", "Question?,Reply"],
)
def test_qa_csv_columns_are_detected_by_name(header):
    data = f'{header},notes\nWhere is the manual?,"On the intranet, under Docs.",x\n'.encode()
    doc = parse_document("faq.csv", data)
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (("Where is the manual?",), "On the intranet, under Docs.\nnotes: x")
    ]


def test_qa_columns_named_at_upload_and_rows_without_an_answer_skipped():
    data = "Kunde fragt,Wir antworten\nWie spät?,Um neun.\nOhne Antwort,\n".encode()
    options = ParseOptions(qa_question_column="kunde fragt", qa_answer_column="Wir antworten")
    doc = parse_document("faq.csv", data, options=options)
    assert [(s.heading_path, s.text) for s in doc.sections] == [(("Wie spät?",), "Um neun.")]
    assert doc.metadata["qa_pairs"] == 1 and doc.metadata["qa_skipped_rows"] == 1


def test_qa_detection_is_turned_off_with_qa_pairs_false():
    data = b"question,answer\nWhy?,Because.\n"
    doc = parse_document("faq.csv", data, options=ParseOptions(qa_pairs=False))
    assert doc.text == "question: Why?; answer: Because."
    assert doc.sections[0].heading_path == ()


def test_qa_asked_for_but_missing_columns_fail_with_the_header():
    with pytest.raises(ParseError, match=r"header \(name; city\) has no columns"):
        parse_document("people.csv", b"name,city\nAl,Rome\n", options=ParseOptions(qa_pairs=True))
    with pytest.raises(ParseError, match='"Frage"'):
        parse_document("x.csv", b"q,a\nx,y\n", options=ParseOptions(qa_question_column="Frage"))


# --- PPTX ------------------------------------------------------------------------------------


def test_pptx_slides_with_titles_tables_groups_and_notes():
    doc = parse_document("training.pptx", build_pptx())

    assert doc.file_type is FileType.PPTX
    assert doc.title == "Pump training"
    assert doc.metadata == {"slide_count": 3}
    assert [(s.page, s.heading_path) for s in doc.sections] == [
        (1, ("Pump maintenance training",)),
        (2, ("Seal replacement",)),
        (3, ("Inspection intervals",)),
    ]
    assert doc.sections[1].text == (
        "Seal replacement\n\nDrain the pump casing first\n"
        "Replace the mechanical seal every twelve months\n\n"
        "Notes: Mention the torque of 25 Nm for the gland bolts."
    )
    assert doc.sections[2].text == (
        "Inspection intervals\n\nPart | Interval\nBearings | monthly\n"
        "Seal: yearly, or when it drips\n\nLog every inspection in the maintenance book."
    )
    assert_sections_consistent(doc)


def test_pptx_over_the_slide_limit_is_refused():
    with pytest.raises(ParseError, match="3 slides, more than the limit of 2"):
        parse_document("deck.pptx", build_pptx(), ParseLimits(max_pages=2))


# --- EML -------------------------------------------------------------------------------------


def test_eml_subject_headers_body_and_attachments():
    pdf = build_pdf([["Seal report."]])
    data = build_eml(
        attachments=[("report.pdf", pdf, "application/pdf"), ("logo.gif", b"GIF89a", "image/gif")]
    )

    doc = parse_document("mail.eml", data)

    assert doc.file_type is FileType.EML
    assert doc.title == "Pump P-100: seal replacement report"
    assert doc.text == (
        "Subject: Pump P-100: seal replacement report\n"
        "From: Li Wei <li.wei@plant.example>\n"
        "To: Maintenance <maintenance@plant.example>, ops@plant.example\n"
        "Date: 2024-03-04T09:30:00+08:00\n\n"
        "Hello team,\n\nthe seal of pump P-100 was replaced on Monday.\n\nRegards, Li"
    )
    assert doc.metadata["email"] == {
        "subject": "Pump P-100: seal replacement report",
        "from": "li.wei@plant.example",
        "to": ["maintenance@plant.example", "ops@plant.example"],
        "cc": [],
        "date": "2024-03-04T09:30:00+08:00",
    }
    assert [(a.name, a.data) for a in doc.attachments] == [
        ("report.pdf", pdf),
        ("logo.gif", b"GIF89a"),
    ]


def test_eml_html_only_body_in_gb2312_and_an_encoded_subject():
    html = "<html><body><h1>通知</h1><p>机械密封每年更换一次。</p><script>x()</script>"
    data = build_eml(subject="泵的维护通知", body=html, body_subtype="html", charset="gb2312")
    assert "泵".encode() not in data  # the subject travels RFC 2047-encoded

    doc = parse_document("notice.eml", data)

    assert doc.title == "泵的维护通知"
    assert doc.text.endswith("通知\n\n机械密封每年更换一次。")
    assert doc.sections[-1].heading_path == ("通知",)


def test_eml_forwarded_message_is_an_eml_attachment_and_inline_images_are_not():
    inner = build_eml(subject="Original report", body="Inner body.")
    data = build_eml(attachments=[("", inner, "message/rfc822")], html="<p>See <img></p>")
    message = email.message_from_bytes(data, policy=email.policy.default)
    message.get_body(("html",)).add_related(
        b"GIF89a", maintype="image", subtype="gif", cid="<logo@plant>", filename="logo.gif"
    )

    doc = parse_document("fwd.eml", message.as_bytes())

    (attachment,) = doc.attachments
    assert attachment.name == "Original report.eml"
    assert parse_document(attachment.name, attachment.data).text.endswith("Inner body.")


def test_eml_attachments_over_the_limit_are_listed_not_returned():
    files = [(f"n{i}.txt", f"note {i}".encode(), "text/plain") for i in range(4)]
    doc = parse_document("m.eml", build_eml(attachments=files), ParseLimits(max_attachments=2))
    assert [a.name for a in doc.attachments] == ["n0.txt", "n1.txt"]
    assert doc.metadata["email"]["attachments_over_limit"] == ["n2.txt", "n3.txt"]


@pytest.mark.parametrize(
    "content_type",
    ['application/pkcs7-mime; smime-type=enveloped-data; name="smime.p7m"', "multipart/encrypted"],
)
def test_an_encrypted_email_fails_with_a_reason(content_type):
    data = (
        b"From: a@example.com\r\nSubject: Secret\r\nMIME-Version: 1.0\r\n"
        b"Content-Type: " + content_type.encode() + b"\r\n\r\nMIAGCSqGSIb3DQEHA6CAMIACAQA=\r\n"
    )
    with pytest.raises(ParseError, match=r"encrypted \(S/MIME or PGP\)"):
        parse_document("secret.eml", data)


def test_a_text_file_named_eml_is_refused():
    with pytest.raises(UnsupportedFileType, match="does not start with e-mail headers"):
        parse_document("notes.eml", b"Just some notes, no headers.\n")


# --- EPUB ------------------------------------------------------------------------------------


def test_epub_chapters_are_headings_in_reading_order():
    doc = parse_document("handbook.epub", build_epub())

    assert doc.file_type is FileType.EPUB
    assert doc.title == "Pump handbook"
    assert doc.metadata == {"chapter_count": 2, "author": "Plant operations"}
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (
            ("Chapter 1: The pump",),
            "Chapter 1: The pump\n\nA centrifugal pump moves water with an impeller.",
        ),
        (("Chapter 1: The pump", "Parts"), "Parts\n\nThe casing holds the mechanical seal."),
        (("第二章 维护",), "每年更换一次机械密封。\n\n轴承每月检查一次。"),
    ]
    assert_sections_consistent(doc)


def test_epub_with_encrypted_chapters_is_refused_as_drm():
    encryption = (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
        b'<enc:CipherReference URI="EPUB/chapter_1.xhtml"/></enc:CipherData>'
        b"</enc:EncryptedData></encryption>"
    )
    data = build_epub()
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr("META-INF/encryption.xml", encryption)
    with pytest.raises(ParseError, match="protected by DRM"):
        parse_document("locked.epub", out.getvalue())


def test_epub_without_container_is_damaged():
    data = rewrite_zip(build_epub(), {"META-INF/container.xml": None})
    with pytest.raises(ParseError, match="The EPUB book is damaged"):
        parse_document("book.epub", data)


# --- detection, legacy, encrypted, damaged, bombs --------------------------------------------


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (build_xlsx, FileType.XLSX),
        (build_pptx, FileType.PPTX),
        (build_epub, FileType.EPUB),
        (build_docx, FileType.DOCX),
    ],
)
def test_zip_based_formats_are_told_apart_by_content_whatever_their_name(build, expected):
    data = build()
    assert detect_file_type("upload.bin", data) is expected
    assert detect_file_type("upload.bin", data[:8192]) is expected  # the upload's sniff


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("prices.xls", "legacy Excel file (.xls); save it as .xlsx"),
        ("deck.ppt", "legacy PowerPoint file (.ppt); save it as .pptx"),
        ("letter.doc", "legacy Word file (.doc); save it as .docx"),
        ("mail.msg", "Outlook message (.msg); save or drag the message out as .eml"),
        ("unknown.bin", "legacy Office file (such as .doc, .xls or .ppt)"),
    ],
)
def test_legacy_office_files_are_refused_with_what_to_save_them_as(name, reason):
    with pytest.raises(UnsupportedFileType, match=r"\.docx, \.xlsx, \.pptx") as refused:
        parse_document(name, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    assert reason in str(refused.value)


@pytest.mark.parametrize(
    ("name", "build", "what"),
    [
        ("prices.xlsx", build_xlsx, "Excel workbook"),
        ("deck.pptx", build_pptx, "PowerPoint presentation"),
        ("report.docx", build_docx, "Word document"),
    ],
)
def test_encrypted_office_files_fail_with_how_to_remove_the_password(name, build, what):
    data = encrypted_office(build())
    assert detect_file_type(name, data) is not None  # accepted at upload: the parser explains
    with pytest.raises(ParseError, match=rf"The {what} is encrypted \(protected with a password\)"):
        parse_document(name, data)
    with pytest.raises(UnsupportedFileType, match=r"encrypted \(password-protected\) Office file"):
        parse_document("locked.bin", data)


def test_a_legacy_file_renamed_to_xlsx_says_so():
    with pytest.raises(ParseError, match=r"legacy Office file \(97-2003 format\), not a \.xlsx"):
        parse_document("old.xlsx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))


@pytest.mark.parametrize(
    ("name", "build", "what"),
    [
        ("prices.xlsx", build_xlsx, "Excel workbook"),
        ("deck.pptx", build_pptx, "PowerPoint presentation"),
        ("book.epub", build_epub, "EPUB book"),
    ],
)
def test_truncated_and_bombed_archives_fail_with_a_reason(name, build, what):
    data = build()
    with pytest.raises(ParseError, match=f"The {what} is damaged and could not be read"):
        parse_document(name, data[: len(data) // 2])
    with pytest.raises(ParseError, match=r"compressed \d+:1; it was refused as a possible zip"):
        parse_document(name, zip_bomb(data, bomb_bytes=4 * 1024 * 1024))
    with pytest.raises(ParseError, match=r"more than the limit of 1000; .*zip bomb"):
        parse_document(name, data, ParseLimits(max_unzipped_bytes=1000))


@pytest.mark.parametrize("name", ["prices.xlsx", "deck.pptx", "book.epub", "mail.eml"])
def test_a_name_promising_a_format_the_bytes_are_not_is_refused(name):
    with pytest.raises(UnsupportedFileType):
        parse_document(name, bytes(range(256)) * 4)
