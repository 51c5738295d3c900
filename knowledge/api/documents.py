"""Documents: upload one or many files into a knowledge base, list them with their processing
status, retrieve, delete, reprocess.

An upload answers 202 as soon as the files are stored: a Celery worker processes them and
``status``/``progress`` show how far it got. An upload is all or nothing: every file, every
member of a .zip archive and every URL is judged before anything is stored, and ``results``
has one entry per file, member and URL, in order: ``accepted``, ``duplicate`` (the same bytes
or URL are in the knowledge base already: its ``document_id``), ``skipped`` (an archive entry
that is not an upload: a folder, __MACOSX or a hidden file, a path with .. or absolute, a
link, a member of a type not accepted; its ``error`` says why) or ``refused`` with its error.

- nothing refused and at least one accepted: 202, with ``documents`` (the accepted ones) and
  ``results``; duplicates and skipped entries do not fail the upload;
- anything refused (too large, empty, an unsupported type, a damaged or unreadable archive or
  member, an encrypted member, an archive inside an archive, a URL refused): nothing is
  stored and nothing queued. The error shape, with ``details.results``, where the entries
  that were fine are ``refused`` with ``not_stored`` (sent again without the others, they are
  accepted). Its status is the refusals' common one (413 too large, 415 unsupported type, 400
  empty or unreadable) or 400 ``upload_refused`` when they differ;
- nothing accepted and nothing refused: the same error shape, its status the entries' common
  one (409 when every file is a duplicate) or 400 ``upload_refused``.

URLs (``url`` or ``urls``, JSON or form, beside or instead of files) are judged the same way:
an invalid URL or one whose host is an address that is not public (``127.0.0.1``,
``169.254.169.254``, ``localhost``...) is refused at once with 400 ``url_invalid`` or
``url_refused``; an accepted one is a pending document that the worker fetches (status
``fetching``), failing with the reason when the site refuses, is too large or too slow.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import UnsupportedMediaType, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from knowledge import access
from knowledge.api.serializers import (
    DocumentSerializer,
    DocumentUpdateSerializer,
    DocumentUploadSerializer,
    ReprocessSerializer,
    UploadResponseSerializer,
)
from knowledge.models import Document
from knowledge.services.curation import set_document_enabled
from knowledge.services.documents import delete_document, reprocess_document
from knowledge.services.uploads import UploadOutcome, upload_documents
from knowledge.web.documents import check_url_document
from tenancy.api.errors import ApiError, PayloadTooLarge, describe, translate
from tenancy.api.parsers import JSONParser
from tenancy.api.schema import error_responses
from tenancy.api.views import TenantAPIView
from tenancy.roles import Permission

TAGS = ["documents"]
# Multipart framing and form fields around the files.
_REQUEST_OVERHEAD_BYTES = 1024 * 1024

UPLOAD_DESCRIPTION = __doc__.split("\n\n", 1)[1]
STATUS_PARAMETER = OpenApiParameter(
    "status",
    OpenApiTypes.STR,
    description="Only documents in these states (comma-separated): "
    + ", ".join(Document.Status.values),
)


def _result(outcome: UploadOutcome) -> dict:
    if outcome.accepted:
        return {
            "file": outcome.name,
            "outcome": "accepted",
            "document_id": outcome.document.pk,
            "error": None,
        }
    body = describe(translate(outcome.error))["error"]
    return {
        "file": outcome.name,
        "outcome": str(outcome.outcome),
        "document_id": body["details"].get("existing_document_id"),
        "error": body,
    }


def _refusal(outcomes: list[UploadOutcome], results: list[dict]) -> ApiError:
    """The error of an upload that stored nothing: its refusals decide, or when there are none
    (nothing accepted) its duplicates and skipped entries."""
    deciding = [o for o in outcomes if o.refused] or [o for o in outcomes if not o.accepted]
    errors = [translate(o.error) for o in deciding]
    bodies = [describe(e)["error"] for e in errors]
    first, name = bodies[0], deciding[0].name
    count = len(outcomes)
    refused = deciding[0].refused
    if count == 1:
        code, message, details = first["code"], first["message"], dict(first["details"])
        status_code = errors[0].status_code
    elif len({e.status_code for e in errors}) == 1 and len({b["code"] for b in bodies}) == 1:
        code, status_code = first["code"], errors[0].status_code
        details = dict(first["details"]) if len(errors) == 1 else {}
        if refused:
            message = (
                f"Nothing was stored: {_of(len(errors), count)} refused; {name}: {first['message']}"
            )
        else:
            message = f"None of the {count} files was accepted: {first['message']}"
    else:
        code, details, status_code = "upload_refused", {}, status.HTTP_400_BAD_REQUEST
        if refused:
            message = (
                f"Nothing was stored: {_of(len(errors), count)} refused for different "
                "reasons; see details.results."
            )
        else:
            message = f"None of the {count} files was accepted; see details.results."
    refusal = ApiError(message, code=code, details={**details, "results": results})
    refusal.status_code = status_code
    return refusal


def _of(part: int, whole: int) -> str:
    return f"{part} of the {whole} files {'was' if part == 1 else 'were'}"


class DocumentListView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}
    # Files are multipart only; URLs (knowledge.web) may come as JSON or a form too.
    parser_classes = [MultiPartParser, JSONParser, FormParser]

    @extend_schema(
        summary="List a knowledge base's documents",
        description="Newest first, with processing status and progress.",
        parameters=[STATUS_PARAMETER],
        responses={200: DocumentSerializer(many=True), **error_responses(400, 404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        wanted = [s for s in request.query_params.get("status", "").split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(Document.Status.values))
        if unknown:
            choices = ", ".join(Document.Status.values)
            raise ValidationError({"status": [f"Unknown status {unknown[0]!r}; one of {choices}."]})
        return self.paginated(access.documents(self.tenant, kb, wanted), DocumentSerializer)

    @extend_schema(
        summary="Upload documents",
        description=UPLOAD_DESCRIPTION,
        request={
            "multipart/form-data": DocumentUploadSerializer,
            "application/json": DocumentUploadSerializer,
        },
        responses={
            202: OpenApiResponse(
                UploadResponseSerializer, description="Stored; processing is queued."
            ),
            **error_responses(400, 404, 409, 413, 415),
        },
        tags=TAGS,
    )
    def post(self, request, pk: int):
        kb = access.access_knowledge_base(self.tenant, pk, self.access.knowledge_base_ids)
        limit = settings.RAG_MAX_UPLOAD_BYTES * settings.RAG_MAX_UPLOAD_FILES
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit + _REQUEST_OVERHEAD_BYTES:
            raise PayloadTooLarge(
                f"The request is larger than {settings.RAG_MAX_UPLOAD_FILES} files of "
                f"{settings.RAG_MAX_UPLOAD_BYTES:,} bytes.",
                code="request_too_large",
            )
        files_in_json = isinstance(request.data, Mapping) and "files" in request.data
        if files_in_json and not request.content_type.startswith("multipart/"):
            raise UnsupportedMediaType(
                request.content_type, "Files are uploaded as multipart/form-data."
            )
        serializer = DocumentUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        outcomes = upload_documents(
            tenant=self.tenant,
            knowledge_base=kb,
            files=data["files"],
            urls=[check_url_document(url) for url in data["urls"]],
            replace=data["replace"],
            metadata=data["metadata"],
            options=serializer.parse_options(),
        )
        results = [_result(outcome) for outcome in outcomes]
        accepted = [outcome.document for outcome in outcomes if outcome.accepted]
        if not accepted:
            raise _refusal(outcomes, results)
        body = {"documents": accepted, "results": results}
        return Response(UploadResponseSerializer(body).data, status=status.HTTP_202_ACCEPTED)


class DocumentDetailView(TenantAPIView):
    required = {"DELETE": Permission.WRITE_DOCUMENTS, "PATCH": Permission.WRITE_DOCUMENTS}

    def _get(self, pk: int) -> Document:
        return access.access_document(self.tenant, pk, self.access.knowledge_base_ids)

    @extend_schema(
        summary="Retrieve a document",
        responses={200: DocumentSerializer, **error_responses(404)},
        tags=TAGS,
    )
    def get(self, request, pk: int):
        return Response(DocumentSerializer(self._get(pk)).data)

    @extend_schema(
        summary="Delete a document",
        description="Deletes the document, its chunks and its stored file; search stops "
        "returning it at once.",
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(404)},
        tags=TAGS,
    )
    def delete(self, request, pk: int):
        delete_document(tenant=self.tenant, document=self._get(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Disable or enable a document",
        description="A disabled document is kept, listed and shown as disabled, and never "
        "returned by search; enabling it makes it searchable again as it was.",
        request=DocumentUpdateSerializer,
        responses={200: DocumentSerializer, **error_responses(400, 404)},
        tags=TAGS,
    )
    def patch(self, request, pk: int):
        serializer = DocumentUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = set_document_enabled(
            tenant=self.tenant, document=self._get(pk), **serializer.validated_data
        )
        return Response(DocumentSerializer(document).data)


class DocumentReprocessView(TenantAPIView):
    required = {"POST": Permission.WRITE_DOCUMENTS}

    @extend_schema(
        summary="Reprocess a document",
        description="Processes the stored file again (with the knowledge base's current "
        "chunking settings). The document leaves search until it is ready again. When parsed "
        "chunks carry hand edits it answers 409 with details.hand_edits (how many would be "
        "discarded) unless discard_hand_edits is true; chunks added by hand are kept.",
        request=ReprocessSerializer,
        responses={202: DocumentSerializer, **error_responses(400, 404, 409)},
        tags=TAGS,
    )
    def post(self, request, pk: int):
        document = access.access_document(self.tenant, pk, self.access.knowledge_base_ids)
        body = request.data if request.data is not None else {}  # JSON null: no body
        if not isinstance(body, Mapping):
            raise ValidationError({"body": ["Give the options as a JSON object, or no body."]})
        options = ReprocessSerializer(data={**request.query_params.dict(), **body})
        options.is_valid(raise_exception=True)
        reprocess_document(tenant=self.tenant, document=document, **options.validated_data)
        return Response(DocumentSerializer(document).data, status=status.HTTP_202_ACCEPTED)
