"""Which writing systems an embedding model embeds meaningfully, and which a text is written in.

An embedding model trained on English puts Chinese text at points that say little about its
meaning: fused with a keyword leg that reads Chinese well, such a vector leg only adds noise. So
every model declares the scripts it covers, and a query mostly in scripts its knowledge base's
model does not cover is searched without the vector leg (``retrieval.search.options``).

Scripts, not languages: a script can be told from the characters alone, cheaply and surely, and
it is what separates the failures that matter (an English-only model is as lost in Chinese as in
Japanese or Russian). A model's coverage is a frozenset of ``Script``; ``ALL`` for multilingual
models and for ones nothing is known about (the safe side: the vector leg stays on).

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


ALL: frozenset[Script] = frozenset(Script)
LATIN_ONLY: frozenset[Script] = frozenset({Script.LATIN})

# Models known to embed one script only, by the last part of their name (a local model is named
# by its directory), lower-cased. Sentence-transformers' English models and the "-en" families.
_ENGLISH_ONLY = re.compile(
    r"^(all-minilm-l6-v2|all-minilm-l12-v2|all-mpnet-base-v2|all-distilroberta-v1"
    r"|multi-qa-minilm-l6-cos-v1|multi-qa-mpnet-base-dot-v1|paraphrase-minilm-l6-v2"
    r"|msmarco-.*|.*-en|.*-en-v[0-9.]+|.*\.en)$"
)


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


def parse_scripts(declared: str) -> frozenset[Script] | None:
    """A knowledge base's declaration: ``*`` (all), a comma-separated list of scripts, or
    empty (None: the model's own declaration). Raises ValueError naming what is unknown."""
    text = declared.strip().lower()
    if not text:
        return None
    if text == "*":
        return ALL
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in Script.__members__.values()]
    if unknown:
        choices = ", ".join(s.value for s in Script)
        raise ValueError(f"unknown script {unknown[0]!r}; use * or some of: {choices}")
    return frozenset(Script(name) for name in names)


def model_coverage(provider: str, model: str) -> frozenset[Script]:
    """What a provider's model is known to cover: English-only models the Latin script,
    everything else (multilingual models, unknown ones, the non-semantic ``hash``) all."""
    if provider not in ("local", "openai", "langchain"):
        return ALL
    name = model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    return LATIN_ONLY if _ENGLISH_ONLY.match(name) else ALL


def coverage(provider: str, model: str, declared: str = "") -> frozenset[Script]:
    """A knowledge base's coverage: its own declaration when it has one, else its model's."""
    return parse_scripts(declared) or model_coverage(provider, model)


def describe(scripts: frozenset[Script]) -> str:
    """``*`` or the scripts in a fixed order, for traces and messages."""
    if scripts == ALL:
        return "all scripts"
    return ", ".join(s.value for s in Script if s in scripts)
