"""Text normalisation and the character classes the analyser is built on.

Documents and queries must meet on the same tokens however they were typed, so every text is
first brought to one form:

- NFKC folds compatibility variants: full-width ``ＴＨ０１`` becomes ``TH01``, ligatures such as
  ``ﬁ`` become ``fi``, the ideographic space becomes a space, compatibility ideographs become
  their unified ideograph.
- ``casefold`` is lowercasing that also folds ``ß`` to ``ss`` and similar; NFKC runs again after
  it because case folding can leave decomposed sequences behind.
- Invisible format characters (soft hyphen, zero-width space and joiners, BOM, bidi controls,
  emoji tags), variation selectors and enclosing marks are removed, so ``co\\u00adoperate``
  matches ``cooperate`` and ``❤️`` or a keycap leaves no stray token.
- Control characters (NUL included) and lone surrogates become spaces: they separate words but
  never appear in a token.

NFKC runs first, so NFKC-equivalent inputs are analysed identically by construction.
"""

from __future__ import annotations

import re
import unicodedata

# CJK Unified Ideographs, extension A, compatibility ideographs, and the supplementary planes
# (extensions B to H and the compatibility supplement).
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U000323af"

HAN_RE = re.compile(f"[{HAN}]")
HAN_RUN_RE = re.compile(f"[{HAN}]+")


def _scan_categories() -> tuple[str, str]:
    """Character classes (regex syntax) for combining marks and for invisible characters.

    Python's ``\\w`` leaves out combining marks, so without them Devanagari, Thai or vocalised
    Arabic would be cut at every vowel sign. Marks and format characters only occur below
    U+20000 and in plane 14, so scanning those takes a few milliseconds at import.
    """
    marks: list[int] = []
    invisible: list[int] = []
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000)):
        category = unicodedata.category(chr(cp))
        is_variation_selector = 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF
        if category in ("Cf", "Me") or is_variation_selector:
            invisible.append(cp)
        elif category in ("Mn", "Mc"):
            marks.append(cp)
    return _char_class(marks), _char_class(invisible)


def _char_class(codepoints: list[int]) -> str:
    parts: list[str] = []
    start = prev = codepoints[0]
    for cp in [*codepoints[1:], -1]:
        if cp == prev + 1:
            prev = cp
            continue
        parts.append(re.escape(chr(start)))
        if prev != start:
            parts.append("-" + re.escape(chr(prev)))
        start = prev = cp
    return "".join(parts)


MARKS, _INVISIBLE = _scan_categories()

_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]+")
# C0 and C1 controls except tab, newline and carriage return, plus lone surrogates.
_SEPARATOR_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]+")


def normalize(text: str) -> str:
    """Return ``text`` in the one form the analyser tokenises (see the module docstring)."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _SEPARATOR_RE.sub(" ", _INVISIBLE_RE.sub("", text))
