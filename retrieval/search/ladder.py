"""The keyword leg's retry ladder, for queries whose BM25 search found nothing or only weak
hits: hits that match what is left of a query after the knowledge base failed to know one of its
words of 5+ letters (a typo in the rare word that mattered, most often).

Rungs, stopping at the first that finds something, every attempt recorded for the trace; a rung
that could not change the result is not run:

1. ``corrected_query``: the query with its unknown words corrected against the knowledge base's
   vocabulary (``retrieval.search.spelling``); run when some word could be corrected. When the
   query found weak hits, this is the only rung, and its hits replace them.
2. ``sanitised_query``: punctuation and query syntax dropped, identifiers split at letter/digit
   and case boundaries (``TH-01?`` -> ``TH 01``), stopwords kept; run when that gives other
   tokens than the query's.
3. ``fuzzy_title``: documents whose title shares character trigrams with the query with a
   Jaccard similarity >= 0.3 (transliterations, words too short to correct); their first
   chunks are returned.

(A query's own strongest term alone, once a rung here, can never find what the whole query did
not: BM25 scores every document holding any of the query's terms.)

Pure functions here; the search service supplies the index and the titles.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from knowledge.analysis import Analyzer, AnalyzerConfig, normalize
from retrieval.bm25.segmented import SegmentedIndex
from retrieval.search.spelling import corrected_tokens, corrections

FUZZY_TITLE_MIN_JACCARD = 0.3
_CASE_OR_DIGIT_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_NOT_WORD = re.compile(r"[^\w]+")


def sanitise(query: str) -> str:
    spaced = _CASE_OR_DIGIT_BOUNDARY.sub(" ", query)
    return " ".join(_NOT_WORD.sub(" ", spaced).split())


def trigrams(text: str) -> set[str]:
    compact = " ".join(normalize(text).split())
    padded = f"  {compact} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def fuzzy_titles(
    query: str, titles: Iterable[tuple[int, str]], minimum: float = FUZZY_TITLE_MIN_JACCARD
) -> list[tuple[int, float]]:
    """(document id, similarity) of titles similar to the query, best first: the Jaccard
    similarity of their trigram sets (``jaccard(trigrams(query), trigrams(title))``), computed
    over every title at once from each title's trigram ids, kept per process (``_TitleGrams``).
    Computing every title's trigrams again for each query would be Python work per title, in
    every search that found nothing (a question the knowledge base cannot answer, a word gone
    with a deleted document); kept, a query costs its own trigrams and numpy passes over the
    titles' trigram ids."""
    rows = list(titles)
    wanted = trigrams(query)
    if not wanted or not rows:
        scored = [(doc_id, 0.0) for doc_id, _ in rows] if minimum <= 0 else []
        return sorted(scored, key=lambda pair: (-pair[1], pair[0]))
    ids, owners, sizes, query_ids = _title_grams.of(rows, wanted)
    shared = np.bincount(owners[np.isin(ids, query_ids)], minlength=len(rows))
    # |A & B| / |A | B|, with |A | B| = |A| + |B| - |A & B|: the same float as ``jaccard``.
    scores = shared / (len(wanted) + sizes - shared)
    keep = np.flatnonzero(scores >= minimum)
    doc_ids = np.fromiter((rows[i][0] for i in keep.tolist()), np.int64, keep.size)
    order = np.lexsort((doc_ids, -scores[keep]))
    return list(zip(doc_ids[order].tolist(), scores[keep][order].tolist(), strict=True))


class _TitleGrams:
    """Per process: each document title's trigrams as ids (one vocabulary of trigrams), by
    document id, computed once per (document, title). Past ``limit`` trigrams or documents it
    starts afresh (titles of deleted documents leave their entries behind until then)."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self.limit = limit
        self._vocab: dict[str, int] = {}
        self._titles: dict[int, tuple[str, np.ndarray]] = {}
        self._lock = threading.Lock()

    def of(
        self, rows: list[tuple[int, str]], wanted: set[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(trigram ids of every title one after another, the row each belongs to, each
        row's trigram count, and the ids of the ``wanted`` trigrams some title held: the
        others share nothing), all of one vocabulary."""
        with self._lock:
            if len(self._vocab) > self.limit or len(self._titles) > self.limit:
                self._vocab.clear()
                self._titles.clear()
            parts = []
            for doc_id, title in rows:
                held = self._titles.get(doc_id)
                if held is None or held[0] != title:
                    grams = trigrams(title)
                    held = (
                        title,
                        np.fromiter(
                            (self._vocab.setdefault(g, len(self._vocab)) for g in grams),
                            np.int64,
                            len(grams),
                        ),
                    )
                    self._titles[doc_id] = held
                parts.append(held[1])
            known = [self._vocab[g] for g in wanted if g in self._vocab]
        sizes = np.fromiter((p.size for p in parts), np.int64, len(parts))
        owners = np.repeat(np.arange(len(parts)), sizes)
        return np.concatenate(parts), owners, sizes, np.array(known, dtype=np.int64)


_title_grams = _TitleGrams()


def run_ladder(
    *,
    query: str,
    tokens: Sequence[str],
    hits: list[tuple[int, float]],
    index: SegmentedIndex,
    analyzer: Analyzer,
    limit: int,
    allowed: np.ndarray | None,
    user_words: Sequence[str],
    titles: Callable[[], Iterable[tuple[int, str]]],
    first_chunks: Callable[[list[int]], dict[int, int]],
) -> tuple[list[tuple[int, float]], list[dict]]:
    """Climb the ladder from the query's own ``hits`` when they are none or weak; returns
    (hits as (chunk id, score), attempts). Nothing to climb: ``hits`` and no attempt."""
    attempts: list[dict] = []

    def attempt(rung: str, terms: Sequence[str], **detail) -> list[tuple[int, float]]:
        found = index.search(list(terms), limit, allowed)
        attempts.append({"rung": rung, "terms": list(terms), "hits": len(found), **detail})
        return found

    fixes = corrections(query, analyzer, index)
    if hits and not fixes:  # hits are weak only when a word was unknown and correctable
        return hits, attempts
    if fixes:
        fixed = attempt(
            "corrected_query",
            corrected_tokens(list(tokens), fixes, analyzer),
            corrected={fix.word: list(fix.terms) for fix in fixes},
        )
        if fixed or hits:
            return fixed or hits, attempts
    keep_stopwords = Analyzer(AnalyzerConfig(stopwords=False, user_words=tuple(user_words)))
    sanitised_tokens = keep_stopwords.tokens(sanitise(query))
    # Only terms the index holds score, and the query's own found nothing: only new ones can.
    new_terms = {t for t in sanitised_tokens if t in index} - set(tokens)
    if new_terms and (found := attempt("sanitised_query", sanitised_tokens)):
        return found, attempts
    matches = fuzzy_titles(query, titles())[:limit]
    chunk_of = first_chunks([doc_id for doc_id, _ in matches])
    found = [(chunk_of[doc_id], score) for doc_id, score in matches if doc_id in chunk_of]
    if allowed is not None:
        permitted = set(allowed.tolist())
        found = [(chunk_id, score) for chunk_id, score in found if chunk_id in permitted]
    attempts.append(
        {
            "rung": "fuzzy_title",
            "terms": [],
            "hits": len(found),
            "titles": [round(score, 3) for _, score in matches[:5]],
        }
    )
    return found, attempts
