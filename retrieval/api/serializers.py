"""Request and response bodies of the search endpoints."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from retrieval.search import SearchResult
from retrieval.search.types import SearchFilters, SearchMode
from tenancy.api.fields import FieldsOnceSerializer, FiniteFloatField, id_field, storable_json

# ---------------------------------------------------------------- requests


class SearchFiltersSerializer(FieldsOnceSerializer):
    """Which chunks a search may return: every filter given must hold; an omitted or null one
    filters nothing."""

    document_ids = serializers.ListField(
        child=id_field(),
        max_length=1000,
        required=False,
        allow_null=True,
        help_text="Only chunks of these documents.",
    )
    metadata = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="Document metadata to match: equality, or any of a list: "
        '{"project": "apollo", "lang": ["en", "de"]}. All keys must match.',
    )
    max_age_days = FiniteFloatField(
        min_value=0.0,
        max_value=36_500.0,
        required=False,
        allow_null=True,
        help_text="Only documents uploaded in the last N days.",
    )
    created_after = serializers.DateTimeField(required=False, allow_null=True)
    created_before = serializers.DateTimeField(required=False, allow_null=True)
    exclude_chunk_ids = serializers.ListField(
        child=id_field(),
        max_length=1000,
        required=False,
        allow_null=True,
        help_text="Never return these chunks (e.g. the ones an agent has already seen).",
    )

    def validate_metadata(self, value: dict) -> dict:
        if len(value) > 50:
            raise serializers.ValidationError("At most 50 metadata keys.")
        return storable_json(value)


class SearchOptionsSerializer(FieldsOnceSerializer):
    """What every search request may set; omitted options take the knowledge base's defaults."""

    query = serializers.CharField(max_length=settings.RAG_MAX_QUERY_CHARS)
    top_k = serializers.IntegerField(
        min_value=1, max_value=settings.RAG_MAX_TOP_K, required=False, allow_null=True
    )
    mode = serializers.ChoiceField(
        choices=[m.value for m in SearchMode],
        default=SearchMode.AUTO.value,
        help_text="auto: hybrid when both legs can run, else the one that can.",
    )
    vector_weight = FiniteFloatField(
        min_value=0.0, max_value=100.0, required=False, allow_null=True
    )
    keyword_weight = FiniteFloatField(
        min_value=0.0, max_value=100.0, required=False, allow_null=True
    )
    score_threshold = FiniteFloatField(
        min_value=0.0,
        max_value=1.0,
        required=False,
        allow_null=True,
        help_text="Drop hits whose relevance (0-1) is below it; the order stays fused. 0.5: "
        "as likely to answer the query as not, by the knowledge base's own calibration.",
    )
    candidate_multiplier = serializers.IntegerField(
        min_value=1, max_value=50, required=False, allow_null=True
    )
    rerank = serializers.BooleanField(required=False, allow_null=True, default=None)
    rerank_top_n = serializers.IntegerField(
        min_value=1, max_value=200, required=False, allow_null=True
    )
    use_rerank = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The seeds' option, not the cross-encoder: true fuses both legs over 3x "
        "candidates (the default hybrid search); false returns vector results only.",
    )
    filters = SearchFiltersSerializer(required=False)
    explain = serializers.BooleanField(
        default=False,
        help_text="Return the whole trace (legs, candidates, ladder, rerank, timings per "
        "knowledge base); otherwise a summary: modes, path, fallbacks, weights, counts, time.",
    )

    def search_options(self) -> dict:
        """Keyword options for RAGService.search (None: the knowledge base's default)."""
        data = self.validated_data
        names = (
            "top_k",
            "mode",
            "vector_weight",
            "keyword_weight",
            "score_threshold",
            "candidate_multiplier",
            "rerank",
            "rerank_top_n",
            "use_rerank",
        )
        options = {name: data.get(name) for name in names}
        options["filters"] = SearchFilters.from_dict(data.get("filters"))
        return options


class KnowledgeBaseIdsMixin(FieldsOnceSerializer):
    knowledge_base_ids = serializers.ListField(
        child=id_field(), min_length=1, max_length=20, help_text="Knowledge bases to search."
    )


class MultiSearchRequestSerializer(KnowledgeBaseIdsMixin, SearchOptionsSerializer):
    pass


class ContextRequestSerializer(SearchOptionsSerializer):
    max_chars = serializers.IntegerField(
        min_value=200,
        max_value=200_000,
        default=6000,
        help_text="Budget of the context text; a chunk that does not fit is cut with a marker "
        "or left out, and the text says so.",
    )


class MultiContextRequestSerializer(KnowledgeBaseIdsMixin, ContextRequestSerializer):
    pass


# ---------------------------------------------------------------- responses


