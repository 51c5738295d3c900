"""Dify's External Knowledge API, so Dify apps can use a knowledge base unchanged.

In Dify, register an external knowledge API with endpoint ``https://<host>/api/v1/dify`` (Dify
appends ``/retrieval``) and one of our API keys (``read`` scope); use a knowledge base id as the
External Knowledge ID. Contract (docs.dify.ai, "External Knowledge API"):

- request: ``knowledge_id``, ``query``, ``retrieval_setting`` {``top_k``, ``score_threshold``},
  optional ``metadata_condition`` {``logical_operator``, ``conditions`` [{``name``,
  ``comparison_operator``, ``value``}]} (what is supported: ``dify_conditions``);
- answer: 200 ``{"records": [{"content", "score", "title", "metadata"}]}``, ``score`` being the
  hit's relevance (0-1, what Dify's score_threshold is compared with; records stay in our
  fused order, the fused score is ``metadata.fused_score``), ``metadata`` always an object
  (the document's metadata and where the chunk comes from);
- errors: ``{"error_code", "error_msg"}``: 1001 invalid Authorization header (403), 1002
  authorization failed (403: unknown or revoked key, or no ``read`` scope), 2001 knowledge does
  not exist (404, also for a knowledge base the key may not use). Our own: 3001 invalid request
  (400), 3002 unsupported metadata condition (400), 3003 too many requests (429).
"""

from __future__ import annotations

import re

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback

from retrieval.api.dify_conditions import UnsupportedCondition, filters_from_condition
from retrieval.api.searching import search_knowledge_base
from tenancy.api.authentication import ApiKeyAuthentication
from tenancy.api.errors import translate
from tenancy.api.fields import FieldsOnceSerializer, FiniteFloatField, storable_json
from tenancy.api.permissions import TenantAccess
from tenancy.api.throttling import ApiKeyRateThrottle
from tenancy.roles import Permission

KNOWLEDGE_ID = re.compile(r"[0-9]{1,18}")
INVALID_HEADER, AUTH_FAILED, NO_KNOWLEDGE = 1001, 1002, 2001
INVALID_REQUEST, UNSUPPORTED_CONDITION, THROTTLED = 3001, 3002, 3003


class DifyError(exceptions.APIException):
    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code, self.error_code = http_status, error_code


class RetrievalSettingSerializer(FieldsOnceSerializer):
    """How many records to return at most, and the lowest relevance score a record may have."""

    top_k = serializers.IntegerField(
        min_value=1, help_text=f"At most this many records (above {settings.RAG_MAX_TOP_K}: that)."
    )
    score_threshold = FiniteFloatField(
        min_value=0.0, max_value=1.0, help_text="Drop records scoring below it; 0: keep all."
    )


class ConditionSerializer(FieldsOnceSerializer):
    """One condition on document metadata: ``is``, ``=`` or ``in`` on any metadata field,
    ``before`` or ``after`` on ``upload_date`` or ``created_at``."""

    name = serializers.JSONField(
        help_text="A metadata field name (or a list of names).", validators=[storable_json]
    )
    comparison_operator = serializers.CharField()
    value = serializers.JSONField(required=False, allow_null=True, validators=[storable_json])


class MetadataConditionSerializer(FieldsOnceSerializer):
    """Which documents' chunks may be returned: conditions joined by ``and`` (all must hold) or
    by ``or`` (only across values of one field)."""

    logical_operator = serializers.ChoiceField(choices=["and", "or"], default="and")
    conditions = ConditionSerializer(many=True)


class DifyRetrievalRequestSerializer(FieldsOnceSerializer):
    """Dify's retrieval request: the knowledge base (``knowledge_id``), the query, how many records
    and how relevant (``retrieval_setting``), and optionally a condition on document metadata."""

    knowledge_id = serializers.CharField(max_length=100, help_text="A knowledge base id.")
    query = serializers.CharField(max_length=settings.RAG_MAX_QUERY_CHARS)
    retrieval_setting = RetrievalSettingSerializer()
    metadata_condition = MetadataConditionSerializer(required=False, allow_null=True)


class DifyRecordSerializer(serializers.Serializer):
    content = serializers.CharField(allow_blank=True)
    score = serializers.FloatField()
    title = serializers.CharField(allow_blank=True)
    metadata = serializers.DictField(child=serializers.JSONField())


class DifyRetrievalResponseSerializer(serializers.Serializer):
    records = DifyRecordSerializer(many=True)


class DifyErrorSerializer(serializers.Serializer):
    error_code = serializers.IntegerField()
    error_msg = serializers.CharField()


