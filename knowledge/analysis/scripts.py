"""Which writing systems (scripts) a text is written in: Han, kana, Hangul, Latin, Cyrillic,
Arabic, other.

Scripts, not languages: a script can be told from the characters alone, cheaply and surely, and
it is what separates the failures that matter to search (an embedding model trained on English
is as lost in Chinese as in Japanese or Russian: ``knowledge.embeddings.coverage``). How much of
a text each script writes is counted in units a reader would weigh alike: Han and kana
characters, words elsewhere.

Pure: no Django.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from enum import StrEnum


class Script(StrEnum):
    LATIN = "latin"
    HAN = "han"
    KANA = "kana"
    HANGUL = "hangul"
    CYRILLIC = "cyrillic"
    ARABIC = "arabic"
    OTHER = "other"


def script_of(char: str) -> Script | None:
    """The script of one character, or None for what is not a letter (digits, punctuation,
    spaces and symbols do not make a text Chinese or English)."""
    if not char.isalpha():
        return None
    code = ord(char)
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF:
        return Script.HAN
    if 0x20000 <= code <= 0x3FFFF:
        return Script.HAN
    if 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F:
        return Script.KANA
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F:
        return Script.HANGUL
    if code < 0x0250 or 0x1E00 <= code <= 0x1EFF or 0xFF21 <= code <= 0xFF5A:
        return Script.LATIN
    if 0x0400 <= code <= 0x052F:
        return Script.CYRILLIC
    if 0x0600 <= code <= 0x06FF or 0x0750 <= code <= 0x077F:
        return Script.ARABIC
    name = unicodedata.name(char, "")
    return Script.LATIN if name.startswith("LATIN") else Script.OTHER


# The characters script_of may call kana; has_kana checks each hit with it.
_KANA_CANDIDATE_RE = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")


def has_kana(text: str) -> bool:
    """Whether ``text`` has a kana letter, which makes its Han characters Japanese kanji."""
    return any(script_of(char) is Script.KANA for char in _KANA_CANDIDATE_RE.findall(text))


# Han and kana are written without spaces, a character about a morpheme; the other scripts are
# counted by words, so "sensor 校准" is one unit of each and not six Latin letters against two.
_BY_CHARACTER = frozenset({Script.HAN, Script.KANA})


def script_units(text: str) -> Counter[Script]:
    """How much of ``text`` each script writes: Han and kana characters, words elsewhere."""
    units: Counter[Script] = Counter()
    previous: Script | None = None
    for char in text:
        script = script_of(char)
        if script is not None and (script in _BY_CHARACTER or script != previous):
            units[script] += 1
        previous = script
    return units


_ORDER = {script: i for i, script in enumerate(Script)}  # ties in dominant_script


def uncovered_share(units: Counter[Script], coverage: frozenset[Script]) -> float:
    """The share of a text's units written in scripts outside ``coverage`` (0 for no letters)."""
    total = sum(units.values())
    if not total:
        return 0.0
    return sum(n for script, n in units.items() if script not in coverage) / total


def dominant_script(units: Counter[Script]) -> Script | None:
    """The script writing most of a text (ties: the first in ``Script`` order), None without
    letters."""
    if not units:
        return None
    return max(_ORDER, key=lambda script: (units[script], -_ORDER[script]))