class HitSerializer(serializers.Serializer):
    rank = serializers.IntegerField(help_text="1-based position in the results.")
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    knowledge_base_id = serializers.IntegerField()
    document_title = serializers.CharField(allow_blank=True)
    original_filename = serializers.CharField(allow_blank=True)
    content = serializers.CharField(allow_blank=True)
    score = serializers.FloatField(
        help_text="Fused score, 0-1 (1 = first in every leg): orders the hits, compare within "
        "one search only."
    )
    relevance = serializers.FloatField(
        allow_null=True,
        help_text="How likely the hit answers the query, 0-1, comparable across queries "
        "(score_threshold cuts it). 0.5: as likely as not.",
    )
    vector_similarity = serializers.FloatField(allow_null=True)
    vector_rank = serializers.IntegerField(allow_null=True)
    bm25_score = serializers.FloatField(allow_null=True)
    bm25_rank = serializers.IntegerField(allow_null=True)
    rerank_score = serializers.FloatField(allow_null=True)
    page = serializers.IntegerField(allow_null=True)
    start_char = serializers.IntegerField()
    end_char = serializers.IntegerField()
    heading_path = serializers.ListField(child=serializers.CharField(allow_blank=True))
    metadata = serializers.DictField(child=serializers.JSONField())
    position = serializers.IntegerField(help_text="The chunk's position in its document.")


class LegTraceSerializer(serializers.Serializer):
    ran = serializers.BooleanField()
    skipped_reason = serializers.CharField(allow_null=True)
    candidates = serializers.IntegerField()
    ms = serializers.FloatField()
    detail = serializers.DictField(child=serializers.JSONField())


EXPLAIN_ONLY = {"required": False, "help_text": "With explain=true only."}


class TraceSerializer(serializers.Serializer):
    mode_requested = serializers.CharField()
    mode_used = serializers.CharField()
    retrieval_path = serializers.ListField(child=serializers.CharField())
    fallbacks = serializers.ListField(
        child=serializers.CharField(), help_text="Every fallback taken, e.g. no embedder."
    )
    weights = serializers.DictField(child=serializers.FloatField())
    weight_source = serializers.CharField()
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the caller should know, e.g. weights given with the request that make "
        "the vector leg embed text in a script its model does not cover.",
    )
    top_k = serializers.IntegerField()
    results = serializers.IntegerField()
    total_ms = serializers.FloatField()
    query_script = serializers.CharField(
        allow_null=True,
        required=False,
        help_text="With explain=true only. The script writing most of the query (latin, han...).",
    )
    k = serializers.IntegerField(**EXPLAIN_ONLY)
    candidate_count = serializers.IntegerField(**EXPLAIN_ONLY)
    vector = LegTraceSerializer(**EXPLAIN_ONLY)
    keyword = LegTraceSerializer(**EXPLAIN_ONLY)
    retry_ladder = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()), **EXPLAIN_ONLY
    )
    fusion_ms = serializers.FloatField(**EXPLAIN_ONLY)
    rerank = serializers.DictField(child=serializers.JSONField(), **EXPLAIN_ONLY)
    filters = serializers.DictField(child=serializers.JSONField(), **EXPLAIN_ONLY)
    knowledge_bases = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()), **EXPLAIN_ONLY
    )
    database = serializers.ChoiceField(
        choices=["primary", "replica"],
        help_text="With explain=true only. Which database served the legs and the hydration: "
        "a replica (DATABASE_REPLICA_URL) holding the versions the search read, else the "
        "primary.",
        required=False,
    )
    replica_lag_fallback = serializers.BooleanField(
        help_text="With explain=true only. True when a replica was passed over because it was "
        "behind the primary.",
        required=False,
    )


SUMMARY_TRACE_FIELDS = (
    "mode_requested",
    "mode_used",
    "retrieval_path",
    "fallbacks",
    "weights",
    "weight_source",
    "warnings",
    "top_k",
    "results",
    "total_ms",
)


class SearchResponseSerializer(serializers.Serializer):
    results = HitSerializer(many=True)
    trace = TraceSerializer()


class ContextResponseSerializer(serializers.Serializer):
    context = serializers.CharField(
        help_text="Numbered chunks [1], [2]... with title and page, then the sources."
    )
    results = HitSerializer(many=True, help_text="The hits, numbered as in the context.")
    trace = TraceSerializer()


def present(result: SearchResult, explain: bool) -> dict:
    """A SearchResult as the response body: hits ranked from 1, the trace whole or summed up.

    It is already what ``SearchResponseSerializer`` (and with ``context``,
    ``ContextResponseSerializer``) renders, so the views send it as it is: the serializers
    describe the body in the OpenAPI schema, and passing the body through them would deep-copy
    some 60 fields per request to rebuild an equal dict, a share of the web worker's CPU on
    every search. ``tests/api/test_search_body.py`` checks that the two stay equal."""
    body = result.to_dict(None if explain else SUMMARY_TRACE_FIELDS)
    for rank, hit in enumerate(body["results"], start=1):
        hit["rank"] = rank
    if not explain:
        body["trace"]["query_script"] = None  # as the serializer renders the absent field
    return body
