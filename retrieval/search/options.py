"""A request's options, settled: the query cleaned, the overrides checked and applied, and for
each knowledge base a ``Plan`` (its top_k, candidates per leg, the legs wanted and their
weights and where they come from, rerank): immutable, the legs read it and return what they
found (``retrieval.search.legs``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from django.conf import settings

from knowledge.analysis.scripts import Script, dominant_script, uncovered_share
from knowledge.embeddings.coverage import coverage, describe
from knowledge.models import KnowledgeBase
from retrieval.search.errors import InvalidSearch
from retrieval.search.types import (
    KnowledgeBaseTrace,
    Leg,
    SearchFilters,
    SearchMode,
    SearchOptions,
    WeightSource,
)


@dataclass(frozen=True)
class Plan:
    """One knowledge base's settled options. The legs read it and return what they found;
    ``trace`` is the record of its search, which each step writes."""

    kb: KnowledgeBase
    top_k: int
    candidates: int  # fetched by each leg
    wanted: frozenset[Leg]  # the legs the mode, else the weights, ask for
    weights: Mapping[Leg, float]  # the legs' fusion weights (a mode of one leg: it weighs 1)
    weight_source: str
    rerank: bool
    rerank_top_n: int
    trace: KnowledgeBaseTrace


def clean_query(query: str) -> str:
    if not isinstance(query, str):
        raise InvalidSearch("query must be text")
    cleaned = query.replace("\x00", " ").strip()
    if not cleaned:
        raise InvalidSearch("query is empty")
    limit = settings.RAG_MAX_QUERY_CHARS
    if len(cleaned) > limit:
        raise InvalidSearch(f"query is longer than {limit} characters")
    return cleaned


def settle(options: SearchOptions, overrides: dict) -> SearchOptions:
    """``options`` with the keyword overrides of a search call applied (None: not given)."""
    unknown = set(overrides) - set(SearchOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown search options: {', '.join(sorted(unknown))}")
    if overrides.get("filters") is not None:
        try:
            overrides["filters"] = SearchFilters.from_dict(overrides["filters"])
        except ValueError as exc:
            raise InvalidSearch(str(exc)) from None
    if overrides.get("mode") is not None:
        try:
            overrides["mode"] = SearchMode(overrides["mode"])
        except ValueError:
            modes = ", ".join(m.value for m in SearchMode)
            raise InvalidSearch(f"mode must be one of {modes}") from None
    options = replace(options, **{k: v for k, v in overrides.items() if v is not None})
    options = _use_rerank(options)
    if options.top_k is not None and not 1 <= options.top_k <= settings.RAG_MAX_TOP_K:
        raise InvalidSearch(f"top_k must be between 1 and {settings.RAG_MAX_TOP_K}")
    for name in ("vector_weight", "keyword_weight"):
        value = getattr(options, name)
        if value is not None and value < 0:
            raise InvalidSearch(f"{name} must be >= 0")
    if options.vector_weight == 0 and options.keyword_weight == 0:
        raise InvalidSearch("vector_weight and keyword_weight cannot both be 0")
    return options


def _use_rerank(options: SearchOptions) -> SearchOptions:
    """The seeds' ``use_rerank``: true means 3x candidates fused from both legs, false means
    the vector leg's results only. A mode that says otherwise is a contradiction."""
    if options.use_rerank is None:
        return options
    if options.use_rerank:
        if options.mode in (SearchMode.VECTOR, SearchMode.KEYWORD):
            raise InvalidSearch(
                f"use_rerank=true fuses both legs; it contradicts mode={options.mode}"
            )
        return replace(options, candidate_multiplier=options.candidate_multiplier or 3)
    if options.mode not in (SearchMode.AUTO, SearchMode.VECTOR):
        raise InvalidSearch(
            f"use_rerank=false returns vector results only; it contradicts mode={options.mode}"
        )
    return replace(options, mode=SearchMode.VECTOR)


