"""Deterministic synthetic corpora and queries for BM25 benchmarks.

Real chunk tokens follow Zipf's law: a few terms occur in almost every chunk and most terms are
rare. That shape is what makes BM25 expensive (long postings for common terms) and what makes
an inverted index pay off (rare terms touch few documents), so the benchmark corpus mimics it:
term ranks are drawn from a finite Zipf distribution (exponent 1), document lengths vary around
a mean (gamma-distributed), and every seventh rank is a Chinese-looking word so that non-ASCII
terms go through the same paths as ASCII ones. Everything is drawn from one seeded numpy
Generator, so a (docs, vocab, mean_len, seed) tuple always yields the same corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_ZIPF_EXPONENT = 1.0
# Distinct CJK characters from the product domain (sensors, devices, data); words are built
# from them as base-len digits of the rank, so each is unique and deterministic.
_CJK_CHARS = "传感器温度压力设备数据系统监测报警阈值电流功率量液位振动频通信模块网关协议"


def _term(rank: int) -> str:
    if rank % 7 != 3:
        return f"t{rank}"
    code, chars = rank // 7, []
    while code or len(chars) < 2:
        code, digit = divmod(code, len(_CJK_CHARS))
        chars.append(_CJK_CHARS[digit])
    return "".join(chars)


def zipf_corpus(
    docs: int, vocab: int = 50_000, mean_len: int = 120, seed: int = 7
) -> list[list[str]]:
    """Return `docs` token lists whose terms follow a Zipf distribution over `vocab` terms.

    Term strings are shared objects (one `str` per vocabulary entry), so a 100k-document corpus
    costs list pointers, not 12M separate strings.
    """
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** _ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    # Gamma with shape 4 gives a standard deviation of half the mean: short and long chunks.
    lengths = np.maximum(1, np.rint(rng.gamma(4.0, mean_len / 4.0, size=docs))).astype(np.int64)
    ranks = np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right")
    np.minimum(ranks, vocab - 1, out=ranks)  # guard against cdf[-1] rounding below 1.0
    terms = np.array([_term(rank) for rank in range(vocab)], dtype=object)
    flat = terms[ranks].tolist()
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [flat[start:end] for start, end in zip(starts, ends, strict=True)]


def sample_queries(corpus: Sequence[Sequence[str]], n: int, seed: int = 7) -> list[list[str]]:
    """Return `n` queries of 2-5 distinct terms, each drawn from one random non-empty document.

    Drawing from a document's distinct terms (not its token stream) guarantees at least one hit
    and mixes common terms with rare ones, as typed queries do.
    """
    rng = np.random.default_rng([seed, 1])
    non_empty = [doc for doc in corpus if doc]
    if not non_empty:
        return []
    queries = []
    for doc_index in rng.integers(0, len(non_empty), size=n).tolist():
        distinct = list(dict.fromkeys(non_empty[doc_index]))
        size = min(int(rng.integers(2, 6)), len(distinct))
        picks = rng.choice(len(distinct), size=size, replace=False).tolist()
        queries.append([distinct[i] for i in picks])
    return queries
