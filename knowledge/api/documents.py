"""Documents: upload one or many files into a knowledge base, list them with their processing
status, retrieve, delete, reprocess.

An upload answers 202 as soon as the files are stored: a Celery worker processes them and
``status``/``progress`` show how far it got. Several files are judged one by one:

- at least one accepted: 202, with ``documents`` (the accepted ones) and ``results`` (one entry
  per file: ``accepted``, ``duplicate`` or ``refused`` with its error);
- none accepted: the error shape, with ``details.results``. Its status is the files' common one
  (409 duplicate, 413 too large, 415 unsupported type, 400 empty) or 400 ``upload_refused`` when
  they failed in different ways.

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
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
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
from knowledge.web.documents import create_url_documents
from tenancy.api.errors import ApiError, PayloadTooLarge, describe, translate
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
    error = translate(outcome.error)
    body = describe(error)["error"]
    duplicate = body["code"] == "duplicate_document"
    return {
        "file": outcome.name,
        "outcome": "duplicate" if duplicate else "refused",
        "document_id": body["details"].get("existing_document_id"),
        "error": body,
    }


def _refusal(outcomes: list[UploadOutcome], results: list[dict]) -> ApiError:
    """The error of an upload of which no file was accepted."""
    errors = [translate(o.error) for o in outcomes]
    first = describe(errors[0])["error"]
    if len(errors) == 1:
        code, message, details = first["code"], first["message"], dict(first["details"])
        status_code = errors[0].status_code
    elif (
        len({e.status_code for e in errors}) == 1
        and len({r["error"]["code"] for r in results}) == 1
    ):
        code, details = first["code"], {}
        message = f"None of the {len(errors)} files was accepted: {first['message']}"
        status_code = errors[0].status_code
    else:
        code, details = "upload_refused", {}
        message = f"None of the {len(errors)} files was accepted; see details.results."
        status_code = status.HTTP_400_BAD_REQUEST
    refusal = ApiError(message, code=code, details={**details, "results": results})
    refusal.status_code = status_code
    return refusal


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
            replace=data["replace"],
            metadata=data["metadata"],
            options=serializer.parse_options(),
        )
        outcomes += create_url_documents(
            tenant=self.tenant,
            knowledge_base=kb,
            urls=data["urls"],
            replace=data["replace"],
            metadata=data["metadata"],
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