def plan_for(kb: KnowledgeBase, options: SearchOptions, query_units: Counter[Script]) -> Plan:
    """The knowledge base's defaults overridden by the request's options, and the language
    rule applied to the weights (``query_units``: the query's script units)."""
    top_k = options.top_k or kb.top_k
    leg_weights, source = weights(kb, options, query_units)
    trace = KnowledgeBaseTrace(
        knowledge_base_id=kb.pk, name=kb.name, weights={}, weight_source=source
    )
    language_rule(kb, options, leg_weights, source, query_units, trace)
    trace.weights = {str(leg): weight for leg, weight in leg_weights.items()}
    wanted = wanted_legs(options.mode, leg_weights)
    if options.mode in (SearchMode.VECTOR, SearchMode.KEYWORD):  # its one leg weighs all
        leg_weights = {leg: 1.0 for leg in wanted}
    return Plan(
        kb=kb,
        top_k=top_k,
        candidates=top_k * (options.candidate_multiplier or kb.candidate_multiplier),
        wanted=frozenset(wanted),
        weights=leg_weights,
        weight_source=source,
        rerank=kb.rerank_enabled if options.rerank is None else options.rerank,
        rerank_top_n=options.rerank_top_n or kb.rerank_top_n,
        trace=trace,
    )


def wanted_legs(mode: SearchMode, weights: Mapping[Leg, float]) -> set[Leg]:
    if mode == SearchMode.VECTOR:
        return {Leg.VECTOR}
    if mode == SearchMode.KEYWORD:
        return {Leg.KEYWORD}
    return {leg for leg, weight in weights.items() if weight > 0}


def language_rule(
    kb: KnowledgeBase,
    options: SearchOptions,
    leg_weights: dict[Leg, float],
    source: str,
    query_units: Counter[Script],
    trace: KnowledgeBaseTrace,
) -> None:
    """Turn the vector leg off (in ``leg_weights``) for a query mostly written in scripts the
    knowledge base's embedding model does not cover, when the weights are the knowledge
    base's own, and say so in ``trace.language``; weights or a vector mode given with the
    request are honoured, with a warning in ``trace.warnings``."""
    if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE or not leg_weights.get(
        Leg.VECTOR
    ):
        return
    covered = coverage(kb.embedding_provider, kb.embedding_model, kb.embedding_scripts)
    if uncovered_share(query_units, covered) <= 0.5:
        return
    outside = ", ".join(s.value for s in Script if query_units[s] and s not in covered)
    model = kb.embedding_model or kb.embedding_provider
    why = f"the query is {outside} text and {model} embeds {describe(covered)}"
    if source == WeightSource.QUERY or options.mode == SearchMode.VECTOR:
        trace.warnings.append(f"{why}; the vector leg runs as the request asked")
        return
    leg_weights[Leg.VECTOR] = 0.0
    if not leg_weights.get(Leg.KEYWORD):
        leg_weights[Leg.KEYWORD] = 1.0
    trace.language = f"vector leg off: {why}"


def weights(
    kb: KnowledgeBase, options: SearchOptions, query_units: Counter[Script] | None = None
) -> tuple[dict[Leg, float], str]:
    """The fusion weight of each leg and where they come from: the request's, else the
    knowledge base's calibrated weights once measured (those of the query's script when the
    knowledge base calibrated that script on its own: source ``calibrated:<script>``), else its
    fixed ones."""
    script = dominant_script(query_units) if query_units else None
    by_script = ((kb.calibration or {}).get("scripts") or {}).get(script.value if script else "")
    if kb.weight_mode == KnowledgeBase.WeightMode.CALIBRATED and by_script:
        base = {Leg.VECTOR: by_script["vector_weight"], Leg.KEYWORD: by_script["keyword_weight"]}
        source = f"{WeightSource.CALIBRATED}:{script}"
    elif (
        kb.weight_mode == KnowledgeBase.WeightMode.CALIBRATED
        and kb.calibrated_vector_weight is not None
    ):
        base = {Leg.VECTOR: kb.calibrated_vector_weight, Leg.KEYWORD: kb.calibrated_keyword_weight}
        source = WeightSource.CALIBRATED
    elif kb.weight_mode == KnowledgeBase.WeightMode.FIXED:
        base = {Leg.VECTOR: kb.vector_weight, Leg.KEYWORD: kb.keyword_weight}
        source = WeightSource.FIXED
    else:  # calibration asked for but not run yet
        base = {Leg.VECTOR: kb.vector_weight, Leg.KEYWORD: kb.keyword_weight}
        source = WeightSource.DEFAULT
    if options.vector_weight is not None or options.keyword_weight is not None:
        if options.vector_weight is not None:
            base[Leg.VECTOR] = options.vector_weight
        if options.keyword_weight is not None:
            base[Leg.KEYWORD] = options.keyword_weight
        source = WeightSource.QUERY
    return {leg: float(w) for leg, w in base.items()}, str(source)
