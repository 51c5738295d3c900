"""Query words a knowledge base does not know, corrected against its own vocabulary.

A typo in a query's only rare word leaves BM25 with the common words, which find the wrong
chunks. Search engines correct such words against the index's own terms within an edit
distance that grows with the word (Elasticsearch's ``fuzziness: AUTO``: one edit from 5
characters here, two from 9; shorter words are too easy to turn into another real word).

The vocabulary holds analysed tokens (stemmed English, jieba's Chinese words), not the words
people type, so a typed word is corrected in two ways:

- one edit away: every string one insertion, deletion, substitution or transposition from the
  typed word is analysed as a document's word would be, and those whose token the vocabulary
  holds are candidates (``calibartion`` -> ``calibration`` -> ``calibr``);
- two edits away (words of 9+ characters, when one edit finds nothing): vocabulary terms within
  two edits of the word's own token (rapidfuzz, Damerau-Levenshtein).

Among candidates the most frequent term wins (the one most documents hold; ties by the term
itself), as a spelling corrector picks the likelier word. A Han word the vocabulary lacks (the
query's segmentation differs from the documents') falls back to its character bigrams, or its
characters for a word of two, that the vocabulary holds.

Pure: the caller supplies the index and the analyser.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from rapidfuzz.distance import DamerauLevenshtein
from rapidfuzz.process import extract

from knowledge.analysis import Analyzer, normalize
from knowledge.analysis.normalization import HAN_RUN_RE
from retrieval.bm25.segmented import SegmentedIndex

ONE_EDIT_FROM = 5
TWO_EDITS_FROM = 9
_LATIN_WORD = re.compile(r"[a-z]+")
_LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class Correction:
    word: str  # as typed (normalised)
    terms: tuple[str, ...]  # the vocabulary terms searched instead


def corrections(query: str, analyzer: Analyzer, index: SegmentedIndex) -> list[Correction]:
    """The corrections of the query's unknown words (empty when every word is known or none
    can be corrected)."""
    found: list[Correction] = []
    seen: set[str] = set()
    text = normalize(query)
    for word in _LATIN_WORD.findall(text):
        if word in seen or len(word) < ONE_EDIT_FROM:
            continue
        seen.add(word)
        tokens = analyzer.tokens(word)
        if not tokens or all(token in index for token in tokens):
            continue
        term = _correct_latin(word, tokens[0], analyzer, index)
        if term is not None:
            found.append(Correction(word, (term,)))
    for token in analyzer.tokens(" ".join(HAN_RUN_RE.findall(text))):
        if token in seen or token in index or len(token) < 2:
            continue
        seen.add(token)
        pieces = (
            [token[i : i + 2] for i in range(len(token) - 1)] if len(token) > 2 else list(token)
        )
        known = tuple(dict.fromkeys(piece for piece in pieces if piece in index))
        if known:
            found.append(Correction(token, known))
    return found


def corrected_tokens(tokens: list[str], fixes: list[Correction], analyzer: Analyzer) -> list[str]:
    """The query's tokens with each corrected word's tokens replaced by its terms."""
    replaced: dict[str, tuple[str, ...]] = {}
    for fix in fixes:
        for token in analyzer.tokens(fix.word) or [fix.word]:
            replaced[token] = fix.terms
    out: list[str] = []
    for token in tokens:
        out.extend(replaced.get(token, (token,)))
    return out


def _correct_latin(word: str, token: str, analyzer: Analyzer, index: SegmentedIndex) -> str | None:
    candidates = {
        analysed
        for variant in _one_edit(word)
        if (analysed := analyzer.word_token(variant)) is not None and analysed in index
    }
    if not candidates and len(word) >= TWO_EDITS_FROM:
        by_length = _latin_terms(index)
        near = [t for n in range(len(token) - 2, len(token) + 3) for t in by_length.get(n, ())]
        matches = extract(
            token, near, scorer=DamerauLevenshtein.distance, score_cutoff=2, limit=None
        )
        candidates = {term for term, _, _ in matches}
    if not candidates:
        return None
    return max(candidates, key=lambda term: (index.document_frequency(term), term))


_TERMS: WeakKeyDictionary[SegmentedIndex, dict[int, list[str]]] = WeakKeyDictionary()


def _latin_terms(index: SegmentedIndex) -> dict[int, list[str]]:
    """The index's terms of Latin letters by length, listed once per index (indexes are
    immutable; two edits change a length by two at most)."""
    terms = _TERMS.get(index)
    if terms is None:
        terms = {}
        for term in index.terms():
            if _LATIN_WORD.fullmatch(term):
                terms.setdefault(len(term), []).append(term)
        _TERMS[index] = terms
    return terms


def _one_edit(word: str) -> set[str]:
    """Every string one insertion, deletion, substitution or adjacent transposition away."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    transposes = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    replaces = {a + c + b[1:] for a, b in splits if b for c in _LETTERS if c != b[0]}
    inserts = {a + c + b for a, b in splits for c in _LETTERS}
    return (deletes | transposes | replaces | inserts) - {word}
