"""The English and Chinese stopword lists, read once from the data files beside this module.

Stopwords are so frequent that they carry almost no BM25 weight, yet they bloat every chunk's
token array and let function-word-only queries (``the of``, ``我们的``) score noise. The lists are
kept to function words: removing a content word would make it unsearchable.
"""

from __future__ import annotations

import functools
from pathlib import Path

from knowledge.analysis.normalization import normalize


@functools.cache
def english_stopwords() -> frozenset[str]:
    return _load("stopwords_en.txt")


@functools.cache
def chinese_stopwords() -> frozenset[str]:
    return _load("stopwords_zh.txt")


def _load(name: str) -> frozenset[str]:
    """One word per line; blank lines and ``#`` comments are skipped."""
    text = Path(__file__).with_name(name).read_text(encoding="utf-8")
    return frozenset(
        normalize(line).strip()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    )
