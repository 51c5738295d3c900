"""Parsing uploads into text with structure; every fixture file is built here, in memory."""

from __future__ import annotations

import io
import random
import zipfile
import zlib

import pytest
from pypdf import PdfReader, PdfWriter

from knowledge.ingestion.parsing import (
    FileTooLarge,
    FileType,
    Ocr,
    ParsedDocument,
    ParseError,
    ParseLimits,
    UnsupportedFileType,
    detect_file_type,
    parse_document,
)
from tests.builders import build_docx, build_pdf, rewrite_zip

ACCEPTED = (
    ".txt, .md, .html, .pdf, .docx, .xlsx, .pptx, .csv, .eml, .epub, .png, .jpg, .webp, .tiff"
)

CHINESE = (
    "检索增强生成把文档切分成小块，再用向量和关键词一起检索。\n\n"
    "第二段：知识库需要正确处理中文编码，例如 GBK 和 GB18030。\n"
    "最后一行包含数字 2024 和 English words。"
)


def assert_sections_consistent(doc: ParsedDocument) -> None:
    """Sections are ordered, exact, trimmed spans that hold every non-whitespace character."""
    covered = 0
    previous_end = 0
    for section in doc.sections:
        assert doc.text[section.start : section.end] == section.text
        assert section.text == section.text.strip() and section.text
        assert section.start >= previous_end
        assert not doc.text[previous_end : section.start].strip()
        previous_end = section.end
        covered += 1
    assert covered and not doc.text[previous_end:].strip()


def section_at(doc: ParsedDocument, needle: str):
    offset = doc.text.index(needle)
    return next(s for s in doc.sections if s.start <= offset < s.end)


# --- PDF -------------------------------------------------------------------------------------


def test_pdf_text_keeps_its_pages_and_title():
    data = build_pdf(
        [["First page, line one.", "Line two (with parens)."], [], ["Third page text."]],
        title="Annual Report",
    )

    doc = parse_document("report.pdf", data)

    assert doc.file_type is FileType.PDF
    assert doc.title == "Annual Report"
    assert doc.encoding is None
    assert doc.metadata["page_count"] == 3
    assert [(s.page, s.text) for s in doc.sections] == [
        (1, "First page, line one.\nLine two (with parens)."),
        (3, "Third page text."),
    ]
    assert_sections_consistent(doc)


def test_pdf_without_title_metadata_has_no_title():
    assert parse_document("a.pdf", build_pdf([["Some text."]])).title is None


def test_pdf_is_recognised_by_content_whatever_its_name():
    doc = parse_document("download.txt", build_pdf([["Actually a PDF."]]))
    assert doc.file_type is FileType.PDF
    assert doc.text == "Actually a PDF."


def test_encrypted_pdf_is_refused_even_with_an_empty_user_password():
    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(build_pdf([["Secret text."]]))).pages[0])
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)

    with pytest.raises(ParseError, match="The PDF is encrypted; upload an unencrypted copy"):
        parse_document("secret.pdf", buffer.getvalue())


@pytest.mark.parametrize("keep", [0.25, 0.5, 0.9])
def test_truncated_pdf_is_reported_as_damaged(keep):
    data = build_pdf([["Page one."], ["Page two."]])
    with pytest.raises(ParseError, match="The PDF is damaged and could not be read"):
        parse_document("cut.pdf", data[: int(len(data) * keep)])


def test_pdf_of_blank_pages_has_no_text_and_needs_no_ocr():
    def no_engine():
        raise AssertionError("blank pages are not worth recognising")

    with pytest.raises(ParseError, match=r"No text could be extracted.*nor recognised"):
        parse_document("scan.pdf", build_pdf([[], []]), ocr=Ocr(engine=no_engine))


