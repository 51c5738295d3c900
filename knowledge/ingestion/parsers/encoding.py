"""Decoding uploaded text files (txt, md, html, csv) without ever guessing silently wrong.

Order of evidence: a byte-order mark decides (UTF-8, UTF-16, UTF-32); then valid UTF-8 wins,
because random legacy bytes are almost never valid UTF-8; only then charset-normalizer guesses.
Its guesses are adjusted for the files this system receives:

- GB2312 and GBK are decoded as GB18030, a superset of both, so characters outside GB2312
  (names, rare characters) survive.
- When several candidates are equally plausible (short texts often are), GB18030 is preferred,
  then Windows-1252; Chinese and Western files are the common legacy cases here.
- UTF-16/32 without a byte-order mark is never accepted: such text holds NUL bytes and is refused
  as binary earlier, so a UTF-16 guess on NUL-free bytes is always a misreading.

If no candidate decodes the bytes, the upload is refused ("Could not determine the text
encoding ...") rather than stored as garbled text.
"""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

from .base import ParseError

# (mark, codec to decode what follows it, name recorded on the document); UTF-32 LE first, since
# its mark begins with the UTF-16 LE one.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF8, "utf-8", "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "utf-16-be"),
)
_WIDE_UNICODE = frozenset({"utf_16", "utf_16_le", "utf_16_be", "utf_32", "utf_32_le", "utf_32_be"})
_GB_FAMILY = frozenset({"gb2312", "gbk", "gb18030", "cp936"})
_UNKNOWN_ENCODING = (
    "Could not determine the text encoding of the file; save it as UTF-8 and upload it again"
)


def starts_with_byte_order_mark(data: bytes) -> bool:
    return any(data.startswith(mark) for mark, _, _ in _BYTE_ORDER_MARKS)


def decode_text(data: bytes, declared: str | None = None) -> tuple[str, str]:
    """Return (text, encoding used) or raise ParseError.

    `declared` is an encoding the file names itself (an HTML meta charset); it is tried after a
    byte-order mark and UTF-8, and ignored if it is unknown or does not decode the bytes.
    """
    for mark, codec, recorded in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            try:
                return data[len(mark) :].decode(codec), recorded
            except UnicodeDecodeError:
                raise ParseError(
                    f"The file starts with a {recorded.upper()} byte-order mark but is not "
                    f"valid {recorded.upper()}; save it again as UTF-8"
                ) from None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    if declared:
        decoded = _decode_declared(data, declared)
        if decoded:
            return decoded
    return _decode_guessed(data)


def _decode_declared(data: bytes, declared: str) -> tuple[str, str] | None:
    try:
        codec = codecs.lookup(declared).name
    except LookupError:
        return None
    if codec.startswith(("utf-16", "utf-32")):
        return None  # without a byte-order mark it cannot be right, see the module docstring
    if codec in _GB_FAMILY:
        codec = "gb18030"
    try:
        return data.decode(codec), codec
    except UnicodeDecodeError:
        return None


def _decode_guessed(data: bytes) -> tuple[str, str]:
    matches = [m for m in from_bytes(data) if m.encoding not in _WIDE_UNICODE]
    if not matches:
        raise ParseError(_UNKNOWN_ENCODING)
    best = matches[0]
    # The same notion of "as plausible" that charset-normalizer uses to order its matches.
    tied = [
        m
        for m in matches
        if abs(m.chaos - best.chaos) < 0.005 and abs(m.coherence - best.coherence) <= 0.02
    ]
    preferred = (
        next((m for m in tied if _GB_FAMILY.intersection(m.could_be_from_charset)), None)
        or next((m for m in tied if "cp1252" in m.could_be_from_charset), None)
        or best
    )
    for codec in _codecs_for(preferred.could_be_from_charset, preferred.encoding):
        try:
            return data.decode(codec), codec
        except UnicodeDecodeError:
            continue
    raise ParseError(_UNKNOWN_ENCODING)


def _codecs_for(charsets: list[str], encoding: str) -> list[str]:
    if _GB_FAMILY.intersection(charsets):
        # GBK's one-byte euro sign (0x80) is not GB18030; fall back to the reported codec then.
        return ["gb18030", codecs.lookup(encoding).name]
    if "cp1252" in charsets:
        return ["cp1252"]
    return [codecs.lookup(encoding).name]
