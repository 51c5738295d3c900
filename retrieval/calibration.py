"""Label-free calibration of a knowledge base's fusion weights.

Fixed weights are wrong when one leg is weak: an English-only embedding model on Chinese text
drags fixed 0.6/0.4 fusion far below keyword search alone. So each knowledge base measures its
own legs, without labels: pseudo-queries are cut from its own chunks (a window of words of a
sampled chunk), every leg searches for them alone, and a leg is scored by the mean reciprocal
rank of the document the query was cut from.

Weights follow the measured MRRs. RRF is sensitive at the top (a tiny weight still reorders
ranks 1 and 2 of the stronger leg), so a leg that finds the source less than half as often as
the other (MRR below ``DISTRUST_RATIO`` of it) gets weight 0 instead of a small one: fusion
with a leg that is mostly noise is worse than the good leg alone. Windows cut from the text
favour the keyword leg (their words are verbatim), so a vector leg that helps on real
questions still scores below it here; the ratio keeps such a leg and drops a model that does
not know the language (measured on public datasets in docs/performance.md).

By script: a knowledge base mixing Chinese and English documents needs two weight pairs, not
one set mostly by whichever language has more chunks (an English model may be good on its
English chunks and useless on the Chinese ones). So chunks are bucketed by the script writing
most of them (``knowledge.analysis.scripts``); every bucket with at least
``RAG_CALIBRATION_MIN_CHUNKS`` chunks of its own (estimated from a sample in a large knowledge
base) is calibrated on pseudo-queries cut from its own chunks, and a query uses the weights of
its script's bucket (``calibration["scripts"]``). The whole knowledge base's pair stays for
queries of other scripts.

Relevance: a sample of ``RELEVANCE_QUERIES`` pseudo-queries fits the knowledge base's relevance
models (``retrieval.relevance``, kept as ``calibration["relevance"]``): one per chunk from as
many chunks, or several windows of each chunk in a knowledge base with fewer. A fit on one
window of each of 30 chunks swung with the draw: in a 30-chunk knowledge base an unanswerable
question's top relevance came within 0.01-0.03 of an answerable one's for some seeds (margin
0.14 +- 0.07 over 40 seeds), against 0.25 +- 0.05 (least 0.14) with 120 pseudo-queries, the
anchor at 0.5 being a quantile of the positives. Its pseudo-queries are looser
than the weights' (a share of the window's words left out, Chinese cut into two-character
pieces) because real questions rarely quote a chunk. Positives: hits from the document a query
was cut from. Negatives, a third of their weight each: the other hits of those queries, the
best hits of the same queries with their source document excluded (questions the knowledge
base cannot answer), and the best hits of queries cut from unrelated everyday text
(``data/unrelated_text.txt``). Each leg gets its own model, fitted on searches of that leg
alone (a hybrid search weighs the two).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from knowledge.analysis.scripts import dominant_script, script_units
from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import SEARCHABLE_CHUNK
from retrieval.relevance import RelevanceModel, fit
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from tenancy.models import Tenant

SAMPLE = 60
WINDOW_WORDS = 12
WINDOW_HAN_CHARS = 16
DISTRUST_RATIO = 0.5
SEARCH_DEPTH = 20
BUCKET_SAMPLE = 10 * SAMPLE  # chunks read to find the scripts of a large knowledge base
RELEVANCE_QUERIES = 2 * SAMPLE  # answerable pseudo-queries the relevance fit learns from
RELEVANCE_DEPTH = 10  # hits of an answerable pseudo-query the relevance fit learns from
NEGATIVE_DEPTH = 3  # best hits of an unanswerable one
RELEVANCE_DROP = 0.3  # share of a window's words a relevance pseudo-query leaves out
UNRELATED = Path(__file__).with_name("data") / "unrelated_text.txt"
_WORD = re.compile(r"\w+")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Calibration:
    vector_weight: float
    keyword_weight: float
    vector_mrr: float | None
    keyword_mrr: float
    queries: int
    rule: str
    chunks: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def pseudo_query(content: str, rng: random.Random) -> str:
    """A window of the chunk's own words: a dozen words, or 16 characters of Chinese."""
    han = len(_HAN.findall(content))
    words = _WORD.findall(content)
    if han > len(content) / 3:
        text = "".join(content.split())
        width = min(WINDOW_HAN_CHARS, len(text))
        start = rng.randrange(0, len(text) - width + 1)
        return text[start : start + width]
    width = min(WINDOW_WORDS, len(words))
    start = rng.randrange(0, len(words) - width + 1) if words else 0
    return " ".join(words[start : start + width])


