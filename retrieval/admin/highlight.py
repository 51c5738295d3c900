"""Which words of a hit's text match the query, as the keyword leg saw them.

The query is analysed by the knowledge base's analyser; the content is cut into words (Han runs
by jieba's precise mode, other text by the analyser's own compound rules, split at joiners),
each word is analysed alone, and a word matches when one of its tokens is a query term. So
"calibrated" lights up for "calibration" (both stem to "calibr"), 校准 for 校准周期, TH01 for
th01, and v2.3.1 as a whole for the query v2.3.1. The content's words are analysed with the
content's own script folding (Traditional to Simplified unless it has kana), as the chunk was
indexed, and its Han runs are cut where jieba cuts their Simplified form: a Traditional query
lights up the Simplified words it matched and the reverse (校準 for 校准, 校准 for 校準), while
the text keeps the characters it was written in. Pure Python: it returns (text, matched) segments
and leaves escaping to the template.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from knowledge.analysis import Analyzer, normalize
from knowledge.analysis.chinese import load_jieba, to_simplified
from knowledge.analysis.identifiers import COMPOUND_RE
from knowledge.analysis.normalization import HAN
from knowledge.analysis.scripts import has_kana

Segment = tuple[str, bool]
_PART_RE = re.compile(r"[^-_./]+")  # a compound's words, between its joiners
_SCRIPT_RE = re.compile(rf"([{HAN}]+)|[^{HAN}]+")  # a Han run (group 1) or a run of the rest


def highlight(content: str, query: str, analyzer: Analyzer) -> list[Segment]:
    """``content`` as consecutive segments, True for the words matching a term of ``query``.
    Joined, the segments are exactly ``content``; neighbours never share a flag."""
    terms = set(analyzer.tokens(query))
    segments: list[Segment] = []
    position = 0
    fold = not has_kana(normalize(content))
    for start, end, whole in _words(content, fold) if terms else ():
        if start < position:
            continue  # inside a compound already matched whole
        word = content[start:end]
        if whole:
            matched = analyzer.fold(normalize(word), fold) in terms
        else:
            matched = bool(terms.intersection(analyzer.tokens(word, fold=fold)))
        if matched:
            _append(segments, content[position:start], False)
            _append(segments, content[start:end], True)
            position = end
    _append(segments, content[position:], False)
    return segments


def _append(segments: list[Segment], text: str, matched: bool) -> None:
    if not text:
        return
    if segments and segments[-1][1] == matched:
        segments[-1] = (segments[-1][0] + text, matched)
    else:
        segments.append((text, matched))


def _words(content: str, fold: bool) -> Iterator[tuple[int, int, bool]]:
    """Spans of the words of ``content``. A compound with joiners comes first as a whole
    (flag True: it matches only if it is itself a query term, like v2.3.1), then word by word."""
    for compound in COMPOUND_RE.finditer(content):
        if compound.end(1) != compound.end():
            yield compound.start(), compound.end(), True
        for part in _PART_RE.finditer(compound.group()):
            offset = compound.start() + part.start()
            for run in _SCRIPT_RE.finditer(part.group()):
                start = offset + run.start()
                if run.group(1) is None:
                    yield start, offset + run.end(), False
                else:
                    for a, b in _han_words(run.group(), fold):
                        yield start + a, start + b, False


def _han_words(run: str, fold: bool) -> Iterator[tuple[int, int]]:
    jieba = load_jieba()
    if jieba is None:
        yield from ((i, i + 1) for i in range(len(run)))
        return
    if fold:
        # Cut where the analyser cut: its Simplified form, when folding kept every character
        # in place (OpenCC's t2s maps character for character in all but rare phrases).
        simplified = to_simplified(run)
        if len(simplified) == len(run):
            run = simplified
    for _word, start, end in jieba.tokenize(run, mode="default", HMM=True):
        yield start, end
