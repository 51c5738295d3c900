"""The text analyser shared by ingestion (chunk tokens for BM25) and queries.

Documents and queries go through this same code, so a query term meets the indexed term whatever
the spelling, script or casing it was typed in. The pipeline for one text:

1. Normalise (:func:`~knowledge.analysis.normalization.normalize`): NFKC, casefold, invisible
   characters removed, control characters and lone surrogates turned into spaces. Then fold Han
   runs from Traditional to Simplified characters
   (:func:`~knowledge.analysis.chinese.to_simplified`): 傳感器校準
   and 传感器校准 give the same tokens. The knowledge base's words are folded alike. A text
   with kana is Japanese (:func:`~knowledge.analysis.scripts.has_kana`) and is not folded: its
   kanji are Japanese forms (shinjitai), not Traditional Chinese, and converting them would
   make Chinese words the text does not contain. A chunk is decided as a whole (title,
   headings and text), so the kanji-only title of a Japanese chunk stays as written too.
2. Find compounds (:mod:`~knowledge.analysis.identifiers`): words of letters, digits, Han and
   combining marks, joined by single ``-``, ``_``, ``.`` or ``/``. Everything else (spaces,
   punctuation, symbols, emoji) only separates; that is why SQL or tsquery syntax in a query is
   harmless here.
3. Analyse each word of a compound:

   a. the knowledge base's own words first (:mod:`~knowledge.analysis.userwords`), emitted whole
      and then analysed like any text, so a query for one of their parts still hits;
   b. the rest is split into runs of Han and of other scripts. A Han run goes to jieba's search
      mode (:mod:`~knowledge.analysis.chinese`), which yields words and the words inside them,
      minus Chinese stopwords. Runs of kana (Japanese) and of Hangul (Korean) become
      overlapping character bigrams (a lone character stays a unigram), as Lucene's
      CJKBigramFilter makes them: neither script marks word boundaries the way spaces do, and
      bigrams match a word inside a longer run without a dictionary. Any other run is one
      token: an English stopword (checked on the unstemmed form) is dropped, a word of Latin
      letters is reduced by the Snowball English stemmer, numbers, letter-digit mixes
      (``th01``) and other scripts are kept as they are.

4. Add the whole compound when it is an identifier (the rule is in
   :mod:`~knowledge.analysis.identifiers`): ``v2.3.1`` gives ``v2``, ``3``, ``1`` and ``v2.3.1``.

Tokens follow the order of the text and may repeat, since BM25 counts term frequency. Tokens
longer than ``MAX_TOKEN_CHARS`` are dropped.

Chunks store ``ANALYZER_VERSION`` with their tokens: bump it with any change here that alters the
output, so stored tokens are re-analysed rather than silently mismatching new queries.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import Stemmer

from knowledge.analysis.chinese import segment_han, to_simplified
from knowledge.analysis.identifiers import (
    COMPOUND_RE,
    JOINER_RE,
    MAX_TOKEN_CHARS,
    is_identifier,
)
from knowledge.analysis.normalization import HAN, HAN_RE, normalize
from knowledge.analysis.scripts import has_kana
from knowledge.analysis.stopwords import chinese_stopwords, english_stopwords
from knowledge.analysis.userwords import UserDictionary

ANALYZER_VERSION: Final = 3  # 2: kana and Hangul as bigrams; 3: Traditional folded to Simplified

# Letters of the Latin script after case folding (Latin-1, Extended-A and -B, Extended
# Additional): the words the English stemmer may touch. Cyrillic, Greek or Thai words are kept
# as they are rather than mangled by rules written for English.
_LATIN_WORD_RE = re.compile(r"[a-z\u00df-\u00f6\u00f8-\u00ff\u0100-\u024f\u1e00-\u1eff]+")
# Within a word: a Han run (group 1), or a run of any other script.
# Kana (Hiragana, Katakana with its prolonged sound mark, phonetic extensions; NFKC has already
# made half-width forms full-width) and Hangul (syllables and jamo): bigrammed runs.
_BIGRAM_RUN_RE = re.compile(
    r"[\u3040-\u30ff\u31f0-\u31ff]+|[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]+"
)
_SCRIPT_RUN_RE = re.compile(rf"([{HAN}]+)|[^\W_{HAN}][^{HAN}]*")

# PyStemmer objects keep state between calls and must not be shared across threads.
_thread_local = threading.local()


def _english_stem() -> Callable[[str], str]:
    stem = getattr(_thread_local, "stem", None)
    if stem is None:
        stem = _thread_local.stem = Stemmer.Stemmer("english").stemWord
    return stem


def _uncached_english_stem() -> Callable[[str], str]:
    """The same stemmer without PyStemmer's cache, which makes a word seen once (a spelling
    candidate) many times slower to stem than a word seen before; same output."""
    stem = getattr(_thread_local, "uncached_stem", None)
    if stem is None:
        stem = _thread_local.uncached_stem = Stemmer.Stemmer("english", 0).stemWord
    return stem


@dataclass(frozen=True)
class AnalyzerConfig:
    """The choices that change an analyser's output."""

    stem: bool = True
    stopwords: bool = True
    user_words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.user_words, str):
            raise TypeError("user_words must be a collection of words, not one string")
        object.__setattr__(self, "user_words", tuple(self.user_words))