def weights_from(vector_mrr: float | None, keyword_mrr: float) -> tuple[float, float, str]:
    if vector_mrr is None:
        return 0.0, 1.0, "no vector leg"
    total = vector_mrr + keyword_mrr
    if total == 0:
        return 0.5, 0.5, "neither leg found its sources; equal weights"
    if vector_mrr < DISTRUST_RATIO * keyword_mrr:
        return 0.0, 1.0, f"vector MRR below {DISTRUST_RATIO:g} x keyword MRR: keyword only"
    if keyword_mrr < DISTRUST_RATIO * vector_mrr:
        return 1.0, 0.0, f"keyword MRR below {DISTRUST_RATIO:g} x vector MRR: vector only"
    return round(vector_mrr / total, 4), round(keyword_mrr / total, 4), "proportional to MRR"


def calibrate(
    tenant: Tenant, knowledge_base: KnowledgeBase, sample: int = SAMPLE, seed: int = 13
) -> Calibration:
    """Measure both legs on pseudo-queries and store the weights on the knowledge base: the
    whole knowledge base's, and each large enough script bucket's."""
    rng = random.Random(f"{seed}:{knowledge_base.pk}")  # noqa: S311 - sampling, not secrets
    chunk_ids = list(
        Chunk.objects.filter(SEARCHABLE_CHUNK, tenant=tenant, knowledge_base=knowledge_base)
        .order_by("pk")  # the seeded sample draws from a fixed order, not the table's
        .values_list("pk", flat=True)
    )
    rows = _sample(chunk_ids, rng, sample)
    overall = _measure(tenant, knowledge_base, rows, rng, len(chunk_ids))
    buckets = _buckets(chunk_ids, rng, sample)
    record = overall.to_dict()
    if len(buckets) > 1:  # one script: the whole knowledge base's pair is that script's
        record["scripts"] = {
            script: _measure(tenant, knowledge_base, rows, rng, size).to_dict()
            for script, (rows, size) in buckets.items()
        }
    _store(tenant, knowledge_base, overall, record)
    # Relevance is fitted on searches with the weights just measured, as searches will run.
    rows = _sample(chunk_ids, rng, RELEVANCE_QUERIES)
    record["relevance"] = fit_relevance(tenant, knowledge_base, rows, rng).to_dict()
    _store(tenant, knowledge_base, overall, record)
    return overall


def _sample(chunk_ids: list[int], rng: random.Random, size: int) -> list[tuple[int, str]]:
    """(document id, content) of ``size`` of ``chunk_ids`` drawn by ``rng`` (all if fewer)."""
    chosen = rng.sample(chunk_ids, min(size, len(chunk_ids)))
    rows = Chunk.objects.filter(pk__in=chosen).order_by("pk").values_list("document_id", "content")
    return list(rows)


def _store(tenant: Tenant, knowledge_base: KnowledgeBase, overall: Calibration, record: dict):
    KnowledgeBase.objects.filter(pk=knowledge_base.pk, tenant=tenant).update(
        calibrated_vector_weight=overall.vector_weight,
        calibrated_keyword_weight=overall.keyword_weight,
        calibrated_at=timezone.now(),
        calibration=record,
    )
    knowledge_base.refresh_from_db()


def relevance_query(content: str, rng: random.Random, foreign: bool = True) -> str:
    """A pseudo-query for the relevance fit: a window of the chunk with ``RELEVANCE_DROP`` of
    its pieces (words; two-character pieces of Chinese) left out and, with ``foreign``, up to
    two pieces of unrelated text of the same script put in (a question's words are rarely all
    the answer's)."""
    pieces = _pieces(pseudo_query(content, rng))
    kept = [piece for piece in pieces if rng.random() >= RELEVANCE_DROP] or pieces
    if foreign and kept:
        han = bool(_HAN.search(kept[0]))
        same = [p for p in unrelated_passages() if bool(_HAN.search(p)) == han]
        extra = _pieces(pseudo_query(rng.choice(same), rng))
        for _ in range(rng.randint(0, 2)):
            kept.insert(rng.randrange(len(kept) + 1), rng.choice(extra))
    return " ".join(kept)


def _pieces(window: str) -> list[str]:
    if " " in window or not _HAN.search(window):
        return window.split()
    return [window[i : i + 2] for i in range(0, len(window), 2)]


@cache
def unrelated_passages() -> tuple[str, ...]:
    lines = UNRELATED.read_text(encoding="utf-8").splitlines()
    return tuple(line for line in lines if line.strip() and not line.startswith("#"))


