"""Text recognition (OCR) for scanned PDF pages and images, and the layout of what it finds.

The engine is RapidOCR (rapidocr_onnxruntime): PaddleOCR's PP-OCRv4 Chinese+English detection
and recognition models, converted to ONNX and shipped inside the wheel, run by onnxruntime on the
CPU. Nothing is downloaded at run time, and one engine per process serves every page (loading
it is the slow part). It is optional at import time: a document that needs OCR where the
package cannot be imported fails with OcrUnavailable, whose message says how to install it.

rapidocr's per-line 0/180 degree classifier is off: it flips correct English lines (a known
weakness of its mobile model) far more often than it rescues upside-down ones. A whole page is
tried upside down instead when what was read looks unsure (mean confidence under 0.8), and the
better reading is kept, which costs a second pass only on such pages.

Pages are bounded before recognition: an image is reduced to at most 2000 pixels on its long side
(the detector's own working size, so nothing is lost), which bounds detection, and the detector
returns at most 1000 boxes, which bounds recognition; ParseLimits.max_ocr_pages bounds pages. A
page with (almost) no dark pixel is blank and skipped without running the engine.

Boxes become text as a reader would take them: lines top to bottom (boxes whose centres lie on
one line, measured along the page's own skew, are one line, left to right), a blank line where
the gap between lines is larger than a line, and no space between two boxes that meet in
Chinese or Japanese text.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from PIL import Image

from .base import ParseError

MAX_SIDE = 2000
_BLANK_DARK_PIXELS = 100  # fewer pixels than this darker than mid-grey: a blank page
_UNSURE = 0.8
_KEPT = 0.5  # boxes read less surely than this are noise (rapidocr's own default)
_CJK = (
    ("\u2e80", "\u9fff"),  # CJK radicals, punctuation, kana, unified ideographs
    ("\uf900", "\ufaff"),
    ("\uff00", "\uffef"),  # full-width forms
)


@dataclass(frozen=True)
class TextBox:
    """A piece of recognised text and its corners (clockwise from the top left, in pixels)."""

    text: str
    score: float
    corners: tuple[tuple[float, float], ...]


class OcrEngine(Protocol):
    def __call__(self, image: np.ndarray) -> list[TextBox]:
        """The text boxes found in an RGB image (height x width x 3, uint8), each with its
        confidence (0-1), the unsure ones included."""
        ...


class OcrUnavailable(ParseError):
    """The document needs OCR and no engine could be loaded."""

    code = "ocr_unavailable"

    @classmethod
    def not_installed(cls, cause: Exception) -> OcrUnavailable:
        reason = str(cause)[:200]
        # OpenCV's wheel needs system libraries a slim host may lack (make ocr-libs installs).
        system = "; OpenCV needs: apt-get install libgl1 libglib2.0-0" if ".so" in reason else ""
        return cls(
            "This is a scanned document or an image: its text has to be recognised (OCR), and "
            "text recognition is not installed: pip install -r requirements.txt "
            f"(rapidocr_onnxruntime). The import failed with: {reason}{system}"
        )


def _ignore_progress(done: int, total: int) -> None:
    pass


@functools.cache
def rapidocr_engine() -> OcrEngine:
    """The process's RapidOCR engine (the default of RAG_OCR_ENGINE)."""
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:  # the package, or a library it loads (libGL for OpenCV)
        raise OcrUnavailable.not_installed(exc) from exc
    return _RapidOcr(RapidOCR(max_side_len=MAX_SIDE))


@dataclass(frozen=True)
class Ocr:
    """How a parse recognises text: the engine (made when a page first needs it) and a
    callback told after each page (pages done, pages in all)."""

    engine: Callable[[], OcrEngine] = rapidocr_engine
    on_page: Callable[[int, int], None] = _ignore_progress


class _RapidOcr:
    def __init__(self, engine) -> None:
        self._engine = engine

    def __call__(self, image: np.ndarray) -> list[TextBox]:
        # Every box, however unsure: the caller judges the page by them (see _read).
        result, _ = self._engine(image, use_cls=False, text_score=0.0)
        return [
            TextBox(text, float(score), tuple((float(x), float(y)) for x, y in corners))
            for corners, text, score in result or []
        ]


def recognize(ocr: Ocr, pages: Iterable[Image.Image], total: int) -> Iterator[str]:
    """The text of each page, in order; the engine is made on the first page with ink."""
    engine: OcrEngine | None = None
    for done, image in enumerate(pages, start=1):
        rgb = _prepared(image)
        if _is_blank(rgb):
            text = ""
        else:
            engine = engine or ocr.engine()
            text = _read(engine, rgb)
        ocr.on_page(done, total)
        yield text


def _prepared(image: Image.Image) -> np.ndarray:
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Transparent pixels are often black underneath: put the image on white paper.
        rgba = image.convert("RGBA")
        paper = Image.new("RGBA", rgba.size, "white")
        image = Image.alpha_composite(paper, rgba)
    image = image.convert("RGB")
    image.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    return np.asarray(image)


def _is_blank(rgb: np.ndarray) -> bool:
    return int((rgb.min(axis=2) < 128).sum()) < _BLANK_DARK_PIXELS


def _read(engine: OcrEngine, rgb: np.ndarray) -> str:
    boxes = engine(rgb)
    if boxes and _confidence(boxes) < _UNSURE:
        turned = engine(np.ascontiguousarray(rgb[::-1, ::-1]))
        if _weight(turned) > _weight(boxes):
            boxes = turned
    return layout([b for b in boxes if b.score >= _KEPT])


def _weight(boxes: list[TextBox]) -> float:
    return sum(b.score * len(b.text) for b in boxes)


def _confidence(boxes: list[TextBox]) -> float:
    return _weight(boxes) / max(1, sum(len(b.text) for b in boxes))


def layout(boxes: list[TextBox]) -> str:
    """Boxes as lines and paragraphs, in reading order (see the module docstring)."""
    boxes = [b for b in boxes if b.text.strip()]
    if not boxes:
        return ""
    slope = math.tan(statistics.median(_angle(b) for b in boxes))

    def level(box: TextBox) -> float:  # the centre's height, the page's skew taken out
        x, y = _centre(box)
        return y - slope * x

    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=level):
        if lines and abs(level(box) - level(lines[-1][-1])) < 0.5 * _height(box):
            lines[-1].append(box)
        else:
            lines.append([box])
    line_height = statistics.median(_height(b) for b in boxes)
    parts = []
    previous: list[TextBox] | None = None
    for line in lines:
        line.sort(key=lambda b: _centre(b)[0])
        if previous is not None:
            gap = min(level(b) for b in line) - max(level(b) for b in previous) - line_height
            parts.append("\n\n" if gap > line_height else "\n")
        text = line[0].text.strip()
        for box in line[1:]:
            piece = box.text.strip()
            text += ("" if _is_cjk(text[-1]) and _is_cjk(piece[0]) else " ") + piece
        parts.append(text)
        previous = line
    return "".join(parts)


def _centre(box: TextBox) -> tuple[float, float]:
    xs, ys = zip(*box.corners, strict=True)
    return sum(xs) / len(xs), sum(ys) / len(ys)


def _height(box: TextBox) -> float:
    (x0, y0), _, _, (x3, y3) = box.corners[:4]
    return max(1.0, math.hypot(x3 - x0, y3 - y0))


def _angle(box: TextBox) -> float:
    (x0, y0), (x1, y1) = box.corners[:2]
    return math.atan2(y1 - y0, x1 - x0) if x1 > x0 else 0.0


def _is_cjk(char: str) -> bool:
    return any(low <= char <= high for low, high in _CJK)