def _error(exc: Exception) -> DifyError | None:
    exc = translate(exc)
    if isinstance(exc, DifyError):
        return exc
    if isinstance(exc, exceptions.NotAuthenticated):
        return DifyError(
            403,
            INVALID_HEADER,
            "Invalid Authorization header format. Expected 'Bearer <api-key>' format.",
        )
    if isinstance(exc, exceptions.AuthenticationFailed):
        if exc.get_codes() == "invalid_authorization_header":
            return DifyError(
                403,
                INVALID_HEADER,
                "Invalid Authorization header format. Expected 'Bearer <api-key>' format.",
            )
        return DifyError(403, AUTH_FAILED, f"Authorization failed: {exc.detail}")
    if isinstance(exc, exceptions.PermissionDenied):
        return DifyError(403, AUTH_FAILED, f"Authorization failed: {exc.detail}")
    if isinstance(exc, exceptions.NotFound):
        return DifyError(404, NO_KNOWLEDGE, "The knowledge does not exist.")
    if isinstance(exc, exceptions.Throttled):
        return DifyError(429, THROTTLED, str(exc.detail))
    if isinstance(exc, exceptions.APIException) and exc.status_code < 500:
        message = exc.detail if isinstance(exc.detail, str) else _flatten(exc.detail)
        return DifyError(400, INVALID_REQUEST, f"Invalid request: {message}")
    return None  # a server error: Django logs it and answers 500


def _flatten(detail, path: str = "") -> str:
    if isinstance(detail, dict):
        return "; ".join(_flatten(v, f"{path}.{k}".strip(".")) for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(v, path) for v in detail)
    return f"{path}: {detail}" if path else str(detail)


def dify_exception_handler(exc: Exception, context: dict) -> Response | None:
    error = _error(exc)
    if error is None:
        return None
    set_rollback()
    body = {"error_code": error.error_code, "error_msg": str(error.detail)}
    headers = {}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(int(exc.wait + 0.999))
    return Response(body, status=error.status_code, headers=headers)


def _record(hit) -> dict:
    metadata = {
        **hit.metadata,
        "document_id": hit.document_id,
        "knowledge_base_id": hit.knowledge_base_id,
        "chunk_id": hit.chunk_id,
        "original_filename": hit.original_filename,
        "page": hit.page,
        "heading_path": hit.heading_path,
        "start_char": hit.start_char,
        "end_char": hit.end_char,
        "fused_score": hit.score,
    }
    return {
        "content": hit.content,
        "score": hit.relevance,
        "title": hit.document_title,
        "metadata": metadata,
    }


class DifyRetrievalView(APIView):
    """``POST /api/v1/dify/retrieval``: see the module docstring."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [TenantAccess]
    throttle_classes = [ApiKeyRateThrottle]

    def required_permission(self, request) -> Permission:
        return Permission.READ

    def get_exception_handler(self):
        return dify_exception_handler

    def get_authenticate_header(self, request) -> str | None:
        return None  # Dify expects 403 for credential problems, not 401

    @extend_schema(
        summary="Dify External Knowledge API: retrieval",
        description=__doc__,
        request=DifyRetrievalRequestSerializer,
        responses={
            200: DifyRetrievalResponseSerializer,
            400: OpenApiResponse(DifyErrorSerializer, description="3001 or 3002"),
            403: OpenApiResponse(DifyErrorSerializer, description="1001 or 1002"),
            404: OpenApiResponse(DifyErrorSerializer, description="2001"),
            429: OpenApiResponse(DifyErrorSerializer, description="3003"),
        },
        examples=[
            OpenApiExample(
                "Request",
                request_only=True,
                value={
                    "knowledge_id": "1",
                    "query": "What is Dify?",
                    "retrieval_setting": {"top_k": 3, "score_threshold": 0.5},
                    "metadata_condition": {
                        "logical_operator": "and",
                        "conditions": [
                            {"name": ["category"], "comparison_operator": "is", "value": "AI"}
                        ],
                    },
                },
            )
        ],
        tags=["Dify"],
    )
    def post(self, request):
        serializer = DifyRetrievalRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        knowledge_id = data["knowledge_id"].strip()
        if not KNOWLEDGE_ID.fullmatch(knowledge_id):
            raise exceptions.NotFound()
        try:
            filters = filters_from_condition(data.get("metadata_condition"))
        except UnsupportedCondition as exc:
            raise DifyError(
                400, UNSUPPORTED_CONDITION, f"Unsupported metadata_condition: {exc}"
            ) from None
        setting = data["retrieval_setting"]
        result = search_knowledge_base(
            request.access,
            data["query"],
            int(knowledge_id),
            top_k=min(setting["top_k"], settings.RAG_MAX_TOP_K),
            score_threshold=setting["score_threshold"],
            filters=filters,
        )
        records = [_record(hit) for hit in result.hits]
        body = DifyRetrievalResponseSerializer({"records": records}).data
        return Response(body, status=status.HTTP_200_OK)