def fit_relevance(
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    rows: list[tuple[int, str]],
    rng: random.Random,
) -> RelevanceModel:
    """Fit the knowledge base's relevance models on pseudo-queries cut from ``rows`` (document
    id, content), at least ``RELEVANCE_QUERIES`` of them (several windows of each row when there
    are fewer rows), and from unrelated text; see the module docstring."""
    service = RAGService(tenant)
    draws = -(-RELEVANCE_QUERIES // len(rows)) if rows else 0  # windows per row, rounded up
    sources = [
        (doc_id, relevance_query(content, rng)) for doc_id, content in rows for _ in range(draws)
    ]
    sources = [(doc_id, text) for doc_id, text in sources if text.strip()]
    unrelated = [relevance_query(p, rng, foreign=False) for p in unrelated_passages()]
    chunks_of: dict[int, list[int]] = defaultdict(list)
    for doc_id, chunk_id in Chunk.objects.filter(
        tenant=tenant, knowledge_base=knowledge_base, document_id__in={d for d, _ in sources}
    ).values_list("document_id", "pk"):
        chunks_of[doc_id].append(chunk_id)
    modes = ["keyword"]
    if knowledge_base.embedding_provider != KnowledgeBase.EmbeddingProvider.NONE:
        modes.append("vector")
    examples: dict[str, list] = defaultdict(list)
    groups = (len(sources) or 1, len(sources) or 1, len(unrelated) or 1)

    def run(text: str, mode: str, exclude=()):
        # Always RELEVANCE_DEPTH deep, so every search has the same crowd (the lead signals).
        result = service.search(
            text,
            knowledge_base.pk,
            mode=mode,
            top_k=RELEVANCE_DEPTH,
            score_threshold=0.0,
            filters=SearchFilters(exclude_chunk_ids=frozenset(exclude)),
        )
        kb_trace = result.trace.knowledge_bases[0]
        if kb_trace.warnings or kb_trace.retrieval_path != [mode]:
            return None, []  # text the model does not embed, or the leg fell back to the other
        return mode, result.hits

    for mode in modes:
        for doc_id, text in sources:
            legs, hits = run(text, mode)
            others = [hit for hit in hits if hit.document_id != doc_id]
            for hit in hits:
                if hit.document_id == doc_id:
                    examples[legs].append((hit.signals, True, 1 / groups[0]))
                else:
                    examples[legs].append((hit.signals, False, 1 / groups[0] / len(others)))
            legs, hits = run(text, mode, chunks_of[doc_id])
            hits = hits[:NEGATIVE_DEPTH]
            for hit in hits:
                examples[legs].append((hit.signals, False, 1 / groups[1] / len(hits)))
        for text in unrelated:
            legs, hits = run(text, mode)
            hits = hits[:NEGATIVE_DEPTH]
            for hit in hits:
                examples[legs].append((hit.signals, False, 1 / groups[2] / len(hits)))
    models = {legs: fit(legs, found) for legs, found in examples.items() if legs}
    return RelevanceModel({legs: model for legs, model in models.items() if model is not None})


def _buckets(
    chunk_ids: list[int], rng: random.Random, sample: int
) -> dict[str, tuple[list[tuple[int, str]], int]]:
    """Script -> (up to ``sample`` of its chunks as (document id, content), its estimated
    chunk count), for scripts with at least RAG_CALIBRATION_MIN_CHUNKS chunks."""
    rows = _sample(chunk_ids, rng, BUCKET_SAMPLE)
    by_script: dict[str, list[tuple[int, str]]] = {}
    for doc_id, content in rows:
        script = dominant_script(script_units(content))
        if script is not None:
            by_script.setdefault(script.value, []).append((doc_id, content))
    scale = len(chunk_ids) / len(rows) if rows else 0.0
    buckets = {}
    for script, members in sorted(by_script.items()):
        size = round(len(members) * scale)
        if size >= settings.RAG_CALIBRATION_MIN_CHUNKS:
            buckets[script] = (rng.sample(members, min(sample, len(members))), size)
    return buckets


def _measure(
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    rows: list[tuple[int, str]],
    rng: random.Random,
    chunks: int,
) -> Calibration:
    """Both legs' MRR on pseudo-queries cut from ``rows`` (document id, content), the weights
    they give."""
    queries = [(doc_id, pseudo_query(content, rng)) for doc_id, content in rows]
    queries = [(doc_id, text) for doc_id, text in queries if text.strip()]
    service = RAGService(tenant)
    has_vectors = (
        knowledge_base.embedding_provider != KnowledgeBase.EmbeddingProvider.NONE
        and knowledge_base.embedding_dimensions
    )

    def mrr(mode: str) -> float:
        total = 0.0
        for doc_id, text in queries:
            result = service.search(
                text,
                knowledge_base.pk,
                mode=mode,
                top_k=SEARCH_DEPTH,
                score_threshold=0.0,
            )
            if result.trace.mode_used != mode:
                raise _LegUnavailable(mode)
            ranked = list(dict.fromkeys(hit.document_id for hit in result.hits))
            if doc_id in ranked:
                total += 1.0 / (ranked.index(doc_id) + 1)
        return total / len(queries) if queries else 0.0

    keyword_mrr = mrr("keyword")
    vector_mrr = None
    if has_vectors:
        try:
            vector_mrr = mrr("vector")
        except _LegUnavailable:
            vector_mrr = None
    vector_weight, keyword_weight, rule = weights_from(vector_mrr, keyword_mrr)
    return Calibration(
        vector_weight,
        keyword_weight,
        None if vector_mrr is None else round(vector_mrr, 4),
        round(keyword_mrr, 4),
        len(queries),
        rule,
        chunks,
    )


class _LegUnavailable(Exception):
    pass
