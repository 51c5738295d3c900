"""Han runs: Traditional characters folded to Simplified, then segmented by jieba's search mode
(or cut into single characters when jieba is missing).

Folding (:func:`to_simplified`) uses OpenCC's ``t2s`` configuration: phrases first, then single
characters, so 傳感器校準週期 becomes 传感器校准周期 and a word whose Simplified form depends on
context (乾隆 stays, 乾燥 becomes 干燥) follows the phrase table. It runs before segmentation:
jieba's dictionary is Simplified, so it cuts Traditional text into loose characters it would
otherwise keep as words. Simplified text passes through unchanged, so documents and queries in
either script meet on the same tokens. Only Han runs are converted; OpenCC's dictionaries ship
inside its wheel and load in milliseconds, once per thread.

Search mode (``cut_for_search``, HMM on) emits each word *and* the dictionary words inside it,
``中华人民共和国`` giving ``中华``, ``人民``, ``共和国`` and the whole, so a short query term still
meets a long indexed word. The HMM lets unknown words (names, new terms) come out whole instead
of as loose characters.

jieba is imported and its dictionary loaded lazily, once per process, on the first Han text:
an English-only process never pays the dictionary load, and the default tokenizer is shared by every
analyser (its prefix dictionary costs tens of MB, so a knowledge base's own words are handled
by :mod:`knowledge.analysis.userwords` instead of a tokenizer of its own). Only the default
tokenizer is read; nothing here changes jieba's global state except its log level, quieted
because jieba prints its loading chatter to stderr.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable
from types import ModuleType

import opencc

from knowledge.analysis.normalization import HAN_RUN_RE

logger = logging.getLogger(__name__)

MAX_JIEBA_RUN = 256

_lock = threading.Lock()
_thread_local = threading.local()
_loaded = False
_jieba: ModuleType | None = None


def load_jieba() -> ModuleType | None:
    """The initialised jieba module, or ``None`` when it cannot be imported.

    The one place jieba is imported; the outcome is kept for the life of the process, so the
    fallback warning is logged once.
    """
    global _loaded, _jieba
    if not _loaded:
        with _lock:
            if not _loaded:
                _jieba = _import_jieba()
                _loaded = True
    return _jieba


def reset_jieba() -> None:
    """Forget the import outcome so the next Han text tries again (tests simulate absence)."""
    global _loaded, _jieba
    with _lock:
        _loaded, _jieba = False, None


def _import_jieba() -> ModuleType | None:
    try:
        import jieba
    except ImportError:
        logger.warning("jieba unavailable, Chinese text falls back to single-character tokens")
        return None
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def segment_han(run: str) -> Iterable[str]:
    """Words and sub-words of a run of Han characters (nothing else may be in ``run``).

    Runs longer than ``MAX_JIEBA_RUN`` are segmented in windows of that length. jieba's HMM
    copies its Viterbi paths at every character, so a long stretch of characters that form no
    dictionary word costs time quadratic in its length. Punctuation already ends a run, so real
    sentences stay far below the limit; only unpunctuated walls of text are cut, at the same
    places in every analysis.
    """
    jieba = load_jieba()
    if jieba is None:
        return run
    if len(run) <= MAX_JIEBA_RUN:
        return jieba.cut_for_search(run, HMM=True)
    return itertools.chain.from_iterable(
        jieba.cut_for_search(run[start : start + MAX_JIEBA_RUN], HMM=True)
        for start in range(0, len(run), MAX_JIEBA_RUN)
    )


def to_simplified(text: str) -> str:
    """``text`` with its Han runs converted from Traditional to Simplified characters; anything
    else, Simplified characters included, is left as it is."""
    if HAN_RUN_RE.search(text) is None:
        return text
    converter = getattr(_thread_local, "t2s", None)
    if converter is None:
        # One converter per thread: OpenCC does not document its converters as thread-safe.
        converter = _thread_local.t2s = opencc.OpenCC("t2s")
    return HAN_RUN_RE.sub(lambda run: converter.convert(run.group()), text)