def inflating_stream(size: int) -> bytes:
    """A content stream object that inflates to `size` bytes, beyond pypdf's own limit (75 MB)."""
    packer = zlib.compressobj(1)
    packed = b"".join(packer.compress(bytes(1024 * 1024)) for _ in range(size // (1024 * 1024)))
    packed += packer.flush()
    return b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed)


def test_pdf_page_that_cannot_be_read_is_skipped_and_listed():
    data = build_pdf([["Readable page."], inflating_stream(80 * 1024 * 1024), ["Also fine."]])

    doc = parse_document("mixed.pdf", data)

    assert [(s.page, s.text) for s in doc.sections] == [(1, "Readable page."), (3, "Also fine.")]
    assert doc.metadata["unreadable_pages"] == [2]


def test_pdf_whose_every_page_is_unreadable_is_damaged():
    data = build_pdf([inflating_stream(80 * 1024 * 1024)])
    with pytest.raises(ParseError, match="damaged and could not be read: no page could be read"):
        parse_document("bad.pdf", data)


def test_pdf_over_the_page_limit_is_refused():
    data = build_pdf([["one"], ["two"], ["three"]])
    with pytest.raises(ParseError, match="3 pages, more than the limit of 2"):
        parse_document("long.pdf", data, ParseLimits(max_pages=2))
    assert parse_document("long.pdf", data, ParseLimits(max_pages=3)).metadata["page_count"] == 3


# --- DOCX ------------------------------------------------------------------------------------


def test_docx_paragraphs_headings_and_tables():
    doc = parse_document("report.docx", build_docx())

    assert doc.file_type is FileType.DOCX
    assert doc.title == "Quarterly report"
    assert doc.text.startswith("Report 2024\n\nOpening words before any heading.\n\nSales")
    assert "Region | Q1 | Q2\nFrance | 10 | 12\nSpain | merged" in doc.text
    assert section_at(doc, "Opening words").heading_path == ("Report 2024",)
    assert section_at(doc, "Sales grew").heading_path == ("Report 2024", "Sales")
    assert section_at(doc, "Europe led").heading_path == ("Report 2024", "Sales", "Europe")
    assert section_at(doc, "France | 10").heading_path == ("Report 2024", "Sales", "Europe")
    assert section_at(doc, "Costs stayed").heading_path == ("Report 2024", "Costs")
    assert_sections_consistent(doc)


def test_docx_title_falls_back_to_the_first_heading():
    assert parse_document("r.docx", build_docx(core_title="")).title == "Report 2024"


def test_docx_zip_bomb_is_refused_before_it_is_unpacked():
    buffer = io.BytesIO(build_docx())
    buffer.seek(0, io.SEEK_END)
    with (
        zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open("word/media/zeros.bin", "w", force_zip64=True) as member,
    ):
        for _ in range(300):
            member.write(bytes(1024 * 1024))
    bomb = buffer.getvalue()
    assert len(bomb) < 2 * 1024 * 1024

    with pytest.raises(ParseError, match=r"unpacks to \d+ bytes, more than the limit.*zip bomb"):
        parse_document("bomb.docx", bomb)


def test_docx_with_an_absurdly_compressed_part_is_refused():
    buffer = io.BytesIO(build_docx())
    buffer.seek(0, io.SEEK_END)
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/media/zeros.bin", bytes(2 * 1024 * 1024))

    with pytest.raises(ParseError, match=r"word/media/zeros.bin\) compressed \d+:1.*zip bomb"):
        parse_document("bomb.docx", buffer.getvalue())


def test_docx_unpacked_size_limit_is_configurable():
    data = build_docx()
    with pytest.raises(ParseError, match="more than the limit of 10000"):
        parse_document("r.docx", data, ParseLimits(max_unzipped_bytes=10_000))


def test_zip_without_word_document_is_not_a_word_document():
    not_word = rewrite_zip(build_docx(), {"word/document.xml": None})

    with pytest.raises(UnsupportedFileType, match="not a Word document") as named_docx:
        parse_document("report.docx", not_word)
    with pytest.raises(UnsupportedFileType, match="looks like binary data") as named_txt:
        parse_document("report.txt", not_word)
    assert ACCEPTED in str(named_docx.value) and ACCEPTED in str(named_txt.value)


def test_damaged_docx_is_reported_as_damaged():
    broken = rewrite_zip(build_docx(), {"word/document.xml": b"<w:document><unclosed"})
    with pytest.raises(ParseError, match="The Word document is damaged and could not be read"):
        parse_document("broken.docx", broken)


def test_docx_is_recognised_from_the_start_of_the_file_only():
    assert detect_file_type("upload.bin", build_docx()[:4096]) is FileType.DOCX


# --- text encodings --------------------------------------------------------------------------


def test_gbk_chinese_text_is_decoded_exactly():
    doc = parse_document("notes.txt", CHINESE.encode("gbk"))
    assert doc.text == CHINESE
    assert doc.encoding == "gb18030"


def test_gb18030_characters_outside_gbk_survive():
    text = CHINESE + "\n生僻字：𠀀𠀁。"  # CJK Extension B, four-byte sequences in GB18030
    doc = parse_document("notes.txt", text.encode("gb18030"))
    assert doc.text == text
    assert doc.encoding == "gb18030"


def test_short_gbk_text_is_not_mistaken_for_another_east_asian_encoding():
    assert parse_document("hi.txt", "你好".encode("gbk")).text == "你好"


@pytest.mark.parametrize(
    ("codec", "bom", "recorded"),
    [
        ("utf-16-le", b"\xff\xfe", "utf-16-le"),
        ("utf-16-be", b"\xfe\xff", "utf-16-be"),
        ("utf-8", b"\xef\xbb\xbf", "utf-8-sig"),
    ],
)
def test_byte_order_marks_decide_the_encoding(codec, bom, recorded):
    doc = parse_document("notes.txt", bom + CHINESE.encode(codec))
    assert doc.text == CHINESE
    assert doc.encoding == recorded


def test_windows_1252_text_is_decoded():
    text = "Le café coûte 5 € à Paris. Ça va très bien, naïf élève." * 3
    doc = parse_document("fr.txt", text.encode("cp1252"))
    assert doc.text == text
    assert doc.encoding == "cp1252"


def test_bytes_in_no_recognisable_encoding_are_refused_not_garbled():
    noise = random.Random(7).randbytes(600).translate(bytes(range(0x80, 0x100)) * 2)
    with pytest.raises(ParseError, match="Could not determine the text encoding"):
        parse_document("mystery.txt", noise)


def test_newlines_are_normalised_and_control_characters_dropped():
    body = "one\r\ntwo\rthree\x0cpage two\tcol\x07\x1b[0m\u2028\ufffd\x85end\n" + "x" * 200
    doc = parse_document("notes.txt", body.encode())
    assert doc.text == "one\ntwo\nthree\npage two\tcol[0m\n\nend\n" + "x" * 200


def test_nul_characters_are_stripped_from_decoded_text():
    doc = parse_document("wide.txt", b"\xff\xfe" + "a\x00b".encode("utf-16-le"))
    assert doc.text == "ab"


# --- HTML ------------------------------------------------------------------------------------

HTML_PAGE = """<!DOCTYPE html>
<html><head><title> Product   manual </title>
<style>body { color: red }</style><script>var tracking = "secret-script";</script></head>
<body>
<noscript>Enable JavaScript</noscript>
<nav>Home | Docs</nav>
<h1>Getting <em>started</em></h1>
<p>Install the   package
   with pip.</p>
<script>console.log("inline-script")</script>
<h2>Configuration</h2>
<p>Set the <code>API_KEY</code> variable.<br>Then restart.</p>
<table><tr><th>Name</th><th>Default</th></tr>
<tr><td>timeout</td><td>30</td></tr></table>
<h2>Usage</h2>
<ul><li>First item</li><li>Second item</li></ul>
<template><p>template-content</p></template>
<h1>Reference</h1><div>API list</div>
</body></html>"""


def test_html_keeps_visible_text_by_block_with_heading_paths():
    doc = parse_document("manual.html", HTML_PAGE.encode())

    assert doc.file_type is FileType.HTML
    assert doc.title == "Product manual"
    for hidden in ("secret-script", "inline-script", "color: red", "template-content", "Enable"):
        assert hidden not in doc.text
    assert "Install the package with pip." in doc.text
    assert "Set the API_KEY variable.\nThen restart." in doc.text
    assert "Name | Default\n\ntimeout | 30" in doc.text
    assert section_at(doc, "Home | Docs").heading_path == ()
    assert section_at(doc, "Install the").heading_path == ("Getting started",)
    assert section_at(doc, "Then restart").heading_path == ("Getting started", "Configuration")
    assert section_at(doc, "timeout | 30").heading_path == ("Getting started", "Configuration")
    assert section_at(doc, "Second item").heading_path == ("Getting started", "Usage")
    assert section_at(doc, "API list").heading_path == ("Reference",)
    assert_sections_consistent(doc)


def test_html_title_falls_back_to_the_first_h1():
    doc = parse_document("a.html", b"<html><body><p>intro</p><h1>Main topic</h1></body></html>")
    assert doc.title == "Main topic"


def test_html_meta_charset_is_honoured():
    page = f'<html><head><meta charset="gbk"><title>标题</title></head><body><p>{CHINESE}</p>'
    doc = parse_document("cn.html", page.encode("gbk"))
    assert doc.title == "标题"
    assert "检索增强生成把文档切分成小块" in doc.text
    assert doc.encoding == "gb18030"


def test_txt_that_clearly_is_an_html_page_is_parsed_as_html():
    page = b"\n  <!doctype HTML><html><body><h1>Hi</h1><script>x()</script></body></html>"
    assert detect_file_type("page.txt", page) is FileType.HTML
    assert parse_document("page.txt", page).text == "Hi"


def test_text_merely_mentioning_html_stays_text():
    note = b"Remember to put <html> at the top of the page.\n<!doctype html> too."
    assert detect_file_type("note.txt", note) is FileType.TXT
    assert detect_file_type("note.md", b"<!doctype html><html></html>") is FileType.MD


# --- Markdown --------------------------------------------------------------------------------

MARKDOWN = """Preface before any heading.

# Install

Run the installer.

```bash
# this is a shell comment, not a heading
pip install thing
```

## Linux ##

~~~
## also code
~~~

Use apt.

#hashtag is not a heading

### Debian

Debian notes.

# Usage

Call it.
"""


def test_markdown_sections_follow_atx_headings_outside_code_fences():
    doc = parse_document("guide.md", MARKDOWN.encode())

    assert doc.file_type is FileType.MD
    assert doc.text == MARKDOWN
    assert doc.title == "Install"
    assert [s.heading_path for s in doc.sections] == [
        (),
        ("Install",),
        ("Install", "Linux"),
        ("Install", "Linux", "Debian"),
        ("Usage",),
    ]
    assert section_at(doc, "# this is a shell comment").heading_path == ("Install",)
    assert section_at(doc, "## also code").heading_path == ("Install", "Linux")
    assert section_at(doc, "#hashtag").heading_path == ("Install", "Linux")
    assert_sections_consistent(doc)


def test_markdown_title_is_the_first_level_one_heading():
    assert parse_document("a.md", b"## Minor\n\ntext\n\n# Major\n").title == "Major"
    assert parse_document("a.md", b"## Only minor\n\ntext").title is None


# --- CSV -------------------------------------------------------------------------------------


def test_csv_rows_become_self_describing_lines():
    data = b'name,city,note\nAlice,Paris,"likes ""tea"", and\ncake"\nBob,,\n\nCarol,Rome,x,extra\n'

    doc = parse_document("people.csv", data)

    assert doc.file_type is FileType.CSV
    assert doc.text.split("\n") == [
        'name: Alice; city: Paris; note: likes "tea", and cake',
        "name: Bob",
        "name: Carol; city: Rome; note: x; column 4: extra",
    ]
    assert doc.metadata == {"delimiter": ",", "columns": ["name", "city", "note"], "row_count": 3}
    assert_sections_consistent(doc)


def test_csv_delimiter_is_sniffed():
    data = "产品;价格\n苹果;5\n香蕉;3\n".encode("gbk")
    doc = parse_document("prices.csv", data)
    assert doc.text == "产品: 苹果; 价格: 5\n产品: 香蕉; 价格: 3"
    assert doc.metadata["delimiter"] == ";"


def test_csv_with_only_a_header_is_refused():
    with pytest.raises(ParseError, match="no rows below its header"):
        parse_document("empty.csv", b"a,b,c\n")


# --- type detection, limits, empty files -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("notes.txt", random.Random(1).randbytes(4096), "binary"),
        ("nul-free.txt", random.Random(2).randbytes(4096).replace(b"\x00", b"\x01"), "binary"),
        ("anim.gif", b"GIF89a\x01\x00\x01\x00" + bytes(64), "is a GIF image"),
        ("tool.exe", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(64), "binary"),
        ("program", b"\x7fELF\x02\x01\x01\x00" + bytes(64), "binary"),
        ("script.exe", b"echo hello\n", "files of type .exe are not supported"),
        ("data.json", b'{"a": 1}', "files of type .json are not supported"),
        ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), "save it as .docx"),
        ("report.pdf", b"Just some text, not a PDF.", "named .pdf but does not contain PDF data"),
        ("report.docx", b"Just some text.", "named .docx but does not contain a Word document"),
    ],
)
def test_unsupported_content_is_refused_with_the_accepted_types(name, data, reason):
    with pytest.raises(UnsupportedFileType) as refused:
        parse_document(name, data)
    assert reason in str(refused.value)
    assert ACCEPTED in str(refused.value)


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("README", b"Plain words.", FileType.TXT),
        ("page", b"<html><body>x</body></html>", FileType.HTML),
        ("paper", build_pdf([["x"]]), FileType.PDF),
        ("C:\\Users\\me\\NOTES.TXT", b"x", FileType.TXT),
        ("dir/guide.Markdown", b"# x", FileType.MD),
        ("index.htm", b"<p>x</p>", FileType.HTML),
        ("table.CSV", b"a,b\n1,2", FileType.CSV),
        ("pdf-notes.md", b"# Notes\nEvery PDF starts with %PDF-1.7.", FileType.MD),
        ("junk-first.pdf", b"\r\n\r\n" + build_pdf([["x"]]), FileType.PDF),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", FileType.IMAGE),
    ],
)
def test_detection_by_name_and_content(name, data, expected):
    assert detect_file_type(name, data) is expected