class Analyzer:
    """Turns text into BM25 tokens. Thread-safe; share instances through :func:`get_analyzer`."""

    def __init__(self, config: AnalyzerConfig = AnalyzerConfig()) -> None:
        self.config = config
        self._stop_en = english_stopwords() if config.stopwords else frozenset()
        self._stop_zh = chinese_stopwords() if config.stopwords else frozenset()
        self._user_words = UserDictionary(config.user_words) if config.user_words else None
        self._joined_user_words = self._user_words.joined if self._user_words else frozenset()

    def __repr__(self) -> str:
        return f"Analyzer({self.config!r})"

    def tokens(self, text: str, *, fold: bool | None = None) -> list[str]:
        """The tokens of any text, a document's or a query's.

        ``fold`` says whether Han runs are folded to Simplified; by default they are unless the
        text has kana. A caller analysing pieces of a larger text passes the whole text's
        decision, so the pieces give the tokens the whole gave.
        """
        out: list[str] = []
        stem = _english_stem() if self.config.stem else None
        text = self.fold(normalize(text), fold)
        for match in COMPOUND_RE.finditer(text):
            if match.end(1) == match.end():
                self._word(match.group(), out, stem)
                continue
            compound = match.group()
            for part in JOINER_RE.split(compound):
                self._word(part, out, stem)
            if len(compound) <= MAX_TOKEN_CHARS and (
                is_identifier(compound) or compound in self._joined_user_words
            ):
                out.append(compound)
        return out

    @staticmethod
    def fold(text: str, fold: bool | None = None) -> str:
        """Normalised ``text`` with its Han runs folded to Simplified when ``fold`` says so
        (by default: unless the text has kana)."""
        if fold is None:
            fold = not has_kana(text)
        return to_simplified(text) if fold else text

    def word_token(self, word: str) -> str | None:
        """The token of one lower-case word of Latin letters, as ``tokens`` gives it, without
        the pipeline around it (None for a stopword or an over-long word): spelling correction
        analyses hundreds of candidate words per unknown query word."""
        if len(word) > MAX_TOKEN_CHARS or word in self._stop_en:
            return None
        return _uncached_english_stem()(word) if self.config.stem else word

    def chunk_tokens(
        self, content: str, title: str = "", heading_path: Sequence[str] = ()
    ) -> list[str]:
        """The tokens indexed for a chunk: its document's title, its heading path, its text.

        A chunk's text often never names what it is about (the "Wiring" section of the "TH01
        manual"), so every chunk carries its title and headings. A heading that repeats the title
        or an earlier heading, like a Markdown H1 restating the title, is counted once so its
        terms do not gain weight from the repetition.

        Kana anywhere in the chunk keeps all of it unfolded (the module docstring says why).
        """
        if isinstance(heading_path, str):
            heading_path = (heading_path,)
        fold = not any(has_kana(part) for part in (title, *heading_path, content))
        out: list[str] = []
        seen: set[str] = set()
        for label in (title, *heading_path):
            key = " ".join(normalize(label).split())
            if key and key not in seen:
                seen.add(key)
                out.extend(self.tokens(label, fold=fold))
        out.extend(self.tokens(content, fold=fold))
        return out

    def _word(self, word: str, out: list[str], stem: Callable[[str], str] | None) -> None:
        if self._user_words is None:
            self._plain(word, out, stem)
            return
        for segment, is_user_word in self._user_words.split(word):
            if is_user_word:
                out.append(segment)
                parts: list[str] = []
                self._plain(segment, parts, stem)
                out.extend(part for part in parts if part != segment)
            else:
                self._plain(segment, out, stem)

    def _plain(self, word: str, out: list[str], stem: Callable[[str], str] | None) -> None:
        if HAN_RE.search(word) is None:
            self._single(word, out, stem)
            return
        for run in _SCRIPT_RUN_RE.finditer(word):
            if run.group(1) is None:
                self._single(run.group(), out, stem)
                continue
            out.extend(
                token
                for token in segment_han(run.group())
                if token not in self._stop_zh and len(token) <= MAX_TOKEN_CHARS
            )

    def _single(self, token: str, out: list[str], stem: Callable[[str], str] | None) -> None:
        """One non-Han run: kana and Hangul runs in it as bigrams, the rest a token of its own
        unless it is a stopword or too long."""
        if _BIGRAM_RUN_RE.search(token) is not None:
            position = 0
            for run in _BIGRAM_RUN_RE.finditer(token):
                if run.start() > position:
                    self._single(token[position : run.start()], out, stem)
                out.extend(bigrams(run.group()))
                position = run.end()
            if position < len(token):
                self._single(token[position:], out, stem)
            return
        if len(token) > MAX_TOKEN_CHARS or token in self._stop_en:
            return
        if stem is not None and (
            token.isalpha() if token.isascii() else _LATIN_WORD_RE.fullmatch(token)
        ):
            token = stem(token)
        out.append(token)


def bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a run; a run of one character is its own token."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


@functools.lru_cache(maxsize=32)
def _shared_analyzer(user_words: tuple[str, ...]) -> Analyzer:
    return Analyzer(AnalyzerConfig(user_words=user_words))


def get_analyzer(user_words: Iterable[str] = ()) -> Analyzer:
    """The shared analyser for a set of user words (order, case and duplicates do not matter).

    Compiling user words costs far more than analysing a query, so analysers are kept in a
    small LRU cache; the default analyser is the one for no user words.
    """
    if isinstance(user_words, str):
        raise TypeError("user_words must be a collection of words, not one string")
    key = {normalize(word).strip() for word in user_words}
    key.discard("")
    return _shared_analyzer(tuple(sorted(key)))
