"""The keyword leg's retry ladder, for queries whose BM25 search found nothing.

Rungs, stopping at the first that finds something, every attempt recorded for the trace:

1. ``strongest_term``: the query's single most selective known term (highest idf), alone.
2. ``sanitised_query``: punctuation and query syntax dropped, identifiers split at letter/digit
   and case boundaries (``TH-01?`` -> ``TH 01``), stopwords kept.
3. ``sanitised_strongest_term``: the strongest term of the sanitised query.
4. ``fuzzy_title``: documents whose title shares character trigrams with the query with a
   Jaccard similarity >= 0.3 (typos, transliterations); their first chunks are returned.

Pure functions here; the search service supplies the index and the titles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from knowledge.analysis import Analyzer, AnalyzerConfig, normalize
from retrieval.bm25 import BM25Index

FUZZY_TITLE_MIN_JACCARD = 0.3
_CASE_OR_DIGIT_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_NOT_WORD = re.compile(r"[^\w]+")


def sanitise(query: str) -> str:
    spaced = _CASE_OR_DIGIT_BOUNDARY.sub(" ", query)
    return " ".join(_NOT_WORD.sub(" ", spaced).split())


def strongest_term(index: BM25Index, tokens: Sequence[str]) -> str | None:
    known = [(index.idf(t), t) for t in dict.fromkeys(tokens) if index.idf(t) is not None]
    if not known:
        return None
    return max(known, key=lambda pair: (pair[0], pair[1]))[1]


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
    """(document id, similarity) of titles similar to the query, best first."""
    wanted = trigrams(query)
    scored = [(doc_id, jaccard(wanted, trigrams(title))) for doc_id, title in titles]
    return sorted(
        [(doc_id, score) for doc_id, score in scored if score >= minimum],
        key=lambda pair: (-pair[1], pair[0]),
    )


def run_ladder(
    *,
    query: str,
    tokens: Sequence[str],
    index: BM25Index,
    limit: int,
    allowed: np.ndarray | None,
    user_words: Sequence[str],
    titles: Callable[[], Iterable[tuple[int, str]]],
    first_chunks: Callable[[list[int]], dict[int, int]],
) -> tuple[list[tuple[int, float]], list[dict]]:
    """Climb the ladder; returns (hits as (chunk id, score), attempts)."""
    attempts: list[dict] = []

    def attempt(rung: str, terms: Sequence[str] | None) -> list[tuple[int, float]]:
        hits = index.search(list(terms), limit, allowed) if terms else []
        attempts.append({"rung": rung, "terms": list(terms or []), "hits": len(hits)})
        return hits

    term = strongest_term(index, tokens)
    if hits := attempt("strongest_term", [term] if term else None):
        return hits, attempts
    keep_stopwords = Analyzer(AnalyzerConfig(stopwords=False, user_words=tuple(user_words)))
    sanitised_tokens = keep_stopwords.tokens(sanitise(query))
    if hits := attempt("sanitised_query", sanitised_tokens):
        return hits, attempts
    term = strongest_term(index, sanitised_tokens)
    if hits := attempt("sanitised_strongest_term", [term] if term else None):
        return hits, attempts
    matches = fuzzy_titles(query, titles())[:limit]
    chunk_of = first_chunks([doc_id for doc_id, _ in matches])
    hits = [(chunk_of[doc_id], score) for doc_id, score in matches if doc_id in chunk_of]
    if allowed is not None:
        permitted = set(allowed.tolist())
        hits = [(chunk_id, score) for chunk_id, score in hits if chunk_id in permitted]
    attempts.append(
        {
            "rung": "fuzzy_title",
            "terms": [],
            "hits": len(hits),
            "titles": [round(score, 3) for _, score in matches[:5]],
        }
    )
    return hits, attempts