def test_file_over_the_size_limit_is_too_large():
    with pytest.raises(FileTooLarge, match="more than the limit of 10 bytes"):
        parse_document("big.txt", b"x" * 11, ParseLimits(max_file_bytes=10))
    assert parse_document("ok.txt", b"x" * 10, ParseLimits(max_file_bytes=10)).text == "x" * 10


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a.txt", b"x" * 101),
        ("a.csv", b"h\n" + b"x\n" * 40),
        ("a.html", b"<p>" + b"x" * 101 + b"</p>"),
        ("a.pdf", build_pdf([["x" * 60], ["y" * 60]])),
        ("a.docx", build_docx()),
    ],
)
def test_text_over_the_length_limit_is_refused(name, data):
    with pytest.raises(ParseError, match="exceeds the limit of 100 characters"):
        parse_document(name, data, ParseLimits(max_text_chars=100))


def test_html_markup_does_not_count_against_the_text_limit():
    page = b"<div class='" + b"m" * 500 + b"'>short text</div>"
    assert parse_document("a.html", page, ParseLimits(max_text_chars=100)).text == "short text"


def test_every_parsing_failure_is_a_parse_error_and_a_value_error():
    assert issubclass(UnsupportedFileType, ParseError) and issubclass(FileTooLarge, ParseError)
    assert issubclass(ParseError, ValueError)


def test_empty_file_is_refused():
    with pytest.raises(ParseError, match="The file is empty"):
        parse_document("empty.txt", b"")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("blank.txt", b"  \n\t\r\n  "),
        ("blank.md", b"\n\n"),
        ("blank.html", b"<html><body><script>only()</script> </body></html>"),
    ],
)
def test_file_with_only_whitespace_has_no_text(name, data):
    with pytest.raises(ParseError, match="no text"):
        parse_document(name, data)


def test_plain_text_is_one_section_without_title():
    doc = parse_document("notes.txt", b"\n\n  Hello there.\n\nSecond paragraph.  \n")
    assert doc.title is None
    assert doc.encoding == "utf-8"
    assert [s.text for s in doc.sections] == ["Hello there.\n\nSecond paragraph."]
    assert_sections_consistent(doc)
