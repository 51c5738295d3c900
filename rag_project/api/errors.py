"""One error shape for every API answer that is not a success:

    {"error": {"code": "duplicate_document", "message": "...", "details": {...}}}

``code`` is stable and meant for programs; ``message`` is for people; ``details`` is an object
(field errors for 400 validation, ``existing_document_id`` for 409, ``retry_after_s`` for 429...).
Domain exceptions of ``knowledge`` map to their status here (``retrieval.api.errors`` maps the
search ones), so views never build error responses themselves.
"""

from __future__ import annotations

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.fields import get_error_detail
from rest_framework.response import Response
from rest_framework.views import set_rollback

from knowledge.embeddings import EmbeddingError
from knowledge.ingestion.parsing import FileTooLarge, ParseError, UnsupportedFileType
from knowledge.models import ApiKey, Chunk, Document, KnowledgeBase
from knowledge.services.api_keys import InvalidKnowledgeBases
from knowledge.services.documents import DuplicateDocument

API_PREFIX = "/api/"


class ApiError(exceptions.APIException):
    """An APIException that carries ``details`` for the error body."""

    def __init__(self, detail=None, code=None, details: dict | None = None) -> None:
        super().__init__(detail, code)
        self.details = details or {}


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the current state."


class PayloadTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request is too large."


class UnsupportedType(ApiError):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    default_code = "unsupported_file_type"
    default_detail = "The file type is not supported."


class BadRequest(ApiError):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "The request is not valid."


_NOT_FOUND = {
    KnowledgeBase.DoesNotExist: "Knowledge base not found.",
    Document.DoesNotExist: "Document not found.",
    Chunk.DoesNotExist: "Chunk not found.",
    ApiKey.DoesNotExist: "API key not found.",
}


def translate(exc: Exception) -> Exception:
    """The APIException a domain or Django exception answers as (others are returned as is)."""
    if isinstance(exc, exceptions.APIException):
        return exc
    for model_error, message in _NOT_FOUND.items():
        if isinstance(exc, model_error):
            return exceptions.NotFound(message)
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return exceptions.NotFound()
    if isinstance(exc, DuplicateDocument):
        return duplicate_error(exc)
    if isinstance(exc, FileTooLarge):
        return PayloadTooLarge(str(exc), code="file_too_large")
    if isinstance(exc, UnsupportedFileType):
        return UnsupportedType(str(exc), code="unsupported_file_type")
    if isinstance(exc, ParseError):
        return BadRequest(str(exc), code="unreadable_file")
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(str(exc), code="request_too_large")
    if isinstance(exc, EmbeddingError | InvalidKnowledgeBases):
        return BadRequest(str(exc), code="invalid")
    if isinstance(exc, DjangoValidationError):
        detail = get_error_detail(exc)
        if isinstance(detail, dict) and "__all__" in detail:
            detail["non_field_errors"] = detail.pop("__all__")
        return exceptions.ValidationError(detail)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, SuspiciousOperation):
        return BadRequest(str(exc) or "The request is not valid.", code="bad_request")
    return exc


def duplicate_error(exc: DuplicateDocument) -> Conflict:
    existing = exc.existing
    return Conflict(
        f"This file is already in the knowledge base as document {existing.pk}; "
        "upload it with replace=true to process it again.",
        code="duplicate_document",
        details={"existing_document_id": existing.pk},
    )


def error_body(code: str, message: str, details: dict | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def describe(exc: exceptions.APIException) -> dict:
    """The error body of an APIException."""
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return error_body("invalid", _first_message(fields), {"fields": fields})
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else exc.default_code
    details = dict(getattr(exc, "details", {}))
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        details["retry_after_s"] = int(exc.wait + 0.999)
    return error_body(code, str(exc.detail), details)


def _first_message(errors, path: str = "") -> str:
    if isinstance(errors, dict):
        for key, value in errors.items():
            where = key if key == "non_field_errors" else f"{path}.{key}".strip(".")
            return _first_message(value, "" if where == "non_field_errors" else where)
    if isinstance(errors, list) and errors:
        return _first_message(errors[0], path)
    return f"{path}: {errors}" if path else str(errors)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every handled exception as the one error shape. Unhandled ones
    return None and become a 500 (logged by Django, answered by ``server_error`` below)."""
    exc = translate(exc)
    if not isinstance(exc, exceptions.APIException):
        return None
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(int(exc.wait + 0.999))
    set_rollback()
    return Response(describe(exc), status=exc.status_code, headers=headers)


def not_found(request, exception=None):
    """handler404: JSON in the error shape under /api/, Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """handler500: JSON in the error shape under /api/, Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(
            error_body("server_error", "The server failed to answer; the error was logged."),
            status=500,
        )
    return defaults.server_error(request)
