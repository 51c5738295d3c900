"""OpenAPI pieces shared by the endpoints: the error body and the error responses."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for programs: e.g. `duplicate_document`.")
    message = serializers.CharField(help_text="For people.")
    details = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Field errors (`fields`) for 400, `existing_document_id` for 409, "
        "`retry_after_s` for 429, per-file `results` for refused uploads...",
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


_DESCRIPTIONS = {
    400: "Invalid request (`details.fields` names the fields).",
    401: "No credentials, an invalid API key, or a revoked one.",
    403: "Authenticated, but the role or the key's scopes do not allow this.",
    404: "No such object in your tenant (another tenant's objects, and knowledge bases a "
    "restricted key may not use, answer exactly like missing ones).",
    409: "Conflict, e.g. the file is already in the knowledge base.",
    413: "Too large.",
    415: "Unsupported file type (or request content type).",
    429: "Too many requests for this key; retry after `Retry-After` seconds.",
    503: "A service it needs (e.g. the embedding API) did not answer; nothing was changed.",
}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses for ``extend_schema(responses=...)``; 401, 403 and 429 always apply."""
    wanted = sorted({401, 403, 429, *statuses})
    return {
        code: OpenApiResponse(ErrorSerializer, description=_DESCRIPTIONS[code]) for code in wanted
    }
