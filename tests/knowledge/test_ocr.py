"""Text recognition (OCR) of scanned PDF pages and images, with the bundled engine on pages
rendered from known text (bench/scans.py: 200 dpi, noise, a slight turn), and the layout of
what an engine finds. Pure parsing, no database."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from django.core.management import call_command
from PIL import Image

from bench.scans import character_accuracy, page_lines, render_scan
from knowledge.ingestion.parsers.ocr import layout
from knowledge.ingestion.parsing import (
    FileType,
    Ocr,
    OcrUnavailable,
    ParseError,
    ParseLimits,
    TextBox,
    parse_document,
)
from tests.builders import build_pdf, build_scan, build_scanned_pdf, scan_text
from tests.conftest import REPO, subprocess_env


def box(text: str, x: float, y: float, width: float = 100, height: float = 30, slope=0.0):
    """A box whose top-left corner is (x, y), its top edge rising `slope` per pixel."""
    corners = (
        (x, y),
        (x + width, y + slope * width),
        (x + width, y + slope * width + height),
        (x, y + height),
    )
    return TextBox(text, 0.99, corners)


# --- layout ----------------------------------------------------------------------------------


def test_layout_orders_lines_and_joins_boxes_of_a_line_on_a_skewed_page():
    slope = 0.03  # about 1.7 degrees: boxes of one line far apart differ by 30 px in height
    boxes = [
        box("second line", 100, 160 + 0.03 * 100, slope=slope),
        box("right part", 1100, 100 + 0.03 * 1100, slope=slope),
        box("left part", 100, 100 + 0.03 * 100, slope=slope),
    ]
    assert layout(boxes) == "left part right part\nsecond line"


def test_layout_joins_chinese_without_spaces_and_marks_paragraphs():
    boxes = [
        box("检索增强", 100, 100),
        box("生成。", 300, 100),
        box("Next line", 100, 150),
        box("New paragraph", 100, 300),
    ]
    assert layout(boxes) == "检索增强生成。\nNext line\n\nNew paragraph"


def test_layout_of_nothing_is_empty():
    assert layout([]) == "" and layout([box("  ", 0, 0)]) == ""


def test_blank_pages_never_reach_the_engine():
    def engine():
        raise AssertionError("a blank page was sent to the engine")

    white = io.BytesIO()
    Image.new("RGB", (800, 600), "white").save(white, "PNG")
    with pytest.raises(ParseError, match="No text was recognised in the image"):
        parse_document("blank.png", white.getvalue(), ocr=Ocr(engine=engine))


def test_a_missing_engine_fails_with_how_to_install_it():
    def engine():
        raise OcrUnavailable.not_installed(ModuleNotFoundError("No module named 'rapidocr'"))

    with pytest.raises(OcrUnavailable) as failed:
        parse_document("notice.png", build_scan(), ocr=Ocr(engine=engine))
    message = str(failed.value)
    assert "scanned document or an image" in message
    assert "pip install -r requirements.txt (rapidocr_onnxruntime)" in message
    assert "No module named 'rapidocr'" in message


def test_a_missing_system_library_is_named_with_how_to_install_it():
    cause = ImportError("libGL.so.1: cannot open shared object file: No such file or directory")
    message = str(OcrUnavailable.not_installed(cause))
    assert "libGL.so.1" in message and "apt-get install libgl1 libglib2.0-0" in message


# --- limits and damage (no recognition needed) -----------------------------------------------


def test_an_image_over_the_pixel_limit_is_refused_before_it_is_decoded():
    with pytest.raises(ParseError, match=r"1654x\d+ pixels, more than the limit of 1,000"):
        parse_document("big.png", build_scan(), ParseLimits(max_image_pixels=1000))


def test_a_truncated_image_is_damaged():
    data = build_scan()
    with pytest.raises(ParseError, match="The image is damaged and could not be read"):
        parse_document("cut.png", data[: len(data) // 2])


def test_a_pdf_with_more_scanned_pages_than_the_ocr_limit_is_refused_before_reading():
    data = build_scanned_pdf([("en", 1), ("en", 2), ("en", 3)], lines=1)
    with pytest.raises(ParseError, match="3 pages without a text layer, more than the limit of 2"):
        parse_document("scan.pdf", data, ParseLimits(max_ocr_pages=2))


# --- the bundled engine ----------------------------------------------------------------------


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_scanned_strip_is_read_at_least_97_percent_right(language):
    doc = parse_document("notice.png", build_scan(language, seed=3, lines=4))
    assert doc.file_type is FileType.IMAGE
    assert character_accuracy(scan_text(language, seed=3, lines=4), doc.text) >= 0.97, doc.text


def test_scanned_pages_of_a_pdf_are_read_between_text_pages_with_progress():
    scanned = build_scanned_pdf([("en", 5), ("zh", 6)], lines=2)
    # A text page first, then the two scans: pypdf merges real PDFs page by page.
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(build_pdf([["Typed cover page."]]))).pages[0])
    for page in PdfReader(io.BytesIO(scanned)).pages:
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    progress: list[tuple[int, int]] = []

    doc = parse_document(
        "mixed.pdf", out.getvalue(), ocr=Ocr(on_page=lambda *p: progress.append(p))
    )

    assert progress == [(1, 2), (2, 2)]
    assert doc.metadata["ocr_pages"] == [2, 3]
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert doc.sections[0].text == "Typed cover page."
    assert character_accuracy(scan_text("en", 5, 2), doc.sections[1].text) >= 0.97
    assert character_accuracy(scan_text("zh", 6, 2), doc.sections[2].text) >= 0.97


def test_an_upside_down_scan_is_read_the_right_way_up():
    lines = page_lines("en", 7, 3)
    upside_down = render_scan(lines, seed=7, strip=True).rotate(180)
    buffer = io.BytesIO()
    upside_down.save(buffer, "PNG")
    doc = parse_document("turned.png", buffer.getvalue())
    assert character_accuracy("\n".join(lines), doc.text) >= 0.97, doc.text


def test_a_phone_photo_is_turned_by_its_exif_orientation_and_transparency_is_paper():
    lines = page_lines("zh", 8, 2)
    scan = render_scan(lines, seed=8, strip=True)
    # Stored sideways with "rotate 90 clockwise to view" (orientation 6), as phones do.
    stored = scan.rotate(90, expand=True).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6
    photo = io.BytesIO()
    stored.save(photo, "JPEG", quality=90, exif=exif)
    # Black text on a transparent background (its hidden colour black as well).
    transparent = Image.new("RGBA", scan.size, (0, 0, 0, 0))
    transparent.putalpha(Image.eval(scan, lambda v: 255 - v))
    png = io.BytesIO()
    transparent.save(png, "PNG")

    for name, data in (("photo.jpg", photo.getvalue()), ("cutout.png", png.getvalue())):
        doc = parse_document(name, data)
        assert character_accuracy("\n".join(lines), doc.text) >= 0.97, (name, doc.text)


def test_every_frame_of_a_tiff_is_a_page():
    frames = [render_scan(page_lines("en", seed, 1), seed=seed, strip=True) for seed in (9, 10)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "TIFF", save_all=True, append_images=frames[1:], compression="tiff_lzw")

    doc = parse_document("fax.tiff", buffer.getvalue())

    assert [s.page for s in doc.sections] == [1, 2]
    for section, seed in zip(doc.sections, (9, 10), strict=True):
        assert character_accuracy(scan_text("en", seed, 1), section.text) >= 0.97


def test_the_engine_loads_and_reads_with_the_network_blocked():
    """The models ship inside the wheel: a fresh process without any socket still reads."""
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network access attempted')\n"
        "socket.socket.connect = socket.socket.connect_ex = socket.socket.sendto = refuse\n"
        "socket.create_connection = socket.getaddrinfo = refuse\n"
        "from tests.builders import build_scan\n"
        "from knowledge.ingestion.parsing import parse_document\n"
        "print(parse_document('n.png', build_scan('en', seed=11, lines=1)).text)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert character_accuracy(scan_text("en", 11, 1), result.stdout) >= 0.97


def test_bench_ocr_reads_full_pages_at_least_97_percent_right():
    """``manage.py bench ocr`` on one full A4 page per language (the reported figures are from
    ``--pages 10``); recognition is deterministic, so the floor is a stable check."""
    out = io.StringIO()
    call_command("bench", "ocr", "--pages", "1", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert set(result["languages"]) == {"en", "zh"}
    for row in result["languages"].values():
        assert row["pages"] == 1 and row["accuracy_min"] >= 0.97, result
    assert result["pages_per_minute"] > 0
