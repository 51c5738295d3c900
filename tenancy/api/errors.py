"""One error shape for every API answer that is not a success, and the one place that maps
errors to HTTP:

    {"error": {"code": "duplicate_document", "message": "...", "details": {...}}}

``code`` is stable and meant for programs; ``message`` is for people; ``details`` is an object
(field errors for 400 validation, ``existing_document_id`` for 409, ``retry_after_s`` for 429...).
Domain errors (``tenancy.errors.DomainError`` and the exceptions of ``knowledge`` and
``retrieval`` derived from it) answer with the status of their ``kind``; a model's DoesNotExist
answers 404 naming the model; views never build error responses themselves. A request that
loses a race to a concurrent one at a database constraint (the same name taken at the same
moment, a row deleted while referenced) answers 409 ``conflict``: sent again, it sees the
winner and gets the ordinary answer.
"""

from __future__ import annotations

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.http import Http404, JsonResponse
from django.views import defaults
from psycopg import errors as pg_errors
from rest_framework import exceptions, status
from rest_framework.fields import get_error_detail
from rest_framework.response import Response
from rest_framework.views import set_rollback

from tenancy.errors import DomainError, ErrorKind

API_PREFIX = "/api/"

STATUS_OF_KIND = {
    ErrorKind.NOT_FOUND: status.HTTP_404_NOT_FOUND,
    ErrorKind.INVALID: status.HTTP_400_BAD_REQUEST,
    ErrorKind.CONFLICT: status.HTTP_409_CONFLICT,
    ErrorKind.TOO_LARGE: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    ErrorKind.UNSUPPORTED: status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    ErrorKind.UNAVAILABLE: status.HTTP_503_SERVICE_UNAVAILABLE,
}


class ApiError(exceptions.APIException):
    """An APIException that carries ``details`` for the error body."""

    def __init__(self, detail=None, code=None, details: dict | None = None) -> None:
        super().__init__(detail, code)
        self.details = details or {}


class PayloadTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request is too large."


class BadRequest(ApiError):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "The request is not valid."


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class NotFound(ApiError, exceptions.NotFound):
    """A domain not-found: still a DRF NotFound, for handlers that tell them apart (Dify)."""


def domain_error(exc: DomainError) -> ApiError:
    """The API answer of a domain error: its kind's status, its code, message and details."""
    cls = NotFound if exc.kind == ErrorKind.NOT_FOUND else ApiError
    error = cls(_sentence(str(exc)), code=exc.code, details=dict(exc.details))
    error.status_code = STATUS_OF_KIND[exc.kind]
    return error


def translate(exc: Exception) -> Exception:
    """The APIException a domain or Django exception answers as (others are returned as is)."""
    if isinstance(exc, exceptions.APIException):
        return exc
    if isinstance(exc, DomainError):
        return domain_error(exc)
    if isinstance(exc, ObjectDoesNotExist):
        return exceptions.NotFound(_not_found_message(exc))
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(str(exc), code="request_too_large")
    if isinstance(exc, DjangoValidationError):
        detail = get_error_detail(exc)
        if isinstance(detail, dict) and "__all__" in detail:
            detail["non_field_errors"] = detail.pop("__all__")
        return exceptions.ValidationError(detail)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, SuspiciousOperation):
        return BadRequest(str(exc) or "The request is not valid.", code="bad_request")
    if isinstance(exc, IntegrityError) and isinstance(exc.__cause__, _RACES):
        return Conflict(
            "Another request changed the same data at the same moment; nothing of this one was "
            "saved. Send it again.",
            code="conflict",
        )
    return exc


# Constraint violations that only a concurrent request can cause past the checks made before
# writing (a NOT NULL or CHECK violation is a bug, and stays a 500 to be seen and fixed).
_RACES = (pg_errors.UniqueViolation, pg_errors.ForeignKeyViolation, pg_errors.ExclusionViolation)


def _not_found_message(exc: ObjectDoesNotExist) -> str:
    """ "Knowledge base not found.": the model's verbose name, for whichever model it was."""
    for model in apps.get_models():
        if type(exc) is model.DoesNotExist:
            name = str(model._meta.verbose_name)
            return f"{name[:1].upper()}{name[1:]} not found."
    return "Not found."


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] if message else message


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
